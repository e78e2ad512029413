#!/usr/bin/env bash
# Installs what the Vagrant lab (tests/vagrant.rs, scripts/vagrant-lab.sh) needs on a fresh Debian
# bookworm machine. Idempotent. Run as root (or a user with sudo).
#   vagrant, vagrant-libvirt        bookworm's Vagrant 2.3 and its libvirt provider
#   qemu-system-x86, qemu-utils     QEMU 10 from bookworm-backports: the lab's guests run under its
#   libvirt-daemon-system,          software emulation (TCG) where /dev/kvm cannot run a stock kernel;
#   libvirt-daemon-driver-qemu,     libvirt 11 from bookworm-backports (a backports qemu-utils rules
#   libvirt-clients, dnsmasq-base   out bookworm's own QEMU 7.2, so the whole stack comes from there)
#   nftables                        the NAT and forward rules libvirt's networks add (and the lab removes)
#   debootstrap, rsync              building the box (scripts/vagrant-box.sh), rsync synced folders
#   e2fsprogs, fdisk, util-linux    the box's disk image: sfdisk, partx, mkfs.ext4
#
# bookworm-backports is reached through a private sources list and a private package index in
# /var/cache/hactl/vagrant/apt: the machine's own apt configuration is left exactly as it is. The
# mirror is the one the machine's own sources already use for bookworm (override: HACTL_APT_MIRROR).
set -euo pipefail

main_pkgs=(vagrant vagrant-libvirt nftables debootstrap rsync e2fsprogs fdisk util-linux)
bpo_pkgs=(qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients dnsmasq-base)

log() { echo "vagrant-deps: $*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  log "this is not a Debian-based machine (no dpkg/apt-get)."
  log "install Vagrant, vagrant-libvirt, QEMU >= 8 and libvirt >= 9 with your package manager."
  exit 1
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${main_pkgs[@]}" "${bpo_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then
  log "all present"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -E)
else
  log "missing ${missing[*]}; not root and no sudo: run this script as root"
  exit 1
fi

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ "$codename" != bookworm ]; then
  # Newer Debian releases carry QEMU >= 8 and libvirt >= 9 in their main suite.
  log "installing ${missing[*]} from $codename's own suites"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=900 "${missing[@]}"
  exit 0
fi

# The mirror: the first URI of a source that serves `bookworm` itself (deb822 or one-line format).
bookworm_uris() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = "" }
         /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ {
           if (match($0, /(^|\n)URIs:[ \t]*[^ \t\n]+/)) {
             s = substr($0, RSTART, RLENGTH); sub(/.*URIs:[ \t]*/, "", s); print s } }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                      if ($(i + 1) == "bookworm") print $i }' "$f"
  done
}
mirror=${HACTL_APT_MIRROR:-}
[ -n "$mirror" ] || mirror=$(bookworm_uris | head -n1 || true)
if [ -z "$mirror" ]; then
  log "no apt source for bookworm found in /etc/apt; set HACTL_APT_MIRROR to a Debian mirror URI"
  exit 1
fi

apt_dir=/var/cache/hactl/vagrant/apt
"${as_root[@]}" install -d "$apt_dir/sources.list.d" "$apt_dir/lists/partial"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
"${as_root[@]}" tee "$apt_dir/sources.list.d/hactl-vagrant.sources" >/dev/null <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates bookworm-backports
Components: main
Signed-By: $keyring
EOF
: | "${as_root[@]}" tee "$apt_dir/sources.list" >/dev/null
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
          -o "Dir::Etc::sourceparts=$apt_dir/sources.list.d"
          -o "Dir::State::Lists=$apt_dir/lists"
          -o DPkg::Lock::Timeout=900)

log "installing ${missing[*]} (backports from $mirror through a private sources list in $apt_dir)"
"${as_root[@]}" apt-get "${apt_opts[@]}" update -qq
# Only the QEMU/libvirt packages named above come from backports: `pkg/bookworm-backports` picks
# their backports version and lets apt take a dependency from backports only where bookworm's
# version does not satisfy it (`-t bookworm-backports` would also move udev and systemd, which the
# nspawn lab uses, to backports).
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq \
  --no-install-recommends "${bpo_pkgs[@]/%//bookworm-backports}" "${main_pkgs[@]}"
log "installed"
