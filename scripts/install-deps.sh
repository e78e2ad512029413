#!/usr/bin/env bash
# Installs what building and testing hactl needs on a fresh Debian machine (idempotent; needs root).
#   protobuf-compiler        etcd-client's build script runs protoc
#   debootstrap, systemd-container, iproute2   the lab (systemd-nspawn hosts on a private bridge)
#   openssh-server, openssh-client, sudo       the SSH transport's loopback tests (incl. sudo -n)
# The lab's base image (Debian with etcd, HAProxy, keepalived) is built by `hactl lab up` itself,
# once per suite, and cached under /var/lib/hactl-lab/base.
set -euo pipefail
pkgs=(protobuf-compiler debootstrap systemd-container iproute2 openssh-server openssh-client sudo ca-certificates)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
