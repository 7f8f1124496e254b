#!/usr/bin/env bash
# The hardware lab (../shared/LABS.md, part 2): Debian's own kernel under QEMU (TCG, no KVM), with
# this machine's / shared read-only over 9p, so host-built binaries run in the guest unchanged.
#
#   scripts/qemu-lab.sh prepare           downloads and builds what the guest needs (cached)
#   scripts/qemu-lab.sh run GUEST_SCRIPT  boots the guest and runs GUEST_SCRIPT (a path on this
#                                         machine) chrooted into the shared /, as root; exits
#                                         with the script's status; its output is the guest console
#
# The guest's initramfs loads virtio, 9p, configfs and a gpio-sim module built here out of tree
# (Debian's kernel has CONFIG_GPIO_SIM off), mounts this machine's / at /host, bind-mounts /dev,
# /proc and /sys into it with tmpfs on /tmp and /run, and chroots. The script's status leaves QEMU
# through isa-debug-exit. Everything is cached in $SHOAL_QEMU_CACHE (default
# /var/cache/shoal-qemu), keyed by the kernel version picked from the apt lists.
# Packages: qemu-system-x86 busybox-static cpio kmod linux-headers-<ver> (and gcc, make).
set -euo pipefail
cache=${SHOAL_QEMU_CACHE:-/var/cache/shoal-qemu}
mkdir -p "$cache"

kernel_version() {
  if [ -f "$cache/version" ]; then cat "$cache/version"; return; fi
  local v
  v=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tail -1)
  if [ -z "$v" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    v=$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sed 's/^linux-image-//' | sort -V | tail -1)
  fi
  echo "$v"
}

prepare() {
  local ver; ver=$(kernel_version)
  [ -n "$ver" ] || { echo "qemu-lab: no linux-image-6.1 in the apt lists (apt-get update?)" >&2; exit 1; }
  local dir="$cache/$ver"
  # The layout number changes whenever the initramfs changes (so a cached guest is rebuilt).
  local layout=3
  if [ -f "$dir/initrd.cpio.gz" ] && [ -f "$dir/vmlinuz" ] && [ "$(cat "$dir/layout" 2>/dev/null)" = $layout ]; then echo "qemu-lab: cached guest for $ver in $dir"; return; fi
  echo "qemu-lab: preparing a guest with Debian's kernel $ver"
  local missing=""
  for p in qemu-system-x86 busybox-static cpio kmod "linux-headers-$ver"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null; fi
  mkdir -p "$dir" && cd "$dir"
  local srcver; srcver=$(apt-cache show "linux-image-$ver" | sed -n 's/^Version: //p' | head -1)
  [ -f "linux-image.deb" ] || { apt-get download "linux-image-$ver" >/dev/null 2>&1; mv linux-image-"$ver"_*.deb linux-image.deb; }
  [ -f "linux-source.deb" ] || { apt-get download "linux-source-6.1=$srcver" >/dev/null 2>&1; mv linux-source-6.1_*.deb linux-source.deb; }
  rm -rf image && mkdir image && dpkg-deb -x linux-image.deb image
  cp "image/boot/vmlinuz-$ver" vmlinuz
  # gpio-sim, out of tree: three files of the kernel's source; irq_sim.c linked in, with the one
  # call to a symbol modules cannot reach replaced (LABS.md).
  rm -rf gpiosim && mkdir gpiosim
  dpkg-deb --fsys-tarfile linux-source.deb | tar -x -O ./usr/src/linux-source-6.1.tar.xz |
    tar -xJ -C gpiosim --strip-components=3 linux-source-6.1/drivers/gpio/gpio-sim.c linux-source-6.1/drivers/gpio/gpiolib.h linux-source-6.1/kernel/irq/irq_sim.c
  mv gpiosim/gpio-sim.c gpiosim/gpio-sim-core.c
  sed -i 's/handle_simple_irq(irq_to_desc(irqnum))/generic_handle_irq(irqnum)/' gpiosim/irq_sim.c
  printf 'obj-m := gpio-sim.o\ngpio-sim-y := gpio-sim-core.o irq_sim.o\n' > gpiosim/Makefile
  make -s -C "/usr/src/linux-headers-$ver" M="$dir/gpiosim" modules 2>&1 | grep -v "Skipping BTF" || true
  [ -f gpiosim/gpio-sim.ko ] || { echo "qemu-lab: building gpio-sim failed" >&2; exit 1; }
  # The initramfs: busybox, the real kmod (busybox's modprobe cannot resolve the kernel's aliases),
  # its libraries, and the module folders the guest needs.
  local root="$dir/initramfs"
  rm -rf "$root" && mkdir -p "$root"/{bin,sbin,proc,sys,dev,host,lib/modules/"$ver"/kernel,lib64,lib/x86_64-linux-gnu}
  cp /bin/busybox "$root/bin/busybox"
  cp /usr/bin/kmod "$root/bin/kmod"
  for l in $(ldd /usr/bin/kmod | grep -o '/lib[^ ]*'); do cp -L "$l" "$root$l" 2>/dev/null || cp -L "$l" "$root/lib/x86_64-linux-gnu/"; done
  for m in modprobe insmod depmod lsmod; do ln -s /bin/kmod "$root/sbin/$m"; done
  local k="image/lib/modules/$ver/kernel"
  for d in crypto arch/x86/crypto lib net/bluetooth drivers/bluetooth net/rfkill fs/configfs fs/9p net/9p fs/netfs fs/fscache drivers/virtio; do
    [ -d "$k/$d" ] && mkdir -p "$root/lib/modules/$ver/kernel/$d" && cp -r "$k/$d/." "$root/lib/modules/$ver/kernel/$d/"
  done
  mkdir -p "$root/lib/modules/$ver/extra" && cp gpiosim/gpio-sim.ko "$root/lib/modules/$ver/extra/"
  cp "image/lib/modules/$ver"/modules.builtin* "image/lib/modules/$ver/modules.order" "$root/lib/modules/$ver/" 2>/dev/null || true
  depmod -b "$root" "$ver"
  cat > "$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
# Modules load here, before the chroot (its /lib/modules is this machine's, not the guest kernel's;
# the kernel's own module requests use this initramfs's modprobe). hci_vhci gives /dev/vhci for btvirt.
for m in virtio_pci 9pnet_virtio 9p configfs gpio-sim hci_vhci; do modprobe $m || echo "qemu-lab: modprobe $m failed"; done
mount -t configfs none /sys/kernel/config
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host || echo "qemu-lab: cannot mount the host's /"
for d in dev proc sys; do mount --bind /$d /host/$d; done
mount --bind /sys/kernel/config /host/sys/kernel/config
mount -t tmpfs tmpfs /host/tmp; mount -t tmpfs tmpfs /host/run
script=$(sed -n 's/.*shoal.script=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "qemu-lab: guest up; running $script"
timeout -s KILL 420 chroot /host /bin/sh "$script"
rc=$?
echo "qemu-lab: exit $rc"
printf "\\$(printf '%03o' $rc)" | dd of=/dev/port bs=1 seek=244 count=1 2>/dev/null
poweroff -f
INIT
  chmod +x "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > initrd.cpio.gz
  echo "$ver" > "$cache/version"
  echo $layout > "$dir/layout"
  rm -rf image
  echo "qemu-lab: guest ready: $dir ($(du -sh initrd.cpio.gz | cut -f1) initramfs)"
}

run() {
  local script=$1
  [ -f "$script" ] || { echo "qemu-lab: no guest script $script" >&2; exit 2; }
  prepare >/dev/null
  local ver; ver=$(kernel_version)
  local dir="$cache/$ver"
  set +e
  timeout -s KILL 600 qemu-system-x86_64 -accel tcg -m 1536 -smp 2 -nographic -no-reboot \
    -kernel "$dir/vmlinuz" -initrd "$dir/initrd.cpio.gz" \
    -append "console=ttyS0 quiet panic=-1 shoal.script=$(realpath "$script")" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 </dev/null
  local rc=$?
  set -e
  # isa-debug-exit: QEMU exits 2v+1 for the guest's v.
  if [ $((rc % 2)) = 1 ]; then exit $(((rc - 1) / 2)); fi
  echo "qemu-lab: QEMU ended without the guest's status (exit $rc)" >&2
  exit 125
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare | run GUEST_SCRIPT" >&2; exit 2 ;;
esac
