# Shoal — see README.md. The two commands: `make demo` and `make test`.
SHELL := /bin/bash
SWIFT ?= swift
# Debian packages the build and tests need (C libraries reached through modulemaps).
DEB_PACKAGES := libsqlite3-dev libmbedtls-dev libavahi-client-dev libbluetooth-dev libgpiod-dev libyaml-dev pkg-config openssl
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps boards build release demo test bench size clean

all: build

## Installs the Debian packages that are missing (only those).
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "deps: all Debian packages present"; fi
	@command -v $(SWIFT) >/dev/null || { echo "no Swift toolchain on PATH: install Swift 6 (see README.md)"; exit 1; }

## Regenerates the board files built into the binary from board-configs/.
boards:
	@./scripts/embed-boards.sh

build: deps boards
	$(SWIFT) build

## One static-stdlib binary, stripped, in dist/shoal.
release: deps boards
	$(SWIFT) build -c release --static-swift-stdlib
	@mkdir -p dist && cp .build/release/shoal dist/shoal && strip dist/shoal
	@echo "dist/shoal: $$(stat -c %s dist/shoal) bytes stripped"

## Runs a gateway on the sim board and shows it working through the CLI.
demo: build
	@./scripts/demo.sh .build/debug/shoal

## The test command (README.md). Unit, store, config, CLI, end-to-end and crash tests.
test: deps boards
	$(SWIFT) test

## Figures, not pass/fail: store writes vs a bare SQLite loop (disk and tmpfs), TLS handshakes and
## throughput vs bare mbedTLS, and an initial pull between two processes over TLS.
bench: release
	./dist/shoal bench store
	./dist/shoal bench store --dir /dev/shm
	./dist/shoal bench tls
	./dist/shoal bench replication

size: release
	@ls -l dist/shoal

clean:
	rm -rf .build dist .shoal
