#!/usr/bin/env bash
# Builds the release artifacts into dist/ and, with --check, installs each in a clean container.
#
#   scripts/release.sh [--check] [--no-build]
#
# dist/hactl-<version>-x86_64-linux-gnu.tar.gz   hactl-<version>/: bin/hactl, completions for bash,
#                                                zsh and fish, man pages (man/man1/*.1), README.md,
#                                                CHANGELOG.md
# dist/hactl_<version>_amd64.deb                 /usr/bin/hactl, completions where each shell looks,
#                                                /usr/share/man/man1/*.1.gz; Depends from dpkg-shlibdeps
# dist/SHA256SUMS                                sha256sum of both (check: sha256sum -c SHA256SUMS)
#
# The binary is `cargo build --release --locked`; `hactl --version` names the commit it was built
# from. --check boots the cached pristine bookworm root of scripts/fresh-machine-check.sh with
# systemd-nspawn (--volatile=overlay: nothing it does is kept), with only dist/ bound read-only,
# and there: checks SHA256SUMS, unpacks the tarball and runs its `hactl --version`, installs the .deb
# with apt-get (so its Depends must resolve) and runs `hactl --version`, and finds the man page
# and the bash completion where the package put them. Needs root for --check.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
check=0 build=1
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --no-build) build=0 ;;
    *) echo "usage: scripts/release.sh [--check] [--no-build]" >&2; exit 64 ;;
  esac
done
say() { echo "release: $*" >&2; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
bin="$target_dir/release/hactl"
if [ "$build" = 1 ]; then
  say "cargo build --release --locked"
  cargo build --release --locked
fi
[ -x "$bin" ] || { say "no $bin: run without --no-build"; exit 1; }

dist="$repo/dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
rm -rf "$dist"
mkdir -p "$dist"

# The tarball.
name="hactl-$version"
top="$stage/tar/$name"
mkdir -p "$top/bin" "$top/completions" "$top/man/man1"
install -m 0755 "$bin" "$top/bin/hactl"
"$bin" completion bash >"$top/completions/hactl.bash"
"$bin" completion zsh >"$top/completions/_hactl"
"$bin" completion fish >"$top/completions/hactl.fish"
"$bin" man --out "$top/man/man1" 2>/dev/null
cp README.md CHANGELOG.md "$top/"
tarball="$name-x86_64-linux-gnu.tar.gz"
tar -C "$stage/tar" --owner=0 --group=0 --numeric-owner --sort=name -czf "$dist/$tarball" "$name"
say "wrote dist/$tarball"

# The .deb, when dpkg-deb is here.
deb=""
if command -v dpkg-deb >/dev/null 2>&1; then
  pkg="$stage/deb"
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/man/man1" "$pkg/usr/share/doc/hactl" \
    "$pkg/usr/share/bash-completion/completions" "$pkg/usr/share/zsh/vendor-completions" \
    "$pkg/usr/share/fish/vendor_completions.d"
  install -m 0755 "$bin" "$pkg/usr/bin/hactl"
  install -m 0644 "$top/completions/hactl.bash" "$pkg/usr/share/bash-completion/completions/hactl"
  install -m 0644 "$top/completions/_hactl" "$pkg/usr/share/zsh/vendor-completions/_hactl"
  install -m 0644 "$top/completions/hactl.fish" "$pkg/usr/share/fish/vendor_completions.d/hactl.fish"
  for page in "$top"/man/man1/*.1; do
    gzip -9n <"$page" >"$pkg/usr/share/man/man1/$(basename "$page").gz"
  done
  gzip -9n <CHANGELOG.md >"$pkg/usr/share/doc/hactl/changelog.gz"
  cat >"$pkg/usr/share/doc/hactl/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: hactl
License: Apache-2.0

Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
  # The shared libraries the binary links (libc, libm, libgcc_s) as package dependencies.
  depends="libc6, libgcc-s1"
  if command -v dpkg-shlibdeps >/dev/null 2>&1; then
    mkdir -p "$stage/shlibs/debian"
    printf 'Source: hactl\n\nPackage: hactl\nArchitecture: amd64\n' >"$stage/shlibs/debian/control"
    if found=$(cd "$stage/shlibs" && dpkg-shlibdeps -O "$pkg/usr/bin/hactl" 2>/dev/null); then
      depends=$(echo "$found" | sed -n 's/^shlibs:Depends=//p')
    fi
  fi
  size=$(du -sk "$pkg/usr" | cut -f1)
  cat >"$pkg/DEBIAN/control" <<CONTROL
Package: hactl
Version: $version
Architecture: amd64
Maintainer: hactl maintainers <hactl@localhost>
Installed-Size: $size
Depends: $depends
Suggests: debootstrap, systemd-container, iproute2
Section: admin
Priority: optional
Description: highly available Kubernetes control plane on hosts you own, over SSH
 hactl brings up and keeps alive etcd with TLS, HAProxy and keepalived with a
 virtual IP, kube-apiserver, kube-controller-manager and kube-scheduler on Linux
 hosts reached over SSH, from one inventory file, and recovers, replaces and
 heals etcd members within the quorum budget. The lab (hactl lab) needs
 debootstrap, systemd-container and iproute2.
CONTROL
  deb="hactl_${version}_amd64.deb"
  dpkg-deb --root-owner-group --build "$pkg" "$dist/$deb" >/dev/null
  say "wrote dist/$deb (Depends: $depends)"
else
  say "no dpkg-deb here: no .deb (scripts/install-deps.sh installs dpkg-dev)"
fi

(cd "$dist" && sha256sum "$tarball" ${deb:+"$deb"} >SHA256SUMS)
say "wrote dist/SHA256SUMS"

[ "$check" = 1 ] || exit 0

# Each artifact installed in a clean container, then `hactl --version` there.
fresh_who=release
# shellcheck source=scripts/lib/fresh-root.sh
. "$repo/scripts/lib/fresh-root.sh"
root=$(fresh_root "${fresh_prereqs[@]}") || exit 1
want=$("$bin" --version)
say "checking the artifacts in a clean $fresh_suite container (expecting: $want)"
t0=$(date +%s)
systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --volatile=overlay \
  --directory="$root" --bind-ro="$dist:/dist" --setenv=WANT="$want" --setenv=TARBALL="$tarball" \
  --setenv=DEB="$deb" --setenv=NAME="$name" \
  /bin/bash -c '
    set -euo pipefail
    cd /dist && sha256sum -c SHA256SUMS
    mkdir -p /opt/hactl && tar -xzf "/dist/$TARBALL" -C /opt/hactl
    got=$(/opt/hactl/$NAME/bin/hactl --version)
    [ "$got" = "$WANT" ] || { echo "tarball: hactl --version printed \"$got\", not \"$WANT\"" >&2; exit 1; }
    echo "tarball: $got"
    test -s /opt/hactl/$NAME/man/man1/hactl.1 && test -s /opt/hactl/$NAME/completions/hactl.bash
    if [ -n "$DEB" ]; then
      command -v hactl >/dev/null && { echo "hactl already on PATH before the .deb" >&2; exit 1; }
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "/dist/$DEB" >/dev/null
      got=$(hactl --version)
      [ "$got" = "$WANT" ] || { echo ".deb: hactl --version printed \"$got\", not \"$WANT\"" >&2; exit 1; }
      echo ".deb: $got ($(command -v hactl))"
      test -s /usr/share/man/man1/hactl.1.gz && test -s /usr/share/bash-completion/completions/hactl
      dpkg -s hactl | grep -q "^Status: install ok installed"
    fi'
say "artifacts install and run in a clean container ($(( $(date +%s) - t0 )) s)"
