#!/usr/bin/env bash
# Builds real kube-apiserver, kube-controller-manager and kube-scheduler from Debian's source package
# `kubernetes` (the complete upstream tree, vendor/ included) with Debian bullseye's Go 1.15, and takes
# kubectl from Debian's `kubernetes-client`, into a cache directory keyed by version:
#
#   scripts/kube-binaries.sh [VERSION]        (default v1.20.2, the only server release the archive has)
#
# Prints the cache directory (e.g. /var/cache/hactl/kubernetes/v1.20.2) as the last line on stdout;
# progress goes to stderr. Returns at once when the cache is already complete.
#
# Environment:
#   HACTL_KUBE_CACHE       cache root (default /var/cache/hactl/kubernetes)
#   HACTL_DEBIAN_MIRROR    Debian archive URI (default: the first `deb` source of this machine's apt
#                          configuration that names a plain suite, e.g. `bookworm`)
#
# The machine's apt configuration is left alone: apt runs with a private sources list, lists directory
# and package cache under <cache root>/build/apt. The `.dsc` file's checksums are checked for every
# source file before anything is unpacked. `hactl lab kube-binaries` runs this same script (it is
# embedded in the binary).
#
# Layout of a complete cache directory:
#   kube-apiserver kube-controller-manager kube-scheduler kubectl   (0755)
#   SHA256SUMS    written last; a directory without it is not complete
#   BUILD-INFO    Debian source version, Go version, build time
# While a build runs, the directory holds `.building`; one left behind by an interrupted build is
# detected and rebuilt here, and refused by hactl (with the command to run).
set -euo pipefail

version="${1:-${HACTL_KUBE_VERSION:-v1.20.2}}"
case "$version" in
  v*) ;;
  *) version="v$version" ;;
esac
if ! [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then
  echo "kube-binaries: '$version' is not a Kubernetes release version (want e.g. v1.20.2)" >&2
  exit 2
fi

root="${HACTL_KUBE_CACHE:-/var/cache/hactl/kubernetes}"
out="$root/$version"
work="$root/build"
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
started=$(date +%s)

# Progress goes to fd 3 (the caller's stderr) so it shows even while a step's output goes to a log.
exec 3>&2
say() { printf 'kube-binaries [%4ss] %s\n' "$(( $(date +%s) - started ))" "$*" >&3; }
die() { echo "kube-binaries: $*" >&2; exit 1; }

# What BUILD-INFO says about the version stamp; a cache made by an older script (which stamped only
# component-base, so the apiserver's /version said v0.0.0-master) is rebuilt.
stamp="stamp: component-base client-go"

complete() {
  [ -f "$out/SHA256SUMS" ] && [ ! -e "$out/.building" ] || return 1
  grep -qxF "$stamp" "$out/BUILD-INFO" 2>/dev/null || return 1
  (cd "$out" && sha256sum --quiet --strict -c SHA256SUMS >/dev/null 2>&1) || return 1
  local b
  for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done
}

if complete; then
  echo "$out"
  exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  say "another build holds $root/.lock; waiting for it"
  flock 9
  if complete; then echo "$out"; exit 0; fi
fi

if [ "$(id -u)" != 0 ]; then
  die "run as root (apt-get and the cache under $root need it), or set HACTL_KUBE_CACHE to a directory you own and run as root anyway for apt"
fi
for tool in apt-get dpkg-source dpkg-deb rsync make sha256sum flock; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing: run scripts/install-deps.sh"
done

if [ -e "$out" ]; then
  if [ -e "$out/.building" ]; then
    say "$out was left half-built by an interrupted build ($out/.building is present): rebuilding it"
  else
    say "$out is incomplete or from an older build script (SHA256SUMS or the BUILD-INFO stamp missing or not matching): rebuilding it"
  fi
  # Only build outputs live here (never data): they are replaced.
  rm -f "${bins[@]/#/$out/}" "$out/SHA256SUMS" "$out/BUILD-INFO"
fi
mkdir -p "$out"
: >"$out/.building"

# --- the archive ---------------------------------------------------------------------------------
mirror="${HACTL_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  # deb822 sources first: the first stanza with Types: deb and a suite without a dash (not -security,
  # not -updates).
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    mirror=$(awk '
      function flush() { if (types ~ /(^| )deb( |$)/ && plain && uri != "" && found == "") found = uri; types=""; uri=""; plain=0 }
      /^[[:space:]]*$/ { flush(); next }
      /^Types:/ { types = $0; sub(/^Types:[[:space:]]*/, "", types) }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-/) plain = 1 }
      END { flush(); print found }' "$f")
    [ -n "$mirror" ] && break
  done
fi
if [ -z "$mirror" ]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    mirror=$(awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) !~ /-/) { print $i; exit } }' "$f")
    [ -n "$mirror" ] && break
  done
fi
[ -n "$mirror" ] || die "no Debian archive found in /etc/apt/sources.list{,.d}: set HACTL_DEBIAN_MIRROR to its URI"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "$keyring is missing: install the debian-archive-keyring package"

apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/sources.list" <<EOF
deb-src [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bullseye main
EOF
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::Etc::preferencesparts=-" -o "APT::Sandbox::User=root" -q)

say "1/7 reading the package lists of bookworm (source) and bullseye (Go 1.15) from $mirror (private apt state in $apt_dir)"
apt-get "${apt_opts[@]}" update >"$work/apt-update.log" 2>&1 \
  || { tail -5 "$work/apt-update.log" >&2; die "apt-get update failed (log: $work/apt-update.log)"; }

# --- the source ----------------------------------------------------------------------------------
src_version=$(apt-get "${apt_opts[@]}" source --download-only --print-uris kubernetes 2>/dev/null \
  | awk '$2 ~ /\.dsc$/ { print $2; exit }' | sed -e 's/^kubernetes_//' -e 's/\.dsc$//')
[ -n "$src_version" ] || die "the archive at $mirror has no source package 'kubernetes' in bookworm main"
# Debian spells a re-packaged older upstream as `<newer>+really<actual>`.
upstream="${src_version%%-*}"
upstream="${upstream##*+really}"
upstream="${upstream%%+*}"
upstream="${upstream%%~*}"
if [ "v$upstream" != "$version" ]; then
  rm -f "$out/.building"; rmdir "$out" 2>/dev/null || true
  die "asked for $version, but the archive's kubernetes source is $src_version (upstream v$upstream): run scripts/kube-binaries.sh v$upstream"
fi

src_dir="$work/src-$src_version"
say "2/7 fetching source kubernetes $src_version (about 35 MB) and checking the .dsc checksums"
mkdir -p "$work/dl"
(cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only "kubernetes=$src_version" >"$work/apt-source.log" 2>&1) \
  || { tail -5 "$work/apt-source.log" >&2; die "apt-get source failed (log: $work/apt-source.log)"; }
dsc="$work/dl/kubernetes_$src_version.dsc"
[ -f "$dsc" ] || die "$dsc was not downloaded"
checked=0
while read -r sum size name; do
  [ -n "$name" ] || continue
  f="$work/dl/$name"
  [ -f "$f" ] || die "$dsc lists $name, which was not downloaded"
  [ "$(stat -c %s "$f")" = "$size" ] || die "$f: size $(stat -c %s "$f"), but $dsc says $size"
  [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sum" ] || die "$f: sha256 does not match $dsc (want $sum): remove it and rerun"
  checked=$((checked + 1))
done < <(awk '/^Checksums-Sha256:/ { on = 1; next } /^[^ ]/ { on = 0 } on { print $1, $2, $3 }' "$dsc")
[ "$checked" -gt 0 ] || die "$dsc has no Checksums-Sha256 section"
say "    $checked source files match $dsc"

if [ ! -f "$src_dir/.unpacked" ]; then
  rm -rf "$src_dir"
  say "3/7 unpacking the tree (with Debian's patches) into $src_dir"
  dpkg-source -x "$dsc" "$src_dir" >"$work/unpack.log" 2>&1 \
    || { tail -5 "$work/unpack.log" >&2; die "dpkg-source -x failed (log: $work/unpack.log)"; }
  [ -d "$src_dir/vendor" ] || die "$src_dir has no vendor/ directory: this source cannot be built offline"
  : >"$src_dir/.unpacked"
else
  say "3/7 the tree is already unpacked in $src_dir"
fi

# --- Go 1.15 -------------------------------------------------------------------------------------
go_dir="$work/go"
goroot="$go_dir/usr/lib/go-1.15"
if [ ! -x "$goroot/bin/go" ]; then
  say "4/7 fetching Go 1.15 (golang-1.15-go, golang-1.15-src from bullseye) into $go_dir"
  mkdir -p "$work/debs" "$go_dir"
  (cd "$work/debs" && apt-get "${apt_opts[@]}" download golang-1.15-go golang-1.15-src >"$work/apt-go.log" 2>&1) \
    || { tail -5 "$work/apt-go.log" >&2; die "apt-get download golang-1.15-go golang-1.15-src failed: Debian bullseye may have left the archive; the build then needs another Go that compiles Kubernetes 1.20 (log: $work/apt-go.log)"; }
  for d in "$work"/debs/golang-1.15-*.deb; do dpkg-deb -x "$d" "$go_dir"; done
else
  say "4/7 Go 1.15 is already in $go_dir"
fi
go_version=$("$goroot/bin/go" version)
[[ "$go_version" == *go1.15* ]] || die "$goroot/bin/go says '$go_version', want go1.15"

# --- kubectl ---------------------------------------------------------------------------------------
say "5/7 fetching kubectl (kubernetes-client from bookworm)"
mkdir -p "$work/debs" "$work/client"
(cd "$work/debs" && apt-get "${apt_opts[@]}" download kubernetes-client >"$work/apt-client.log" 2>&1) \
  || { tail -5 "$work/apt-client.log" >&2; die "apt-get download kubernetes-client failed (log: $work/apt-client.log)"; }
client_deb=$(ls -t "$work"/debs/kubernetes-client_*.deb | head -1)
dpkg-deb -x "$client_deb" "$work/client"
install -m 0755 "$work/client/usr/bin/kubectl" "$out/kubectl"

# --- the build -------------------------------------------------------------------------------------
export GOROOT="$goroot" PATH="$goroot/bin:$PATH" GOPATH="$work/gopath" GOCACHE="$work/gocache" \
       GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 GO111MODULE=on \
       KUBE_GIT_VERSION="$version" KUBE_GIT_TREE_STATE=clean
minor="${version#v1.}"; minor="${minor%%.*}"

# Prints "still <what> (<elapsed>)" every 30 s while the given command runs.
with_ticker() {
  local what="$1"; shift
  local t0; t0=$(date +%s)
  ( while sleep 30; do say "    still $what ($(( $(date +%s) - t0 )) s)"; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  return "$rc"
}

openapi="$src_dir/pkg/generated/openapi/zz_generated.openapi.go"
if [ ! -s "$openapi" ]; then
  say "6/7 generating the openapi code (make gen_openapi, about 1 min on 2 idle cores)"
  with_ticker "generating openapi" make -C "$src_dir" gen_openapi >"$work/gen_openapi.log" 2>&1 \
    || { tail -20 "$work/gen_openapi.log" >&2; die "make gen_openapi failed (log: $work/gen_openapi.log)"; }
  [ -s "$openapi" ] || die "make gen_openapi did not write $openapi (log: $work/gen_openapi.log)"
else
  say "6/7 the openapi code is already generated"
fi

# Both version packages, as upstream's hack/lib/version.sh does: `--version` reads component-base's,
# the apiserver's /version endpoint client-go's.
ldflags="-s -w"
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
n=0
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  n=$((n + 1))
  say "7/7 building $cmd ($n of 3; kube-apiserver takes about 2.5 min on 2 idle cores)"
  (cd "$src_dir" && with_ticker "building $cmd" go build -ldflags "$ldflags" -o "$out/$cmd.tmp" "./cmd/$cmd") \
    >"$work/build-$cmd.log" 2>&1 || { tail -20 "$work/build-$cmd.log" >&2; die "go build ./cmd/$cmd failed (log: $work/build-$cmd.log)"; }
  mv "$out/$cmd.tmp" "$out/$cmd"
  got=$("$out/$cmd" --version 2>&1 || true)
  [ "$got" = "Kubernetes $version" ] || die "$out/$cmd --version printed '$got', want 'Kubernetes $version'"
done

cat >"$out/BUILD-INFO" <<EOF
$stamp
version: $version
debian-source: kubernetes $src_version
go: $go_version
kubectl: $(basename "$client_deb")
built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - started )) s
EOF
(cd "$out" && sha256sum "${bins[@]}" >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
rm -f "$out/.building"
say "done: ${bins[*]} in $out"
echo "$out"
