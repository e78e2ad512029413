#!/usr/bin/env bash
# Installs what building, testing and running hactl's lab needs on a fresh Debian machine.
# Idempotent. Works as root, or as a user with sudo; otherwise it names what to install.
#   protobuf-compiler, libprotobuf-dev   etcd-client's build script runs protoc, which needs the
#                                        well-known .proto files (google/protobuf/*.proto)
#   gcc, libc6-dev, pkg-config, make     C parts of crates (aws-lc-sys)
#   debootstrap, systemd-container, iproute2   the lab (systemd-nspawn hosts on a private bridge)
#   openssh-server, openssh-client, sudo       the SSH transport's loopback tests (incl. sudo -n)
#   rsync, dpkg-dev, xz-utils, curl            building the Kubernetes server binaries
#                                              (scripts/kube-binaries.sh: apt-get source, make gen_openapi)
#   ca-certificates, git                       TLS to the package archives; --version names the commit
#   jq, bc                                     the bench scripts (bench/), which the lab tests run
# The lab's base image (Debian with etcd, HAProxy, keepalived) is built by `hactl lab up` itself,
# once per suite, and cached under /var/lib/hactl-lab/base.
set -euo pipefail
pkgs=(protobuf-compiler libprotobuf-dev gcc libc6-dev pkg-config make
      debootstrap systemd-container iproute2
      openssh-server openssh-client sudo
      rsync dpkg-dev xz-utils curl ca-certificates git
      jq bc)

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: this is not a Debian-based machine (no dpkg/apt-get)." >&2
  echo "install-deps: install the equivalents of these Debian packages by hand: ${pkgs[*]}" >&2
  exit 1
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all present"
  exit 0
fi

if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -E)
else
  echo "install-deps: missing ${missing[*]}" >&2
  echo "install-deps: not root and no sudo; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
install() {
  "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
if ! install; then
  # e.g. sudo refused this user (not in sudoers, no terminal for the password) or apt failed.
  how=${as_root[*]:-as root}
  echo "install-deps: installing failed ($how: see above); as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
