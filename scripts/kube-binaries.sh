#!/usr/bin/env bash
# Builds real kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy from
# Debian's source package `kubernetes` (the complete upstream tree, vendor/ included) with Debian
# bullseye's Go 1.15, compiles the pause container's program from the same tree
# (build/pause/linux/pause.c, `gcc -Os -static`), and takes kubectl from Debian's `kubernetes-client`
# and a static busybox from Debian's `busybox-static` (the workload image of scripts/node-images.sh),
# into a cache directory keyed by version:
#
#   scripts/kube-binaries.sh [VERSION]        (default v1.20.2, the only server release the archive has)
#
# Prints the cache directory (e.g. /var/cache/hactl/kubernetes/v1.20.2) as the last line on stdout;
# progress goes to stderr. Returns at once when the cache is already complete.
#
# Environment:
#   HACTL_KUBE_CACHE       cache root (default /var/cache/hactl/kubernetes)
#   HACTL_DEBIAN_MIRROR    Debian archive URI (default: this machine's, from its apt sources:
#                          scripts/lib/debian-mirror.sh, which hactl writes beside its embedded copy)
#
# The machine's apt configuration is left alone: apt runs with a private sources list, lists directory
# and package cache under <cache root>/build/apt. The `.dsc` file's checksums are checked for every
# source file before anything is unpacked. `hactl lab kube-binaries` runs this same script (it is
# embedded in the binary).
#
# Layout of a complete cache directory:
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy   (0755, Go, static)
#   kubectl pause busybox                                                      (0755)
#   SHA256SUMS    written last; lists every file above; a directory where it does not is not complete
#   BUILD-INFO    Debian source version, Go version, what was built when and what was reused
#
# What is rebuilt when:
# - complete (every file listed in SHA256SUMS and matching it, BUILD-INFO's stamp current): nothing;
#   the script prints the directory and returns at once, without touching the network.
# - a directory made by an earlier version of this script (fewer files, e.g. the three server
#   binaries and kubectl): the source is fetched again and checked against its .dsc, Go is checked;
#   when BUILD-INFO names that same Debian source version and Go version, every file that
#   SHA256SUMS lists and still matches is kept, and only the others (missing, or no longer
#   matching) are built (kubelet about 80 s, kube-proxy about 10 s on 2 cores). The directory
#   stays usable meanwhile: new files appear under their final name only when complete, and
#   SHA256SUMS is replaced last.
# - anything else (no SHA256SUMS, an old stamp, another Debian source or Go version, nothing that
#   matches): everything is rebuilt; the directory holds `.building` meanwhile. One left behind by
#   an interrupted build is rebuilt here, and refused by hactl (with the command).
#
# Every external tool (apt-get, dpkg-source, make, go, gcc) runs with an environment set here and
# nothing inherited (`env -i`): a caller's OUT_DIR, GOFLAGS, GOOS, CC, APT_CONFIG, CARGO_* or
# MAKEFLAGS cannot change the build (a `cargo run` once leaked OUT_DIR into Kubernetes' Makefile).
set -euo pipefail
# shellcheck source=scripts/lib/debian-mirror.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/debian-mirror.sh"

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
# Built from the tree with Go, in this order (kube-apiserver takes longest).
go_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
bins=("${go_cmds[@]}" kubectl pause busybox)
started=$(date +%s)

# Progress goes to fd 3 (the caller's stderr) so it shows even while a step's output goes to a log.
exec 3>&2
say() { printf 'kube-binaries [%4ss] %s\n' "$(( $(date +%s) - started ))" "$*" >&3; }
die() { echo "kube-binaries: $*" >&2; exit 1; }

# What BUILD-INFO says about the version stamp; a cache made by an older script (which stamped only
# component-base, so the apiserver's /version said v0.0.0-master) is rebuilt.
stamp="stamp: component-base client-go"

# hactl's own patches to the tree, applied after Debian's: upstream fixes that 1.20.2 lacks. Their
# name is written into BUILD-INFO; a cache built without them rebuilds the binaries they change
# (patched_cmds) and keeps the others. The tree in the build directory records what was applied in
# .hactl-patches; a tree with other patches is unpacked again.
#  - kubernetes#96876 (in 1.21): the node lifecycle controller queued a Node for its NoExecute
#    taint again every 5 s while the Node was not ready, without taking the old entry out of the
#    queue, so Nodes that joined together left dozens of stale entries ahead of any later one. The
#    queue drains one entry per 10 s: a worker that lost power got its `unreachable:NoExecute`
#    taint (and its pods their eviction) only many minutes later. Take the old entry out.
patches="patches: kubernetes#96876"
patched_cmds=(kube-controller-manager)
write_patches() {
  cat <<'PATCH'
--- a/pkg/controller/nodelifecycle/node_lifecycle_controller.go
+++ b/pkg/controller/nodelifecycle/node_lifecycle_controller.go
@@ -1477,13 +1477,13 @@
 	defer nc.evictorLock.Unlock()
 	if status == v1.ConditionFalse {
 		if !taintutils.TaintExists(node.Spec.Taints, NotReadyTaintTemplate) {
-			nc.zoneNoExecuteTainter[utilnode.GetZoneKey(node)].SetRemove(node.Name)
+			nc.zoneNoExecuteTainter[utilnode.GetZoneKey(node)].Remove(node.Name)
 		}
 	}
 
 	if status == v1.ConditionUnknown {
 		if !taintutils.TaintExists(node.Spec.Taints, UnreachableTaintTemplate) {
-			nc.zoneNoExecuteTainter[utilnode.GetZoneKey(node)].SetRemove(node.Name)
+			nc.zoneNoExecuteTainter[utilnode.GetZoneKey(node)].Remove(node.Name)
 		}
 	}
 
PATCH
}

# Whether SHA256SUMS lists `$1`.
listed() { awk -v f="$1" '$2 == f || $2 == "*" f { found = 1 } END { exit !found }' "$out/SHA256SUMS" 2>/dev/null; }

complete() {
  [ -f "$out/SHA256SUMS" ] && [ ! -e "$out/.building" ] || return 1
  grep -qxF "$stamp" "$out/BUILD-INFO" 2>/dev/null || return 1
  grep -qxF "$patches" "$out/BUILD-INFO" 2>/dev/null || return 1
  (cd "$out" && sha256sum --quiet --strict -c SHA256SUMS >/dev/null 2>&1) || return 1
  local b
  for b in "${bins[@]}"; do [ -x "$out/$b" ] && listed "$b" || return 1; done
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
for tool in apt-get dpkg-source dpkg-deb rsync make gcc sha256sum flock patch; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing: run scripts/install-deps.sh"
done

mkdir -p "$work/home" "$work/tmp"
# The environment of every external tool: nothing inherited.
clean=(env -i "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "LANG=C.UTF-8" "HOME=$work/home" "TMPDIR=$work/tmp")

# What an earlier build left that may be kept: every file SHA256SUMS lists that still matches it,
# if BUILD-INFO has the current stamp (whether its source and Go match is checked below, once
# they are known).
keep=()
old_source="" old_go="" old_kubectl="" old_built=""
if [ -e "$out/.building" ]; then
  say "$out was left half-built by an interrupted build ($out/.building is present): rebuilding it"
elif [ -f "$out/SHA256SUMS" ] && grep -qxF "$stamp" "$out/BUILD-INFO" 2>/dev/null; then
  for b in "${bins[@]}"; do
    if [ -x "$out/$b" ] && listed "$b" \
      && [ "$(sha256sum "$out/$b" | cut -d' ' -f1)" = "$(awk -v f="$b" '$2 == f || $2 == "*" f { print $1 }' "$out/SHA256SUMS")" ]; then
      keep+=("$b")
    fi
  done
  if ! grep -qxF "$patches" "$out/BUILD-INFO"; then
    # Built without (all of) today's patches: what they change is built again.
    for b in "${patched_cmds[@]}"; do
      for i in "${!keep[@]}"; do [ "${keep[$i]}" = "$b" ] && unset 'keep[i]'; done
    done
    keep=("${keep[@]}")
  fi
  old_source=$(sed -n 's/^debian-source: kubernetes //p' "$out/BUILD-INFO")
  old_go=$(sed -n 's/^go: //p' "$out/BUILD-INFO")
  old_kubectl=$(sed -n 's/^kubectl: //p' "$out/BUILD-INFO")
  old_built=$(sed -n 's/^built: //p' "$out/BUILD-INFO")
  say "$out is not complete (has ${keep[*]:-nothing usable}; wants ${bins[*]}): completing it"
elif [ -e "$out" ]; then
  say "$out is from an older build script (SHA256SUMS or the BUILD-INFO stamp missing): rebuilding it"
fi

# Whether `$1` is kept from the earlier build.
kept() { local k; for k in "${keep[@]}"; do [ "$k" = "$1" ] && return 0; done; return 1; }

# --- the archive ---------------------------------------------------------------------------------
mirror=$(debian_mirror) || die "no Debian archive to fetch from (above)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "$keyring is missing: install the debian-archive-keyring package"

apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/sources.list" <<EOS
deb-src [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $mirror bullseye main
EOS
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::Etc::preferencesparts=-" -o "APT::Sandbox::User=root" -q)
apt() { "${clean[@]}" apt-get "${apt_opts[@]}" "$@"; }

say "1/8 reading the package lists of bookworm (source) and bullseye (Go 1.15) from $mirror (private apt state in $apt_dir)"
apt update >"$work/apt-update.log" 2>&1 \
  || { tail -5 "$work/apt-update.log" >&2; die "apt-get update failed (log: $work/apt-update.log)"; }


# --- the source ----------------------------------------------------------------------------------
src_version=$(apt source --download-only --print-uris kubernetes 2>/dev/null \
  | awk '$2 ~ /\.dsc$/ { print $2; exit }' | sed -e 's/^kubernetes_//' -e 's/\.dsc$//')
[ -n "$src_version" ] || die "the archive at $mirror has no source package 'kubernetes' in bookworm main"
# Debian spells a re-packaged older upstream as `<newer>+really<actual>`.
upstream="${src_version%%-*}"
upstream="${upstream##*+really}"
upstream="${upstream%%+*}"
upstream="${upstream%%~*}"
if [ "v$upstream" != "$version" ]; then
  die "asked for $version, but the archive's kubernetes source is $src_version (upstream v$upstream): run scripts/kube-binaries.sh v$upstream"
fi

src_dir="$work/src-$src_version"
say "2/8 fetching source kubernetes $src_version (about 35 MB) and checking the .dsc checksums"
mkdir -p "$work/dl"
(cd "$work/dl" && apt source --download-only "kubernetes=$src_version" >"$work/apt-source.log" 2>&1) \
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

if [ -f "$src_dir/.unpacked" ] && [ -f "$src_dir/.hactl-patches" ] \
  && [ "$(cat "$src_dir/.hactl-patches")" != "$patches" ]; then
  say "    $src_dir has other patches ($(cat "$src_dir/.hactl-patches")): unpacking it again"
  rm -f "$src_dir/.unpacked"
fi
if [ ! -f "$src_dir/.unpacked" ]; then
  rm -rf "$src_dir"
  say "3/8 unpacking the tree (with Debian's patches) into $src_dir"
  "${clean[@]}" dpkg-source -x "$dsc" "$src_dir" >"$work/unpack.log" 2>&1 \
    || { tail -5 "$work/unpack.log" >&2; die "dpkg-source -x failed (log: $work/unpack.log)"; }
  [ -d "$src_dir/vendor" ] || die "$src_dir has no vendor/ directory: this source cannot be built offline"
  : >"$src_dir/.unpacked"
else
  say "3/8 the tree is already unpacked in $src_dir"
fi
if [ "$(cat "$src_dir/.hactl-patches" 2>/dev/null)" != "$patches" ]; then
  say "    applying hactl's patches to the tree (${patches#patches: })"
  write_patches >"$work/hactl.patch"
  "${clean[@]}" patch -d "$src_dir" -p1 --forward --batch <"$work/hactl.patch" >"$work/patch.log" 2>&1 \
    || { cat "$work/patch.log" >&2; die "hactl's patches do not apply to $src_dir (log: $work/patch.log)"; }
  echo "$patches" >"$src_dir/.hactl-patches"
fi

# --- Go 1.15 -------------------------------------------------------------------------------------
go_dir="$work/go"
goroot="$go_dir/usr/lib/go-1.15"
if [ ! -x "$goroot/bin/go" ]; then
  say "4/8 fetching Go 1.15 (golang-1.15-go, golang-1.15-src from bullseye) into $go_dir"
  mkdir -p "$work/debs" "$go_dir"
  (cd "$work/debs" && apt download golang-1.15-go golang-1.15-src >"$work/apt-go.log" 2>&1) \
    || { tail -5 "$work/apt-go.log" >&2; die "apt-get download golang-1.15-go golang-1.15-src failed: Debian bullseye may have left the archive; the build then needs another Go that compiles Kubernetes 1.20 (log: $work/apt-go.log)"; }
  for d in "$work"/debs/golang-1.15-*.deb; do "${clean[@]}" dpkg-deb -x "$d" "$go_dir"; done
else
  say "4/8 Go 1.15 is already in $go_dir"
fi
minor="${version#v1.}"; minor="${minor%%.*}"
go_env=(env -i "PATH=$goroot/bin:/usr/sbin:/usr/bin:/sbin:/bin" "LANG=C.UTF-8" "HOME=$work/home" "TMPDIR=$work/tmp"
        "GOROOT=$goroot" "GOPATH=$work/gopath" "GOCACHE=$work/gocache" "GOENV=off" "GOPROXY=off" "GOSUMDB=off"
        "GOFLAGS=-mod=vendor" "CGO_ENABLED=0" "GO111MODULE=on" "GOOS=linux" "GOARCH=amd64"
        "KUBE_GIT_VERSION=$version" "KUBE_GIT_TREE_STATE=clean")
go_version=$("${go_env[@]}" go version)
[[ "$go_version" == *go1.15* ]] || die "$goroot/bin/go says '$go_version', want go1.15"

# What is kept needs the same source and Go; otherwise everything is rebuilt.
if [ ${#keep[@]} -gt 0 ] && { [ "$old_source" != "$src_version" ] || [ "$old_go" != "$go_version" ]; }; then
  say "    $out was built from kubernetes '$old_source' with '$old_go', now $src_version with '$go_version': rebuilding everything"
  keep=()
fi
if [ ${#keep[@]} -eq 0 ]; then
  # A full build: only build outputs live here (never data); they are replaced.
  mkdir -p "$out"
  : >"$out/.building"
  rm -f "${bins[@]/#/$out/}" "$out/SHA256SUMS" "$out/BUILD-INFO"
else
  say "    keeping ${keep[*]} (listed in SHA256SUMS and matching it; same source and Go)"
fi
built=()

# --- kubectl and busybox from Debian's packages ------------------------------------------------------
mkdir -p "$work/debs"
# Fetches the current .deb of package $1 from bookworm into $work/debs and prints its path.
fetch_deb() {
  rm -f "$work/debs/$1"_*.deb
  (cd "$work/debs" && apt download "$1" >"$work/apt-$1.log" 2>&1) \
    || { tail -5 "$work/apt-$1.log" >&2; die "apt-get download $1 failed (log: $work/apt-$1.log)"; }
  ls "$work/debs/$1"_*.deb
}
kubectl_deb="$old_kubectl"
if ! kept kubectl; then
  say "5/8 fetching kubectl (kubernetes-client from bookworm)"
  deb=$(fetch_deb kubernetes-client)
  rm -rf "$work/client"; mkdir -p "$work/client"
  "${clean[@]}" dpkg-deb -x "$deb" "$work/client"
  install -m 0755 "$work/client/usr/bin/kubectl" "$out/kubectl.tmp"
  mv "$out/kubectl.tmp" "$out/kubectl"
  kubectl_deb=$(basename "$deb")
  built+=(kubectl)
fi
busybox_deb=$(sed -n 's/^busybox: //p' "$out/BUILD-INFO" 2>/dev/null || true)
if ! kept busybox; then
  say "5/8 fetching busybox (busybox-static from bookworm)"
  deb=$(fetch_deb busybox-static)
  rm -rf "$work/busybox"; mkdir -p "$work/busybox"
  "${clean[@]}" dpkg-deb -x "$deb" "$work/busybox"
  install -m 0755 "$work/busybox/bin/busybox" "$out/busybox.tmp"
  "$out/busybox.tmp" true || die "$out/busybox.tmp (from $(basename "$deb")) does not run here"
  mv "$out/busybox.tmp" "$out/busybox"
  busybox_deb=$(basename "$deb")
  built+=(busybox)
fi

# --- pause, from the tree ---------------------------------------------------------------------------
pause_src="$src_dir/build/pause/linux/pause.c"
pause_tag=$(sed -n 's/^TAG[[:space:]]*=[[:space:]]*//p' "$src_dir/build/pause/Makefile" | head -1)
[ -f "$pause_src" ] && [ -n "$pause_tag" ] || die "$src_dir has no build/pause/linux/pause.c or no TAG in build/pause/Makefile"
pause_info="pause: $pause_tag, gcc -Os -Wall -Werror -static build/pause/linux/pause.c"
if ! kept pause; then
  say "6/8 compiling pause $pause_tag (build/pause/linux/pause.c, gcc -Os -static)"
  "${clean[@]}" gcc -Os -Wall -Werror -static "-DVERSION=v$pause_tag" \
      -o "$out/pause.tmp" "$pause_src" >"$work/build-pause.log" 2>&1 \
    || { tail -20 "$work/build-pause.log" >&2; die "gcc $pause_src failed (log: $work/build-pause.log)"; }
  got=$("$out/pause.tmp" -v 2>&1 || true)
  [[ "$got" == *"v$pause_tag"* ]] || die "$out/pause.tmp -v printed '$got', want v$pause_tag"
  mv "$out/pause.tmp" "$out/pause"
  built+=(pause)
  pause_info="$pause_info, $("${clean[@]}" gcc --version | head -1)"
else
  pause_info=$(grep '^pause: ' "$out/BUILD-INFO" || echo "$pause_info")
fi

# --- the Go build ------------------------------------------------------------------------------------
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

to_build=()
for cmd in "${go_cmds[@]}"; do kept "$cmd" || to_build+=("$cmd"); done

openapi="$src_dir/pkg/generated/openapi/zz_generated.openapi.go"
if [ ${#to_build[@]} -gt 0 ] && [ ! -s "$openapi" ]; then
  say "7/8 generating the openapi code (make gen_openapi, about 1 min on 2 idle cores)"
  with_ticker "generating openapi" "${go_env[@]}" make -C "$src_dir" gen_openapi >"$work/gen_openapi.log" 2>&1 \
    || { tail -20 "$work/gen_openapi.log" >&2; die "make gen_openapi failed (log: $work/gen_openapi.log)"; }
  [ -s "$openapi" ] || die "make gen_openapi did not write $openapi (log: $work/gen_openapi.log)"
else
  say "7/8 the openapi code is already generated (or not needed)"
fi

# Both version packages, as upstream's hack/lib/version.sh does: `--version` reads component-base's,
# the apiserver's /version endpoint client-go's.
ldflags="-s -w"
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
n=0
for cmd in "${to_build[@]}"; do
  n=$((n + 1))
  say "8/8 building $cmd ($n of ${#to_build[@]}; on 2 idle cores kube-apiserver takes about 2.5 min, kubelet 1.5 min)"
  (cd "$src_dir" && with_ticker "building $cmd" "${go_env[@]}" go build -ldflags "$ldflags" -o "$out/$cmd.tmp" "./cmd/$cmd") \
    >"$work/build-$cmd.log" 2>&1 || { tail -20 "$work/build-$cmd.log" >&2; die "go build ./cmd/$cmd failed (log: $work/build-$cmd.log)"; }
  got=$("$out/$cmd.tmp" --version 2>&1 || true)
  [ "$got" = "Kubernetes $version" ] || die "$out/$cmd.tmp --version printed '$got', want 'Kubernetes $version'"
  mv "$out/$cmd.tmp" "$out/$cmd"
  built+=("$cmd")
done

{
  echo "$stamp"
  echo "$patches"
  echo "version: $version"
  echo "debian-source: kubernetes $src_version"
  echo "go: $go_version"
  echo "kubectl: $kubectl_deb"
  echo "busybox: $busybox_deb"
  echo "$pause_info"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - started )) s: ${built[*]}"
  if [ ${#keep[@]} -gt 0 ]; then
    echo "kept: ${keep[*]} (from the build of $old_built; checksums matched)"
  fi
} >"$out/BUILD-INFO.tmp"
mv "$out/BUILD-INFO.tmp" "$out/BUILD-INFO"
(cd "$out" && sha256sum "${bins[@]}" >SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
rm -f "$out/.building"
say "done: ${built[*]} built${keep[*]:+, ${keep[*]} kept} in $out"
echo "$out"
