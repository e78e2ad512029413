#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, checks format and lints, runs every test.
# Lab tests boot real hosts with systemd-nspawn (and, last, VMs with libvirt) and need root. Run as
# root, a lab test that skips for want of root fails the run: it would mean the check meant to
# prove a behaviour never ran.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
log=$(mktemp "${TMPDIR:-/tmp}/hactl-test.XXXXXX")
# --show-output prints what passing tests wrote, so their SKIPPED lines reach the log.
cargo test --locked -- --test-threads="${HACTL_TEST_THREADS:-3}" --show-output 2>&1 | tee "$log"
scripts/check-skips.sh "$log"
# The Vagrant lab (real VMs under libvirt, tests/vagrant.rs) alone, after the rest: it needs most
# of the machine for several minutes. HACTL_SKIP_VAGRANT=1 leaves it out.
if [ "${HACTL_SKIP_VAGRANT:-0}" != 1 ]; then
  cargo test --locked --test vagrant -- --ignored --nocapture 2>&1 | tee "$log"
  scripts/check-skips.sh "$log"
fi
