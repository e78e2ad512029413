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
# Dependencies (deny.toml): advisories, bans, sources. cargo-deny is built once when missing
# (`cargo install --locked`: several minutes on a fresh machine). The advisory database is a git
# repository cargo-deny fetches itself; where it cannot be reached, the advisories check is skipped
# out loud and bans and sources are still checked.
command -v cargo-deny >/dev/null 2>&1 || cargo install --locked cargo-deny
if cargo deny --locked fetch db; then
  cargo deny --locked --offline check advisories bans sources
else
  echo "SKIPPED cargo deny check advisories: the advisory database could not be fetched (error above); bans and sources are checked"
  cargo deny --locked check bans sources
fi
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
