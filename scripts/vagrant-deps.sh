#!/usr/bin/env bash
# Installs what the Vagrant lab (tests/vagrant.rs, scripts/vagrant-lab.sh) needs on a fresh Debian
# machine. Idempotent. Run as root (or a user with sudo).
#   vagrant, vagrant-libvirt        Vagrant and its libvirt provider
#   qemu-system-x86, qemu-utils     QEMU: the lab's guests run under its software emulation (TCG)
#                                   where /dev/kvm cannot run a stock kernel
#   libvirt-daemon-system, libvirt-daemon-driver-qemu, libvirt-clients, dnsmasq-base
#                                   libvirt, its QEMU driver, virsh, and the DHCP/DNS of its networks
#   nftables                        the NAT and forward rules libvirt's networks add (and the lab removes)
#   debootstrap, rsync              building the box (scripts/vagrant-box.sh)
#   e2fsprogs, fdisk, util-linux    the box's disk image: sfdisk, partx, mkfs.ext4
#
# On bookworm, QEMU and libvirt are taken from bookworm-backports where it offers a set apt can
# install (QEMU 10, libvirt 11), otherwise from bookworm itself; Vagrant always comes from bookworm.
# The archive moves under us (backports has dropped packages, and has offered a qemu-system-x86
# whose same-version qemu-system-common it did not carry), so nothing is asked of backports by
# name. apt picks every package's version itself, from private pin files (apt_preferences(5)),
# one plan after the other, each first resolved with `apt-get --simulate`; the first plan apt can
# resolve is installed:
#   1. backports  the QEMU and libvirt source packages (and their firmware: seabios, ipxe, edk2)
#                 pinned level with bookworm, so apt takes the newest version offered, per
#                 package: a binary package backports lacks comes from bookworm
#   2. qemu-bpo   the same for QEMU and its firmware only; libvirt from bookworm (9.0)
#   3. bookworm   bookworm's own QEMU 7.2 and libvirt 9.0. A backports qemu-utils already on the
#                 machine breaks QEMU 7.2 (it Breaks qemu-system-common << 8.0), so this plan asks
#                 for bookworm's qemu-utils and allows that one downgrade, saying so.
# Nothing of the machine's apt configuration is changed: apt runs with the machine's own sources
# and pins plus bookworm-backports (the mirror its sources use for bookworm: scripts/lib/debian-mirror.sh,
# HACTL_DEBIAN_MIRROR overrides it), and a private package index and pin file in /var/cache/hactl/vagrant/apt.
# HACTL_VAGRANT_DEPS_PLANS (e.g. `bookworm`) limits the plans tried, in that order.
set -euo pipefail
# shellcheck source=scripts/lib/debian-mirror.sh
. "$(dirname "$0")/lib/debian-mirror.sh"

main_pkgs=(vagrant vagrant-libvirt nftables debootstrap rsync e2fsprogs fdisk util-linux)
virt_pkgs=(qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients dnsmasq-base)

log() { echo "vagrant-deps: $*" >&2; }

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  log "this is not a Debian-based machine (no dpkg/apt-get)."
  log "install Vagrant, vagrant-libvirt, QEMU and libvirt with your package manager."
  exit 1
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
missing=()
for p in "${main_pkgs[@]}" "${virt_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
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
apt_env=(env DEBIAN_FRONTEND=noninteractive)

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
if [ "$codename" != bookworm ]; then
  # Newer Debian releases carry QEMU >= 8 and libvirt >= 9 in their main suite.
  log "installing ${missing[*]} from $codename's own suites"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" "${apt_env[@]}" apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=900 "${missing[@]}"
  exit 0
fi

# ── the private apt state ─────────────────────────────────────────────────────────────────────
# sources: the machine's /etc/apt/sources.list (when it has one) and bookworm-backports in a
# private main list; the machine's sources.list.d as it is. Pins: the machine's own
# (/etc/apt/preferences, preferences.d) plus the plan's, in a private main file.
apt_dir=/var/cache/hactl/vagrant/apt
"${as_root[@]}" install -d "$apt_dir/lists/partial"
sources=$({ cat /etc/apt/sources.list 2>/dev/null || true; })
if grep -rqsE '^[^#]*[[:space:]]bookworm-backports([[:space:]]|$)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  log "the machine's apt sources already have bookworm-backports"
else
  mirror=$(debian_mirror) || { log "no Debian archive for bookworm-backports (above)"; exit 1; }
  sources+=$'\n'"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main"
fi
printf '%s\n' "$sources" | "${as_root[@]}" tee "$apt_dir/sources.list" >/dev/null
machine_pins=$({ cat /etc/apt/preferences 2>/dev/null || true; })
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list"
          -o "Dir::State::Lists=$apt_dir/lists"
          -o "Dir::Etc::preferences=$apt_dir/preferences"
          -o DPkg::Lock::Timeout=900)

# The pin file of a plan: its source packages level with bookworm (priority 500), so that the
# newest version offered wins, package by package.
pins() {
  local sources=$1
  printf '%s\n\n' "$machine_pins"
  [ -n "$sources" ] || return 0
  printf 'Explanation: hactl vagrant-deps: the newest of bookworm and bookworm-backports\nPackage: %s\nPin: release n=bookworm-backports\nPin-Priority: 500\n' "$sources"
}
declare -A plan_sources=(
  [backports]="src:qemu src:libvirt src:seabios src:ipxe src:edk2"
  [qemu-bpo]="src:qemu src:seabios src:ipxe src:edk2"
  [bookworm]=""
)
read -r -a plans <<<"${HACTL_VAGRANT_DEPS_PLANS:-backports qemu-bpo bookworm}"

log "missing: ${missing[*]}"
log "reading the package lists (the machine's sources and bookworm-backports; private index in $apt_dir)"
# An index that cannot be read (e.g. backports moved to archive.debian.org) leaves its packages
# out; the plans below then resolve without them.
"${as_root[@]}" apt-get "${apt_opts[@]}" update -qq ||
  log "apt-get update reported errors (above): going on with the package lists it could read"

# What plan 3 asks for: bookworm's qemu-utils when the installed one is newer than bookworm's.
downgrade=()
if installed qemu-utils; then
  have=$(dpkg-query -W -f='${Version}' qemu-utils)
  pins "" | "${as_root[@]}" tee "$apt_dir/preferences" >/dev/null
  base=$(apt-cache "${apt_opts[@]}" madison qemu-utils | awk -F'|' '$3 ~ / bookworm(-updates|-security)?\// { gsub(/ /, "", $2); print $2; exit }')
  if [ -n "$base" ] && dpkg --compare-versions "$have" gt "$base"; then
    downgrade=("qemu-utils=$base")
  fi
fi

for plan in "${plans[@]}"; do
  [ -n "${plan_sources[$plan]+set}" ] || { log "unknown plan '$plan' in HACTL_VAGRANT_DEPS_PLANS (plans: backports qemu-bpo bookworm)"; exit 1; }
  pins "${plan_sources[$plan]}" | "${as_root[@]}" tee "$apt_dir/preferences" >/dev/null
  want=("${missing[@]}")
  extra=()
  if [ "$plan" = bookworm ] && [ ${#downgrade[@]} -gt 0 ]; then
    want+=("${downgrade[@]}")
    extra=(--allow-downgrades)
  fi
  if ! sim=$(apt-get "${apt_opts[@]}" --simulate install --no-install-recommends "${extra[@]}" "${want[@]}" 2>&1); then
    log "plan $plan: apt cannot install it from what the archive offers now:"
    grep -E '^ |^E:' <<<"$sim" | sed 's/^/    /' >&2 || true
    continue
  fi
  versions=$(grep -E '^Inst (qemu-system-x86|qemu-utils|libvirt-daemon|vagrant|dnsmasq-base) ' <<<"$sim" \
    | sed -E 's/^Inst ([^ ]+) (\[[^]]*\] )?\(([^ ]+) ([^)]*)\).*/\1 \3 (\4)/' | paste -sd, - | sed 's/,/, /g')
  log "plan $plan: installing ${want[*]}"
  if [ -n "$versions" ]; then log "    $versions"; fi
  if [ ${#extra[@]} -gt 0 ]; then
    log "    this downgrades qemu-utils from $have to ${downgrade[0]#qemu-utils=} (bookworm's QEMU 7.2 needs it)"
  fi
  "${as_root[@]}" "${apt_env[@]}" apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends \
    "${extra[@]}" "${want[@]}"
  log "installed (plan $plan)"
  exit 0
done
log "no plan could be installed (${plans[*]}): see apt's reasons above"
exit 1
