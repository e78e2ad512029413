#!/usr/bin/env bash
# Benchmark: a 3-member etcd upgrade 3.4.23 -> 3.5.16 with `hactl up` (source: bundle), beside the
# same steps by hand on a second lab of the same kind, in the same run:
#   floor = a plain script over OpenSSH: copy etcd, etcdctl and etcdutl to every host (in
#           parallel), point the unit at them, then one member at a time (the leader last): wait
#           for cluster health, move leadership off the member when it leads, restart it, wait
#           for it to be healthy; then wait for the cluster version 3.5.
# hactl does the same and more: it checks the binaries' version on every host first, compares each
# member's running version, and waits for the member to report the new version.
# The binaries come from trixie's packages (scripts/etcd-bundle.sh, cached in /var/cache/hactl).
# Labs have no load balancers, so neither side drains HAProxy. Needs root.
# Usage: sudo bench/etcd_upgrade.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

bundle=$(scripts/etcd-bundle.sh 3.5.16 trixie)
a="bupg-a-$$"; b="bupg-b-$$"
trap '"$HACTL" lab down --name "$a" >/dev/null 2>&1 || true; "$HACTL" lab down --name "$b" >/dev/null 2>&1 || true' EXIT
for lab in "$a" "$b"; do
  "$HACTL" lab up --no-kubernetes --name "$lab" --suite bookworm --control-planes 3 --load-balancers 0 --out "/tmp/$lab.yaml" >/dev/null 2>&1
  "$HACTL" up -i "/tmp/$lab.yaml" --yes >/dev/null 2>&1
done

# hactl: declare the bundle and run up.
inv="/tmp/$a.yaml"
sed -i "s|^\(\s*\)source: package\$|\1source: bundle\n\1bundleDir: $bundle\n\1version: 3.5.16|" "$inv"
t=$(now); "$HACTL" up -i "$inv" --yes >/dev/null 2>&1; hactl_time=$(since "$t")
[ "$("$HACTL" plan -i "$inv" 2>/dev/null)" = "no changes" ] || { echo "hactl's upgrade left changes" >&2; exit 1; }

# The floor on the other lab.
inv="/tmp/$b.yaml"
key="${HACTL_LAB_DIR:-/var/lib/hactl-lab}/labs/$b/id_ed25519"
mapfile -t ips < <(sed -n 's/^ *address: "\{0,1\}\([0-9.]*\)"\{0,1\}$/\1/p' "$inv")
ssh_to() { ssh -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes "root@$1" "${@:2}"; }
ctl=/usr/local/sbin/hactl-etcdctl
t=$(now)
for ip in "${ips[@]}"; do
  ( for bin in etcd etcdctl etcdutl; do
      ssh_to "$ip" "cat > /usr/local/bin/$bin.new && chmod 755 /usr/local/bin/$bin.new && mv /usr/local/bin/$bin.new /usr/local/bin/$bin" < "$bundle/$bin"
    done
    ssh_to "$ip" "sed -i 's|/usr/bin/etcd |/usr/local/bin/etcd |; s|/usr/bin/etcdctl|/usr/local/bin/etcdctl|' /etc/systemd/system/etcd.service $ctl && systemctl daemon-reload" ) &
done
wait
leader_ip=""
for ip in "${ips[@]}"; do
  st=$(ssh_to "$ip" "$ctl endpoint status -w json")
  me=$(grep -o '"member_id":[0-9]*' <<<"$st" | cut -d: -f2); l=$(grep -o '"leader":[0-9]*' <<<"$st" | cut -d: -f2)
  if [ "$me" = "$l" ]; then leader_ip=$ip; fi
done
order=(); for ip in "${ips[@]}"; do [ "$ip" = "$leader_ip" ] || order+=("$ip"); done; order+=("$leader_ip")
for ip in "${order[@]}"; do
  until ssh_to "$ip" "$ctl endpoint health --cluster" >/dev/null 2>&1; do sleep 0.05; done
  ssh_to "$ip" /usr/local/sbin/hactl-etcd-member step-down >/dev/null
  ssh_to "$ip" systemctl restart etcd
  until ssh_to "$ip" "$ctl endpoint health" >/dev/null 2>&1; do sleep 0.05; done
done
# The cluster version at /version: etcd 3.5 serves HTTP on loopback port 2382 under hactl's unit.
until ssh_to "${ips[0]}" "curl -sf --cacert /etc/hactl/pki/etcd/ca.crt --cert /etc/hactl/pki/etcd/client.crt --key /etc/hactl/pki/etcd/client.key https://127.0.0.1:2382/version" | grep -q '"etcdcluster":"3.5.0"'; do sleep 0.05; done
floor=$(since "$t")

printf '3-member etcd upgrade 3.4.23 -> 3.5.16: hactl up %ss, by hand %ss (%sx)\n' "$hactl_time" "$floor" "$(ratio "$hactl_time" "$floor")"
