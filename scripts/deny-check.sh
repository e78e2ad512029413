#!/usr/bin/env bash
# cargo-deny's checks of deny.toml (CI: scripts/test.sh): advisories, bans, sources. Any advisory
# that deny.toml does not answer (an ignore with its reason) fails the run.
#
# cargo-deny is installed when missing or of another version: `cargo install --locked`, several
# minutes on a fresh machine. It lands in $CARGO_HOME/bin (~/.cargo/bin), which stays between
# runs, so a machine builds it once.
#
# The advisory database (RustSec's, a git repository) comes from, in this order:
#   1. the network: `cargo deny fetch db`;
#   2. the snapshot beside the checkout, ../shared/advisory-db.tar.gz (HACTL_ADVISORY_DB_TARBALL
#      names another), unpacked where cargo-deny opens its default database,
#      $CARGO_HOME/advisory-dbs/advisory-db-<hash of its URL> (an older copy already there is
#      replaced only by a newer one); the check then runs offline and names its newest advisory's date;
#   3. a copy an earlier run left there, said so with the date of its newest advisory;
#   4. none: the advisories check does not run, and says so on the last line; bans and
#      sources are still checked. With HACTL_REQUIRE_ADVISORIES=1 (.ci/run sets it) that fails
#      the run instead: CI has the snapshot, so it never takes this path silently.
#
# `--install-only` installs cargo-deny (when missing) and stops there: scripts/test.sh starts it
# early, in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=0
case "${1:-}" in
  --install-only) install_only=1 ;;
  "") ;;
  *) echo "usage: scripts/deny-check.sh [--install-only]" >&2; exit 64 ;;
esac
version=0.20.2
# The directory cargo-deny $version opens for https://github.com/rustsec/advisory-db (it names it
# when missing).
db_dir_name=advisory-db-3157b0e258782691
cargo_home=${CARGO_HOME:-$HOME/.cargo}
tarball=${HACTL_ADVISORY_DB_TARBALL:-../shared/advisory-db.tar.gz}
say() { echo "deny-check: $*" >&2; }

have=$(cargo deny --version 2>/dev/null | awk '{ print $2 }' || true)
if [ "$have" != "$version" ]; then
  say "installing cargo-deny $version into $cargo_home/bin (${have:+replacing $have; }several minutes, once per machine)"
  t0=$(date +%s)
  cargo install --locked --quiet "cargo-deny@$version"
  say "cargo-deny $version installed in $(( $(date +%s) - t0 )) s"
fi
[ "$install_only" = 0 ] || exit 0

# The commit time (unix seconds) of the database in $1, or nothing.
db_time() { git -C "$1" log -1 --format=%ct 2>/dev/null || true; }

source=""
if cargo deny --locked fetch db; then
  source="the network"
elif [ -f "$tarball" ]; then
  say "the advisory database could not be fetched (above): using the snapshot $tarball"
  db_root="$cargo_home/advisory-dbs"
  mkdir -p "$db_root"
  unpacked=$(mktemp -d "$db_root/.unpack.XXXXXX")
  trap 'rm -rf "$unpacked"' EXIT
  tar -xzf "$tarball" -C "$unpacked"
  [ -d "$unpacked/advisory-db/crates" ] || { say "$tarball holds no advisory-db/crates: not RustSec's database"; exit 1; }
  new_time=$(db_time "$unpacked/advisory-db")
  [ -n "$new_time" ] || { say "$tarball is not a git repository (cargo-deny opens the database with git)"; exit 1; }
  old_time=$(db_time "$db_root/$db_dir_name")
  if [ -n "$old_time" ] && [ "$old_time" -ge "$new_time" ]; then
    say "the copy already in $db_root/$db_dir_name is as new or newer: keeping it"
  else
    rm -rf "$db_root/$db_dir_name.old"
    [ -e "$db_root/$db_dir_name" ] && mv "$db_root/$db_dir_name" "$db_root/$db_dir_name.old"
    mv "$unpacked/advisory-db" "$db_root/$db_dir_name"
    rm -rf "$db_root/$db_dir_name.old"
  fi
  source="the snapshot $tarball"
  # Offline, cargo-deny reads the crates' metadata from cargo's cache.
  cargo fetch --locked --quiet
elif [ -d "$cargo_home/advisory-dbs/$db_dir_name/crates" ]; then
  say "the advisory database could not be fetched (above) and there is no $tarball: using the copy an earlier run left in $cargo_home/advisory-dbs"
  source="an earlier run's copy"
  cargo fetch --locked --quiet
fi

if [ -z "$source" ]; then
  if [ "${HACTL_REQUIRE_ADVISORIES:-}" = 1 ]; then
    say "FAILED: no advisory database: the network copy could not be fetched and there is no $tarball (HACTL_REQUIRE_ADVISORIES=1: CI must check advisories)"
    exit 1
  fi
  cargo deny --locked check bans sources
  say "the advisories check DID NOT RUN: no database from the network nor at $tarball (bans and sources were checked)"
  exit 0
fi
# How recent the database is: the date of its newest advisory.
newest=$(grep -rhs '^date = "' "$cargo_home/advisory-dbs/$db_dir_name/crates" | sort | tail -n1 | cut -d'"' -f2 || true)
say "advisories from $source${newest:+ (newest advisory: $newest)}"
cargo deny --locked --offline check advisories bans sources
