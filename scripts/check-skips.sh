#!/usr/bin/env bash
# Fails a run as root in which a test skipped, unless the machine itself cannot run that test.
# A test that cannot do its work prints `SKIPPED <test>: <why>` and passes. As root (CI) that
# means a check meant to prove a behaviour never ran, while a script can install nearly anything
# a test lacks (packages: scripts/install-deps.sh and scripts/vagrant-deps.sh; the Kubernetes
# binaries: scripts/kube-binaries.sh). So every skip fails the run, except one that names a limit
# of the machine no script can lift, in these words:
#   SKIPPED <test>: this machine cannot run it: <what> (e.g. no /dev/net/tun)
# Those are listed and let through. Not root, nothing fails (the lab tests need root and say so).
# Usage: scripts/check-skips.sh LOG [UID]   (UID defaults to this process's, for tests)
set -euo pipefail
log=${1:?usage: check-skips.sh LOG [UID]}
uid=${2:-$(id -u)}
[ -r "$log" ] || { echo "check-skips: cannot read $log" >&2; exit 2; }
skips=$(grep -E 'SKIPPED [A-Za-z0-9_]' "$log" || true)
[ -n "$skips" ] || exit 0
machine=$(grep -F 'this machine cannot run it: ' <<<"$skips" || true)
others=$(grep -vF 'this machine cannot run it: ' <<<"$skips" || true)
if [ -n "$machine" ]; then
  echo "check-skips: skipped because this machine cannot run them:" >&2
  sed 's/^[[:space:]]*/  /' <<<"$machine" >&2
fi
[ -n "$others" ] || exit 0
if [ "$uid" != 0 ]; then
  echo "check-skips: $(wc -l <<<"$others") skipped test(s), allowed because this run is not root" >&2
  exit 0
fi
echo "check-skips: these tests skipped in a run as root, where nothing but the machine itself may stop them:" >&2
sed 's/^[[:space:]]*/  /' <<<"$others" >&2
echo "check-skips: install what they lack in the project's scripts (scripts/install-deps.sh, scripts/vagrant-deps.sh), or fix the test; a limit no script can lift is printed as \`SKIPPED <test>: this machine cannot run it: <what>\`" >&2
exit 1
