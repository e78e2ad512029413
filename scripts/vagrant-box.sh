#!/usr/bin/env bash
# Builds the Vagrant box the Vagrant lab runs on (libvirt provider), once, and adds it to Vagrant.
#
#   scripts/vagrant-box.sh            build if not cached, then `vagrant box add` if not added
#   scripts/vagrant-box.sh --rebuild  build again even if cached
#   scripts/vagrant-box.sh --id       print the build's id (what the cached box's name carries)
#
# The box is Debian bookworm from debootstrap, with no more than a cloud image has: systemd, a
# kernel and GRUB, openssh-server, sudo, ifupdown and a DHCP client. hactl installs everything else
# (etcd, HAProxy, keepalived, curl) over SSH itself. It has:
#   - the `vagrant` user with passwordless sudo and Vagrant's insecure public key (Vagrant replaces
#     it with a key of its own on the first `vagrant up`);
#   - no SSH host keys: the first boot generates ed25519 and ECDSA keys only (an RSA key takes
#     about 30 s under QEMU's emulation), so every VM has its own;
#   - empty apt lists (as in a cloud image) and no e2scrub/apt-daily timers (slow under emulation).
#
# Cache: $HACTL_VAGRANT_CACHE (default /var/cache/hactl/vagrant): the box file and a catalog whose
# version changes with every build, so a rebuilt box is never confused with an older one already
# uploaded into a libvirt storage pool. Needs root (debootstrap, loop devices) and the packages of
# scripts/vagrant-deps.sh. Mirror: the machine's own (HACTL_DEBIAN_MIRROR overrides it:
# scripts/lib/debian-mirror.sh).
set -euo pipefail
# shellcheck source=scripts/lib/debian-mirror.sh
. "$(dirname "$0")/lib/debian-mirror.sh"

BOX_NAME=${HACTL_VAGRANT_BOX:-hactl/bookworm}
CACHE=${HACTL_VAGRANT_CACHE:-/var/cache/hactl/vagrant}
SUITE=bookworm
DISK_GB=8
# What the box contains beyond debootstrap's minbase (a cloud image has these too).
PACKAGES=systemd-sysv,udev,kmod,linux-image-amd64,grub-pc-bin,grub2-common,initramfs-tools,openssh-server,sudo,ifupdown,isc-dhcp-client,iproute2,procps,netbase,ca-certificates,less

start=$(date +%s)
step() { printf 'vagrant-box: [%3ds] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }
die() { echo "vagrant-box: $*" >&2; exit 1; }

rebuild=false
print_id=false
case "${1:-}" in
  --rebuild) rebuild=true ;;
  --id) print_id=true ;;
  "") ;;
  *) die "unknown argument $1 (use --rebuild, --id, or nothing)" ;;
esac

build() {
  local mirror work raw mnt loop part uuid
  mirror=$(debian_mirror) || die "no Debian archive to build the box from (above)"

  work="$CACHE/build.$$"
  raw="$work/disk.raw"
  mnt="$work/root"
  loop=""
  cleanup() {
    set +e
    for m in dev/pts dev proc sys ""; do
      mountpoint -q "$mnt/$m" 2>/dev/null && umount -l "$mnt/$m"
    done
    [ -n "$loop" ] && { partx -d "$loop" 2>/dev/null; losetup -d "$loop"; }
    rm -rf "$work"
  }
  trap cleanup EXIT
  mkdir -p "$mnt"

  step "disk: $DISK_GB GiB sparse image, one MBR partition"
  truncate -s "${DISK_GB}G" "$raw"
  echo 'type=83, bootable' | sfdisk -q "$raw"
  loop=$(losetup --find --show "$raw")
  # This kernel does not create the partition devices of a loop device by itself.
  partx -a "$loop" 2>/dev/null || true
  part="${loop}p1"
  for _ in 1 2 3 4 5; do [ -b "$part" ] && break; sleep 1; done
  [ -b "$part" ] || die "no partition device $part after partx -a $loop"
  mkfs.ext4 -q -L root "$part"
  uuid=$(blkid -s UUID -o value "$part")
  mount "$part" "$mnt"

  step "debootstrap $SUITE (minbase + kernel, GRUB, sshd, sudo) from $mirror: about 3-4 minutes"
  if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$mnt" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  fi

  step "configure: vagrant user, host keys on first boot, network, fstab"
  mount --bind /dev "$mnt/dev"
  mount --bind /dev/pts "$mnt/dev/pts"
  mount -t proc proc "$mnt/proc"
  mount -t sysfs sys "$mnt/sys"

  echo "UUID=$uuid / ext4 errors=remount-ro 0 1" >"$mnt/etc/fstab"
  echo debian >"$mnt/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tdebian\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$mnt/etc/hosts"
  # Each VM gets its own machine-id at first boot.
  : >"$mnt/etc/machine-id"
  rm -f "$mnt/var/lib/dbus/machine-id"
  cat >"$mnt/etc/network/interfaces" <<'EOF'
# Vagrant's management interface; Vagrant adds the private network below.
source /etc/network/interfaces.d/*

auto lo
iface lo inet loopback

auto eth0
iface eth0 inet dhcp
EOF
  cat >"$mnt/etc/apt/sources.list" <<EOF
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
EOF

  chroot "$mnt" useradd --create-home --shell /bin/bash --user-group vagrant
  echo 'vagrant ALL=(ALL) NOPASSWD:ALL' >"$mnt/etc/sudoers.d/vagrant"
  chmod 0440 "$mnt/etc/sudoers.d/vagrant"
  install -d -m 0700 -o "$(chroot "$mnt" id -u vagrant)" -g "$(chroot "$mnt" id -g vagrant)" "$mnt/home/vagrant/.ssh"
  local insecure
  insecure=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -n1 || true)
  [ -n "$insecure" ] || die "Vagrant's insecure public key (keys/vagrant.pub in the vagrant gem) not found"
  install -m 0600 -o "$(chroot "$mnt" id -u vagrant)" -g "$(chroot "$mnt" id -g vagrant)" "$insecure" "$mnt/home/vagrant/.ssh/authorized_keys"

  # Host keys: none in the image; ed25519 and ECDSA at first boot, before sshd starts.
  rm -f "$mnt"/etc/ssh/ssh_host_*
  cat >"$mnt/etc/ssh/sshd_config.d/10-hactl-box.conf" <<'EOF'
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
UseDNS no
EOF
  cat >"$mnt/etc/systemd/system/ssh-host-keys.service" <<'EOF'
[Unit]
Description=Generate this machine's SSH host keys (ed25519, ECDSA)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key
ExecStart=/usr/bin/ssh-keygen -q -t ecdsa -N "" -f /etc/ssh/ssh_host_ecdsa_key

[Install]
WantedBy=multi-user.target
EOF
  chroot "$mnt" systemctl enable ssh-host-keys.service ssh.service >/dev/null 2>&1
  # Slow under emulation and of no use to a lab VM.
  chroot "$mnt" systemctl mask e2scrub_reap.service e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1 || true
  # As in a cloud image: no package lists (hactl runs apt-get update when it needs them).
  chroot "$mnt" apt-get clean
  rm -rf "$mnt"/var/lib/apt/lists/*
  mkdir -p "$mnt/var/lib/apt/lists/partial"

  # A small initramfs (only the drivers a libvirt or VirtualBox VM boots from) unpacks faster
  # under emulation than the default one with most of the kernel's modules.
  sed -i 's/^MODULES=.*/MODULES=list/' "$mnt/etc/initramfs-tools/initramfs.conf"
  printf '%s\n' virtio_pci virtio_blk virtio_scsi virtio_net ahci ata_piix sd_mod ext4 crc32c_generic \
    >>"$mnt/etc/initramfs-tools/modules"
  chroot "$mnt" update-initramfs -u -k all >"$work/initramfs.log" 2>&1 \
    || { cat "$work/initramfs.log" >&2; die "update-initramfs failed (log above)"; }

  step "bootloader: GRUB on the disk, kernel command line net.ifnames=0 with a serial console"
  # quiet: every kernel message written to the emulated serial port costs time.
  local cmdline="net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200n8 quiet"
  cat >"$mnt/etc/default/grub" <<EOF
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="$cmdline"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
EOF
  chroot "$mnt" grub-install --target=i386-pc --modules="part_msdos ext2" "$loop" >"$work/grub.log" 2>&1 \
    || { cat "$work/grub.log" >&2; die "grub-install failed (log above)"; }
  # Written by hand rather than by grub-mkconfig, which cannot see the root's UUID in a chroot.
  local kernel initrd
  kernel=$(cd "$mnt/boot" && ls vmlinuz-* | sort -V | tail -n1)
  initrd=initrd.img-${kernel#vmlinuz-}
  [ -f "$mnt/boot/$initrd" ] || die "no $initrd in the image (initramfs-tools failed?)"
  cat >"$mnt/boot/grub/grub.cfg" <<EOF
set timeout=0
serial --speed=115200
terminal_input console serial
terminal_output console serial
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $uuid
menuentry 'Debian $SUITE' {
  linux /boot/$kernel root=UUID=$uuid ro $cmdline
  initrd /boot/$initrd
}
EOF

  step "image: qcow2 (compressed)"
  for m in dev/pts dev proc sys; do umount "$mnt/$m"; done
  # Give the blocks of deleted files (debootstrap's .debs) back, so the image compresses small.
  fstrim "$mnt" 2>/dev/null || true
  umount "$mnt"
  e2fsck -fy "$part" >/dev/null 2>&1 || true
  partx -d "$loop" 2>/dev/null || true
  losetup -d "$loop"
  loop=""
  qemu-img convert -c -O qcow2 "$raw" "$work/box.img"
  rm -f "$raw"
  printf '{"provider":"libvirt","format":"qcow2","virtual_size":%d}\n' "$DISK_GB" >"$work/metadata.json"
  cat >"$work/Vagrantfile" <<'EOF'
# Defaults of the hactl lab box (libvirt provider).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
    lv.nic_model_type = "virtio"
  end
end
EOF
  tar -C "$work" -cf "$box.tmp" metadata.json Vagrantfile box.img
  mv "$box.tmp" "$box"
  # The catalog gives the box a version that changes with each build (the build's time).
  local version sum
  version="1.$(date -u +%Y%m%d.%H%M%S)"
  sum=$(sha256sum "$box" | cut -d' ' -f1)
  cat >"$catalog" <<EOF
{"name":"$BOX_NAME","versions":[{"version":"$version","providers":[{"name":"libvirt","url":"file://$box","checksum_type":"sha256","checksum":"$sum"}]}]}
EOF
  trap - EXIT
  cleanup
  step "built $box ($(du -h "$box" | cut -f1), version $version)"
}

# The build is identified by what makes the box (the build function, the package list, the
# suite and the disk size): a change there builds a new box; other edits of this script do not.
BUILD_ID=$( { declare -f build; echo "$PACKAGES $SUITE $DISK_GB"; } | sha256sum | cut -c1-12)
box="$CACHE/hactl-$SUITE-$BUILD_ID.box"
catalog="$CACHE/hactl-$SUITE-$BUILD_ID.json"
if $print_id; then
  echo "$BUILD_ID"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, loop devices): run it with sudo"
for tool in debootstrap sfdisk partx losetup mkfs.ext4 qemu-img vagrant; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is missing: run scripts/vagrant-deps.sh first"
done
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then
  step "another build holds $CACHE/.build.lock; waiting for it"
  flock 9
fi

if $rebuild || [ ! -s "$box" ] || [ ! -s "$catalog" ]; then
  build
else
  step "cached: $box"
fi

# Older builds in the cache are superseded by this one.
for old in "$CACHE"/hactl-"$SUITE"-*.box "$CACHE"/hactl-"$SUITE"-*.json; do
  [ -e "$old" ] && [ "$old" != "$box" ] && [ "$old" != "$catalog" ] && rm -f "$old"
done

version=$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' "$catalog")
vagrant_home=${VAGRANT_HOME:-$HOME/.vagrant.d}
boxes="$vagrant_home/boxes/${BOX_NAME//\//-VAGRANTSLASH-}"
if [ -d "$boxes/$version/libvirt" ]; then
  step "box $BOX_NAME $version already added to $vagrant_home"
else
  step "vagrant box add $BOX_NAME $version (into $vagrant_home)"
  vagrant box add --provider libvirt "file://$catalog" >&2
fi
# Older versions of the box: removed unless a VM still uses one (Vagrant refuses then).
for v in $(ls "$boxes" 2>/dev/null); do
  [ "$v" = "$version" ] || [ ! -d "$boxes/$v/libvirt" ] && continue
  if vagrant box remove --provider libvirt --box-version "$v" "$BOX_NAME" >/dev/null 2>&1; then
    rmdir "$boxes/$v" 2>/dev/null || true
    step "removed the older box version $v"
  fi
done
step "done: box $BOX_NAME $version; next: cd vagrant && vagrant up --provider=libvirt"
