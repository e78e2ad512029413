#!/usr/bin/env bash
# Benchmark: the Kubernetes API through the VIP while single hosts fail. A lab of 3 control planes
# (etcd, real kube-apiserver, kube-controller-manager, kube-scheduler) and 2 load balancers; a
# client asks `GET /api/v1/namespaces` through the VIP 5 times a second (curl with the admin
# credentials, each request given 5 s) while the bench, in turn:
#   vip-holder     power-cuts the load balancer holding the VIP, then powers it on again;
#   lease-holder   power-cuts the control plane whose controller-manager holds its Lease, then
#                  powers it on again;
#   maintenance    runs `hactl maintenance start` and `complete` on the (new) Lease holder.
# For each it prints a RESULT line: requests, failed requests, the longest time without an answer
# (from one answered request to the next), and beside it the floor measured in the same run: the
# longest such time over a quiet stretch of the same length before the faults.
# Needs root (it builds a lab). Usage: sudo bench/api_availability.sh [--quick]
# --quick: a short round of the VIP holder's cut and of maintenance (CI runs it so the bench
# cannot rot; the Lease holder's cut is the same code); the default observes each event for longer. Asserts nothing about time: it fails only when it cannot measure.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

settle=30 quick=0
[ "${1:-}" = --quick ] && settle=8 quick=1

"$HACTL" lab kube-binaries >/dev/null
name="ba$$"
inv="/tmp/$name.yaml"
work=$(mktemp -d)
chmod 700 "$work"
probe_pid=
cleanup() {
  [ -n "$probe_pid" ] && kill "$probe_pid" 2>/dev/null || true
  "$HACTL" lab down --name "$name" >/dev/null 2>&1 || true
  rm -rf "$work" "$inv"
}
trap cleanup EXIT

"$HACTL" lab up --name "$name" --control-planes 3 --load-balancers 2 --out "$inv" >/dev/null 2>&1
"$HACTL" up -i "$inv" --yes >/dev/null 2>&1

# The admin credentials from the kubeconfig `up` wrote, as files curl reads (0600, in a 0700
# directory removed on exit; never printed).
"$HACTL" kubeconfig -i "$inv" >"$work/kubeconfig"
field() { sed -n "s/^ *$1: *//p" "$work/kubeconfig" | head -1; }
field certificate-authority-data | base64 -d >"$work/ca.crt"
field client-certificate-data | base64 -d >"$work/client.crt"
(umask 077 && field client-key-data | base64 -d >"$work/client.key")
server=$(field server)
[ -n "$server" ] && [ -s "$work/client.key" ] || { echo "api_availability: no admin credentials in the kubeconfig" >&2; exit 1; }
api() { # $1 = path: one request, the HTTP code on stdout
  curl -s -o "${2:-/dev/null}" -w '%{http_code}' --max-time 5 --cacert "$work/ca.crt" \
    --cert "$work/client.crt" --key "$work/client.key" "$server$1" || true
}

# The client: one request every 200 ms, each line `start end code` in $work/probe.
probe() {
  while :; do
    local t0 t1 code
    t0=$(now)
    code=$(api /api/v1/namespaces)
    t1=$(now)
    echo "$t0 $t1 $code" >>"$work/probe"
    sleep "$(awk -v a="$t0" -v b="$(now)" 'BEGIN { d = 0.2 - (b - a); print (d > 0 ? d : 0) }')"
  done
}
start_probe() { : >"$work/probe"; probe & probe_pid=$!; }
stop_probe() { kill "$probe_pid" 2>/dev/null || true; wait "$probe_pid" 2>/dev/null || true; probe_pid=; }
# report LABEL: requests, failures and the longest stretch without an answer in $work/probe.
report() {
  awk -v label="$1" -v floor="${2:-}" '
    { n++; if ($3 != "200") { failed++; next }
      if (last != "") { gap = $2 - last; if (gap > longest) longest = gap }
      last = $2 }
    END {
      if (n == 0) { print "api_availability: no request was made" > "/dev/stderr"; exit 1 }
      printf "RESULT %-13s requests %4d   failed %3d   longest gap %6.3f s", label, n, failed, longest
      if (floor != "") printf "   (floor, a quiet stretch: %s s)", floor
      printf "\n"
    }' "$work/probe"
}
longest_gap() { awk '$3 == "200" { if (last != "") { g = $2 - last; if (g > m) m = g } last = $2 } END { printf "%.3f", m }' "$work/probe"; }

vip=$(sed -n 's|^ *server: *https://\([^:]*\):.*|\1|p' "$work/kubeconfig" | head -1)
vip_holder() {
  for lb in lb1 lb2; do
    if "$HACTL" lab ssh --name "$name" "$lb" -- ip -o addr show 2>/dev/null | grep -q " $vip/"; then
      echo "$lb"; return
    fi
  done
  echo "api_availability: no load balancer holds the VIP $vip" >&2; exit 1
}
lease_holder() {
  api /apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager "$work/lease" >/dev/null
  sed -n 's/.*"holderIdentity": *"\([^_"]*\).*/\1/p' "$work/lease"
}
# The cluster is whole again: every apiserver ready behind HAProxy, every etcd member healthy.
wait_whole() {
  local deadline=$((SECONDS + 180))
  until "$HACTL" status -i "$inv" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "api_availability: the cluster did not come back within 180 s" >&2; "$HACTL" status -i "$inv" >&2 || true; exit 1; }
    sleep 2
  done
}

echo "Kubernetes API through the VIP at 5 requests/s, 3 control planes + 2 load balancers ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%FT%TZ))"
wait_whole
start_probe
sleep "$settle"
stop_probe
floor=$(longest_gap)
report quiet

# power_cut LABEL HOST: the client runs while HOST is power-cut; then HOST is powered on again
# and the cluster waited for.
power_cut() {
  [ -n "$2" ] || { echo "api_availability: no host to power-cut for $1" >&2; exit 1; }
  start_probe
  "$HACTL" lab fault --name "$name" "$2" power-cut >/dev/null
  sleep "$settle"
  stop_probe
  report "$1" "$floor"
  "$HACTL" lab fault --name "$name" "$2" poweron >/dev/null
  wait_whole
}
power_cut vip-holder "$(vip_holder)"
# --quick: the power cut's code ran once (above); the Lease holder's cut waits for a control
# plane to boot again, which CI's quick run can spare.
[ "$quick" = 1 ] || power_cut lease-holder "$(lease_holder)"

holder=$(lease_holder)
start_probe
"$HACTL" maintenance start -i "$inv" --yes "$holder" >/dev/null 2>&1
"$HACTL" maintenance complete -i "$inv" "$holder" >/dev/null 2>&1
sleep 5
stop_probe
report maintenance "$floor"
