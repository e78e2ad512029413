#!/bin/sh
# Benchmark: hactl recover and hactl etcd snapshot save, each beside its floor measured in the
# same run on the same lab (3 control planes, etcd from Debian trixie, a ~256 MB database).
#
#   sudo bench/recover.sh [SIZE_MB]        (needs root for the lab; uses target/release/hactl)
#
# Floors:
#   snapshot: `etcdctl snapshot save` on the leader, then a copy back with `ssh cat`;
#   recover:  the etcd docs' manual restore as a plain script: restore every member from the same
#             snapshot (copied to each with scp), start all, wait for health.
# Recover is measured as the issue defines it, from the command's start to a verified 3-member
# quorum: the time its journal records step R4.1 (exact membership, one cluster ID, health,
# equal hashkv, no alarms, revision past the mark) as done. The whole command's time (which
# adds the R4.2 baseline backup and R6) is printed beside it.
# Prints figures; asserts nothing about time. Tears the lab down on exit.
set -eu
SIZE_MB=${1:-256}
HERE=$(cd "$(dirname "$0")/.." && pwd)
H=${HACTL:-$HERE/target/release/hactl}
NAME=bench$$
OUT=$(mktemp -d)
trap '$H lab down --name $NAME >/dev/null 2>&1 || true; rm -rf "$OUT"' EXIT INT TERM

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
# The step timeline of the newest recover run: seconds from the command's start to each step's
# end, and how long the step took.
# Seconds from $1 (date +%s.%N) to the journal entry of step R4.1 (done or skipped: its
# postcondition is the verification itself).
verified() {
  j=$(ls -td "$LAB"/state/runs/*/ | head -n1)journal.jsonl
  jq -r --arg t0 "$1" '
    def secs: (.ts | sub("\\.(?<f>[0-9]+)Z$"; "Z") | fromdateiso8601) + ((.ts | capture("\\.(?<f>[0-9]+)Z$").f | "0." + .) | tonumber);
    [.[] | select(.step == "R4.1" and (.phase == "done" or .phase == "skipped"))][0] | ((secs - ($t0 | tonumber)) * 1000 | round / 1000)
  ' --slurp "$j"
}
timeline() {
  j=$(ls -td "$LAB"/state/runs/*/ | head -n1)journal.jsonl
  jq -r --arg t0 "$1" '
    def secs: (.ts | sub("\\.(?<f>[0-9]+)Z$"; "Z") | fromdateiso8601) + ((.ts | capture("\\.(?<f>[0-9]+)Z$").f | "0." + .) | tonumber);
    [.[] | {step, phase, t: secs}] as $e
    | ($e | map(select(.phase == "started")) | map({key: .step, value: .t}) | from_entries) as $start
    | $e[] | select(.phase == "done" or .phase == "skipped")
    | "  \(.step | . + " " * (14 - length)) ends at \((.t - ($t0 | tonumber)) * 100 | round / 100)s  took \((.t - ($start[.step] // .t)) * 100 | round / 100)s  \(.phase)"
  ' --slurp "$j"
}

$H lab up --no-kubernetes --name $NAME --control-planes 3 --load-balancers 0 --out "$OUT/inv.yaml" >/dev/null
I=$OUT/inv.yaml
LAB=/var/lib/hactl-lab/labs/$NAME
KEY=$LAB/id_ed25519
KH=$LAB/known_hosts
ip() { sed -n "/name: $1\$/{n;s/.*\"\(.*\)\".*/\1/p}" "$I"; }
on() { h=$1; shift; ssh -q -i "$KEY" -o UserKnownHostsFile="$KH" -o StrictHostKeyChecking=yes -o BatchMode=yes "root@$(ip "$h")" "$@"; }
$H up -i "$I" --yes >/dev/null 2>&1

echo "filling ${SIZE_MB} MB (1 MB values)..."
on cp1 "for i in \$(seq 1 $SIZE_MB); do head -c 1000000 /dev/urandom | base64 -w0 | head -c 1000000 | hactl-etcdctl put /bench/\$i >/dev/null; done"
LEADER=$($H status -i "$I" -o json | sed -n 's/.*"leader": "\(cp[0-9]*\)".*/\1/p' | head -n1)
DB=$(on "$LEADER" "hactl-etcdctl endpoint status -w json" | sed -n 's/.*"dbSize":\([0-9]*\).*/\1/p')
echo "database: $DB bytes; leader: $LEADER"

# --- snapshot save -------------------------------------------------------------------------
t=$(now)
on "$LEADER" "hactl-etcdctl snapshot save /var/tmp/floor.db >/dev/null 2>&1"
on "$LEADER" "cat /var/tmp/floor.db" > "$OUT/floor.db"
FLOOR_SNAP=$(since "$t")
t=$(now)
SNAP=$($H etcd snapshot save -i "$I" --out "$OUT/snaps" 2>"$OUT/save.err")
HACTL_SNAP=$(since "$t")
SIZE=$(stat -c %s "$SNAP")
echo "snapshot save: hactl ${HACTL_SNAP}s (stream, status read from the file, sidecar, bundle) vs floor etcdctl+ssh cat ${FLOOR_SNAP}s; $SIZE bytes"
grep '^snapshot:' "$OUT/save.err" || true

# --- recover -------------------------------------------------------------------------------
lose() { for h in "$@"; do on "$h" "systemctl kill -s KILL etcd; systemctl stop etcd; rm -rf /var/lib/etcd"; done; }
lose cp2 cp3
sleep 2
t=$(now)
$H recover -i "$I" --from-snapshot "$SNAP" --yes >"$OUT/rec.out" 2>"$OUT/rec.err" || { cat "$OUT/rec.err" >&2; exit 1; }
HACTL_REC=$(since "$t")
VERIFIED_REC=$(verified "$t")
echo "recover (seed mode): verified quorum at ${VERIFIED_REC}s; whole command (with the baseline backup) ${HACTL_REC}s"
grep '^recover: run' "$OUT/rec.out" || true
timeline "$t" || true

lose cp2 cp3
sleep 2
t=$(now)
# The same snapshot again: the first recover raised the high-water mark past it, so the data-loss
# gate needs the window accepted.
$H recover -i "$I" --from-snapshot "$SNAP" --mode all --accept-data-loss-window 1h --yes >"$OUT/rec2.out" 2>"$OUT/rec2.err" || { cat "$OUT/rec2.err" >&2; exit 1; }
HACTL_ALL=$(since "$t")
VERIFIED_ALL=$(verified "$t")
echo "recover --mode all: verified quorum at ${VERIFIED_ALL}s; whole command ${HACTL_ALL}s"
timeline "$t" || true

# The floor: the etcd docs' manual restore, by a plain script.
lose cp2 cp3
sleep 2
TOKEN=floor-$$
IC="cp1=https://$(ip cp1):2380,cp2=https://$(ip cp2):2380,cp3=https://$(ip cp3):2380"
t=$(now)
for h in cp1 cp2 cp3; do
  (on $h "systemctl stop etcd; mv /var/lib/etcd /var/lib/etcd.floor-$$ 2>/dev/null; true"
   scp -q -i "$KEY" -o UserKnownHostsFile="$KH" -o BatchMode=yes "$SNAP" "root@$(ip $h):/var/tmp/restore.db"
   on $h "etcdutl snapshot restore /var/tmp/restore.db --name $h --initial-cluster $IC --initial-cluster-token $TOKEN \
      --initial-advertise-peer-urls https://$(ip $h):2380 --data-dir /var/lib/etcd --bump-revision 1000000000 --mark-compacted >/dev/null 2>&1 \
      && chown -R etcd:etcd /var/lib/etcd && chmod 700 /var/lib/etcd && systemctl start --no-block etcd") &
done
wait
until on cp1 "hactl-etcdctl endpoint health --cluster >/dev/null 2>&1"; do sleep 0.1; done
FLOOR_REC=$(since "$t")
echo "floor (manual restore of all three in parallel, start, wait for health): ${FLOOR_REC}s"
echo
echo "RESULT snapshot_save hactl=${HACTL_SNAP}s floor=${FLOOR_SNAP}s ratio=$(echo "scale=2; $HACTL_SNAP / $FLOOR_SNAP" | bc)"
echo "RESULT recover_seed verified=${VERIFIED_REC}s floor=${FLOOR_REC}s ratio=$(echo "scale=2; $VERIFIED_REC / $FLOOR_REC" | bc) whole_command=${HACTL_REC}s ($(echo "scale=2; $HACTL_REC / $FLOOR_REC" | bc)x)"
echo "RESULT recover_all verified=${VERIFIED_ALL}s floor=${FLOOR_REC}s ratio=$(echo "scale=2; $VERIFIED_ALL / $FLOOR_REC" | bc) whole_command=${HACTL_ALL}s ($(echo "scale=2; $HACTL_ALL / $FLOOR_REC" | bc)x)"
