#!/usr/bin/env bash
# The test command (README, CI): installs what is missing, checks format and lints, runs every test.
# Lab tests boot real hosts with systemd-nspawn and need root. Run as root, a lab test that skips
# for want of root fails the run: it would mean the check meant to prove a behaviour never ran.
# As root, the Kubernetes lab tests run with real kube-apiserver, kube-controller-manager and
# kube-scheduler: built once into /var/cache/hactl/kubernetes/<version> by scripts/kube-binaries.sh
# (about 6 min on two idle cores, at once when the cache is complete) and named by
# HACTL_KUBE_BIN_DIR. None of them may be skipped there: a `SKIPPED … HACTL_KUBE_BIN_DIR` line fails
# the run too (scripts/check-skips.sh: as root, only a skip naming a limit of the machine passes).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
# Dependencies (deny.toml): advisories, bans, sources; an advisory deny.toml does not answer fails
# the run. The advisory database comes from the network, else from ../shared/advisory-db.tar.gz;
# with neither the advisories check does not run and says so (CI, through .ci/run, fails then).
# cargo-deny is installed once per machine into ~/.cargo/bin. See scripts/deny-check.sh.
started=$(date +%s)
scripts/deny-check.sh
echo "test.sh: the dependency checks took $(( $(date +%s) - started )) s"
if [ "$(id -u)" = 0 ]; then
  if [ -z "${HACTL_KUBE_BIN_DIR:-}" ]; then
    HACTL_KUBE_BIN_DIR="$(scripts/kube-binaries.sh | tail -1)"
    export HACTL_KUBE_BIN_DIR
    echo "test.sh: Kubernetes binaries from $HACTL_KUBE_BIN_DIR"
  fi
  # Vagrant, libvirt and QEMU, before the tests: tests/vagrant.rs's quick refusals run with the
  # rest and must not skip for want of them.
  scripts/vagrant-deps.sh
fi
log=$(mktemp "${TMPDIR:-/tmp}/hactl-test.XXXXXX")
# cargo-nextest runs every test in its own process, side by side across the test binaries and
# within them (cargo test runs the binaries one after another, and the lab tests, two binaries,
# etcd_labs and kube_labs, spend most of their time waiting on hosts), so each lab gets its own name. --success-output prints what passing tests wrote, so
# their SKIPPED lines reach the log; --failure-output immediate-final prints a failed try's output
# when it fails (a test retried by .config/nextest.toml that passes on its second try shows only
# that try at the end), and again at the end. (The crate has no doc tests.)
command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
started=$(date +%s)
cargo nextest run --locked --no-fail-fast --test-threads="${HACTL_TEST_THREADS:-4}" \
  --success-output final --failure-output immediate-final 2>&1 | tee "$log"
echo "test.sh: tests took $(( $(date +%s) - started )) s"
# As root, any skipped test fails the run, unless it says the machine itself cannot run it.
scripts/check-skips.sh "$log"
# A fresh Debian root with only the README's build-machine prerequisites: install-deps.sh and
# vagrant-deps.sh, then cargo check (fails when install-deps.sh misses a package). Prints its time.
scripts/fresh-machine-check.sh
# The README's set-up command, verbatim as README.md has it (scripts/readme-lab.sh reads it from
# there), through to a healthy lab with Kubernetes, then `lab down`. Its `cargo run --release` is
# the release build the artifact check below uses too, so that build happens once.
if [ "$(id -u)" = 0 ]; then
  started=$(date +%s)
  scripts/readme-lab.sh
  echo "test.sh: the README's command took $(( $(date +%s) - started )) s"
else
  echo "test.sh: the README's command is not run: it needs root (a lab)"
fi
# The release artifacts (tarball, .deb), each installed in a clean container: hactl --version.
started=$(date +%s)
scripts/release.sh --check
echo "test.sh: the release check took $(( $(date +%s) - started )) s"
# The Vagrant lab (real VMs under libvirt, tests/vagrant.rs: scripts/vagrant-lab.sh): 3 emulated
# VMs, `hactl check`, `up`, `status`, a second `plan`, a recreated VM's new host key refused, then
# `vagrant destroy`. It needs most of the machine, so it runs alone, after the rest: about 9 min
# on a quiet machine with the box cached (docs/development/vagrant.md). Without root it skips; as
# root only where the machine cannot run it (no /dev/net/tun). HACTL_VAGRANT=0 leaves it out of a
# local run, saying so; CI sets nothing.
if [ "${HACTL_VAGRANT:-1}" = 0 ]; then
  echo "test.sh: the Vagrant lab is left out (HACTL_VAGRANT=0)"
else
  started=$(date +%s)
  cargo test --locked --test vagrant -- --ignored --nocapture 2>&1 | tee "$log.vagrant"
  echo "test.sh: the Vagrant lab took $(( $(date +%s) - started )) s"
  scripts/check-skips.sh "$log.vagrant"
fi
# The suite's count again as the last line (the steps above print after nextest's summary).
summary=$(grep -E 'Summary \[' "$log" | tail -1 || true)
passed=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")
failed=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary")
skipped=$(sed -nE 's/.* ([0-9]+) skipped.*/\1/p' <<<"$summary")
echo "tests: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
