#!/usr/bin/env bash
# The fresh-machine check (CI): proves that scripts/install-deps.sh installs everything a new Debian
# machine needs to build hactl, and scripts/vagrant-deps.sh what the Vagrant lab needs. In a Debian
# bookworm root holding only the build-machine prerequisites the README's "Install" section names
# (gcc, git, curl, ca-certificates; debootstrap --variant=minbase plus those), booted as a
# container with systemd-nspawn (never the host's root), it runs scripts/install-deps.sh, then
# scripts/vagrant-deps.sh and checks that Vagrant's libvirt provider, libvirtd, virsh and QEMU run,
# then `cargo check --locked`. From the host it takes only:
#   - a clean copy of the repository (tracked and new files, no target/, no .git), read-only;
#   - the host's Rust toolchain (~/.cargo and ~/.rustup), read-only;
#   - the host's CA file (the one SSL_CERT_FILE names, when set), read-only.
# The pristine root is built once and cached; every run starts from it again (systemd-nspawn
# --volatile=overlay: writes go to a tmpfs that is dropped at exit), so install-deps.sh always meets
# a fresh machine. Between runs only these are kept, outside the checkout: cargo's registry cache, a
# target dir, and apt's cache of downloaded .deb files (not its package lists: each run reads those
# from the archive as a fresh machine does, so a moved archive shows here). Build scripts that call
# system tools or the C toolchain would not run again from a warm target dir and could hide a
# missing package, so their packages (and hactl's own build script) are cleaned before every
# check: see `rebuilt` below.
#
# `--prepare` builds (or finds) the pristine root and stops there (scripts/test.sh starts it early,
# in the background).
#
# Needs root, debootstrap and systemd-nspawn (scripts/install-deps.sh installs both).
# Environment:
#   HACTL_FRESH_CACHE    cache directory (default /var/cache/hactl/fresh-root)
#   HACTL_DEBIAN_MIRROR  Debian mirror for the root (default: this machine's, from its apt sources:
#                        scripts/lib/debian-mirror.sh)
#   HACTL_FRESH_COLD=1   drop the registry cache and target dir first (a cold run)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
fresh_who=fresh-machine-check
# shellcheck source=scripts/lib/fresh-root.sh
. "$repo/scripts/lib/fresh-root.sh"
# Packages whose build scripts run system tools or compile C: protoc (etcd-client's protos via
# tonic-prost-build), the C compiler and libc headers (aws-lc-sys), and hactl's own build script
# (git, and a link with cc). They are rebuilt every run; the rest of the warm target dir is reused.
rebuilt=(etcd-client aws-lc-sys hactl)
# The check builds unoptimised: Cargo.toml optimises the dependencies of debug builds (for the lab
# tests' sake), which would make aws-lc-sys's C code, compiled again every run, take longer here,
# and what a fresh machine lacks does not depend on the optimisation level.
no_opt="--config 'profile.dev.package.\"*\".opt-level=0' --config profile.dev.package.aws-lc-sys.opt-level=0"

prepare=0
case "${1:-}" in
  --prepare) prepare=1 ;;
  "") ;;
  *) echo "usage: scripts/fresh-machine-check.sh [--prepare]" >&2; exit 64 ;;
esac
started=$(date +%s)
say() { echo "fresh-machine-check: $*" >&2; }
fail() { say "$*"; exit 1; }

# 1. The pristine root, built once per set of prerequisites (its name carries them).
root=$(fresh_root "${fresh_prereqs[@]}") || exit 1
if [ "$prepare" = 1 ]; then
  say "the pristine root is ready in $(( $(date +%s) - started )) s: $root"
  exit 0
fi
cache="$fresh_cache"
suite="$fresh_suite"

# 2. What is kept between runs, outside the checkout.
keep="$cache/keep"
if [ "${HACTL_FRESH_COLD:-}" = 1 ]; then
  say "cold run: dropping the registry cache and target dir"
  rm -rf "$keep"
fi
mkdir -p "$keep/cargo-home" "$keep/target" "$keep/apt-archives"
# One check at a time uses the kept target dir.
exec 8>"$keep/.lock"
flock 8

# 3. A clean copy of the repository: what git tracks plus new files it does not ignore.
work=$(mktemp -d "$cache/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf -) | tar -xf - -C "$work/src"

# 4. The host's toolchain and CA file, read-only.
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
cargo_bin_home="${CARGO_HOME:-$HOME/.cargo}"
[ -x "$cargo_bin_home/bin/cargo" ] || fail "no Rust toolchain at $cargo_bin_home/bin/cargo (install rustup)"
binds=(--bind-ro="$work/src:/src"
       --bind-ro="$rustup_home:/opt/rustup"
       --bind-ro="$cargo_bin_home/bin:/opt/cargo-bin"
       --bind="$keep/cargo-home:/var/cache/cargo-home"
       --bind="$keep/target:/var/cache/target"
       --bind="$keep/apt-archives:/var/cache/apt/archives")
envs=(--setenv=RUSTUP_HOME=/opt/rustup
      --setenv=RUSTUP_AUTO_INSTALL=0
      --setenv=CARGO_HOME=/var/cache/cargo-home
      --setenv=CARGO_TARGET_DIR=/var/cache/target
      --setenv=CARGO_TERM_COLOR=never
      --setenv=CARGO_TERM_PROGRESS_WHEN=never
      --setenv=PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
toolchain=$(cd "$repo" && rustup show active-toolchain 2>/dev/null | cut -d' ' -f1 || true)
[ -n "$toolchain" ] && envs+=(--setenv=RUSTUP_TOOLCHAIN="$toolchain")
if [ -n "${SSL_CERT_FILE:-}" ]; then
  [ -f "$SSL_CERT_FILE" ] || fail "SSL_CERT_FILE names $SSL_CERT_FILE, which is not a file"
  binds+=(--bind-ro="$(readlink -f "$SSL_CERT_FILE"):/etc/host-ca.crt")
  envs+=(--setenv=SSL_CERT_FILE=/etc/host-ca.crt --setenv=CARGO_HTTP_CAINFO=/etc/host-ca.crt)
fi

# 5. In the container: install-deps.sh, then cargo check.
say "checking in a fresh $suite container: scripts/install-deps.sh, scripts/vagrant-deps.sh, cargo check --locked"
t0=$(date +%s)
status=0
systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --volatile=overlay \
  --directory="$root" --chdir=/src "${binds[@]}" "${envs[@]}" \
  /bin/bash -c "set -euo pipefail
    t=\$(date +%s)
    scripts/install-deps.sh
    echo \"fresh-machine-check: install-deps.sh took \$(( \$(date +%s) - t )) s\" >&2
    t=\$(date +%s)
    scripts/vagrant-deps.sh
    vagrant plugin list | grep -q vagrant-libvirt || { echo 'vagrant-libvirt is not a Vagrant plugin' >&2; exit 1; }
    libvirtd --version >&2 && virsh --version >/dev/null && qemu-system-x86_64 --version | head -n1 >&2 && qemu-img --version >/dev/null
    echo \"fresh-machine-check: vagrant-deps.sh and its tools took \$(( \$(date +%s) - t )) s\" >&2
    cargo clean --quiet $(printf -- '-p %s ' "${rebuilt[@]}")
    cargo check --locked $no_opt" || status=$?
now=$(date +%s)
if [ "$status" -ne 0 ]; then
  fail "FAILED (exit $status) after $(( now - started )) s: a fresh $suite machine cannot build hactl with scripts/install-deps.sh, or get the Vagrant lab's packages with scripts/vagrant-deps.sh (above)"
fi
say "passed in $(( now - started )) s (container $(( now - t0 )) s)"
