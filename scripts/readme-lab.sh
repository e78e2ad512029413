#!/usr/bin/env bash
# The README's set-up command, run verbatim (CI: scripts/test.sh). The command is read from
# README.md, from the first shell block under the heading "Two commands" (any level): its first
# line that is not a comment. Nothing here repeats it, so the README and CI cannot drift apart. Then:
#   - it must exit 0 and end by showing a healthy cluster with Kubernetes: `hactl status`'s
#     `state: healthy`, a kube-apiserver row in its kubernetes table, its Nodes table with every
#     Node Ready, and `ok` from /readyz through the VIP;
#   - the lab is removed again (`hactl lab down --name <its name>`), whatever happened.
# Run from the repository's root as root (the lab needs it), with the Kubernetes binaries and the
# lab's base image cached or not (the command builds what is missing). Prints its time.
#
#   scripts/readme-lab.sh            run it
#   scripts/readme-lab.sh --print    only print the command (fails, saying why, when the README
#                                    has no such block)
# Environment: HACTL_README (default README.md), for tests.
set -euo pipefail
cd "$(dirname "$0")/.."
readme=${HACTL_README:-README.md}
say() { echo "readme-lab: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# The command: under the heading `Two commands`, the first ```sh block, its first non-comment line.
[ -f "$readme" ] || fail "no $readme"
command=$(awk '
  in_block && /^```/ { exit }
  in_block && !/^[[:space:]]*(#|$)/ { print; exit }
  in_block { next }
  /^#+ / { section = ($0 ~ /^#+ Two commands[[:space:]]*$/); next }
  section && /^```(sh|bash|console)?[[:space:]]*$/ { in_block = 1 }' "$readme")
if [ -z "$command" ]; then
  fail "$readme has no shell block with a command under the heading \"Two commands\": the README's set-up command cannot be found (keep the heading and the block, or change scripts/readme-lab.sh with them)"
fi
case "$command" in
  *" lab up"*) ;;
  *) fail "the first command under \"Two commands\" in $readme does not bring up a lab (\`lab up\`): \"$command\"" ;;
esac
if [ "${1:-}" = --print ]; then
  echo "$command"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: scripts/readme-lab.sh [--print]" >&2; exit 64; }
[ "$(id -u)" = 0 ] || fail "run it as root (the lab boots hosts with systemd-nspawn)"

# The lab's name: the command's --name, else the CLI's default.
name=hactl
if [[ $command =~ --name[=[:space:]]+([a-z0-9-]+) ]]; then
  name=${BASH_REMATCH[1]}
fi
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
log=$(mktemp "${TMPDIR:-/tmp}/hactl-readme-lab.XXXXXX")
down() {
  local rc=$?
  if [ -x "$target_dir/release/hactl" ]; then
    "$target_dir/release/hactl" lab down --name "$name" >&2 || { say "lab down --name $name failed"; rc=1; }
  fi
  rm -f "$log"
  exit $rc
}
trap down EXIT

say "from $readme: $command"
started=$(date +%s)
status=0
bash -c "$command" 2>&1 | tee "$log" || status=$?
took=$(( $(date +%s) - started ))
[ "$status" = 0 ] || fail "the README's command exited $status after $took s"
missing=()
grep -qx 'state: healthy' "$log" || missing+=("\`state: healthy\` from hactl status")
grep -qE '^[^[:space:]]+[[:space:]]+kube-apiserver[[:space:]]' "$log" || missing+=("a kube-apiserver row in the kubernetes table")
grep -qx 'ok' "$log" || missing+=("\`ok\` from /readyz through the VIP")
# The Nodes table: every Node the command brought up Ready (a control-plane host's kubelet, and
# each worker's), none NotReady.
grep -qE '^NODE[[:space:]]+READY' "$log" || missing+=("the Nodes table of hactl status")
grep -qE '^[^[:space:]]+[[:space:]]+True[[:space:]]+v[0-9]' "$log" || missing+=("a Ready Node")
if grep -qE '^[^[:space:]]+[[:space:]]+(False|Unknown)[[:space:]]+v[0-9]' "$log"; then missing+=("every Node Ready"); fi
[ ${#missing[@]} = 0 ] || fail "the README's command exited 0 after $took s, but its output lacks: $(IFS=';'; echo "${missing[*]}")"
say "passed: a healthy lab with Kubernetes and Ready Nodes in $took s; removing lab $name"
