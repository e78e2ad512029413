#!/usr/bin/env bash
# Benchmark: cold `hactl up` of a lab with the Kubernetes control plane (3 control planes with etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler; 2 load balancers) beside the same run
# without Kubernetes (`lab up --no-kubernetes`: etcd and the load balancers only), same shape, same
# machine, same run. The Kubernetes binaries come from the cache (`hactl lab kube-binaries`, built
# first if missing; that build is not timed). Also times the no-op second `up` of each, and a third
# with the hosts' digest records removed (every binary hashed on its host again).
# The no-op `up` is timed 5 times (the median counts; once with --quick) after the cluster has
# settled for 10 s (not with --quick), and its ratio to the floor (the same no-op without Kubernetes) is printed.
# With Kubernetes it also measures the cold `up`'s floor as issue 23 defines it, in the same lab
# after the timed runs: every large file (1 MiB or more) the cold `up`'s plan uploads, streamed
# once to each host that gets it, every host at once over one SSH connection each (tar into a
# scratch directory on the host, removed after), plus the slowest of the apiservers' own start to
# `/readyz` (all stopped, then started at once and timed on their hosts). The apiservers restart on
# an etcd they have already initialised, so their start is a little shorter than a first one.
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
  # What the cold `up` uploads (plan changes nothing; not timed), for the floor below.
  "$HACTL" plan -i "$inv" -o json >"/tmp/$name.plan.json" 2>/dev/null
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
  [ "$tag" = k ] && floor "$name" "/tmp/$name.plan.json"
  rm -f "/tmp/$name.plan.json"
  "$HACTL" lab down --name "$name" >/dev/null 2>&1
  printf '%-28s cold up %6s s   no-op up %5s s (median of %s: %s)   no-op up without digest records %5s s\n' \
    "$label" "$cold" "$noop" "$runs" "${times[*]}" "$unrecorded"
  eval "cold_$tag=$cold noop_$tag=$noop"
}

# floor LAB PLAN: sets floor_copy (s), floor_mib, floor_hosts, floor_start (s) for the cold up's floor.
floor() {
  local lab=$1 plan=$2 dir="${HACTL_LAB_DIR:-/var/lib/hactl-lab}/labs/$1"
  local scratch=/var/tmp/hactl-bench-floor h
  # host, path, size of every upload of 1 MiB or more (each once per host), and those hosts.
  jq -r '.phases[].hosts[] | .host as $h | .steps[]
         | select(.kind == "upload" and .size >= 1048576) | "\($h) \(.path) \(.size)"' "$plan" |
    sort -u >"$plan.large"
  [ -s "$plan.large" ] || { echo "the cold up's plan uploads no file of 1 MiB or more" >&2; exit 1; }
  local hosts; mapfile -t hosts < <(cut -d' ' -f1 "$plan.large" | sort -u)
  floor_hosts=${#hosts[@]}
  floor_mib=$(awk '{ s += $3 } END { printf "%d", s / 1048576 }' "$plan.large")
  local ssh=(ssh -i "$dir/id_ed25519" -o UserKnownHostsFile="$dir/known_hosts"
             -o StrictHostKeyChecking=yes -o BatchMode=yes)
  # The same bytes `up` uploaded, read from where it put them (the hosts' roots are on this
  # machine), each host's over its own connection, all hosts at once.
  local t pids=()
  t=$(now)
  for h in "${hosts[@]}"; do
    local ip; ip=$(jq -r --arg h "$h" '.hosts[] | select(.name == $h) | .ip' "$dir/lab.json")
    (cd "$(jq -r --arg h "$h" '.hosts[] | select(.name == $h) | .merged' "$dir/lab.json")" &&
      awk -v h="$h" '$1 == h {print substr($2, 2)}' "$plan.large" | tar -cf - -T - |
      "${ssh[@]}" "root@$ip" "mkdir -p $scratch && tar -xf - -C $scratch") &
    pids+=($!)
  done
  local p; for p in "${pids[@]}"; do wait "$p" || { echo "the floor's copy to a host of $lab failed" >&2; exit 1; }; done
  floor_copy=$(since "$t")
  for h in "${hosts[@]}"; do
    "$HACTL" lab ssh --name "$lab" "$h" -- rm -rf "$scratch"
  done
  # Each apiserver's own start to /readyz, timed on its host; all three at once.
  local cps=(cp1 cp2 cp3) outs=()
  for h in "${cps[@]}"; do
    "$HACTL" lab ssh --name "$lab" "$h" -- systemctl stop kube-apiserver
  done
  pids=()
  for h in "${cps[@]}"; do
    local ip; ip=$(jq -r --arg h "$h" '.hosts[] | select(.name == $h) | .ip' "$dir/lab.json")
    "$HACTL" lab ssh --name "$lab" "$h" -- bash -c "t=\$EPOCHREALTIME; systemctl start kube-apiserver
      for i in \$(seq 1200); do
        curl -skf --max-time 1 https://$ip:6443/readyz >/dev/null && break; sleep 0.05
      done
      curl -skf --max-time 1 https://$ip:6443/readyz >/dev/null || exit 1
      awk -v a=\$t -v b=\$EPOCHREALTIME 'BEGIN { printf \"%.1f\", b - a }'" >"$plan.$h" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "an apiserver of $lab did not become ready" >&2; exit 1; }; done
  for h in "${cps[@]}"; do outs+=("$(cat "$plan.$h")"); rm -f "$plan.$h"; done
  floor_start=$(printf '%s\n' "${outs[@]}" | sort -n | tail -1)
  rm -f "$plan.large"
}

echo "cold hactl up, 3 control planes + 2 load balancers ($(nproc) cores, $(date -u +%FT%TZ))"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run without-kubernetes e --no-kubernetes
run with-kubernetes k
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "RESULT no-op up with Kubernetes ${noop_k} s, floor (without) ${noop_e} s: $(ratio "$noop_k" "$noop_e")x (goal 1.3x)"
floor_k=$(awk -v a="$floor_copy" -v b="$floor_start" 'BEGIN { printf "%.1f", a + b }')
echo "RESULT cold up with Kubernetes ${cold_k} s, floor ${floor_k} s (${floor_mib} MiB of uploads, in all, streamed to ${floor_hosts} hosts in parallel ${floor_copy} s + the slowest apiserver's start to /readyz ${floor_start} s): $(ratio "$cold_k" "$floor_k")x (goal 1.3x); without Kubernetes ${cold_e} s"
