#!/bin/sh
# Builds an etcd bundle directory (etcd, etcdctl, etcdutl) for `etcd.source: {bundle: DIR}` from a
# Debian suite's etcd-server and etcd-client packages, without touching the machine's own apt state.
#
#   scripts/etcd-bundle.sh VERSION SUITE [DIR]
#     VERSION  the etcd version the binaries must report (e.g. 3.5.16)
#     SUITE    the Debian suite whose packages carry it (e.g. trixie)
#     DIR      where the bundle goes (default /var/cache/hactl/etcd/VERSION); reused when it
#              already holds binaries of VERSION
#
# The mirror is the one the machine's own apt sources name (or HACTL_DEBIAN_MIRROR: see
# scripts/lib/debian-mirror.sh); apt runs with a private sources list, lists and cache under
# DIR.work, so the machine's apt sources stay as they were.
set -eu
version=${1:?usage: etcd-bundle.sh VERSION SUITE [DIR]}
suite=${2:?usage: etcd-bundle.sh VERSION SUITE [DIR]}
dir=${3:-/var/cache/hactl/etcd/$version}

have() { [ -x "$dir/etcd" ] && "$dir/etcd" --version 2>/dev/null | head -n1 | grep -qx "etcd Version: $version"; }
if have && [ -x "$dir/etcdctl" ]; then echo "$dir"; exit 0; fi

# shellcheck source=scripts/lib/debian-mirror.sh
. "$(dirname "$0")/lib/debian-mirror.sh"
mirror=$(debian_mirror) || { echo "etcd-bundle: no Debian archive to fetch from (above)" >&2; exit 1; }

work=$dir.work
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" > "$work/sources.list"
apt_opts="-o Dir::Etc::sourcelist=$work/sources.list -o Dir::Etc::sourceparts=- \
 -o Dir::State::Lists=$work/lists -o Dir::Cache=$work/cache -o APT::Get::List-Cleanup=0 \
 -o Debug::NoLocking=1 -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get -q $apt_opts update >&2
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get -q $apt_opts download etcd-server etcd-client >&2)
x=$work/x
rm -rf "$x"; mkdir -p "$x"
for deb in "$work"/debs/etcd-server_*.deb "$work"/debs/etcd-client_*.deb; do dpkg-deb -x "$deb" "$x"; done
mkdir -p "$dir"
for b in etcd etcdctl etcdutl; do
  src=$x/usr/bin/$b; [ -f "$src" ] || src=
  if [ -n "$src" ]; then install -m 0755 "$src" "$dir/$b.part" && mv "$dir/$b.part" "$dir/$b"; fi
done
if ! have; then
  echo "etcd-bundle: $suite's etcd-server carries $("$dir/etcd" --version 2>/dev/null | head -n1), not etcd $version" >&2
  exit 1
fi
echo "$dir"
