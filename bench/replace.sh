#!/bin/sh
# Benchmark: `hactl replace` of a dead member (etcd killed, data dir lost) in a 3-member cluster
# holding SIZE_MB of data, beside the floor measured in the same run on the same lab: the same
# remove / add --learner / start / promote done by a plain etcdctl script over ssh. Also counts the
# writes that fail, for a writer through the VIP (one etcdctl put every ~50 ms from cp2), during
# the replacement and during a maintenance cycle (start + complete) of cp1.
#
#   sudo bench/replace.sh [SIZE_MB]        (needs root for the lab; uses target/release/hactl)
#
# Time = command start to 3 healthy voters. Prints figures; asserts nothing about time. Tears the
# lab down on exit.
set -eu
SIZE_MB=${1:-256}
HERE=$(cd "$(dirname "$0")/.." && pwd)
H=${HACTL:-$HERE/target/release/hactl}
NAME=benchr$$
OUT=$(mktemp -d)
trap 'on cp2 "kill \$(cat /var/tmp/writer.pid)" >/dev/null 2>&1 || true; $H lab down --name $NAME >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT INT TERM

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

$H lab up --no-kubernetes --name $NAME --control-planes 3 --load-balancers 1 --out "$OUT/inv.yaml" >/dev/null
I=$OUT/inv.yaml
LAB=/var/lib/hactl-lab/labs/$NAME
KEY=$LAB/id_ed25519
KH=$LAB/known_hosts
ip() { sed -n "/name: $1\$/{n;s/.*\"\(.*\)\".*/\1/p}" "$I"; }
on() { h=$1; shift; ssh -q -i "$KEY" -o UserKnownHostsFile="$KH" -o StrictHostKeyChecking=yes -o BatchMode=yes "root@$(ip "$h")" "$@"; }
$H up -i "$I" --yes >/dev/null 2>&1
VIP=$(ip cp1 | sed 's/\.[0-9]*$/.100/') # the lab's VIP is .100 of its subnet

echo "filling ${SIZE_MB} MB (1 MB values)..."
on cp1 "for i in \$(seq 1 $SIZE_MB); do head -c 1000000 /dev/urandom | base64 -w0 | head -c 1000000 | hactl-etcdctl put /bench/\$i >/dev/null; done"
DB=$(on cp1 "hactl-etcdctl endpoint status -w json" | sed -n 's/.*"dbSize":\([0-9]*\).*/\1/p')
echo "database: $DB bytes; VIP $VIP"

# A writer through the VIP on cp2: one line per put, ok or fail, in /var/tmp/writer.log.
writer_start() {
  on cp2 "rm -f /var/tmp/writer.log; nohup sh -c 'echo \$\$ >/var/tmp/writer.pid; i=0; while :; do i=\$((i+1)); \
    if hactl-etcdctl --endpoints=https://$VIP:2379 --command-timeout=3s put /w/\$((i%64)) \$i >/dev/null 2>&1; \
    then echo ok; else echo fail; fi; sleep 0.05; done' >>/var/tmp/writer.log 2>&1 </dev/null &"
}
writer_stop() {
  on cp2 "kill \$(cat /var/tmp/writer.pid); sleep 0.2; echo \$(grep -c ok /var/tmp/writer.log) \$(grep -c fail /var/tmp/writer.log)"
}
kill_cp3() {
  on cp3 "systemctl kill -s KILL etcd; systemctl stop etcd; mv /var/lib/etcd /var/lib/etcd.dead-\$(date +%s%N)"
}
healthy3() {
  on cp1 "hactl-etcdctl endpoint health --cluster >/dev/null 2>&1 && [ \$(hactl-etcdctl member list | grep -c ', false\$') -eq 3 ]"
}

# --- hactl replace --------------------------------------------------------------------------
kill_cp3
sleep 1
writer_start
t=$(now)
$H replace cp3 --reuse-host --yes -i "$I" >"$OUT/rep.out" 2>"$OUT/rep.err" || { cat "$OUT/rep.err" >&2; exit 1; }
until healthy3; do sleep 0.1; done
HACTL_REP=$(since "$t")
set -- $(writer_stop)
REP_OK=$1 REP_FAIL=$2
echo "hactl replace cp3 --reuse-host: ${HACTL_REP}s; writer through the VIP: $REP_OK ok, $REP_FAIL failed"

# --- the floor: remove / add --learner / start / promote by hand -----------------------------
TOKEN=$(on cp1 "sed -n 's/^ETCD_INITIAL_CLUSTER_TOKEN=//p' /etc/hactl/etcd-initial.env 2>/dev/null" || true)
[ -n "$TOKEN" ] || TOKEN=$(on cp1 "systemctl cat etcd" | sed -n 's/.*--initial-cluster-token=\([^ ]*\).*/\1/p' | head -n1)
kill_cp3
sleep 1
OLD=$(on cp1 "hactl-etcdctl member list" | awk -F', ' '$3=="cp3"{print $1}')
t=$(now)
on cp1 "hactl-etcdctl member remove $OLD" >/dev/null
IC=$(on cp1 "hactl-etcdctl member add cp3 --learner --peer-urls=https://$(ip cp3):2380" | sed -n 's/^ETCD_INITIAL_CLUSTER="\(.*\)"/\1/p')
on cp3 "printf 'ETCD_INITIAL_CLUSTER=%s\nETCD_INITIAL_CLUSTER_STATE=existing\nETCD_INITIAL_CLUSTER_TOKEN=%s\n' '$IC' '$TOKEN' >/etc/hactl/etcd-initial.env; \
  install -d -o etcd -g etcd -m 700 /var/lib/etcd; systemctl start --no-block etcd"
NEW=$(on cp1 "hactl-etcdctl member list" | awk -F', ' '$4=="https://'"$(ip cp3)"':2380"{print $1}')
until on cp1 "hactl-etcdctl member promote $NEW" >/dev/null 2>&1; do sleep 0.1; done
until healthy3; do sleep 0.1; done
FLOOR_REP=$(since "$t")
echo "floor (etcdctl remove/add/start/promote over ssh): ${FLOOR_REP}s"

# --- a maintenance cycle of cp1 with the writer running --------------------------------------
writer_start
sleep 1
t=$(now)
$H maintenance start cp1 --yes -i "$I" >"$OUT/m1.out" 2>&1 || { cat "$OUT/m1.out" >&2; exit 1; }
$H maintenance complete cp1 --yes -i "$I" >"$OUT/m2.out" 2>&1 || { cat "$OUT/m2.out" >&2; exit 1; }
MAINT=$(since "$t")
sleep 1
set -- $(writer_stop)
M_OK=$1 M_FAIL=$2
echo "maintenance start+complete cp1: ${MAINT}s; writer through the VIP: $M_OK ok, $M_FAIL failed"
echo
echo "RESULT replace_dead_member db=${DB}B hactl=${HACTL_REP}s floor=${FLOOR_REP}s ratio=$(echo "scale=2; $HACTL_REP / $FLOOR_REP" | bc)"
echo "RESULT writes_during_replace ok=$REP_OK failed=$REP_FAIL"
echo "RESULT writes_during_maintenance ok=$M_OK failed=$M_FAIL cycle=${MAINT}s"
