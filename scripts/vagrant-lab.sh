#!/usr/bin/env bash
# The Vagrant lab, run for real (tests/vagrant.rs runs it; scripts/test.sh runs that):
#   libvirt's daemons started by hand (no systemd needed), the cached box, `vagrant up` of the
#   3 VMs of inventories/vagrant.yaml in parallel (the Vagrantfile sets their clocks from this
#   machine's: emulated guests boot seconds behind and reach no NTP server here), `hactl check`, `hactl up`, `hactl status`
#   healthy, etcd answering through the VIP from this machine, a second `hactl plan` with no
#   changes, then a recreated VM whose new host key hactl refuses with the exact command to run.
#   At the end, always: `vagrant destroy -f`, and everything libvirt added is removed again
#   (networks, storage pool, nftables tables and LIBVIRT_* chains, ip_forward as it was, the
#   daemons this script started).
#
# `--prepare` only installs the packages and builds (or finds) the box, then stops: no VM
# (scripts/test.sh runs it early, in the background, so that the lab itself starts at once).
#
# Exit codes: 0 passed, 77 skipped (a line `SKIPPED vagrant_lab: <why>`), else failed. It skips
# only without root, or, saying `this machine cannot run it: <what>`, for what no script can
# install (scripts/check-skips.sh fails any other skip of a run as root). Packages that cannot be
# installed, or daemons that do not start, fail it.
# Environment:
#   HACTL_BIN                      the hactl binary (default target/debug/hactl)
#   HACTL_VAGRANT_LIBVIRT_DRIVER   qemu (default here: software emulation) or kvm
#   HACTL_VAGRANT_LAB_RECREATE     0 to skip the recreated-VM step (default 1)
#   HACTL_VAGRANT_BOOT_TIMEOUT     seconds Vagrant waits for a guest's SSH (default 600)
#   HACTL_VAGRANT_UP_TIMEOUT       seconds one `vagrant up` try may take (default 720)
#   HACTL_VAGRANT_CACHE            box cache and Vagrant's home (default /var/cache/hactl/vagrant)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
prepare=0
case "${1:-}" in
  --prepare) prepare=1 ;;
  "") ;;
  *) echo "usage: scripts/vagrant-lab.sh [--prepare]" >&2; exit 64 ;;
esac

t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
say() { printf 'vagrant-lab: [%4ss] %s\n' "$(elapsed)" "$*" >&2; }
skip() { echo "SKIPPED vagrant_lab: $*"; exit 77; }
cannot() { skip "this machine cannot run it: $*"; }
fail() { say "FAILED: $*"; exit 1; }
declare -A took=()
timed() { # timed NAME command...: runs it, records its seconds
  local name=$1 s rc=0
  shift
  s=$(date +%s)
  "$@" || rc=$?
  took[$name]=$(( $(date +%s) - s ))
  say "$name: ${took[$name]} s (exit $rc)"
  return $rc
}

[ "$(id -u)" = 0 ] || skip "needs root (libvirt's daemons, networks and VMs)"
[ -e /dev/net/tun ] || cannot "no /dev/net/tun (libvirt's networks need the kernel's TUN device)"

# Packages, from the project's own script (QEMU and libvirt from bookworm-backports where apt can).
scripts/vagrant-deps.sh >&2 || fail "scripts/vagrant-deps.sh could not install Vagrant, libvirt and QEMU (above)"
for tool in vagrant virsh libvirtd virtlogd qemu-system-x86_64 qemu-img nft ssh-keygen curl; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is missing after scripts/vagrant-deps.sh"
done
plugins=$(vagrant plugin list 2>/dev/null || true)
grep -q vagrant-libvirt <<<"$plugins" || fail "Vagrant's libvirt provider (vagrant-libvirt) is missing after scripts/vagrant-deps.sh"

cache=${HACTL_VAGRANT_CACHE:-/var/cache/hactl/vagrant}
if [ "$prepare" = 1 ]; then
  # The box into the cache and into the Vagrant home the lab uses; no VM, no libvirt daemon.
  VAGRANT_HOME="$cache/home" VAGRANT_CHECKPOINT_DISABLE=1 timed box scripts/vagrant-box.sh \
    || fail "scripts/vagrant-box.sh"
  say "prepared: the packages and the box"
  exit 0
fi

hactl=${HACTL_BIN:-$repo/target/debug/hactl}
[ -x "$hactl" ] || fail "no hactl binary at $hactl: run cargo build first (or set HACTL_BIN)"

work=$(mktemp -d /tmp/hactl-vagrant-lab.XXXXXX)
export VAGRANT_HOME="$cache/home"
export VAGRANT_CWD="$repo/vagrant"
export VAGRANT_DOTFILE_PATH="$work/dot-vagrant"
export VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_NO_COLOR=1
export HACTL_VAGRANT_NODES=3
export HACTL_VAGRANT_LIBVIRT_DRIVER=${HACTL_VAGRANT_LIBVIRT_DRIVER:-qemu}
export HACTL_VAGRANT_MEMORY=${HACTL_VAGRANT_MEMORY:-768}
# On a quiet machine 3 emulated guests are up in about 90 s; on one saturated by other work a
# guest took over 15 minutes (about 6% of a core each). CI runs this alone, after the rest, so the
# limits below are several times the quiet figure and keep CI within its budget in the worst case
# (two `vagrant up` tries, then `hactl up`, then the recreate): Vagrant waits this long for a
# guest's SSH (vagrant-libvirt's wait for the first DHCP lease before that is fixed: see the retry
# below), and each `vagrant up` try is stopped after HACTL_VAGRANT_UP_TIMEOUT.
export HACTL_VAGRANT_BOOT_TIMEOUT=${HACTL_VAGRANT_BOOT_TIMEOUT:-600}
up_timeout=${HACTL_VAGRANT_UP_TIMEOUT:-720}
export HACTL_VAGRANT_POOL=hactl-vagrant-lab
export LIBVIRT_DEFAULT_URI=qemu:///system
# The lab's own SSH key and hactl state: the Vagrantfile's default key is ~/.ssh/id_ed25519.pub
# and the inventory's keyFile ~/.ssh/id_ed25519, both under this HOME.
export HOME="$work/home"
export HACTL_STATE_DIR="$work/state"
inventory="$repo/inventories/vagrant.yaml"
vip=192.168.56.100
pool_dir="$cache/pool"

# ── what exists before, so that the end removes exactly what was added ──────────────────────────
ip_forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
nft_tables_before=$(nft list tables 2>/dev/null | sort || true)
started_daemons=()

cleanup() {
  local rc=$?
  set +e
  say "cleanup"
  if [ -n "${vagrant_started:-}" ]; then
    timed "vagrant destroy" timeout 600 vagrant destroy -f >"$work/destroy.log" 2>&1 || tail -n 20 "$work/destroy.log" >&2
  fi
  if virsh version >/dev/null 2>&1; then
    # Anything of this lab's left behind (destroy failed): its domains by their prefix.
    for d in $(virsh list --all --name 2>/dev/null | grep "^hactl-lab-" || true); do
      virsh destroy "$d" >/dev/null 2>&1
      virsh undefine "$d" --remove-all-storage >/dev/null 2>&1
    done
    for n in hactl-vagrant hactl-vagrant-mgmt; do
      if virsh net-info "$n" >/dev/null 2>&1; then
        virsh net-destroy "$n" >/dev/null 2>&1
        virsh net-undefine "$n" >/dev/null 2>&1
      fi
    done
    if virsh pool-info "$HACTL_VAGRANT_POOL" >/dev/null 2>&1; then
      virsh pool-destroy "$HACTL_VAGRANT_POOL" >/dev/null 2>&1
      virsh pool-undefine "$HACTL_VAGRANT_POOL" >/dev/null 2>&1
    fi
  fi
  local pid
  for pidfile in "${started_daemons[@]}"; do
    pid=$(cat "$pidfile" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
  # nftables: the tables libvirt created (new since the start, and named libvirt*, holding
  # LIBVIRT_* chains, or left with nothing but empty chains: what iptables-nft leaves behind),
  # then the LIBVIRT_* chains it left in tables that existed before.
  local t fam name c listing
  while read -r t fam name; do
    [ "$t" = table ] || continue
    grep -qxF "table $fam $name" <<<"$nft_tables_before" && continue
    listing=$(nft list table "$fam" "$name" 2>/dev/null)
    if [[ $name == libvirt* ]] || grep -q '^[[:space:]]*chain LIBVIRT_' <<<"$listing" \
      || ! grep -vqE '^[[:space:]]*(table .*\{|chain .*\{|type .*;|\}|)$' <<<"$listing"; then
      nft delete table "$fam" "$name"
    fi
  done < <(nft list tables 2>/dev/null)
  while read -r t fam name; do
    [ "$t" = table ] || continue
    for c in $(nft list table "$fam" "$name" 2>/dev/null | awk '$1 == "chain" && $2 ~ /^LIBVIRT_/ { print $2 }'); do
      nft flush chain "$fam" "$name" "$c" 2>/dev/null
    done
    # Rules jumping to them, then the chains.
    nft -a list table "$fam" "$name" 2>/dev/null | awk '/^\tchain / { chain = $2 } /jump LIBVIRT_/ { print chain, $NF }' |
      while read -r c handle; do nft delete rule "$fam" "$name" "$c" handle "$handle" 2>/dev/null; done
    for c in $(nft list table "$fam" "$name" 2>/dev/null | awk '$1 == "chain" && $2 ~ /^LIBVIRT_/ { print $2 }'); do
      nft delete chain "$fam" "$name" "$c" 2>/dev/null
    done
  done < <(nft list tables 2>/dev/null)
  echo "$ip_forward_before" >/proc/sys/net/ipv4/ip_forward
  rm -rf "$work"
  say "total: $(elapsed) s"
  if [ ${#took[@]} -gt 0 ]; then
    local k
    for k in box "vagrant up" "vagrant up (again)" "hactl check" "hactl up" "hactl status" "hactl plan" "hactl check (end)" recreate "vagrant destroy"; do
      [ -n "${took[$k]:-}" ] && printf 'vagrant-lab: time %-16s %5s s\n' "$k" "${took[$k]}" >&2
    done
  fi
  exit $rc
}
trap cleanup EXIT
# Killed (kill -- -PGID, Ctrl-C): exit, so that the cleanup above runs once the child is gone.
trap 'exit 143' TERM
trap 'exit 130' INT

# ── libvirt without systemd ─────────────────────────────────────────────────────────────────
# Its default network is not wanted (and would take 192.168.122.0/24): no autostart.
rm -f /etc/libvirt/qemu/networks/autostart/default.xml
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if ! running /run/virtlogd.pid; then
  virtlogd -d || fail "virtlogd does not start"
  started_daemons+=(/run/virtlogd.pid)
fi
if ! running /run/libvirtd.pid; then
  libvirtd -d >/dev/null 2>&1 || fail "libvirtd does not start"
  started_daemons=(/run/libvirtd.pid "${started_daemons[@]}")
fi
for _ in $(seq 1 50); do virsh version >/dev/null 2>&1 && break; sleep 0.2; done
virsh version >/dev/null 2>&1 || fail "libvirtd does not answer on qemu:///system"
caps=$(virsh capabilities 2>/dev/null || true)
grep -q "<domain type='qemu'" <<<"$caps" || fail "libvirt finds no QEMU that can run x86_64 guests"
say "libvirt is up (libvirt $(virsh version --daemon 2>/dev/null | awk '/daemon/ { print $NF }'), QEMU driver: $HACTL_VAGRANT_LIBVIRT_DRIVER)"

mkdir -p "$pool_dir"
virsh pool-info "$HACTL_VAGRANT_POOL" >/dev/null 2>&1 || virsh pool-define-as "$HACTL_VAGRANT_POOL" dir --target "$pool_dir" >/dev/null
virsh pool-start "$HACTL_VAGRANT_POOL" >/dev/null 2>&1 || true

# ── the box (cached), a key, the VMs ────────────────────────────────────────────────────────
timed box scripts/vagrant-box.sh
# The pool keeps the box's image between runs (no upload each time); images of older box
# versions are dropped.
box_version=$(ls "$VAGRANT_HOME/boxes/hactl-VAGRANTSLASH-bookworm" | sort -V | tail -n1)
for vol in $(virsh vol-list "$HACTL_VAGRANT_POOL" 2>/dev/null | awk '$1 ~ /_vagrant_box_image_/ { print $1 }'); do
  [[ $vol == *"_${box_version}_"* ]] || virsh vol-delete --pool "$HACTL_VAGRANT_POOL" "$vol" >/dev/null
done
install -d -m 700 "$HOME/.ssh"
ssh-keygen -q -t ed25519 -N "" -f "$HOME/.ssh/id_ed25519"
export HACTL_VAGRANT_PREFIX=hactl-lab-

vagrant_started=1
say "vagrant up: 3 VMs in parallel under ${HACTL_VAGRANT_LIBVIRT_DRIVER} (several minutes under emulation)"
# vagrant-libvirt waits a fixed ~300 tries (10 to 15 minutes) for a guest's first DHCP lease,
# whatever boot_timeout says, and destroys a guest that missed it; at load 15 to 35 on 2 cores one
# guest in three sometimes did. One more `vagrant up` recreates only the missing ones.
# A try stopped by the timeout may leave a VM running whose private interface Vagrant had not
# configured yet; a second `vagrant up` leaves a running VM as it is. So before the second try,
# a VM that does not answer on its private address is destroyed, to be created anew.
hosts=$(sed -nE 's/.*name: *([a-z0-9-]+), *address: *([0-9.]+).*/\1 \2/p' "$inventory")
answers() { timeout 5 bash -c "exec 3<>/dev/tcp/$1/22" 2>/dev/null; }
unreachable() {
  local name addr
  while read -r name addr; do answers "$addr" || echo "$name"; done <<<"$hosts"
}
up_ok=0
for attempt in 1 2; do
  step="vagrant up"
  [ "$attempt" = 1 ] || step="vagrant up (again)"
  if timed "$step" timeout "$up_timeout" vagrant up --provider=libvirt --parallel >"$work/up.log" 2>&1; then
    up_ok=1
    break
  fi
  # Vagrant's message, without the Ruby stack traces that follow an exception.
  grep -v '^/.*:in `' "$work/up.log" | tail -n 40 >&2
  if [ "$attempt" = 1 ]; then
    for vm in $(unreachable); do
      say "$vm does not answer on its private address: destroying it, to be created again"
      timeout 300 vagrant destroy -f "$vm" >>"$work/destroy-retry.log" 2>&1 || tail -n 20 "$work/destroy-retry.log" >&2
    done
    say "vagrant up failed; once more for the VMs that are not up"
  fi
done
[ "$up_ok" = 1 ] || fail "vagrant up"
missing=$(unreachable | paste -sd' ' -)
[ -z "$missing" ] || fail "vagrant up succeeded, but these VMs do not answer on port 22 of their private address: $missing"
grep -h "hactl: clock\|hactl: could not set" "$work/up.log" >&2 || true

# ── hactl on the VMs ────────────────────────────────────────────────────────────────────────
# The Vagrantfile set each VM's clock from this machine's after `vagrant up` (the box has no NTP
# client and no NTP server is reachable here); `hactl check`'s clock rule (< 1 s) judges that.
timed "hactl check" "$hactl" check -i "$inventory" || fail "hactl check"
# On failure, the last lines of etcd's, keepalived's and HAProxy's journals on each VM: a VIP held
# by nobody (seen once, on VMs ten times slower than usual) is explained by keepalived's own log,
# a member that does not start by etcd's.
journals() {
  local vm
  for vm in cp1 cp2 cp3; do
    say "$vm: journalctl -u etcd -u keepalived -u haproxy (last 30 lines)"
    timeout 60 vagrant ssh "$vm" -c "sudo journalctl -u etcd -u keepalived -u haproxy -n 30 --no-pager -o short-precise" 2>&1 | sed "s/^/  $vm | /" >&2 || true
  done
}
# hactl's log goes to a file first, so that on failure its last lines can be printed again below
# the journals, last before `FAILED:`, where a summary that keeps only the end still shows them.
up_rc=0
timed "hactl up" "$hactl" up -i "$inventory" 2>"$work/up.err" || up_rc=$?
cat "$work/up.err" >&2
if [ "$up_rc" != 0 ]; then
  journals
  say "hactl up's last lines, again:"
  tail -n 8 "$work/up.err" >&2
  fail "hactl up"
fi
# `status` reads one moment. On emulated VMs a starved guest's keepalived may be in FAULT for a
# while (its HAProxy check timed out) and its etcd slow to answer /health, so the cluster is
# given up to 4 readings, 40 s apart, to be healthy; each reading that is not is printed.
healthy=0
for reading in 1 2 3 4; do
  if timed "hactl status" "$hactl" status -i "$inventory"; then
    healthy=1
    break
  fi
  [ "$reading" = 4 ] || { say "not healthy yet (reading $reading of 4); again in 40 s"; sleep 40; }
done
[ "$healthy" = 1 ] || { journals; fail "hactl status is not healthy (4 readings over 2 minutes)"; }
say "etcd through the VIP $vip, from this machine"
pki="$HACTL_STATE_DIR/pki/etcd"
health=$(curl -fsS --max-time 10 --cacert "$pki/ca.crt" --cert "$pki/hactl-client.crt" \
  --key "$pki/hactl-client.key" "https://$vip:2379/health") || fail "no answer from https://$vip:2379/health"
say "VIP answered: $health"
grep -q '"health":"true"' <<<"$health" || fail "etcd through the VIP is not healthy: $health"
timed "hactl plan" "$hactl" plan -i "$inventory" >"$work/plan.txt" || fail "hactl plan"
grep -q "no changes" "$work/plan.txt" || { cat "$work/plan.txt" >&2; fail "a second plan after up is not 'no changes'"; }
# The clocks again, minutes after they were set: an emulated guest's clock may run at the wrong
# rate (its TSC calibrated on a starved CPU), which a step at boot would not cure.
timed "hactl check (end)" "$hactl" check -i "$inventory" || fail "hactl check after up (the clocks drifted?)"

# ── a recreated VM: new host key, refused with the command to run ───────────────────────────
if [ "${HACTL_VAGRANT_LAB_RECREATE:-1}" = 1 ]; then
  say "recreate cp3 (new host key)"
  recreate() {
    vagrant destroy -f cp3 >"$work/recreate.log" 2>&1 && vagrant up --provider=libvirt cp3 >>"$work/recreate.log" 2>&1
  }
  timed recreate timeout 600 bash -c "$(declare -f recreate); work=$work; recreate" || { tail -n 30 "$work/recreate.log" >&2; fail "recreating cp3"; }
  set +e
  out=$("$hactl" check -i "$inventory" 2>&1)
  rc=$?
  set -e
  echo "$out" | grep -i "host key" >&2 || true
  [ $rc -ne 0 ] || fail "hactl check passed although cp3's host key changed"
  # 3: only the operator can say the key changed for a re-install (docs/reference/exit-codes.md).
  [ $rc -eq 3 ] || { echo "$out" >&2; fail "hactl check exited $rc, not 3 (needs input), for a changed host key alone"; }
  grep -q "the host key of cp3 (192.168.56.13:22) changed" <<<"$out" || { echo "$out" >&2; fail "no host-key refusal for cp3"; }
  grep -qF -- "$hactl check -i $inventory --accept-new-host-key cp3" <<<"$out" \
    || { echo "$out" >&2; fail "the refusal does not print the command to run"; }
  say "refused as expected, with the command to run"
fi
say "PASSED"
