#!/usr/bin/env bash
# Fails when a test run captured in LOG skipped a test for want of root while running as root
# (`SKIPPED <test>: needs root`, or any skip line that names root). Skips for other missing
# things (e.g. HACTL_KUBE_BIN_DIR) are left to their tests.
# Usage: scripts/check-skips.sh LOG [UID]   (UID defaults to this process's, for tests)
set -euo pipefail
log=${1:?usage: check-skips.sh LOG [UID]}
uid=${2:-$(id -u)}
if [ "$uid" != 0 ]; then
  exit 0
fi
if grep -iE 'skipped[^a-z].*needs root' "$log"; then
  echo "error: the lines above skipped a lab test for want of root, but this run is root: the lab did not run; fix the harness or the test" >&2
  exit 1
fi
