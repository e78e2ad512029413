# Sourced by scripts/fresh-machine-check.sh and scripts/release.sh: the cached pristine Debian root
# a fresh-machine container boots from. Not executable on its own (`scripts/fresh-machine-check.sh
# --prepare` builds the root alone).
#
# fresh_root PREREQ...   prints the path of a bookworm root built with debootstrap --variant=minbase
#                        plus PREREQ..., building it once under $HACTL_FRESH_CACHE (default
#                        /var/cache/hactl/fresh-root). Callers boot it with
#                        `systemd-nspawn --volatile=overlay`, so it stays pristine.
# The mirror is this machine's Debian archive (scripts/lib/debian-mirror.sh; HACTL_DEBIAN_MIRROR
# overrides it).

# shellcheck source=scripts/lib/debian-mirror.sh
. "$(dirname "${BASH_SOURCE[0]}")/debian-mirror.sh"

fresh_cache="${HACTL_FRESH_CACHE:-/var/cache/hactl/fresh-root}"
fresh_suite=bookworm
# What the README ("Install") and docs/getting-started.md ("Install") name for a build machine, the
# packages of the root (`fresh_root "${fresh_prereqs[@]}"`). Keep the three in step.
# shellcheck disable=SC2034 # used by the scripts that source this file
fresh_prereqs=(gcc git curl ca-certificates)

fresh_say() { echo "${fresh_who:-fresh-root}: $*" >&2; }

fresh_root() {
  [ "$(id -u)" = 0 ] || { fresh_say "needs root (debootstrap and systemd-nspawn); run it as root"; return 1; }
  local tool
  for tool in debootstrap systemd-nspawn flock; do
    command -v "$tool" >/dev/null 2>&1 || { fresh_say "$tool is missing: run scripts/install-deps.sh first"; return 1; }
  done
  local root="$fresh_cache/$fresh_suite-$(echo "$*" | tr ' ' '-')"
  mkdir -p "$fresh_cache"
  (
    flock 9
    [ -d "$root" ] && exit 0
    mirror=$(debian_mirror) || exit 1
    fresh_say "building the pristine $fresh_suite root once (debootstrap minbase + $*) from $mirror"
    t0=$(date +%s)
    rm -rf "$root.build"
    if ! debootstrap --variant=minbase --include="$(echo "$*" | tr ' ' ',')" \
        "$fresh_suite" "$root.build" "$mirror" >"$root.debootstrap.log" 2>&1; then
      tail -n 20 "$root.debootstrap.log" >&2
      fresh_say "debootstrap failed (log: $root.debootstrap.log)"
      exit 1
    fi
    # No package lists kept, as on a freshly installed machine before its first `apt-get update`.
    rm -rf "$root.build"/var/lib/apt/lists/* "$root.build"/var/cache/apt/archives/*.deb
    mv "$root.build" "$root"
    fresh_say "pristine root built in $(( $(date +%s) - t0 )) s: $root"
  ) 9>"$fresh_cache/.lock" || return 1
  echo "$root"
}
