#!/usr/bin/env bash
# Packs the container images a node needs, without a registry, from the binaries that
# scripts/kube-binaries.sh builds, into a cache directory keyed by the Kubernetes version:
#
#   scripts/node-images.sh [VERSION]          (default v1.20.2)
#
# Prints the image directory (e.g. /var/cache/hactl/images/v1.20.2) as the last line on stdout;
# progress goes to stderr. Returns at once when that directory is complete and was made from the
# binaries there are now.
#
# Environment:
#   HACTL_KUBE_BIN_DIR   the binaries (default <HACTL_KUBE_CACHE or /var/cache/hactl/kubernetes>/VERSION;
#                        run scripts/kube-binaries.sh first). Its SHA256SUMS must list and match
#                        pause, busybox, kube-apiserver, kube-controller-manager and kube-scheduler.
#   HACTL_IMAGE_CACHE    cache root (default /var/cache/hactl/images)
#
# The images (one layer each, linux/amd64):
#   hactl.local/pause:<tag>                   /pause (the tag is the version pause.c reports, e.g. 3.4)
#   hactl.local/busybox:<busybox version>     /bin/busybox with every applet linked, /etc/passwd, /tmp
#   hactl.local/kube-apiserver:<VERSION>      /usr/local/bin/kube-apiserver, /tmp; entrypoint the binary;
#   hactl.local/kube-controller-manager:<VERSION>, hactl.local/kube-scheduler:<VERSION>   likewise
#
# Each archive is an OCI image layout in a tar (oci-layout, index.json, blobs/sha256/…), which
# `ctr -n k8s.io images import` takes as it is; index.json names the image with the annotation
# io.containerd.image.name (the full reference) and org.opencontainers.image.ref.name (the tag). OCI
# rather than `docker save`'s manifest.json: the manifest is written here, so its digest, which
# containerd then shows for the image (`ctr images ls`), is known before any import and can be
# checked on every node after one; from a docker-save archive containerd writes a manifest of its own.
#
# Reproducible: file modes set here, owner 0:0, mtimes 0, tar entries sorted, layers compressed with
# `gzip -n` (no name, no time), JSON written byte for byte: the same binaries give the same digests
# (with the same tar and gzip).
#
# Layout of a complete directory (built in a temporary directory and renamed into place, so it is
# complete or absent):
#   <name>.tar ...   one archive per image
#   images.json      written last: format, version, and per image name, tag, reference, manifest
#                    digest, archive file, its sha256 and size, and the sha256 of each binary it was
#                    made from (a later run rebuilds the directory when one of those changed)
#
# Every external tool runs with an environment set here and nothing inherited (`env -i`).
set -euo pipefail

version="${1:-${HACTL_KUBE_VERSION:-v1.20.2}}"
case "$version" in
  v*) ;;
  *) version="v$version" ;;
esac
if ! [[ "$version" =~ ^v1\.[0-9]+\.[0-9]+$ ]]; then
  echo "node-images: '$version' is not a Kubernetes release version (want e.g. v1.20.2)" >&2
  exit 2
fi

bins="${HACTL_KUBE_BIN_DIR:-${HACTL_KUBE_CACHE:-/var/cache/hactl/kubernetes}/$version}"
root="${HACTL_IMAGE_CACHE:-/var/cache/hactl/images}"
out="$root/$version"
started=$(date +%s)
registry=hactl.local
control_plane=(kube-apiserver kube-controller-manager kube-scheduler)
inputs=(pause busybox "${control_plane[@]}")

exec 3>&2
say() { printf 'node-images [%4ss] %s\n' "$(( $(date +%s) - started ))" "$*" >&3; }
die() { echo "node-images: $*" >&2; exit 1; }

clean=(env -i "PATH=/usr/sbin:/usr/bin:/sbin:/bin" "LANG=C.UTF-8" "LC_ALL=C" "TZ=UTC")

# The sha256 SHA256SUMS gives for binary $1 (empty when not listed).
listed_sum() { awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$bins/SHA256SUMS" 2>/dev/null; }

# Whether $out is complete and made from the binaries there are now.
complete() {
  local manifest="$out/images.json" b want file sum
  [ -f "$manifest" ] || return 1
  for b in "${inputs[@]}"; do
    want=$(listed_sum "$b")
    [ -n "$want" ] && grep -qF "\"$b\": \"$want\"" "$manifest" || return 1
  done
  while read -r file sum; do
    [ -f "$out/$file" ] && [ "$(sha256sum "$out/$file" | cut -d' ' -f1)" = "$sum" ] || return 1
  done < <(sed -n 's/.*"archive": "\([^"]*\)", "archiveSha256": "\([0-9a-f]*\)".*/\1 \2/p' "$manifest")
}

[ -f "$bins/SHA256SUMS" ] || die "$bins has no SHA256SUMS: build the binaries first (scripts/kube-binaries.sh $version, or hactl lab kube-binaries)"
for b in "${inputs[@]}"; do
  [ -n "$(listed_sum "$b")" ] \
    || die "$bins/SHA256SUMS does not list $b: complete the directory with scripts/kube-binaries.sh $version"
done

if complete; then
  echo "$out"
  exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock"
if ! flock -n 9; then
  say "another run holds $root/.lock; waiting for it"
  flock 9
  if complete; then echo "$out"; exit 0; fi
fi
for tool in tar gzip sha256sum flock; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing: run scripts/install-deps.sh"
done
for b in "${inputs[@]}"; do
  [ "$(sha256sum "$bins/$b" | cut -d' ' -f1)" = "$(listed_sum "$b")" ] \
    || die "$bins/$b does not match $bins/SHA256SUMS: rebuild it with scripts/kube-binaries.sh $version"
done
# Modes of what is written here do not depend on the caller's umask.
umask 022

stage="$root/.build-$version"
rm -rf "$stage"
mkdir -p "$stage/images"
[ -e "$out" ] && say "$out is incomplete or was made from other binaries: rebuilding it"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
# Writes stdin to the blob store of layout $1 under its sha256; prints "<sha256> <size>".
put_blob() {
  local tmp="$1/blob.tmp" sum
  cat >"$tmp"
  sum=$(sha "$tmp")
  mkdir -p "$1/blobs/sha256"
  mv "$tmp" "$1/blobs/sha256/$sum"
  echo "$sum $(size "$1/blobs/sha256/$sum")"
}
# A tar of directory $1's content, reproducibly, on stdout.
tar_tree() {
  (cd "$1" && "${clean[@]}" tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --format=gnu -cf - .)
}

# pack NAME TAG ROOTFS ENTRYPOINT_JSON CMD_JSON SOURCES...: writes $stage/images/NAME.tar and
# appends its entry to $stage/entries.
pack() {
  local name="$1" tag="$2" rootfs="$3" entrypoint="$4" cmd="$5"; shift 5
  local ref="$registry/$name:$tag" layout="$stage/layout-$name"
  rm -rf "$layout"; mkdir -p "$layout"
  local diff_id layer layer_size config config_size manifest manifest_size
  tar_tree "$rootfs" >"$layout/layer.tar"
  diff_id=$(sha "$layout/layer.tar")
  read -r layer layer_size < <("${clean[@]}" gzip -n -6 <"$layout/layer.tar" | put_blob "$layout")
  rm "$layout/layer.tar"
  local process="\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"]"
  [ "$entrypoint" = null ] || process="$process,\"Entrypoint\":$entrypoint"
  [ "$cmd" = null ] || process="$process,\"Cmd\":$cmd"
  read -r config config_size < <(printf '%s' \
    "{\"created\":\"1970-01-01T00:00:00Z\",\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{$process},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\"history\":[{\"created\":\"1970-01-01T00:00:00Z\",\"created_by\":\"hactl scripts/node-images.sh\"}]}" \
    | put_blob "$layout")
  read -r manifest manifest_size < <(printf '%s' \
    "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:$config\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer\",\"size\":$layer_size}]}" \
    | put_blob "$layout")
  printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:$manifest\",\"size\":$manifest_size,\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$ref\",\"org.opencontainers.image.ref.name\":\"$tag\"}}]}" \
    >"$layout/index.json"
  (cd "$layout" && "${clean[@]}" tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
      --format=gnu -cf "$stage/images/$name.tar" oci-layout index.json blobs)
  local sources=() b
  for b in "$@"; do sources+=("\"$b\": \"$(listed_sum "$b")\""); done
  local IFS=,
  printf '    {"name": "%s", "tag": "%s", "reference": "%s", "digest": "sha256:%s", "archive": "%s", "archiveSha256": "%s", "archiveSize": %s, "sources": {%s}}' \
    "$registry/$name" "$tag" "$ref" "$manifest" "$name.tar" "$(sha "$stage/images/$name.tar")" \
    "$(size "$stage/images/$name.tar")" "${sources[*]}" >>"$stage/entries"
  printf '\n' >>"$stage/entries"
  say "    $ref  sha256:$manifest  ($(( $(size "$stage/images/$name.tar") / 1024 )) KiB)"
  rm -rf "$layout"
}

# A root file system with the given files; modes are set here, not taken from the umask.
new_rootfs() { rm -rf "$1"; mkdir -p "$1"; chmod 0755 "$1"; }
add_tmp() { mkdir -p "$1/tmp"; chmod 1777 "$1/tmp"; }

say "1/3 pause"
pause_tag=$("$bins/pause" -v 2>&1 | sed -n 's/^pause\.c v\([0-9][0-9.]*\).*/\1/p')
[ -n "$pause_tag" ] || die "$bins/pause -v did not print its version (pause.c vX.Y)"
r="$stage/rootfs-pause"; new_rootfs "$r"
install -m 0755 "$bins/pause" "$r/pause"
pack pause "$pause_tag" "$r" '["/pause"]' null pause

say "2/3 busybox"
busybox_tag=$("$bins/busybox" --help 2>&1 | sed -n '1s/^BusyBox v\([0-9][0-9.]*\).*/\1/p')
[ -n "$busybox_tag" ] || die "$bins/busybox --help did not print its version (BusyBox vX.Y.Z)"
r="$stage/rootfs-busybox"; new_rootfs "$r"
for d in bin sbin usr usr/bin usr/sbin etc; do mkdir -p "$r/$d"; chmod 0755 "$r/$d"; done
add_tmp "$r"
install -m 0755 "$bins/busybox" "$r/bin/busybox"
while read -r applet; do
  [ -n "$applet" ] && [ "$applet" != bin/busybox ] && [ ! -e "$r/$applet" ] || continue
  ln -s /bin/busybox "$r/$applet"
done < <("$bins/busybox" --list-full)
[ -L "$r/bin/sh" ] || die "busybox has no sh applet"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
chmod 0644 "$r/etc/passwd" "$r/etc/group"
pack busybox "$busybox_tag" "$r" null '["sh"]' busybox

say "3/3 the control plane (kube-apiserver, kube-controller-manager, kube-scheduler) for static pods"
for b in "${control_plane[@]}"; do
  got=$("$bins/$b" --version 2>&1 || true)
  [ "$got" = "Kubernetes $version" ] || die "$bins/$b --version printed '$got', want 'Kubernetes $version'"
  r="$stage/rootfs-$b"; new_rootfs "$r"
  mkdir -p "$r/usr/local/bin"; chmod 0755 "$r/usr" "$r/usr/local" "$r/usr/local/bin"
  add_tmp "$r"
  install -m 0755 "$bins/$b" "$r/usr/local/bin/$b"
  pack "$b" "$version" "$r" "[\"/usr/local/bin/$b\"]" null "$b"
done

{
  printf '{\n  "format": 1,\n  "kubernetesVersion": "%s",\n  "images": [\n' "$version"
  sed '$!s/$/,/' "$stage/entries"
  printf '  ]\n}\n'
} >"$stage/images/images.json"

# Into place: the old directory (stale, or from an interrupted swap) goes first.
if [ -e "$out" ]; then
  mv "$out" "$root/.old-$version-$$"
  rm -rf "$root/.old-$version-$$"
fi
mv "$stage/images" "$out"
rm -rf "$stage"
complete || die "$out was written but does not check out (a bug in this script)"
say "done: $(ls "$out" | grep -c '\.tar$') images in $out"
echo "$out"
