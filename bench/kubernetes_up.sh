#!/usr/bin/env bash
# Benchmark: cold `hactl up` of a lab with the Kubernetes control plane (3 control planes with etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler; 2 load balancers) beside the same run
# without Kubernetes (`lab up --no-kubernetes`: etcd and the load balancers only), same shape, same
# machine, same run. The Kubernetes binaries come from the cache (`hactl lab kube-binaries`, built
# first if missing; that build is not timed). Also times the no-op second `up` of each, and a third
# with the hosts' digest records removed (every binary hashed on its host again).
# The no-op `up` is timed 5 times (the median counts; once with --quick) after the cluster has
# settled for 10 s (not with --quick), and its ratio to the floor (the same no-op without Kubernetes) is printed.
# Needs root (it builds labs). Usage: sudo bench/kubernetes_up.sh [--quick]
# Prints figures; asserts nothing about time. Tears its labs down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

runs=5 settle=10
[ "${1:-}" = --quick ] && runs=1 settle=0
"$HACTL" lab kube-binaries >/dev/null
names=()
trap 'for n in "${names[@]}"; do "$HACTL" lab down --name "$n" >/dev/null 2>&1 || true; done' EXIT

run() { # $1 = label, $2 = short tag (lab names have at most 20 characters), $3.. = lab up flags
  local label=$1 tag=$2; shift 2
  local name="bk$$-${tag}"
  names+=("$name")
  local inv="/tmp/$name.yaml"
  "$HACTL" lab up --name "$name" --control-planes 3 --load-balancers 2 --out "$inv" "$@" >/dev/null 2>&1
  local t; t=$(now)
  "$HACTL" up -i "$inv" --yes >/dev/null 2>&1
  local cold; cold=$(since "$t")
  # Let a fresh control plane settle (controllers start, kubelets register) before timing.
  sleep "$settle"
  local i times=() out
  for ((i = 0; i < runs; i++)); do
    t=$(now)
    out=$("$HACTL" up -i "$inv" 2>/dev/null)
    times+=("$(since "$t")")
    [ "$out" = "no changes" ] || { echo "no-op up on $label did not say no changes: $out" >&2; exit 1; }
  done
  local noop; noop=$(printf '%s\n' "${times[@]}" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
  # The same no-op `up` with every host's digest records removed: each large file hashed on its
  # host again, as before the records existed (docs/reference/files-on-hosts.md).
  local h
  for h in cp1 cp2 cp3 lb1 lb2; do
    "$HACTL" lab ssh --name "$name" "$h" -- rm -rf /var/lib/hactl/digests >/dev/null
  done
  t=$(now)
  out=$("$HACTL" up -i "$inv" 2>/dev/null)
  local unrecorded; unrecorded=$(since "$t")
  [ "$out" = "no changes" ] || { echo "third up on $label did not say no changes: $out" >&2; exit 1; }
  "$HACTL" lab down --name "$name" >/dev/null 2>&1
  printf '%-28s cold up %6s s   no-op up %5s s (median of %s: %s)   no-op up without digest records %5s s\n' \
    "$label" "$cold" "$noop" "$runs" "${times[*]}" "$unrecorded"
  eval "cold_$tag=$cold noop_$tag=$noop"
}

echo "cold hactl up, 3 control planes + 2 load balancers ($(nproc) cores, $(date -u +%FT%TZ))"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run without-kubernetes e --no-kubernetes
run with-kubernetes k
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "RESULT no-op up with Kubernetes ${noop_k} s, floor (without) ${noop_e} s: $(ratio "$noop_k" "$noop_e")x (goal 1.3x)"
echo "RESULT cold up with Kubernetes ${cold_k} s, without ${cold_e} s: $(ratio "$cold_k" "$cold_e")x"
