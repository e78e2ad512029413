#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, checks format and lints, runs every test.
# Lab tests boot real hosts with systemd-nspawn and need root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked -- --test-threads="${HACTL_TEST_THREADS:-3}"
