//! The steps of a recover, built from its [`Decisions`] (pure: no I/O; a dry run prints them).
//!
//! Order (docs/recovery.md, "Recover (R0–R6)"): for a snapshot file the trial restore (R0.4) comes before any change, so a
//! bad file is refused before anything is stopped; R1 locks and fences (Kubernetes units, then
//! etcd) and moves data dirs aside; for a survivor, R0.4b extracts a snapshot from a *copy* of
//! its data dir after fencing; R2 restores (the seed, or every member with `--mode all`); R3 joins
//! the others one at a time as learners; R4 verifies and takes a baseline backup; R5 starts the
//! Kubernetes units in the mandatory order; R6 records and releases. Old members (hosts of the
//! member history that are not etcd hosts of the inventory) are fenced for good in R1.5, before
//! the new cluster starts; R7 brings the rest of the cluster to the inventory (`hactl up`'s plan)
//! when R0 found work for it (the control plane on new hosts, HAProxy's backends).
//!
//! Every step has a postcondition read from the hosts (a marker, a unit state, a cluster ID), so
//! a resumed run skips exactly what is done.
//!
//! Work that is the same on several hosts runs on all of them at once (a step group, see
//! [`JournaledStep::group`]): fencing, moving data dirs aside, certificates, and with `--mode
//! all` the copies of the snapshot file, the restores, swaps and starts. With `--mode all` from
//! a file, the copies to the other hosts run alongside the trial restore on the seed: they only
//! stage the file in this run's scratch dir (as R0.4 does on the seed), change nothing etcd
//! serves from, and a failed trial still refuses before anything is stopped.
//!
//! Layout: this file holds the shared pieces (the remote commands, [`build`] and what it derives
//! once); the stages are in `restore.rs` (R0.4, R0.4b, R2), `stop.rs` (R1), `join.rs` (R3) and
//! `finish.rs` (R4–R6). [`build`] calls them in the order above.

mod finish;
mod join;
mod restore;
mod stop;

use std::sync::Arc;
use std::time::Duration;

use super::acts;
use super::Mode as RecoverMode;
use super::{Bump, Decisions, Source};
use crate::etcd::client::ClientTls;
use crate::fence as unit_fence;
use crate::inventory::{Host, Inventory};
use crate::operations::runner::{JournaledStep, StepCode};
use crate::phases::Ctx;
use crate::pki::Pki;
use crate::plan::{Check, RemoteCommand, Step, Upload};
use crate::state::StateDir;

crate::step_codes! {
    /// The steps of a recover (docs/recovery.md, "Recover (R0–R6)"); R0.1, R0.3, R0.5 and R0.6
    /// are the decisions R0 journals before the first step.
    pub enum R {
        Targets = "R0.1",
        Gate = "R0.3",
        /// Check the snapshot file and trial-restore it, before any change.
        Trial = "R0.4",
        /// Extract a snapshot from a copy of a survivor's data dir.
        Extract = "R0.4b",
        Bump = "R0.5",
        Identity = "R0.6",
        StopKubernetes = "R1.2",
        StopEtcd = "R1.3",
        MoveAside = "R1.4",
        /// An old member (a host of the member history that is not an etcd host of the
        /// inventory) fenced for good, before the new cluster starts.
        RetireOld = "R1.5",
        StageSnapshot = "R2.2",
        Certificates = "R2.3",
        Restore = "R2.4",
        Swap = "R2.5",
        InitialEnv = "R2.6",
        StartEtcd = "R2.7",
        EmulateBump = "R2.8",
        OneLeader = "R2.9",
        JoinEnv = "R3.1",
        AddLearner = "R3.2",
        StartLearner = "R3.3",
        Promote = "R3.4",
        Verify = "R4.1",
        Baseline = "R4.2",
        StartApiserver = "R5.2",
        StartControllers = "R5.3",
        RestartKubelet = "R5.4",
        Finish = "R6",
        /// The rest of the cluster brought to the inventory with `hactl up`'s plan, once etcd
        /// is back (new hosts: the control plane there, HAProxy's backends).
        Converge = "R7",
    }
}

/// What the builder reads besides the decisions.
pub struct Inputs<'a> {
    pub inv: &'a Inventory,
    pub pki: &'a Pki,
    pub state: &'a StateDir,
    pub tls: &'a ClientTls,
    /// How R7's `hactl up` plan connects.
    pub connect: &'a crate::exec::connect::ConnectSettings,
}

fn host<'a>(inv: &'a Inventory, name: &str) -> &'a Host {
    inv.host(name).expect("recover decisions name inventory hosts")
}

fn sh(script: &str, name: &str, args: &[&str]) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        script.to_string(),
        name.to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    RemoteCommand::new(argv)
}

/// Fences units with the one fence ([`crate::fence`]: a runtime drop-in whose start
/// assertion fails while it exists), then stops them.
fn fence(run: &str, units: &[String]) -> RemoteCommand {
    let args: Vec<&str> = units.iter().map(String::as_str).collect();
    let write = unit_fence::write(
        "$u",
        &[&format!(
            "fenced by hactl recover {run}: starts fail until it finishes (hactl recover --resume {run})"
        )],
    );
    sh(
        &format!(
            r#"for u in "$@"; do
  {write}
done
systemctl daemon-reload
systemctl stop "$@""#
        ),
        "hactl-fence",
        &args,
    )
}

/// Removes the fence and starts units (enabled, failed state reset; `systemctl enable` only
/// where needed: it costs a third of a second even when there is nothing to do). First leaves `marker` on
/// the host: the fence steps' postconditions accept it, so a resumed run never fences again
/// what this run has already started.
fn unfence_start(units: &[String], block: bool, marker: &str) -> RemoteCommand {
    let mut args: Vec<&str> = vec![marker];
    args.extend(units.iter().map(String::as_str));
    let start = if block {
        "systemctl start \"$@\""
    } else {
        "systemctl start --no-block \"$@\""
    };
    let lift = unit_fence::lift("$u");
    sh(
        &format!(
            r#"mkdir -p "$(dirname "$1")" && touch "$1"; shift
for u in "$@"; do {lift}; done
systemctl daemon-reload
systemctl reset-failed "$@" 2>/dev/null || true
for u in "$@"; do systemctl is-enabled -q "$u" 2>/dev/null || systemctl enable "$u" 2>/dev/null || true; done
{start}"#
        ),
        "hactl-unfence",
        &args,
    )
}

/// Read-only: every unit is fenced and not running, and nothing listens on `ports`.
fn fenced(units: &[String], ports: &[u16], process: Option<&str>) -> RemoteCommand {
    fenced_or(units, ports, process, None)
}

/// As [`fenced`], or `marker` exists (this run has started the units again since).
fn fenced_or(units: &[String], ports: &[u16], process: Option<&str>, marker: Option<&str>) -> RemoteCommand {
    let inner = fenced_inner(units, ports, process);
    match marker {
        None => inner,
        Some(m) => {
            let mut argv = vec![
                "sh".to_string(),
                "-c".to_string(),
                "[ -e \"$1\" ] && exit 0; shift; exec \"$@\"".to_string(),
                "hactl-fenced-or".to_string(),
                m.to_string(),
            ];
            argv.extend(inner.argv);
            RemoteCommand::read_only(argv)
        }
    }
}

fn fenced_inner(units: &[String], ports: &[u16], process: Option<&str>) -> RemoteCommand {
    let filter = ports
        .iter()
        .map(|p| format!("sport = :{p}"))
        .collect::<Vec<_>>()
        .join(" or ");
    let proc_check = process
        .map(|p| format!("! pgrep -x {p} >/dev/null || exit 1\n"))
        .unwrap_or_default();
    let args: Vec<&str> = units.iter().map(String::as_str).collect();
    let fenced = unit_fence::is_fenced("$u");
    RemoteCommand {
        read_only: true,
        ..sh(
            &format!(
                r#"for u in "$@"; do
  {fenced} || exit 1
  case "$(systemctl is-active "$u")" in active|activating|deactivating|reloading) exit 1 ;; esac
done
{proc_check}[ -z "$(ss -Hltn '( {filter} )')" ]"#
            ),
            "hactl-fenced",
            &args,
        )
    }
}

/// Read-only: units active and not fenced.
fn started(units: &[String]) -> RemoteCommand {
    let args: Vec<&str> = units.iter().map(String::as_str).collect();
    let unfenced = unit_fence::is_unfenced("$u");
    RemoteCommand {
        read_only: true,
        ..sh(
            &format!(
                r#"for u in "$@"; do
  {unfenced} && [ "$(systemctl is-active "$u")" = active ] || exit 1
done"#
            ),
            "hactl-started",
            &args,
        )
    }
}

/// Read-only: every upload's sha256 matches on the host.
fn files_match(uploads: &[Upload]) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        "printf '%s\\n' \"$@\" | sha256sum -c --status".to_string(),
        "hactl-sha-check".to_string(),
    ];
    argv.extend(uploads.iter().map(|u| format!("{}  {}", u.sha256, u.path)));
    RemoteCommand::read_only(argv)
}

fn initial_env(name: &str, members: &[(String, String)], state: &str, token: &str) -> Upload {
    let text = crate::render::render(
        "etcd-initial.env",
        &crate::render::EtcdInitialEnv {
            name: name.to_string(),
            initial_cluster: members
                .iter()
                .map(|(n, u)| format!("{n}={u}"))
                .collect::<Vec<_>>()
                .join(","),
            state: state.to_string(),
            token: token.to_string(),
        },
    )
    .expect("the initial env template renders");
    Upload::new(
        crate::etcd::INITIAL_ENV_PATH,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    )
}

/// Read-only on a member: its own status names `cluster_id` (decimal) and, with `leader`, a leader.
fn member_in_cluster(cluster_id_dec: &str, leader: bool) -> RemoteCommand {
    let mut script = format!(
        "[ \"$(systemctl is-active etcd.service)\" = active ] && s=$({} --command-timeout=3s endpoint status -w json 2>/dev/null) && printf '%s' \"$s\" | grep -q '\"cluster_id\":{cluster_id_dec},'",
        crate::etcd::ETCDCTL_WRAPPER
    );
    if leader {
        script.push_str(" && ! printf '%s' \"$s\" | grep -q '\"leader\":0,'");
    }
    RemoteCommand::read_only(["sh", "-c", &script])
}

const RESTORE: &str = r#"set -eu
work=$1 dd=$2 want=$3; shift 3
[ ! -e "$dd" ] || { echo "data dir $dd exists: R1.4 must move it aside first" >&2; exit 1; }
mkdir -p "$work"
rm -rf "$work/staging" "$work/restored"
out=$(/usr/local/sbin/hactl-etcd-snapshot restore "$@") || {
  rc=$?
  rm -rf "$work/staging"
  echo "the restore failed (exit $rc); its partial staging dir was removed (a partial restore is never reused): fix the cause, e.g. free space on the filesystem of $work, then resume" >&2
  exit 1
}
cid=$(printf '%s\n' "$out" | sed -n 's/.*"cluster_id":"\([0-9a-f]*\)".*/\1/p')
if [ "$cid" != "$want" ]; then
  echo "the restore logged cluster-id $cid, expected $want: refusing to use it" >&2
  mv "$work/staging" "$work/staging.rejected-$(date +%s)" 2>/dev/null || true
  exit 1
fi
[ -d "$work/staging/member/wal" ] && [ -f "$work/staging/member/snap/db" ]
echo "$cid" > "$work/restored"
printf '{"cluster_id":"%s"}\n' "$cid""#;

/// R2.5, after [`swap_script`]'s guard: the restored staging dir becomes the data dir.
const SWAP: &str = r#"set -eu
work=$1 dd=$2
if [ -d "$work/staging" ]; then mv -T "$work/staging" "$dd"; fi
[ -d "$dd/member" ] || { echo "neither $work/staging nor $dd/member exists" >&2; exit 1; }
chown -R etcd:etcd "$dd"
chmod 700 "$dd"
cp "$work/restored" "$work/swapped""#;

/// R2.5: [`SWAP`] under the data-directory rule ([`crate::etcd::data_dir`]) for the data dir
/// (`$2`), which R1.4 moved aside: it must be missing, or hold this run's `member/` on a resume.
fn swap_script(run: &str) -> String {
    format!(
        "{}{} \"$2\" \"rename the restored data to $2\" 'hactl recover --resume {run}'\n{SWAP}",
        crate::etcd::data_dir::guard(),
        crate::etcd::data_dir::GUARD_FN
    )
}

const TRIAL: &str = r#"set -eu
work=$1 want=$2 skip=$3; shift 3
f="$work/snapshot.db"
c=$(/usr/local/sbin/hactl-etcd-snapshot check "$f")
case "$c" in
  *'"hash":"ok"'*) ;;
  *'"hash":"missing"'*) [ "$skip" = yes ] || { echo "snapshot missing hash but --skip-hash-check=false: $c" >&2; exit 2; } ;;
  *) echo "expected sha256 does not match: $c" >&2; exit 2 ;;
esac
st=$(/usr/local/sbin/hactl-etcd-snapshot status "$f")
rm -rf "$work/trial"
mkdir -p "$work/trial"
out=$(/usr/local/sbin/hactl-etcd-snapshot restore "$@") || { rm -rf "$work/trial"; exit 1; }
rm -rf "$work/trial"
cid=$(printf '%s\n' "$out" | sed -n 's/.*"cluster_id":"\([0-9a-f]*\)".*/\1/p')
[ "$cid" = "$want" ] || { echo "trial restore gave cluster-id $cid, computed $want" >&2; exit 1; }
rev=$(printf '%s' "$st" | sed -n 's/.*"revision":\([0-9]*\).*/\1/p')
printf '%s\n' "$rev" > "$work/snapshot.revision"
echo "$cid" > "$work/trial.ok"
printf '{"cluster_id":"%s","revision":%s,"check":%s}\n' "$cid" "${rev:-0}" "$c""#;

/// R0.4b: a throw-away etcd on a copy of the survivor's data dir, reachable only by root.
///
/// Its client and peer listeners are unix sockets in `$work/probe/sock`, a directory made fresh
/// here with mode 0700 (`mkdir` without `-p`: one that someone made first is refused), so no
/// other local user can take its address first or talk to it (a loopback TCP port could be
/// taken by anyone, who would then seed the recovered cluster). etcd wants `host:port` in its
/// URLs and binds a unix URL's `host:port` as a path relative to its working directory, so it
/// runs inside that directory. Before the snapshot is saved, the listener is checked to belong
/// to the process started here (its socket inode among that process's descriptors).
const EXTRACT: &str = r#"set -eu
work=$1 dd=$2 name=$3 port=$4 pport=$5
systemctl stop etcd.service 2>/dev/null || true
if pgrep -x etcd >/dev/null; then echo "etcd still runs: refusing to copy its data dir" >&2; exit 1; fi
[ -d "$dd/member/wal" ] || { echo "$dd holds no member data" >&2; exit 1; }
mkdir -p "$work/probe"
chmod 700 "$work/probe"
rm -rf "$work/probe/copy" "$work/probe/sock" "$work/snapshot.db" "$work/snapshot.db.part"
mkdir -m 0700 "$work/probe/sock" || { echo "refusing to start the scratch etcd (rule: its sockets live in a directory only root can enter): $work/probe/sock could not be made fresh; remove what is there and resume" >&2; exit 1; }
sock=$(cd "$work/probe/sock" && pwd -P)
[ "$(stat -c '%u %a' "$sock")" = "0 700" ] || { echo "refusing to start the scratch etcd (rule: its sockets live in a directory only root can enter): $sock is $(stat -c '%U %a' "$sock"); remove it and resume" >&2; exit 1; }
cp -a "$dd" "$work/probe/copy"
(cd "$sock" && exec etcd --name "$name" --data-dir "$work/probe/copy" --force-new-cluster \
  --listen-client-urls "unix://localhost:$port" --advertise-client-urls "unix://localhost:$port" \
  --listen-peer-urls "unix://localhost:$pport" --initial-advertise-peer-urls "unix://localhost:$pport") > "$work/probe/etcd.log" 2>&1 &
pid=$!
ctl() { ETCDCTL_API=3 etcdctl --endpoints="unix://$sock/localhost:$port" --dial-timeout=2s --command-timeout=60s "$@"; }
# The listener at $sock/localhost:$port is this run's etcd: its working directory is $sock and
# one of its descriptors is the listening socket of that name.
ours() {
  [ "$(readlink "/proc/$pid/cwd")" = "$sock" ] || return 1
  for ino in $(awk -v n="localhost:$port" '$6 == "01" && $8 == n { print $7 }' /proc/net/unix); do
    ls -l "/proc/$pid/fd" 2>/dev/null | grep -q "socket:\[$ino\]" && return 0
  done
  return 1
}
ok=no
for i in $(seq 1 100); do
  if s=$(ctl endpoint status -w json 2>/dev/null) && ! printf '%s' "$s" | grep -q '"leader":0,'; then ok=yes; break; fi
  sleep 0.2
done
if [ $ok = yes ] && ! ours; then
  ok=no
  echo "refusing the scratch etcd's snapshot (rule: the listener must belong to the process hactl started): $sock/localhost:$port is not held by pid $pid" >&2
fi
if [ $ok = yes ]; then ctl snapshot save "$work/snapshot.db" >/dev/null 2>&1 || ok=no; fi
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
rm -rf "$work/probe/copy" "$sock"
[ $ok = yes ] || { tail -n 20 "$work/probe/etcd.log" >&2; echo "the scratch etcd on a copy of $dd did not yield a snapshot" >&2; exit 1; }
size=$(stat -c %s "$work/snapshot.db")
[ $((size % 512)) -eq 32 ] || { echo "the extracted snapshot has no hash (size $size)" >&2; exit 1; }
printf '{"size":%s}\n' "$size""#;

/// etcd refuses an add until every voter has been connected for 5 s (`unhealthy cluster`, the
/// case right after a promotion): retry that, for up to 2 minutes.
const ADD_LEARNER: &str = r#"end=$(( $(date +%s) + 120 ))
while :; do
  if out=$(/usr/local/sbin/hactl-etcd-member add-learner "$1" "$2" 2>&1); then printf '%s\n' "$out"; exit 0; fi
  case "$out" in *"unhealthy cluster"*|*"deadline exceeded"*) ;; *) printf '%s\n' "$out" >&2; exit 1 ;; esac
  [ "$(date +%s)" -lt "$end" ] || { printf '%s\n' "$out" >&2; exit 1; }
  sleep 0.2
done"#;

/// Waits for the last joining learner to be ready (systemd's `active`: etcd signals readiness
/// once it has published itself), restarting it once if it got stuck the way etcd #3774 shows.
///
/// A member that gets its data as the leader's raft snapshot may have had its first publish
/// committed *inside* that snapshot: always so when the leader is the only voter (the first
/// join after a seed restore), since the leader commits the proposal before it cuts the
/// snapshot, and by a race when there are more. The member then never applies the entry it
/// waits for, and waits out etcd's request timeout (5 s + 2 × election timeout) before it
/// publishes again. So: once its metrics show the snapshot applied and it is still not ready a
/// second later, it is restarted once (a learner does not vote: quorum-neutral); restarted, it
/// publishes through its log in milliseconds. Only the last joiner: a restart renews its peer
/// connection, and etcd refuses the next `member add` until the leader has been connected to
/// every voter for 5 s, which costs what the restart saves.
const LEARNER_READY: &str = r#"set -u
port=$1; applied_at=; restarted=; i=0
while [ $i -lt 1200 ]; do
  case "$(systemctl is-active etcd.service)" in
    active) [ -z "$restarted" ] || echo "restarted once, after it applied the leader's snapshot"; exit 0 ;;
    activating|deactivating|inactive) ;;
    *) echo "etcd.service is $(systemctl is-active etcd.service)" >&2; exit 1 ;;
  esac
  if [ -z "$applied_at" ]; then
    a=$(curl -fsS -m 1 "http://127.0.0.1:$port/metrics" 2>/dev/null | sed -n 's/^etcd_server_proposals_applied_total //p')
    case "$a" in ''|0) ;; *) applied_at=$i ;; esac
  elif [ -z "$restarted" ] && [ $((i - applied_at)) -ge 10 ]; then
    systemctl restart --no-block etcd.service
    restarted=yes
  fi
  sleep 0.1
  i=$((i + 1))
done
echo "etcd.service did not become ready" >&2
exit 1"#;

const VERIFY: &str = r#"set -eu
ctl=/usr/local/sbin/hactl-etcdctl
names=$1 cid=$2 minrev=$3 eps=$4
ml=$($ctl --endpoints="$eps" member list)
want=$(printf '%s\n' "$names" | tr , '\n' | grep -c .)
have=$(printf '%s\n' "$ml" | grep -c .)
[ "$have" = "$want" ] || { echo "member list has $have members, want $want: $ml" >&2; exit 1; }
for n in $(printf '%s' "$names" | tr , ' '); do
  printf '%s\n' "$ml" | grep -q ", started, $n, .*, false$" || { echo "member $n is missing, unstarted or a learner: $ml" >&2; exit 1; }
done
st=$($ctl --endpoints="$eps" endpoint status -w json)
[ "$(printf '%s' "$st" | grep -o '"cluster_id":[0-9]*' | sort -u | wc -l)" = 1 ] || { echo "members disagree about the cluster ID" >&2; exit 1; }
printf '%s' "$st" | grep -q "\"cluster_id\":$cid," || { echo "cluster ID is not the restored one" >&2; exit 1; }
[ "$(printf '%s' "$st" | grep -o '"leader":[0-9]*' | sort -u | wc -l)" = 1 ] || { echo "members disagree about the leader" >&2; exit 1; }
$ctl --endpoints="$eps" endpoint health >/dev/null
# hashkv at one revision every member has applied (the lowest they report), so a member that is
# one write ahead cannot make equal data look different; every member must answer.
hrev=$(printf '%s' "$st" | grep -o '"revision":[0-9]*' | cut -d: -f2 | sort -n | head -n1)
if ! hk=$($ctl --endpoints="$eps" endpoint hashkv --rev="$hrev" -w json 2>&1); then
  case "$hk" in
    # etcd 3.4 refuses a hash at the compaction revision itself (3.5 allows it): right after an
    # emulated bump that is the current revision, so hash at the current one (0) instead.
    *"required revision has been compacted"*) hrev=0; hk=$($ctl --endpoints="$eps" endpoint hashkv -w json) ;;
    *) echo "hashkv at revision $hrev failed: $hk" >&2; exit 1 ;;
  esac
fi
[ "$(printf '%s' "$hk" | grep -o '"hash":[0-9]*' | wc -l)" = "$want" ] || { echo "hashkv at revision $hrev: not every member answered: $hk" >&2; exit 1; }
[ "$(printf '%s' "$hk" | grep -o '"hash":[0-9]*' | sort -u | wc -l)" = 1 ] || { echo "hashkv differs at revision $hrev: $hk" >&2; exit 1; }
al=$($ctl --endpoints="$eps" alarm list)
[ -z "$al" ] || { echo "alarms: $al" >&2; exit 1; }
rev=$(printf '%s' "$st" | grep -o '"revision":[0-9]*' | cut -d: -f2 | sort -n | tail -n1)
[ "$rev" -ge "$minrev" ] || { echo "revision $rev is below $minrev" >&2; exit 1; }
printf '{"revision":%s,"hashkv_revision":%s,"hashkv":%s}\n' "$rev" "$hrev" "$(printf '%s' "$hk" | grep -o '"hash":[0-9]*' | head -n1 | cut -d: -f2)""#;

/// Static-pod mode, R1.2: moves each component's manifest out of the kubelet's directory into
/// `$1` (the run's aside dir); a manifest already moved is left there.
const MANIFESTS_OUT: &str = r#"set -eu
dest=$1; shift
mkdir -p "$dest"
for c in "$@"; do
  if [ -e "/etc/kubernetes/manifests/$c.yaml" ]; then mv -f "/etc/kubernetes/manifests/$c.yaml" "$dest/$c.yaml"; fi
done"#;

/// Static-pod mode, R5: leaves the kube-started marker (`$2`), then moves the manifests back.
const MANIFESTS_BACK: &str = r#"set -eu
dest=$1 marker=$2; shift 2
mkdir -p "$(dirname "$marker")" && touch "$marker"
mkdir -p /etc/kubernetes/manifests
for c in "$@"; do
  if [ -e "$dest/$c.yaml" ]; then mv -f "$dest/$c.yaml" "/etc/kubernetes/manifests/$c.yaml"; fi
done"#;

fn manifest_args<'a>(aside: &'a str, components: &'a [String]) -> Vec<&'a str> {
    let mut v = vec![aside];
    v.extend(components.iter().map(String::as_str));
    v
}

fn manifest_back_args<'a>(aside: &'a str, marker: &'a str, components: &'a [String]) -> Vec<&'a str> {
    let mut v = vec![aside, marker];
    v.extend(components.iter().map(String::as_str));
    v
}

/// Read-only, static-pod mode: R5 has begun (`marker`, when given), or the kubelet stopped
/// `components` ([`crate::kubernetes::static_pods_gone`]: no manifest in its directory, no
/// process left).
fn manifests_stopped(components: &[String], marker: Option<&str>) -> RemoteCommand {
    let components: Vec<crate::kubernetes::Component> = crate::kubernetes::Component::ALL
        .into_iter()
        .filter(|c| components.iter().any(|n| n == c.binary()))
        .collect();
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "[ -n \"$1\" ] && [ -e \"$1\" ] && exit 0; {}",
            crate::kubernetes::static_pods_gone(&components)
        ),
        "hactl-manifests-stopped".to_string(),
        marker.unwrap_or_default().to_string(),
    ])
}

/// Read-only, static-pod mode: nothing of `components` is left in the aside dir.
fn manifests_back(components: &[String], aside: &str) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        r#"d=$1; shift
for c in "$@"; do [ ! -e "$d/$c.yaml" ] || exit 1; done"#
            .to_string(),
        "hactl-manifests-back".to_string(),
        aside.to_string(),
    ];
    argv.extend(components.iter().cloned());
    RemoteCommand::read_only(argv)
}

/// Read-only: a container named `component` runs (`crictl ps --name`); true where crictl is
/// not installed (the kubelet's runtime is then not hactl's to ask).
fn container_running(component: &str) -> RemoteCommand {
    RemoteCommand::read_only([
        "sh",
        "-c",
        r#"! command -v crictl >/dev/null 2>&1 || [ -n "$(crictl ps --name "$1" -q 2>/dev/null)" ]"#,
        "hactl-container-running",
        component,
    ])
}

/// Static-pod hosts holding `component`'s manifest, each with just that component.
fn static_pods_with(d: &Decisions, component: &str) -> Vec<(String, Vec<String>)> {
    d.kube_manifests
        .iter()
        .filter(|(_, cs)| cs.iter().any(|c| c == component))
        .map(|(h, _)| (h.clone(), vec![component.to_string()]))
        .collect()
}

/// `--mode all`: each host's snapshot copy (R2.2, from a survivor) and restore (R2.4) run
/// alongside the other hosts'.
const STAGE_AND_RESTORE: &str = "R2.2/R2.4";
/// `--mode all` from a file: the copies to the other hosts run alongside the trial on the seed.
const TRIAL_AND_STAGE: &str = "R0.4/R2.2";

/// The whole recover, in order: each stage below appends its steps.
pub fn build(d: &Decisions, i: &Inputs<'_>) -> Vec<JournaledStep> {
    let inv = i.inv;
    let dd = inv.etcd.data_dir.as_str();
    let work = d.work_dir();
    let snap = d.snapshot_path();
    let cid_dec = u64::from_str_radix(&d.expected_cluster_id, 16)
        .unwrap_or(0)
        .to_string();
    let etcd_units = vec![crate::etcd::UNIT.to_string()];
    let etcd_started = format!("{work}/etcd-started");
    let kube_started = format!("{work}/kube-started");
    let etcd_ports = [inv.etcd.client_port, inv.etcd.peer_port];
    let reachable: Vec<String> = inv
        .with_role(crate::inventory::Role::Etcd)
        .into_iter()
        .map(|h| h.name.clone())
        .filter(|h| !d.confirmed_dead.contains(h))
        .collect();
    let initial: Vec<(String, String)> = match d.mode {
        RecoverMode::Seed => vec![(d.seed.clone(), crate::etcd::peer_url(inv, host(inv, &d.seed)))],
        RecoverMode::All => d
            .targets
            .iter()
            .map(|h| (h.clone(), crate::etcd::peer_url(inv, host(inv, h))))
            .collect(),
    };
    let initial_cluster = initial
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",");
    let bump = match d.bump {
        Bump::Restore { by } => by,
        _ => 0,
    };
    let skip_hash = matches!(
        d.source,
        Source::File {
            skip_hash_check: true,
            ..
        }
    );
    let helper = crate::snapshot::helper_upload().expect("the snapshot helper renders");
    let s = Shared {
        d,
        i,
        inv,
        dd,
        work,
        snap,
        cid_dec,
        etcd_units,
        etcd_started,
        kube_started,
        etcd_ports,
        reachable,
        initial,
        initial_cluster,
        bump,
        skip_hash,
        helper,
    };
    let mut steps = Vec::new();
    restore::r0_4_trial_file(&s, &mut steps);
    stop::r1_lock_and_fence(&s, &mut steps);
    restore::r0_4b_extract(&s, &mut steps);
    stop::r1_4_move_aside(&s, &mut steps);
    stop::r1_5_retire_old(&s, &mut steps);
    restore::r2_restore(&s, &mut steps);
    join::r3_join(&s, &mut steps);
    finish::r4_verify(&s, &mut steps);
    finish::r5_kubernetes(&s, &mut steps);
    finish::r6_release(&s, &mut steps);
    finish::r7_converge(&s, &mut steps);
    steps
}

/// What every stage of [`build`] reads: the decisions, the inputs, and what is derived from them
/// once (paths of this run, the new cluster's initial members, the restore flags).
struct Shared<'s> {
    d: &'s Decisions,
    i: &'s Inputs<'s>,
    inv: &'s Inventory,
    dd: &'s str,
    work: String,
    snap: String,
    cid_dec: String,
    etcd_units: Vec<String>,
    etcd_started: String,
    kube_started: String,
    etcd_ports: [u16; 2],
    reachable: Vec<String>,
    initial: Vec<(String, String)>,
    initial_cluster: String,
    bump: u64,
    skip_hash: bool,
    helper: Upload,
}

impl Shared<'_> {
    fn url(&self, h: &str) -> String {
        crate::etcd::peer_url(self.inv, host(self.inv, h))
    }
    /// The restore flags for member `h` into `data_dir`, after the helper's own two arguments.
    fn restore_argv(&self, h: &str, data_dir: &str) -> Vec<String> {
        let args = crate::snapshot::RestoreArgs {
            snapshot: self.snap.clone(),
            name: h.to_string(),
            peer_url: self.url(h),
            initial_cluster: self.initial_cluster.clone(),
            token: self.d.token.clone(),
            data_dir: data_dir.to_string(),
            bump: self.bump,
            skip_hash_check: self.skip_hash,
        };
        crate::snapshot::restore_command(&args).argv[2..].to_vec()
    }
}

/// R0.4: stage the snapshot on the seed and trial-restore it with the real flags, before any change.
fn trial(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let work = &s.work;
    let snap = &s.snap;
    let skip_hash = s.skip_hash;
    let helper = &s.helper;
    let mut args: Vec<String> = vec![
        work.clone(),
        d.expected_cluster_id.clone(),
        if skip_hash { "yes" } else { "no" }.into(),
    ];
    args.extend(s.restore_argv(&d.seed, &format!("{work}/trial/data")));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut s = JournaledStep::new(
        R::Trial.at(&d.seed),
        "check the snapshot (hash, status on a copy) and trial-restore it with the real flags",
        Some(&d.seed),
    )
    .done_when(RemoteCommand::read_only([
        "sh",
        "-c",
        "[ \"$(cat \"$1/trial.ok\" 2>/dev/null)\" = \"$2\" ]",
        "hactl-trial-done",
        work,
        &d.expected_cluster_id,
    ]))
    .step(Step::Upload(helper.clone()));
    if let Source::File { path, sha256, .. } = &d.source {
        s = s.local(Arc::new(acts::UploadSnapshot {
            host: d.seed.clone(),
            local: path.into(),
            remote: snap.clone(),
            sha256: sha256.clone(),
        }));
    }
    steps.push(
        s.run(sh(TRIAL, "hactl-trial", &args).with_timeout(Duration::from_secs(900)))
            .no_cluster_change(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::recover::{static_pod_manifests, Bump, Decisions, Source};

    fn inventory(state: &std::path::Path, mode: &str) -> Inventory {
        let yaml = format!(
            concat!(
                "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    agent: true\n",
                "  hosts:\n",
                "    - {{ name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }}\n",
                "    - {{ name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }}\n",
                "    - {{ name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }}\n",
                "  kubernetes: {{ version: 1.31.4, source: release, releaseUrl: 'https://example.com/k.tar.gz',\n",
                "    sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, mode: {} }}\n",
                "  stateDir: {}\n",
            ),
            mode,
            state.display()
        );
        crate::inventory::load_str(std::path::Path::new("c.yaml"), &yaml).unwrap()
    }

    fn decisions(inv: &Inventory) -> Decisions {
        let hosts: Vec<String> = ["cp1", "cp2", "cp3"].map(String::from).to_vec();
        Decisions {
            run: "20261122-050000-abcd".into(),
            cluster: "c".into(),
            mode: RecoverMode::Seed,
            source: Source::File {
                path: "/tmp/c.db".into(),
                sha256: "ab".into(),
                size: 544,
                skip_hash_check: false,
                revision: Some(10),
                time: None,
            },
            seed: "cp1".into(),
            targets: hosts.clone(),
            confirmed_dead: vec![],
            data_dirs: hosts.clone(),
            kube_units: vec![],
            kubelets: hosts.clone(),
            nodes_unreached: vec![],
            token: crate::operations::recover::token("c", "20261122-050000-abcd"),
            bump: Bump::Restore { by: 1_000_000_000 },
            hwm: None,
            expected_cluster_id: "bd64556880bc1085".into(),
            min_revision: 1_000_000_010,
            tool: "etcdutl".into(),
            etcd_version: "3.5.16".into(),
            kube_manifests: static_pod_manifests(inv, &hosts),
            old_fenced: vec![],
            old_attested: vec![],
            converge: vec![],
        }
    }

    /// Builds the steps a dry run prints for `mode` (`systemd` / `static-pod`).
    fn build_for(mode: &str) -> (Vec<JournaledStep>, Decisions) {
        build_with(mode, |_| {})
    }

    /// As [`build_for`], with the decisions changed by `edit` first.
    fn build_with(mode: &str, edit: impl FnOnce(&mut Decisions)) -> (Vec<JournaledStep>, Decisions) {
        let dir = tempfile::tempdir().unwrap();
        let inv = inventory(dir.path(), mode);
        let pki = crate::pki::ensure(&dir.path().join("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        let tls = ClientTls {
            ca_pem: String::new(),
            cert_pem: String::new(),
            key_pem: String::new(),
        };
        let mut d = decisions(&inv);
        edit(&mut d);
        let connect = crate::exec::connect::ConnectSettings::default();
        let inputs = Inputs {
            inv: &inv,
            pki: &pki,
            state: &state,
            tls: &tls,
            connect: &connect,
        };
        (build(&d, &inputs), d)
    }

    fn position(steps: &[JournaledStep], id: &str) -> usize {
        steps.iter().position(|s| s.id == id).unwrap_or_else(|| {
            panic!(
                "no step {id}: {:?}",
                steps.iter().map(|s| &s.id).collect::<Vec<_>>()
            )
        })
    }

    #[test]
    fn static_pod_mode_moves_the_manifests_aside_and_back_in_the_mandatory_order() {
        let (steps, d) = build_for("static-pod");
        let aside = format!("/etc/kubernetes/manifests.hactl/{}", d.run);
        for h in ["cp1", "cp2", "cp3"] {
            let out = position(&steps, &format!("R1.2@{h}:manifests"));
            // Every control plane is stopped before etcd stops anywhere.
            assert!(out < position(&steps, "R1.3@cp1"), "{h}");
            let text = steps[out].render(false);
            assert!(text.contains(&aside), "{text}");
            assert!(
                text.contains("kube-apiserver kube-controller-manager kube-scheduler"),
                "{text}"
            );
        }
        // R5: every apiserver, then every controller-manager, then every scheduler, then kubelets;
        // all after etcd is verified and the baseline taken.
        let r4 = position(&steps, "R4.2");
        let api: Vec<usize> = ["cp1", "cp2", "cp3"]
            .iter()
            .map(|h| position(&steps, &format!("R5.2@{h}:manifests")))
            .collect();
        let kcm: Vec<usize> = ["cp1", "cp2", "cp3"]
            .iter()
            .map(|h| position(&steps, &format!("R5.3@{h}:kube-controller-manager:manifest")))
            .collect();
        let sched: Vec<usize> = ["cp1", "cp2", "cp3"]
            .iter()
            .map(|h| position(&steps, &format!("R5.3@{h}:kube-scheduler:manifest")))
            .collect();
        let kubelet = position(&steps, "R5.4@cp1");
        assert!(r4 < api[0]);
        assert!(api.iter().max() < kcm.iter().min(), "{api:?} {kcm:?}");
        assert!(kcm.iter().max() < sched.iter().min(), "{kcm:?} {sched:?}");
        assert!(*sched.iter().max().unwrap() < kubelet);
        let back = steps[api[0]].render(false);
        assert!(back.contains(&aside) && back.contains("kube-apiserver"), "{back}");
        assert!(!back.contains("kube-scheduler"), "one component per step: {back}");
    }

    /// Point 3 of issue 13: the scratch etcd of R0.4b listens on nothing another local user can
    /// reach (it used plain HTTP on 127.0.0.1:23790, which anyone could take first and so seed
    /// the recovered cluster), and its snapshot is taken only from the process hactl started.
    #[test]
    fn the_scratch_etcd_of_a_survivor_listens_only_on_unix_sockets_in_a_0700_dir() {
        let (steps, _) = build_with("systemd", |d| {
            d.source = Source::Member { host: "cp1".into() };
        });
        let text = steps[position(&steps, "R0.4b@cp1")].render(false);
        assert!(!text.contains("http://127.0.0.1"), "{text}");
        assert!(!text.contains("--listen-metrics-urls"), "{text}");
        for want in [
            "mkdir -m 0700 \"$work/probe/sock\"",
            "(cd \"$sock\" && exec etcd",
            "--listen-client-urls \"unix://localhost:$port\"",
            "--listen-peer-urls \"unix://localhost:$pport\"",
            "--endpoints=\"unix://$sock/localhost:$port\"",
            "the listener must belong to the process hactl started",
            "/proc/$pid/fd",
        ] {
            assert!(text.contains(want), "R0.4b lacks {want}: {text}");
        }
        // The ownership check comes before the snapshot is saved.
        assert!(text.find("! ours").unwrap() < text.find("snapshot save").unwrap());
    }

    /// The data-directory rule guards every step that moves or replaces the data dir.
    #[test]
    fn moving_and_swapping_the_data_dir_run_the_data_dir_guard_first() {
        let (steps, d) = build_for("systemd");
        let aside = steps[position(&steps, "R1.4@cp2")].render(false);
        let guard = aside
            .find("hactl_data_dir_guard \"$1\" \"move $1 aside\"")
            .expect(&aside);
        assert!(guard < aside.find("mv -T --").unwrap(), "{aside}");
        assert!(
            aside.contains(&format!("hactl recover --resume {}", d.run)),
            "{aside}"
        );
        let swap = steps[position(&steps, "R2.5@cp1")].render(false);
        let guard = swap.find("hactl_data_dir_guard \"$2\"").expect(&swap);
        assert!(guard < swap.find("mv -T \"$work/staging\"").unwrap(), "{swap}");
    }

    #[test]
    fn systemd_mode_plans_no_manifest_moves() {
        let (steps, _) = build_for("systemd");
        assert!(steps.iter().all(|s| !s.id.contains(":manifest")));
    }

    #[test]
    fn r4_compares_hashkv_at_one_revision_and_fails_on_a_difference() {
        let (steps, _) = build_for("systemd");
        let v = steps[position(&steps, "R4.1")].render(false);
        assert!(v.contains("endpoint hashkv --rev=\"$hrev\""), "{v}");
        assert!(v.contains("hashkv differs at revision"), "{v}");
    }

    /// Issue 22: the old members are fenced for good before the new cluster starts, recorded,
    /// and R7 runs `up`'s plan last, only when R0 found work for it.
    #[test]
    fn old_members_are_fenced_before_the_restore_and_r7_comes_last() {
        let (steps, d) = build_with("systemd", |d| {
            d.old_fenced = vec!["old1".into()];
            d.converge = vec!["HAProxy on lb1 still sends clients to the old members old1".into()];
        });
        let retire = position(&steps, "R1.5@old1");
        assert!(position(&steps, "R1.3@cp1") < retire);
        assert!(retire < position(&steps, "R2.4@cp1"), "fenced before the restore");
        let text = steps[retire].render(false);
        assert!(
            text.contains(&format!("/var/lib/etcd.hactl-retired-{}", d.run)),
            "{text}"
        );
        assert!(text.contains("record old1 as fenced for good"), "{text}");
        assert!(text.contains("kube-apiserver.service etcd.service"), "{text}");
        let members = position(&steps, "R6:members");
        let r7 = position(&steps, "R7");
        assert!(position(&steps, "R6") < members && members < r7);
        assert_eq!(r7, steps.len() - 1);
        assert!(
            steps[r7].render(false).contains("HAProxy on lb1"),
            "{}",
            steps[r7].render(false)
        );
        // With a member attested dead `up` cannot run: no R7.
        let (steps, _) = build_with("systemd", |d| {
            d.converge = vec!["x".into()];
            d.confirmed_dead = vec!["cp3".into()];
        });
        assert!(steps.iter().all(|s| s.id != "R7"));
    }
}
