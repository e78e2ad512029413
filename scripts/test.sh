#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, checks format and lints, runs every test.
# Lab tests boot real hosts with systemd-nspawn and need root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked -- --test-threads="${HACTL_TEST_THREADS:-3}"
# A fresh Debian root with only the README's build-machine prerequisites: install-deps.sh, then
# cargo check (fails when install-deps.sh misses a package). Prints its time.
scripts/fresh-machine-check.sh
# The release artifacts (tarball, .deb), each installed in a clean container: hactl --version.
scripts/release.sh --check
