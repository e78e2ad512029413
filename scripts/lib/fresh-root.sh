# Sourced by scripts/fresh-machine-check.sh and scripts/release.sh: the cached pristine Debian root
# a fresh-machine container boots from. Not executable on its own.
#
# fresh_root PREREQ...   prints the path of a bookworm root built with debootstrap --variant=minbase
#                        plus PREREQ..., building it once under $HACTL_FRESH_CACHE (default
#                        /var/cache/hactl/fresh-root). Callers boot it with
#                        `systemd-nspawn --volatile=overlay`, so it stays pristine.
# The mirror is HACTL_FRESH_MIRROR, else HACTL_LAB_MIRROR, else the first one in this machine's apt
# sources.

fresh_cache="${HACTL_FRESH_CACHE:-/var/cache/hactl/fresh-root}"
fresh_suite=bookworm

fresh_say() { echo "${fresh_who:-fresh-root}: $*" >&2; }

fresh_mirror() {
  local mirror="${HACTL_FRESH_MIRROR:-${HACTL_LAB_MIRROR:-}}"
  if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
      | sed -n -E 's/^(deb[[:space:]]+(\[[^]]*\][[:space:]]+)?|URIs:[[:space:]]+)([a-z]+:\/\/[^[:space:]]+).*/\3/p' \
      | grep -v -- '-security' | head -n1 || true)
  fi
  [ -n "$mirror" ] || { fresh_say "no Debian mirror in /etc/apt/sources.list*: set HACTL_FRESH_MIRROR"; return 1; }
  echo "$mirror"
}

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
    mirror=$(fresh_mirror) || exit 1
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
