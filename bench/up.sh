#!/usr/bin/env bash
# Benchmark: cold `hactl up` of 3 and of 5 etcd members and a no-op `up`, each printed beside its
# floor measured in the same run on the same lab:
#   cold floor  = the same files (taken from the hosts after hactl's run) installed and etcd started
#                 by a plain script over OpenSSH, all hosts in parallel, until the cluster is healthy;
#   no-op floor = one `ssh host true` per host, in parallel.
# Needs root (it builds labs). Usage: sudo bench/up.sh [MEMBERS...]   (default: 3 5)
set -euo pipefail
cd "$(dirname "$0")/.."
HACTL=${HACTL:-target/release/hactl}
[ -x "$HACTL" ] || cargo build --release --quiet
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

for n in "${@:-3 5}"; do
  for members in $n; do
    name="bup${members}-$$"
    inv="/tmp/$name.yaml"
    trap '"$HACTL" lab down --name "$name" >/dev/null 2>&1 || true' EXIT
    "$HACTL" lab up --no-kubernetes --name "$name" --control-planes "$members" --load-balancers 0 --out "$inv" >/dev/null 2>&1
    key="$("$HACTL" lab status 2>/dev/null >/dev/null; echo "${HACTL_LAB_DIR:-/var/lib/hactl-lab}/labs/$name/id_ed25519")"
    mapfile -t ips < <(sed -n 's/^ *address: "\{0,1\}\([0-9.]*\)"\{0,1\}$/\1/p' "$inv")
    ssh_to() { ssh -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes "root@$1" "${@:2}"; }

    t=$(now); "$HACTL" up -i "$inv" --yes >/dev/null 2>&1; cold=$(since "$t")
    t=$(now); out=$("$HACTL" up -i "$inv" 2>/dev/null); noop=$(since "$t")
    [ "$out" = "no changes" ] || { echo "second up did not say no changes: $out" >&2; exit 1; }
    t=$(now); for ip in "${ips[@]}"; do ssh_to "$ip" true & done; wait; noop_floor=$(since "$t")

    # The floor for a cold start: the very files hactl installed, placed by a plain script.
    for ip in "${ips[@]}"; do
      ssh_to "$ip" tar czPf - /etc/hactl /etc/systemd/system/etcd.service /usr/local/sbin/hactl-etcdctl /usr/local/sbin/hactl-etcd-member > "/tmp/$name-$ip.tgz"
    done
    "$HACTL" reset -i "$inv" --yes >/dev/null 2>&1
    t=$(now)
    for ip in "${ips[@]}"; do
      ssh_to "$ip" 'tar xzPf - && install -d -m 0700 -o etcd -g etcd /var/lib/etcd && systemctl daemon-reload && systemctl enable --quiet etcd && systemctl start --no-block etcd' < "/tmp/$name-$ip.tgz" &
    done
    wait
    until ssh_to "${ips[0]}" hactl-etcdctl endpoint health --cluster >/dev/null 2>&1; do sleep 0.05; done
    cold_floor=$(since "$t")
    rm -f /tmp/"$name"-*.tgz

    printf '%d members: cold up %ss (floor %ss, %sx)   no-op up %ss (floor %ss, %sx)\n' \
      "$members" "$cold" "$cold_floor" "$(ratio "$cold" "$cold_floor")" "$noop" "$noop_floor" "$(ratio "$noop" "$noop_floor")"
    "$HACTL" lab down --name "$name" >/dev/null 2>&1
    trap - EXIT
  done
done
