#!/usr/bin/env bash
# Benchmark: rotating the etcd CA of a 3-member cluster with `hactl certs rotate-ca etcd`, beside
# the same steps by hand on a second lab of the same kind, in the same run:
#   floor = a plain script with openssl and OpenSSH: a new CA; every host's trust file holds old
#           and new, roll; every leaf (3 server, 3 peer, the client) re-issued from the new CA with
#           its key kept and uploaded, roll; the trust file holds the new CA alone, roll. A roll is
#           one member at a time, the leader last: wait for cluster health, move leadership off the
#           member when it leads, restart it, wait until it is healthy.
# hactl does the same and more: each step is journaled with a postcondition read back (a crash
# resumes), each roll is `up`'s plan built from the facts of every host (only what changed
# restarts), and it checks the result (`plan` says no changes). Both sides are then checked alike:
# the old CA's client certificate is refused and the new CA's accepted.
# Labs have no load balancers, so neither side drains HAProxy. Needs root.
# Usage: sudo bench/rotate_ca.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

labs=${HACTL_LAB_DIR:-/var/lib/hactl-lab}/labs
a="brot-a-$$"; b="brot-b-$$"
work=$(mktemp -d)
trap 'for c in "$work"/cm-*; do [ -S "$c" ] && ssh -o ControlPath="$c" -O exit x 2>/dev/null; done; "$HACTL" lab down --name "$a" >/dev/null 2>&1 || true; "$HACTL" lab down --name "$b" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
for lab in "$a" "$b"; do
  "$HACTL" lab up --no-kubernetes --name "$lab" --suite bookworm --control-planes 3 --load-balancers 0 --out "$work/$lab.yaml" >/dev/null 2>&1
  HACTL_STATE_DIR="$work/state-$lab" "$HACTL" up -i "$work/$lab.yaml" --yes >/dev/null 2>&1
done

# The old CA's client certificate, to check afterwards that it is refused.
old_client() { local s=$1; cp "$s/pki/etcd/ca.crt" "$s/old-ca.crt"; cp "$s/pki/etcd/hactl-client.crt" "$s/old-client.crt"; cp "$s/pki/etcd/hactl-client.key" "$s/old-client.key"; }
old_client "$work/state-$a"; old_client "$work/state-$b"

# hactl.
t=$(now)
HACTL_STATE_DIR="$work/state-$a" "$HACTL" certs rotate-ca etcd -i "$work/$a.yaml" --yes >/dev/null 2>&1
hactl_time=$(since "$t")
[ "$(HACTL_STATE_DIR="$work/state-$a" "$HACTL" plan -i "$work/$a.yaml" 2>/dev/null)" = "no changes" ] \
  || { echo "hactl's rotation left changes" >&2; exit 1; }

# The floor on the other lab.
inv="$work/$b.yaml"
pki="$work/state-$b/pki/etcd"
key="$labs/$b/id_ed25519"
mapfile -t ips < <(sed -n 's/^ *address: "\{0,1\}\([0-9.]*\)"\{0,1\}$/\1/p' "$inv")
mapfile -t names < <(sed -n 's/^ *- *name: "\{0,1\}\([a-z0-9-]*\)"\{0,1\}$/\1/p' "$inv")
[ "${#ips[@]}" = 3 ] && [ "${#names[@]}" = 3 ] || { echo "could not read 3 hosts from $inv" >&2; exit 1; }
# One multiplexed connection per host (ControlMaster), as hactl keeps one: the floor pays no
# handshake per command.
ssh_to() { ssh -i "$key" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes \
  -o ControlMaster=auto -o ControlPath="$work/cm-%h" -o ControlPersist=120 "root@$1" "${@:2}"; }
put() { ssh_to "$1" "cat > $2.new && chmod 644 $2.new && mv $2.new $2" < "$3"; }
ctl=/usr/local/sbin/hactl-etcdctl
d=/etc/hactl/pki/etcd
roll() {
  local ip leader_ip="" st me l order=()
  for ip in "${ips[@]}"; do
    st=$(ssh_to "$ip" "$ctl endpoint status -w json")
    me=$(grep -o '"member_id":[0-9]*' <<<"$st" | cut -d: -f2); l=$(grep -o '"leader":[0-9]*' <<<"$st" | cut -d: -f2)
    if [ "$me" = "$l" ]; then leader_ip=$ip; fi
  done
  for ip in "${ips[@]}"; do [ "$ip" = "$leader_ip" ] || order+=("$ip"); done
  order+=("$leader_ip")
  for ip in "${order[@]}"; do
    until ssh_to "$ip" "$ctl endpoint health --cluster" >/dev/null 2>&1; do sleep 0.05; done
    ssh_to "$ip" /usr/local/sbin/hactl-etcd-member step-down >/dev/null
    ssh_to "$ip" systemctl restart etcd
    until ssh_to "$ip" "$ctl endpoint health" >/dev/null 2>&1; do sleep 0.05; done
  done
}
# sign NAME CN EKU SAN: a new certificate for the state dir's key NAME.key from the new CA.
sign() {
  local ext="$work/ext"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n' "$3" >"$ext"
  [ -z "$4" ] || echo "subjectAltName=$4" >>"$ext"
  openssl req -new -key "$pki/$1.key" -subj "/CN=$2" -out "$work/req" 2>/dev/null
  openssl x509 -req -in "$work/req" -CA "$work/ca-new.crt" -CAkey "$work/ca-new.key" -CAcreateserial \
    -days 365 -extfile "$ext" -out "$work/$1.crt" 2>/dev/null
}
for ip in "${ips[@]}"; do ssh_to "$ip" true; done   # the connections, opened before the clock starts
t=$(now)
# 1. trust old and new, roll.
openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
  -subj "/CN=etcd-ca-by-hand" -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout "$work/ca-new.key" -out "$work/ca-new.crt" 2>/dev/null
cat "$pki/ca.crt" "$work/ca-new.crt" >"$work/trust-both.crt"
for ip in "${ips[@]}"; do put "$ip" "$d/ca.crt" "$work/trust-both.crt" & done; wait
roll
# 2. re-issue every leaf from the new CA (keys kept), 3. roll.
for i in 0 1 2; do
  n=${names[$i]} ip=${ips[$i]}
  sign "server-$n" "$n" serverAuth,clientAuth "IP:$ip,DNS:$n,DNS:localhost,IP:127.0.0.1,IP:::1"
  sign "peer-$n" etcd-peer serverAuth,clientAuth "IP:$ip,DNS:$n,DNS:localhost,IP:127.0.0.1,IP:::1"
done
sign hactl-client hactl clientAuth ""
for i in 0 1 2; do
  n=${names[$i]} ip=${ips[$i]}
  ( put "$ip" "$d/server.crt" "$work/server-$n.crt"; put "$ip" "$d/peer.crt" "$work/peer-$n.crt"
    put "$ip" "$d/client.crt" "$work/hactl-client.crt" ) &
done
wait
roll
# 4. trust only the new, 5. roll again.
for ip in "${ips[@]}"; do put "$ip" "$d/ca.crt" "$work/ca-new.crt" & done; wait
roll
floor=$(since "$t")

# Both sides: the old CA's client certificate is refused, the new CA's accepted.
check() { # STATE_DIR NEW_CA NEW_CERT NEW_KEY IP
  local s=$1 url="https://$5:2379/health"
  if curl -sf --max-time 5 --cacert "$s/old-ca.crt" --cert "$s/old-client.crt" --key "$s/old-client.key" "$url" >/dev/null 2>&1; then
    echo "$s: the old CA's client certificate still passes at $url" >&2; exit 1
  fi
  curl -sf --max-time 5 --cacert "$2" --cert "$3" --key "$4" "$url" | grep -q '"health":"true"' \
    || { echo "$s: the new CA's client certificate does not pass at $url" >&2; exit 1; }
}
ip_a=$(sed -n 's/^ *address: "\{0,1\}\([0-9.]*\)"\{0,1\}$/\1/p' "$work/$a.yaml" | head -n1)
sa="$work/state-$a/pki/etcd"
check "$work/state-$a" "$sa/ca.crt" "$sa/hactl-client.crt" "$sa/hactl-client.key" "$ip_a"
check "$work/state-$b" "$work/ca-new.crt" "$work/hactl-client.crt" "$pki/hactl-client.key" "${ips[0]}"

printf 'etcd CA rotation, 3 members (trust both, re-issue, roll x3): hactl %ss, by hand %ss (%sx)\n' \
  "$hactl_time" "$floor" "$(ratio "$hactl_time" "$floor")"
