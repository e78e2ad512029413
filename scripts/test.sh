#!/usr/bin/env bash
# The test command (README, CI: .ci/run), in stages. Each stage runs alone and installs or builds
# what it needs itself (on a fresh machine too):
#
#   scripts/test.sh                every stage
#   scripts/test.sh STAGE...       those stages, in the order below (e.g. `scripts/test.sh lint unit`)
#
#   lint     cargo fmt --check, cargo clippy --all-targets -D warnings, cargo-deny (deny-check.sh)
#   unit     every test binary but etcd_labs, kube_labs and vagrant, under cargo-nextest
#   lab      the lab tests (etcd_labs, kube_labs) under cargo-nextest, then check-skips.sh on them
#   fresh    the fresh-machine check (scripts/fresh-machine-check.sh)
#   release  the README's lab command, verbatim (scripts/readme-lab.sh), and the release artifacts
#            installed in clean containers (scripts/release.sh --check)
#   vagrant  the Vagrant lab on real VMs (tests/vagrant.rs: scripts/vagrant-lab.sh), alone, last
#
# Each stage prints its time; a table of every stage and preparation (seconds, result) ends the
# run. A failed stage fails the run, and the stages after it still run. Exit 64: an unknown stage.
#
# Lab tests boot real hosts with systemd-nspawn and need root. Run as root, a test that skips fails
# the run (scripts/check-skips.sh: only a skip naming a limit of the machine passes), the lab and
# Kubernetes tests included: they run with real kube-apiserver, kube-controller-manager and
# kube-scheduler, built once into /var/cache/hactl/kubernetes/<version> by scripts/kube-binaries.sh
# (about 8 minutes of both cores; at once when the cache is complete) and named by
# HACTL_KUBE_BIN_DIR.
#
# What the stages need is prepared once, as soon as it can be: what waits on the network or the
# disk runs in the background (as root) while the first stages compile and test: the Kubernetes
# binaries and node images, the lab's base images (`hactl lab image`, once the hactl binary is
# built), the fresh-machine root, and the Vagrant packages and box. Nothing runs beside the lab
# tests or the Vagrant lab at normal priority: both wait for every preparation still under way
# first (the lab tests are timing-sensitive: etcd's fsyncs, keepalived's and the tests' deadlines
# on 2 cores). The release build alone starts as the lab tests do, at idle priority (nice 19, idle
# I/O class): it takes only the CPU they leave, and the release stage waits for the rest of it.
# HACTL_TEST_OVERLAP=1 (not CI's default) also starts the release build and cargo-deny's install at
# once at idle priority (nice 19, idle I/O class), and runs `lint` (its clippy shares target/debug
# with the test build, so it waits until the lab tests have started) and `fresh` at idle priority
# beside the lab tests: faster, but CPU-heavy work beside the lab tests. Every background job's
# time is printed, and its failure fails the run with its log shown. The Vagrant lab always runs
# alone, at the end: it needs most of the machine (it failed once with lab tests beside it), and
# the machine is bound by CPU in every stage (the CPU share printed for each stage, and every 30 s,
# says so: 99 % busy in the lab stage), so running it beside the Kubernetes lanes' end saved
# nothing (measured 2026-11-26: the whole run 2556 s, against 2510 s alone).
#
# Environment: HACTL_TEST_THREADS (cargo-nextest's test threads, default 4), HACTL_VAGRANT=0 (leave
# the Vagrant lab out of a local run, saying so; CI sets nothing), HACTL_TEST_OVERLAP=1 (above),
# HACTL_KUBE_BIN_DIR (use these Kubernetes binaries instead of building them).
set -euo pipefail
cd "$(dirname "$0")/.."

all_stages=(lint unit lab fresh release vagrant)
usage() {
  echo "usage: scripts/test.sh [STAGE...]   (none: all of them)"
  echo "stages, run in this order: ${all_stages[*]}"
}
declare -A wanted=()
for arg in "$@"; do
  case "$arg" in
    -h | --help) usage; exit 0 ;;
  esac
  case " ${all_stages[*]} " in
    *" $arg "*) wanted[$arg]=1 ;;
    *) echo "test.sh: unknown stage \"$arg\"" >&2; usage >&2; exit 64 ;;
  esac
done
stages=()
for s in "${all_stages[@]}"; do
  if [ $# -eq 0 ] || [ -n "${wanted[$s]:-}" ]; then stages+=("$s"); fi
done

say() { echo "test.sh: $*"; }
selected() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
if selected vagrant && [ "${HACTL_VAGRANT:-1}" = 0 ]; then
  say "the Vagrant lab is left out (HACTL_VAGRANT=0)"
  mapfile -t stages < <(printf '%s\n' "${stages[@]}" | grep -vx vagrant)
fi
root=0
[ "$(id -u)" = 0 ] && root=1
# As root (CI), cargo's target dir is kept across runs in /var/cache/hactl/cargo-target, like the
# Kubernetes binaries: a clean checkout then compiles only hactl itself, not its ~300 dependencies
# again (the release build alone took 498 s of a CI run). Cargo still rebuilds whatever changed;
# a cold machine builds everything, and the fresh stage checks a cold build in a fresh container.
# CARGO_TARGET_DIR set by the caller wins.
if [ "$root" = 1 ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR=/var/cache/hactl/cargo-target
  mkdir -p "$CARGO_TARGET_DIR"
fi
target_dir=${CARGO_TARGET_DIR:-$PWD/target}
threads=${HACTL_TEST_THREADS:-4}
overlap=0
if selected lab && [ "${#stages[@]}" -gt 1 ] && [ "${HACTL_TEST_OVERLAP:-0}" = 1 ]; then overlap=1; fi

run=$(mktemp -d "${TMPDIR:-/tmp}/hactl-test.XXXXXX")
jobs_dir=$run/jobs
mkdir -p "$jobs_dir"
run_started=$(date +%s)
say "stages: ${stages[*]} (logs in $run)"

# ── jobs: preparations and stages, in the foreground or in the background ───────────────────────
# A job NAME leaves in $jobs_dir: NAME.started, NAME.pid, and at its end NAME.done ("<exit> <s>").
# Its output: the terminal in the foreground, $run/NAME.log in the background.

# job_bg NAME normal|idle COMMAND...: runs COMMAND (a function) in the background, in a process
# group of its own (job control on for that one `&`), so that an interrupted run can stop it whole.
job_bg() {
  local name=$1 level=$2
  shift 2
  : >"$jobs_dir/$name.started"
  : >"$jobs_dir/$name.bg"
  set -m
  (
    set +e
    if [ "$level" = idle ]; then
      renice -n 19 -p "$BASHPID" >/dev/null
      ionice -c 3 -p "$BASHPID" 2>/dev/null
    fi
    t0=$(date +%s)
    (set -e; "$@")
    rc=$?
    echo "$rc $(($(date +%s) - t0))" >"$jobs_dir/$name.done.tmp"
    mv "$jobs_dir/$name.done.tmp" "$jobs_dir/$name.done"
  ) </dev/null >"$run/$name.log" 2>&1 &
  echo $! >"$jobs_dir/$name.pid"
  set +m
  say "$name: started in the background$([ "$level" = idle ] && echo ' at idle priority') (log: $run/$name.log)"
}

# attempt COMMAND...: runs COMMAND (a function) with errexit in force within it, and puts its exit
# status into $status; returns 0. (Bash ignores errexit all the way down a function called from
# `if`, `while`, `||` or `&&`: so functions that run steps are only ever called as plain commands,
# through this.)
attempt() {
  set +e
  (set -e; "$@")
  status=$?
  set -e
}

# job_fg NAME COMMAND...: runs COMMAND (a function) here, timed; its exit status into $status.
job_fg() {
  local name=$1 t0
  shift
  : >"$jobs_dir/$name.started"
  echo "$BASHPID" >"$jobs_dir/$name.pid"
  t0=$(date +%s)
  attempt "$@"
  echo "$status $(($(date +%s) - t0))" >"$jobs_dir/$name.done"
}

# job_wait NAME: waits for a job started here or elsewhere; prints its time, and its log when it
# failed (once). Returns its exit status.
job_wait() {
  local name=$1 rc secs pid
  while [ ! -e "$jobs_dir/$name.done" ]; do
    pid=$(cat "$jobs_dir/$name.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && [ ! -e "$jobs_dir/$name.done" ]; then
      echo "1 0" >"$jobs_dir/$name.done"
      echo "(the job ended without recording its status)" >>"$run/$name.log"
    fi
    sleep 2
  done
  read -r rc secs <"$jobs_dir/$name.done"
  if [ "$rc" = 0 ]; then
    say "$name: done in $secs s"
  elif [ -e "$run/$name.log" ] && mkdir "$jobs_dir/$name.shown" 2>/dev/null; then
    say "$name: FAILED (exit $rc) after $secs s; its log ($run/$name.log):"
    sed 's/^/  | /' "$run/$name.log"
  else
    say "$name: FAILED (exit $rc) after $secs s"
  fi
  return "$rc"
}

# need NAME: the preparation NAME (function prep_NAME) done: waits for it when it was started,
# runs it here otherwise. Returns 1 when it failed (a plain command in a stage: that stops it).
need() {
  local name=$1
  if [ -e "$jobs_dir/$name.started" ]; then
    job_wait "$name" || { say "$name failed (above): what needs it cannot run"; return 1; }
  else
    say "$name: preparing"
    job_fg "$name" "prep_$name"
    if [ "$status" != 0 ]; then
      say "$name failed (above, exit $status)"
      return 1
    fi
    say "$name: done in $(cut -d' ' -f2 "$jobs_dir/$name.done") s"
  fi
}

# ── preparations: each is cached, and returns at once when there is nothing to do ───────────────
prep_deps() { scripts/install-deps.sh; }
prep_nextest() {
  # cargo-nextest runs every test in its own process, side by side across the test binaries and
  # within them (cargo test runs the binaries one after another).
  command -v cargo-nextest >/dev/null 2>&1 || cargo install --locked cargo-nextest
}
prep_deny_tool() { scripts/deny-check.sh --install-only; }
prep_hactl() { cargo build --locked --bin hactl; }
prep_image_trixie() { need hactl; "$target_dir/debug/hactl" lab image --suite trixie; }
prep_image_bookworm() { need hactl; "$target_dir/debug/hactl" lab image --suite bookworm; }
prep_release_build() { cargo build --release --locked; }
prep_fresh_root() { scripts/fresh-machine-check.sh --prepare; }
prep_vagrant() {
  local rc=0
  scripts/vagrant-lab.sh --prepare || rc=$?
  # 77: the lab skips on this machine (it says why); the vagrant stage says so again.
  [ "$rc" = 0 ] || [ "$rc" = 77 ]
}
# The Kubernetes binaries (scripts/kube-binaries.sh) and the node images packed from them
# (scripts/node-images.sh); their directory goes to $run/kube-bin-dir.
prep_kube() {
  local dir=${HACTL_KUBE_BIN_DIR:-}
  [ -n "$dir" ] || dir=$(scripts/kube-binaries.sh | tail -n1)
  HACTL_KUBE_BIN_DIR=$dir scripts/node-images.sh >/dev/null
  echo "$dir" >"$run/kube-bin-dir"
  echo "Kubernetes binaries in $dir"
}
# quiet_machine WHAT: waits for every preparation still running in the background (their results
# count at the end of the run), so that WHAT runs with nothing beside it.
quiet_machine() {
  local f name waited=0
  for f in "$jobs_dir"/*.bg; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .bg)
    case "$name" in stage-*) continue ;; esac
    [ -e "$jobs_dir/$name.done" ] && continue
    [ "$waited" = 1 ] || say "before $1: waiting for the preparations still running (nothing runs beside them)"
    waited=1
    job_wait "$name" || true
  done
}
need_kube() {
  # Explicit returns: bash ignores errexit inside a function called from `||` or `if`.
  need kube || return 1
  HACTL_KUBE_BIN_DIR=$(cat "$run/kube-bin-dir") || return 1
  export HACTL_KUBE_BIN_DIR
}

# ── stages ───────────────────────────────────────────────────────────────────────────────────
nextest_run() { # nextest_run LOG ARGS...: cargo-nextest with this suite's settings, output to LOG too
  local log=$1
  shift
  # --success-output prints what passing tests wrote, so their SKIPPED lines reach the log;
  # --failure-output immediate-final prints a failed try's output when it fails, and again at the
  # end. (The crate has no doc tests.)
  cargo nextest run --locked --no-fail-fast --test-threads="$threads" \
    --success-output final --failure-output immediate-final "$@" 2>&1 | tee "$log"
}
unit_filter='not (binary(etcd_labs) | binary(kube_labs) | binary(vagrant))'
lab_args=(--test etcd_labs --test kube_labs)

stage_lint() {
  need deps
  cargo fmt --all -- --check
  cargo clippy --all-targets --locked -- -D warnings
  # Dependencies (deny.toml): advisories, bans, sources; an advisory deny.toml does not answer fails
  # the run. The advisory database comes from the network, else from ../shared/advisory-db.tar.gz;
  # with neither the advisories check does not run and says so (CI, through .ci/run, fails then).
  need deny_tool
  scripts/deny-check.sh
}

stage_unit() {
  need deps
  need nextest
  cargo nextest run --locked --no-run -E "$unit_filter"
  # tests/kubernetes_bundle.rs checks bundles made of the real binaries.
  if [ "$root" = 1 ]; then need_kube; fi
  nextest_run "$run/unit.out" -E "$unit_filter"
  scripts/check-skips.sh "$run/unit.out"
}

stage_lab() {
  need deps
  need nextest
  cargo nextest run --locked --no-run "${lab_args[@]}"
  if [ "$root" = 1 ]; then
    need_kube
    need image_trixie
    need image_bookworm
  fi
  [ "$overlap" = 1 ] || quiet_machine "the lab tests"
  # The release stage's build (cold on a fresh machine: 500-1100 s in CI runs, on the critical
  # path when it ran after the lab tests) starts now at idle priority: it gets only the CPU the
  # lab tests leave (their waits on timers and the network), and the release stage waits for
  # what is left of it.
  if selected release && [ ! -e "$jobs_dir/release_build.started" ]; then
    job_bg release_build idle prep_release_build
  fi
  local pid rc=0
  nextest_run "$run/lab.out" "${lab_args[@]}" &
  pid=$!
  # What runs beside the lab tests starts once they have (their build is done: clippy may take
  # target/debug then).
  if [ "$overlap" = 1 ]; then
    while kill -0 "$pid" 2>/dev/null && ! grep -qE '^ *Starting [0-9]+ tests?' "$run/lab.out" 2>/dev/null; do
      sleep 2
    done
    beside_lab
  fi
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { say "the lab tests failed (exit $rc)"; }
  # As root, any skipped test fails the run, unless it says the machine itself cannot run it.
  scripts/check-skips.sh "$run/lab.out"
  return "$rc"
}

stage_fresh() {
  need deps
  if [ "$root" = 0 ]; then
    say "the fresh-machine check is not run: it needs root (debootstrap, systemd-nspawn)"
    return 0
  fi
  need fresh_root
  # A fresh Debian root with only the README's build-machine prerequisites: install-deps.sh and
  # vagrant-deps.sh, then cargo check (fails when install-deps.sh misses a package).
  scripts/fresh-machine-check.sh
}

stage_release() {
  need deps
  need release_build
  if [ "$root" = 0 ]; then
    say "the README's command and the artifacts' check are not run: they need root (a lab, containers); building the artifacts only"
    scripts/release.sh
    return 0
  fi
  need_kube
  need image_trixie
  need fresh_root
  local t0
  # The README's set-up command, verbatim as README.md has it (scripts/readme-lab.sh reads it from
  # there), through to a healthy lab with Kubernetes, then `lab down`. Its `cargo run --release`
  # is the release build the artifact check below uses too, so that build happens once.
  t0=$(date +%s)
  scripts/readme-lab.sh
  say "the README's command took $(($(date +%s) - t0)) s"
  # The release artifacts (tarball, .deb), each installed in a clean container: hactl --version.
  t0=$(date +%s)
  scripts/release.sh --check
  say "the release check took $(($(date +%s) - t0)) s"
}

stage_vagrant() {
  need deps
  if [ "$root" = 1 ]; then need vagrant; fi
  quiet_machine "the Vagrant lab"
  # The Vagrant lab (real VMs under libvirt, tests/vagrant.rs: scripts/vagrant-lab.sh): 3 emulated
  # VMs, `hactl check`, `up`, `status`, a second `plan`, a recreated VM's new host key refused,
  # then `vagrant destroy`; and the binary's quick refusals. Without root it skips; as root only
  # where the machine cannot run it (no /dev/net/tun).
  cargo test --locked --test vagrant -- --include-ignored --nocapture 2>&1 | tee "$run/vagrant.out"
  scripts/check-skips.sh "$run/vagrant.out"
}

# Beside the lab tests (overlap): lint and fresh at idle priority; the release build is already
# under way.
beside_lab() {
  local s
  for s in lint fresh; do
    if selected "$s"; then job_bg "stage-$s" idle "stage_$s"; fi
  done
}

# ── the run ──────────────────────────────────────────────────────────────────────────────────
declare -A result=() seconds=()
# On the way out (an interrupted run): every background job still running, with its children.
stop_jobs() {
  local f pid
  for f in "$jobs_dir"/*.bg; do
    [ -e "$f" ] || continue
    [ -e "${f%.bg}.done" ] && continue
    pid=$(cat "${f%.bg}.pid" 2>/dev/null) || continue
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
}
trap 'stop_jobs; [ -z "${sampler_pid:-}" ] || kill "$sampler_pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cpu_ticks: the machine's CPU time so far, in ticks: "busy iowait total" (/proc/stat's cpu line).
cpu_ticks() {
  awk '$1 == "cpu" { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, $6, t; exit }' /proc/stat
}
# cpu_share BEFORE: the share of the machine's CPU that was busy, and waiting for I/O, since BEFORE
# (a cpu_ticks reading). A stage that kept every core busy is bound by CPU: more lanes would not
# make it faster, less work would.
cpu_share() {
  local b0 w0 t0 b1 w1 t1
  read -r b0 w0 t0 <<<"$1"
  read -r b1 w1 t1 < <(cpu_ticks)
  [ "$t1" -gt "$t0" ] || { echo "CPU not measured"; return 0; }
  echo "CPU $(((b1 - b0) * 100 / (t1 - t0))) % busy, $(((w1 - w0) * 100 / (t1 - t0))) % waiting for I/O"
}
# A stage in the foreground: its time and result.
run_stage() {
  local s=$1 cpu0
  # The machine's load as the stage starts: a slow stage on a machine busy with something else
  # (a Vagrant run once found its VMs 10 times slower than usual) shows it here.
  say "── stage $s ── (load average $(cut -d' ' -f1-3 /proc/loadavg), $(awk '/MemAvailable/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) available)"
  cpu0=$(cpu_ticks)
  job_fg "stage-$s" "stage_$s"
  read -r _ seconds[$s] <"$jobs_dir/stage-$s.done"
  if [ "$status" = 0 ]; then result[$s]=passed; else result[$s]="FAILED (exit $status)"; fi
  say "stage $s: ${result[$s]} in ${seconds[$s]} s ($(cpu_share "$cpu0"))"
}
# A stage that ran in the background: its log, time and result.
collect_stage() {
  local s=$1 rc=0
  job_wait "stage-$s" >/dev/null || rc=$?
  say "── stage $s (ran in the background) ──"
  sed 's/^/  | /' "$run/stage-$s.log"
  read -r _ seconds[$s] <"$jobs_dir/stage-$s.done"
  if [ "$rc" = 0 ]; then result[$s]=passed; else result[$s]="FAILED (exit $rc)"; fi
  say "stage $s: ${result[$s]} in ${seconds[$s]} s"
}

# The machine's CPU every 30 s, to $run/cpu.log (seconds into the run, busy and I/O-wait shares,
# load average): where a stage was bound by CPU, and where it left cores idle.
cpu_sampler() {
  local prev now
  prev=$(cpu_ticks)
  while sleep 30; do
    now=$(cpu_ticks)
    echo "$(($(date +%s) - run_started)) s: $(cpu_share "$prev"), load $(cut -d' ' -f1 /proc/loadavg)"
    prev=$now
  done
}
cpu_sampler >"$run/cpu.log" 2>&1 &
sampler_pid=$!
failed=0
attempt need deps
[ "$status" = 0 ] || failed=1
if [ "$failed" = 0 ] && [ "$root" = 1 ]; then
  # What waits on the network, the disk or one core, first, in the background.
  if selected unit || selected lab || selected release; then job_bg kube normal prep_kube; fi
  if selected fresh || selected release; then job_bg fresh_root normal prep_fresh_root; fi
  if selected vagrant; then job_bg vagrant normal prep_vagrant; fi
fi
if [ "$failed" = 0 ] && [ "$overlap" = 1 ]; then
  if selected release; then job_bg release_build idle prep_release_build; fi
  if selected lint; then job_bg deny_tool idle prep_deny_tool; fi
fi
if [ "$failed" = 0 ] && [ "$root" = 1 ] && { selected lab || selected release; }; then
  # The base images need the hactl binary: it is built first.
  attempt need hactl
  if [ "$status" = 0 ]; then
    job_bg image_trixie normal prep_image_trixie
    if selected lab; then job_bg image_bookworm normal prep_image_bookworm; fi
  fi
fi

for s in "${stages[@]}"; do
  if [ "$overlap" = 1 ] && { [ "$s" = lint ] || [ "$s" = fresh ]; }; then
    continue # beside the lab tests
  fi
  run_stage "$s"
  if [ "$s" = lab ] && [ "$overlap" = 1 ]; then
    for b in lint fresh; do
      if selected "$b"; then
        [ -e "$jobs_dir/stage-$b.started" ] || job_bg "stage-$b" idle "stage_$b"
        collect_stage "$b"
      fi
    done
  fi
done

# Every background job: done, and its time and result.
declare -a prep_rows=()
for f in "$jobs_dir"/*.started; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .started)
  case "$name" in stage-*) continue ;; esac
  rc=0
  job_wait "$name" || rc=$?
  read -r _ secs <"$jobs_dir/$name.done"
  if [ "$rc" = 0 ]; then r=passed; else r="FAILED (exit $rc)"; failed=1; fi
  prep_rows+=("$(printf '  %-16s %7s  %s' "$name" "$secs" "$r")")
  # A failed background job whose log nobody has shown yet: now.
  if [ "$rc" != 0 ] && [ -e "$run/$name.log" ] && mkdir "$jobs_dir/$name.shown" 2>/dev/null; then
    say "$name FAILED; its log ($run/$name.log):"
    sed 's/^/  | /' "$run/$name.log"
  fi
done

echo
say "the machine's CPU every 30 s ($run/cpu.log):"
sed 's/^/  | /' "$run/cpu.log"
say "summary (logs in $run)"
printf '  %-16s %7s  %s\n' stage seconds result
for s in "${stages[@]}"; do
  r=${result[$s]:-"not run"}
  [ "$r" = passed ] || failed=1
  printf '  %-16s %7s  %s\n' "$s" "${seconds[$s]:--}" "$r"
done
if [ "${#prep_rows[@]}" -gt 0 ]; then
  printf '  %-16s %7s  %s\n' preparation seconds result
  printf '%s\n' "${prep_rows[@]}"
fi
printf '  %-16s %7s\n' "wall time" "$(($(date +%s) - run_started))"
# The tests' counts again as the last line (the stages above print after nextest's summaries).
tests_passed=0 tests_failed=0 tests_skipped=0
add() { # add VAR LINE REGEX: adds the number the regex's group finds in LINE to VAR
  local n
  n=$(sed -nE "s/$3/\1/p" <<<"$2")
  printf -v "$1" '%s' "$(( ${!1} + ${n:-0} ))"
}
for out in "$run/unit.out" "$run/lab.out"; do
  [ -e "$out" ] || continue
  line=$(grep -E 'Summary \[' "$out" | tail -n1 || true)
  add tests_passed "$line" '.* ([0-9]+) passed.*'
  add tests_failed "$line" '.* ([0-9]+) failed.*'
  add tests_skipped "$line" '.* ([0-9]+) skipped.*'
done
if [ -e "$run/vagrant.out" ]; then
  while read -r line; do
    add tests_passed "$line" '.* ([0-9]+) passed.*'
    add tests_failed "$line" '.* ([0-9]+) failed.*'
  done < <(grep -E '^test result:' "$run/vagrant.out" || true)
fi
echo "tests: $tests_passed passed, $tests_failed failed, $tests_skipped skipped"
if [ "$failed" = 0 ]; then
  say "all stages passed"
else
  say "FAILED"
fi
exit "$failed"
