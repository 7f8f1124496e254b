# Shoal — see README.md. The two commands: `make demo` and `make test`.
SHELL := /bin/bash
SWIFT ?= swift
# Debian packages the build needs (C libraries reached through modulemaps): all that `make build`,
# `make demo` and `make release` install.
DEB_PACKAGES := libsqlite3-dev libmbedtls-dev libavahi-client-dev libbluetooth-dev libgpiod-dev libyaml-dev libmicrohttpd-dev libmosquitto-dev libnats-dev pkg-config
# Tests only (`make deps`, `make test`): openssl for the TLS interop tests; the network lab's (avahi-daemon runs only inside namespaces the tests make), and the
# deploy check's (lintian; dpkg-dev for dpkg-shlibdeps; systemd for systemd-analyze).
# And the hardware lab's (QEMU with Debian's kernel; scripts/qemu-lab.sh adds the kernel headers; bluez and
# bluez-test-tools for btvirt, hciconfig, btmgmt and hcitool in the guest). debootstrap for the fresh-machine check.
# The local API's real clients: curl, python3-pip (PyPI packages in Tests/HTTP/requirements.txt), promtool
# (prometheus), headless chromium for the web console, wrk for `shoal bench http`.
# The MQTT bridge's: the mosquitto broker (the tests start their own, on loopback ports of their own
# with a config of their own) and its clients mosquitto_pub/mosquitto_sub; paho-mqtt from PyPI
# (Tests/MQTT/requirements.txt).
LAB_PACKAGES := openssl avahi-daemon avahi-utils dbus iproute2 lintian dpkg-dev systemd qemu-system-x86 busybox-static cpio kmod gpiod bluez bluez-test-tools debootstrap \
	curl python3-pip prometheus chromium wrk mosquitto mosquitto-clients nats-server systemd-container
# Packages whose Debian service must not run for the tests: started by no install (policy-rc.d
# below) and, when this run installed them, disabled so that no boot starts them either (Debian's
# mosquitto would hold port 1883; the tests never use it, but a gateway owner's broker is theirs).
NO_SERVICE_PACKAGES := mosquitto nats-server
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build-deps install-missing boards build release deb demo demo-gateways example test protocol1-check fresh-check sim-check sim-large soak lab-soak uplink-soak crash sanitizers fuzz bench bench-sim bench-instructions size clean

all: build

## Installs the Debian packages that are missing (only those): `build-deps` what building needs
## (without recommends: the D-Bus daemon libdbus recommends is not needed to build), `deps` that
## and everything the tests need.
build-deps:
	@$(MAKE) --no-print-directory install-missing PACKAGES="$(DEB_PACKAGES)" APT_FLAGS=--no-install-recommends

deps:
	@$(MAKE) --no-print-directory install-missing PACKAGES="$(DEB_PACKAGES) $(LAB_PACKAGES)"
	@python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --break-system-packages -r Tests/HTTP/requirements.txt -r Tests/MQTT/requirements.txt -r Tests/NATS/requirements.txt

install-missing:
	@missing=""; for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\n# shoal deps: start no daemon while installing (avahi-daemon must not run in this namespace)\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null; \
	    $(SUDO) chmod +x /usr/sbin/policy-rc.d; guard=1; fi; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_FLAGS) $$missing; rc=$$?; \
	  if [ -n "$$guard" ]; then $(SUDO) rm -f /usr/sbin/policy-rc.d; fi; \
	  [ $$rc = 0 ] || exit $$rc; \
	  for p in $(NO_SERVICE_PACKAGES); do case " $$missing " in *" $$p "*) \
	    command -v systemctl >/dev/null && $(SUDO) systemctl disable --quiet $$p.service 2>/dev/null; \
	    echo "deps: $$p's service is not started and is disabled (the tests start their own)";; esac; done; \
	else echo "deps: all Debian packages present"; fi
	@command -v $(SWIFT) >/dev/null || { echo "no Swift toolchain on PATH: install Swift 6 (see README.md)"; exit 1; }

## Regenerates the board files built into the binary from board-configs/, and the OpenAPI
## document it serves from docs/openapi.json.
boards:
	@./scripts/embed-boards.sh
	@./scripts/embed-openapi.sh

build: build-deps boards
	$(SWIFT) build

## One static-stdlib binary, stripped, in dist/shoal.
release: build-deps boards
	$(SWIFT) build -c release --static-swift-stdlib
	@mkdir -p dist && cp .build/release/shoal dist/shoal && strip dist/shoal
	@echo "dist/shoal: $$(stat -c %s dist/shoal) bytes stripped"

## dist/shoal_<version>_<arch>.deb: the binary, the systemd unit, udev rules, a default site file.
deb: release
	./scripts/build-deb.sh

## Five gateways in one process on a simulated radio: real stores, TLS, replication, mesh.
demo: build
	@.build/debug/shoal demo

## Real processes: one gateway on the sim board driven through the CLI, then two gateways
## replicating over mutual TLS on loopback.
demo-gateways: build
	@./scripts/demo.sh .build/debug/shoal

## The example firmware built on `import Shoal` (Examples/Firmware), three gateways on the
## library's simulated medium.
example: build-deps boards
	$(SWIFT) build --product shoal-example-firmware
	.build/debug/shoal-example-firmware --simulate 3

## The test command (README.md). Unit, store, config, mesh, CLI, end-to-end, crash and network-lab
## tests, then on the release binary the mesh's simulation properties over 200 seeds each (~5 min)
## the deploy check (the .deb, lintian, install, systemd-analyze verify, doctor, purge), the
## fresh-machine check (README's prerequisites and `make demo` on a minimal Debian 12) and the
## hardware lab under QEMU (the LED's libgpiod driver on gpio-sim), updates under a real systemd
## (PID 1 in systemd-nspawn: a release confirmed, crashing ones rolled back), and 10 s of fuzzing
## per target.
## The example firmware (built by `make release` with every product) runs on the simulated medium.
## The sanitizer runs (about 19 minutes) are `make sanitizers`, which CI (.ci/run) runs after this.
test: deps boards
	$(SWIFT) test
	./scripts/protocol1-check.sh
	$(MAKE) release
	.build/release/shoal-example-firmware --simulate 5
	SHOAL_BIN=dist/shoal ./scripts/sim-check.sh 200
	./scripts/deploy-check.sh
	./scripts/fresh-machine.sh
	SHOAL_BINARY=dist/shoal ./scripts/systemd-update-check.sh
	./Tests/HardwareLab/run.sh dist/shoal
	./scripts/fuzz.sh 10

## A gateway built from the tag protocol-1 (cached in /var/cache/shoal-compat) and this tree's
## replicate over TLS, through a conflict (part of make test).
protocol1-check: deps boards
	$(SWIFT) build --build-tests
	./scripts/protocol1-check.sh

## README's promise, checked: on a minimal Debian 12 (debootstrap --variant=minbase, cached in
## /var/cache/shoal-fresh) with this toolchain bind-mounted read-only, README's prerequisites, a
## clean clone of HEAD and `make demo`, which must pass; prints its time and the packages installed.
fresh-check:
	./scripts/fresh-machine.sh

## Updates over the mesh under a real systemd: PID 1 in a systemd-nspawn container of Debian 12, the
## packaged unit, a release confirmed and a crashing one rolled back by the boot check (root).
update-check: build
	./scripts/systemd-update-check.sh

## libFuzzer on every outside input (frames, messages, JSON, site and board YAML, certificates,
## control requests), FUZZ_SECONDS per target (make test runs 10 s each).
FUZZ_SECONDS ?= 300
fuzz: deps boards
	./scripts/fuzz.sh $(FUZZ_SECONDS)

## The simulation properties over 200 seeds each (release build).
sim-check: deps boards
	$(SWIFT) build -c release --product shoal
	./scripts/sim-check.sh 200

## Large meshes (issue 26): 1,000 gateways once, 250 with faults over 50 seeds (~7 min).
sim-large: deps boards
	$(SWIFT) build -c release --product shoal
	./scripts/sim-large.sh 50

## Before a release: the simulation properties over 2,000 seeds each (about an hour).
soak: deps boards
	$(SWIFT) build -c release --product shoal
	./scripts/sim-check.sh 2000

## The network lab's soak for before releases: five gateways in namespaces with real Avahi,
## partitions every 5–30 s and kill -9 every 3–15 s with writes on all sides, for SOAK_SECONDS
## (make test runs 45 s of it); then all must converge with nothing acknowledged lost.
SOAK_SECONDS ?= 600
lab-soak: deps boards
	SHOAL_SOAK_SECONDS=$(SOAK_SECONDS) $(SWIFT) test --filter NetLabSoakTests

## The uplink's hub outage at length, for before releases: two sites of three gateways in
## namespaces keep writing while the NATS hub is cut off from both for UPLINK_OUTAGE_SECONDS
## (make test runs 60 s of it); then all six gateways and the hub must converge, nothing lost.
UPLINK_OUTAGE_SECONDS ?= 300
uplink-soak: deps boards
	SHOAL_UPLINK_OUTAGE_SECONDS=$(UPLINK_OUTAGE_SECONDS) $(SWIFT) test --filter UplinkLabTests/hubOutageWhileBothSitesWrite

## The tests under ThreadSanitizer and AddressSanitizer (CI runs the default part after make test;
## see scripts/sanitizers.sh): SHOAL_SANITIZE_FILTER=all for the whole suite.
sanitizers: deps boards
	./scripts/sanitizers.sh thread address

## The crash campaign at full size (make test runs it smaller): 700 SIGKILLs of a local writer,
## 300 of three gateways replicating in a line (one store damaged and refilled), and 500
## power losses below SQLite (WAL cut/torn/flipped, main file cut/zeroed): 1,000 kill points.
CRASH_KILLS ?= 700
CRASH_REPLICATION_KILLS ?= 300
POWERLOSS_ROUNDS ?= 500
crash: deps boards
	SHOAL_CRASH_KILLS=$(CRASH_KILLS) SHOAL_CRASH_REPLICATION_KILLS=$(CRASH_REPLICATION_KILLS) SHOAL_POWERLOSS_ROUNDS=$(POWERLOSS_ROUNDS) \
	  $(SWIFT) test --filter "CrashTests|ReplicationCrashTests"

## Figures, not pass/fail: `shoal bench`'s table — store writes vs bare SQLite, TLS bulk vs bare
## mbedTLS, a 2-process pull of 10,000 × 1 KB, write-to-peer latency vs the import, the SD-card
## profile, instructions per document (valgrind), bytes per replicated document vs ideal (10-node
## sim), a write across a 20-node line vs the hop bound, RSS idle vs 100,000 documents, HTTP, MQTT,
## the uplink, the binary vs a trivial program — each against a baseline (~4 min).
bench: release
	@$(MAKE) --no-print-directory install-missing PACKAGES=valgrind APT_FLAGS=--no-install-recommends
	@cp .build/release/shoal-bench-gateway dist/  # not stripped: callgrind names functions by their symbols
	./scripts/bench.sh dist/shoal

## Instructions per replicated 1 KB document on each side, by where they go (valgrind's callgrind:
## the same count on every run; about 2 minutes). Installs valgrind if it is missing.
bench-instructions: release
	@$(MAKE) --no-print-directory install-missing PACKAGES=valgrind APT_FLAGS=--no-install-recommends
	.build/release/shoal bench instructions

## More figures: the simulator at larger sizes and with faults.
bench-sim: release
	./dist/shoal sim --nodes 50 --seconds 300 --partitions --crashes --loss 0.02
	./dist/shoal sim --nodes 10 --writes 100 --edits off --burst 10

size: release
	@ls -l dist/shoal

clean:
	rm -rf .build dist .shoal
