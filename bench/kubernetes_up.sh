#!/usr/bin/env bash
# Benchmark: cold `hactl up` of a lab with the Kubernetes control plane (3 control planes with etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler; 2 load balancers) beside the same run
# without Kubernetes (`lab up --no-kubernetes`: etcd and the load balancers only), same shape, same
# machine, same run. The Kubernetes binaries come from the cache (`hactl lab kube-binaries`, built
# first if missing; that build is not timed). Also times the no-op second `up` of each, and a third
# with the hosts' digest records removed (every binary hashed on its host again).
# Needs root (it builds labs). Usage: sudo bench/kubernetes_up.sh
# Prints figures; asserts nothing about time. Tears its labs down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

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
  t=$(now)
  local out; out=$("$HACTL" up -i "$inv" 2>/dev/null)
  local noop; noop=$(since "$t")
  [ "$out" = "no changes" ] || { echo "second up on $label did not say no changes: $out" >&2; exit 1; }
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
  printf '%-28s cold up %6s s   no-op up %5s s   no-op up without digest records %5s s\n' "$label" "$cold" "$noop" "$unrecorded"
}

echo "cold hactl up, 3 control planes + 2 load balancers ($(nproc) cores, $(date -u +%FT%TZ))"
run without-kubernetes e --no-kubernetes
run with-kubernetes k
