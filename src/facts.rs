//! Read-only probes: what is on each host now, in one round trip per host.
//!
//! Invariant: the probe only reads (it is a `RemoteCommand::read_only`), so `hactl plan` and
//! `hactl check` may send it; everything a phase needs to know about a host comes from here.

use std::collections::BTreeMap;

use crate::exec::Transport;
use crate::plan::RemoteCommand;

/// What one host reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// `ID` and `VERSION_ID` from /etc/os-release.
    pub os_id: String,
    pub os_version: String,
    /// The name of PID 1 (`systemd` on supported hosts).
    pub init: String,
    /// Host clock at the probe, nanoseconds since the epoch.
    pub time_ns: i128,
    /// When the host booted, seconds since the epoch (`btime` in /proc/stat): turns a unit's
    /// monotonic start time into wall-clock time.
    pub boot_time: i64,
    /// Whether `sudo -n true` worked (or the user is root).
    pub privileged: bool,
    pub arch: String,
    /// Listening TCP ports → process names (from `ss -Hltnp`).
    /// (a port may be held by several: HAProxy on the VIP, etcd on the host address).
    pub listeners: BTreeMap<u16, std::collections::BTreeSet<String>>,
    /// Free bytes on the filesystem that holds (or will hold) the etcd data dir.
    pub data_dir_free_bytes: Option<u64>,
    /// Whether `<data dir>/member` exists.
    pub data_dir_has_member: bool,
    /// Binary name → path, for the binaries hactl uses.
    pub binaries: BTreeMap<String, String>,
    /// Mode, owner and group of the etcd data dir when it exists.
    pub data_dir: Option<FileState>,
    /// Whether the `etcd` system user exists.
    pub etcd_user: bool,
    /// `member list -w json` as seen by this host's running member.
    pub members: Option<crate::etcd::MemberList>,
    /// `etcd --version` first line, when installed.
    pub etcd_version: Option<String>,
    /// The running member's own `endpoint status` (its version, its ID, the leader it knows).
    pub etcd_status: Option<crate::etcd::health::StatusBody>,
    /// Path → `--version` first line of the etcd binaries at the paths a unit may run
    /// (`/usr/bin/etcd` from the package, `/usr/local/bin/etcd` from a bundle or release).
    pub etcd_binaries: BTreeMap<String, String>,
    /// Kubernetes binary → its `--version` line (`Kubernetes v1.31.4`), for those installed.
    pub kube_versions: BTreeMap<String, String>,
    /// Whether apt-get exists (binaries from packages are obtainable).
    pub apt: bool,
    /// Unit name → state.
    pub units: BTreeMap<String, UnitState>,
    /// Managed path → its state; absent paths are missing here.
    pub files: BTreeMap<String, FileState>,
    /// Managed paths that exist without hactl's `Managed by hactl` header in their first lines
    /// (the distribution's or the operator's own file): kept as `<file>.hactl-orig` before the
    /// first overwrite.
    pub foreign: std::collections::BTreeSet<String>,
    /// Addresses on the host's interfaces (`ip -o addr show`), in the order `ip` lists them.
    pub addresses: Vec<InterfaceAddress>,
    /// The CA trust files hactl installs, wherever present on this host, whatever its roles
    /// ([`TRUST_FILES`]): path → PEM text (certificates only: public). What the cluster identity
    /// check ([`crate::identity`]) compares with the state directory.
    pub trusted: BTreeMap<String, String>,
    /// What a node host (control plane or worker) reports about its node components; `None`
    /// where the query asked nothing of the kind.
    pub node: Option<NodeFacts>,
    /// On a load balancer: the servers a cut `up` left out of a backend, from the notes
    /// [`crate::load_balancer::HELD_DIR`] holds, with HAProxy's status of each.
    pub held_servers: Vec<HeldServer>,
}

/// A server `hactl up` noted as taken out of a backend on a load balancer (a roll or a mode
/// switch that was cut before it brought the server back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldServer {
    pub backend: String,
    pub server: String,
    /// When it was taken out (UTC, as the note says).
    pub since: String,
    /// HAProxy's status of it now (`MAINT`, `UP`, …); empty when HAProxy does not answer or
    /// lists no such server.
    pub status: String,
}

impl HeldServer {
    /// HAProxy still keeps it out of the rotation (in maintenance, or draining).
    pub fn out(&self) -> bool {
        self.status.starts_with("MAINT") || self.status.starts_with("DRAIN")
    }
}

/// Shell function `hactl_held_notes DIR`: the notes a cut `up` left of the servers it took out
/// of a backend ([`crate::load_balancer::HELD_DIR`]), one line each, `<backend>,<server>
/// <since>` (the file's name, then the time it holds or `-`); nothing, and no process started,
/// without a note. This probe and `load_balancer::status`'s both print them with it, and
/// [`parse_held_note`] reads a line back.
pub const HELD_NOTES_FN: &str = r#"hactl_held_notes() {
  for m in "$1"/*,*; do
    [ -f "$m" ] || continue
    since=$(head -c 64 "$m" | tr -d ' \n'); echo "${m##*/} ${since:--}"
  done
}
"#;

/// One note of [`crate::load_balancer::HELD_DIR`] as this probe and `load_balancer::status`'s
/// print it (`<backend>,<server> <since>`: the file's name, then the time it holds or `-`):
/// (backend, server, since), or `None` for anything else.
pub fn parse_held_note<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<(&'a str, &'a str, &'a str)> {
    let (backend, server) = words.next()?.split_once(',')?;
    Some((backend, server, words.next().unwrap_or("-")))
}

/// The CA trust files the probe reads on every host (certificates, never keys).
pub const TRUST_FILES: [&str; 5] = [
    "/etc/hactl/pki/etcd/ca.crt",
    "/etc/hactl/pki/apiserver-etcd/ca.crt",
    "/etc/hactl/pki/kubernetes/ca.crt",
    "/etc/hactl/pki/kubernetes/signing-ca.crt",
    "/etc/hactl/pki/front-proxy/ca.crt",
];

/// A node host's containerd, pod routes and Node, as its facts probe read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The filesystem type under containerd's data dir (`stat -f -c %T` of it, or of its nearest
    /// existing parent): `overlayfs` means containerd's overlayfs snapshotter cannot stack there.
    pub snapshot_fs: String,
    /// Whether `net.netfilter.nf_conntrack_max` can be set here (kube-proxy sets it unless told
    /// not to; a network namespace sees it read-only).
    pub conntrack_max: ConntrackMax,
    /// Images in containerd's `k8s.io` namespace: reference → manifest digest (when containerd
    /// runs).
    pub images: std::collections::BTreeMap<String, String>,
    /// hactl's pod routes (`ip route … proto 76`): destination → gateway.
    pub pod_routes: std::collections::BTreeMap<String, String>,
    /// The host's Node as the API answered its kubelet's credentials.
    pub api: NodeApi,
}

/// Whether `nf_conntrack_max` is writable on a node host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConntrackMax {
    #[default]
    Writable,
    ReadOnly,
    /// The conntrack module is not loaded yet (it is once iptables uses it): writable then.
    Absent,
}

/// What the API said about a node host's Node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NodeApi {
    /// Not asked: the host holds no kubelet credentials yet.
    #[default]
    NotAsked,
    /// The apiserver did not answer (or answered something other than 200 or 404).
    Unknown(String),
    /// No Node of that name: the kubelet has not registered (or the Node was deleted).
    Absent,
    Registered(RegisteredNode),
}

impl NodeApi {
    pub fn registered(&self) -> Option<&RegisteredNode> {
        match self {
            NodeApi::Registered(n) => Some(n),
            _ => None,
        }
    }
}

/// The parts of a registered Node that planning reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisteredNode {
    /// `spec.podCIDR`, once the controller-manager allocated it.
    pub pod_cidr: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// `key=value:effect` (`key:effect` without a value).
    pub taints: Vec<String>,
    /// Its `Ready` condition is `True`: a roll waits for it again after restarting the kubelet.
    pub ready: bool,
}

impl RegisteredNode {
    /// Reads the API's Node JSON; `None` when it is not a Node.
    pub fn parse(json: &str) -> Option<RegisteredNode> {
        #[derive(serde::Deserialize)]
        struct Raw {
            #[serde(default)]
            metadata: RawMeta,
            #[serde(default)]
            spec: RawSpec,
            #[serde(default)]
            status: RawStatus,
            kind: String,
        }
        #[derive(serde::Deserialize, Default)]
        struct RawStatus {
            #[serde(default)]
            conditions: Vec<RawCondition>,
        }
        #[derive(serde::Deserialize)]
        struct RawCondition {
            #[serde(rename = "type")]
            kind: String,
            status: String,
        }
        #[derive(serde::Deserialize, Default)]
        struct RawMeta {
            #[serde(default)]
            labels: std::collections::BTreeMap<String, String>,
        }
        #[derive(serde::Deserialize, Default)]
        struct RawSpec {
            #[serde(default, rename = "podCIDR")]
            pod_cidr: Option<String>,
            #[serde(default)]
            taints: Vec<RawTaint>,
        }
        #[derive(serde::Deserialize)]
        struct RawTaint {
            key: String,
            #[serde(default)]
            value: String,
            effect: String,
        }
        let raw: Raw = serde_json::from_str(json).ok()?;
        (raw.kind == "Node").then(|| RegisteredNode {
            pod_cidr: raw.spec.pod_cidr.filter(|c| !c.is_empty()),
            labels: raw.metadata.labels,
            taints: raw
                .spec
                .taints
                .into_iter()
                .map(|t| {
                    if t.value.is_empty() {
                        format!("{}:{}", t.key, t.effect)
                    } else {
                        format!("{}={}:{}", t.key, t.value, t.effect)
                    }
                })
                .collect(),
            ready: raw
                .status
                .conditions
                .iter()
                .any(|c| c.kind == "Ready" && c.status == "True"),
        })
    }
}

/// The `proto` number that marks hactl's pod routes (not one `ip` names; see `rt_protos`).
pub const POD_ROUTE_PROTO: u8 = 76;

impl HostFacts {
    /// The interface that carries `address`, when the host has it.
    pub fn interface_of(&self, address: std::net::IpAddr) -> Option<&str> {
        self.addresses
            .iter()
            .find(|a| a.address == address)
            .map(|a| a.interface.as_str())
    }

    /// When `unit`'s main process started, seconds since the epoch; `None` when it is not
    /// active or the host did not say.
    pub fn unit_started(&self, unit: &str) -> Option<i64> {
        let u = self.units.get(unit).filter(|u| u.active == "active")?;
        (u.started_monotonic_us > 0 && self.boot_time > 0)
            .then(|| self.boot_time + (u.started_monotonic_us / 1_000_000) as i64)
    }

    /// The files among `paths` written after active `unit` started: it still runs what was
    /// there before, so it must restart even though the files already match (a run that
    /// uploaded them stopped before the restart). Empty when the unit is not active.
    ///
    /// Two seconds of slack: the boot time and the file times are whole seconds, and a restart
    /// follows its uploads within the same run, so a file newer by less than that is one the
    /// running process read at its start.
    pub fn written_after_start<'a>(
        &self,
        unit: &str,
        paths: impl IntoIterator<Item = &'a str>,
    ) -> Vec<&'a str> {
        let Some(started) = self.unit_started(unit) else {
            return vec![];
        };
        paths
            .into_iter()
            .filter(|p| {
                self.files
                    .get(*p)
                    .is_some_and(|f| f.mtime > started + STALE_SLACK_SECS)
            })
            .collect()
    }
}

/// See [`HostFacts::written_after_start`].
pub const STALE_SLACK_SECS: i64 = 2;

/// One address on one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddress {
    pub interface: String,
    pub address: std::net::IpAddr,
    pub prefix_length: u8,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitState {
    /// `active`, `inactive`, `failed`, … (systemd ActiveState).
    pub active: String,
    pub main_pid: u32,
    /// `enabled`, `disabled`, `masked`, … (UnitFileState).
    pub enabled: String,
    /// When the main process started, microseconds after boot (ExecMainStartTimestampMonotonic;
    /// 0 when it never started).
    pub started_monotonic_us: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileState {
    pub sha256: String,
    pub mode: u32,
    pub owner: String,
    pub group: String,
    /// Last modification, seconds since the epoch (0 when unknown).
    pub mtime: i64,
}

/// What to ask a host about, besides the fixed facts.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub data_dir: String,
    pub units: Vec<String>,
    pub files: Vec<String>,
    pub binaries: Vec<String>,
    /// A node host: what its node components need to be planned ([`NodeFacts`]).
    pub node: Option<NodeQuery>,
    /// (sha256, first `--version` line) of binaries the operator machine ran already: a
    /// binary on the host whose digest record ([`crate::digest_cache`]) names one of these
    /// digests is the same file, so the probe prints that line instead of starting it.
    pub known_versions: Vec<(String, String)>,
    /// A load balancer: (the directory of `up`'s held-server notes, HAProxy's runtime-API
    /// helper), so the probe reports [`HostFacts::held_servers`].
    pub held_notes: Option<(String, String)>,
}

/// What a node host's facts read about its Node: its name, the apiserver its kubelet uses and
/// the kubelet's credentials (the Node authorizer lets a kubelet read Nodes).
#[derive(Debug, Clone, Default)]
pub struct NodeQuery {
    pub name: String,
    pub server: String,
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// The probe script; arguments: data dir, then `u:<unit>`, `f:<path>`, `b:<binary>`,
/// `r:<record name> <path>` and `v:<sha256> <version line>` words. A large file's digest comes
/// from the record its upload left while the file is untouched ([`crate::digest_cache`]); so
/// does a binary's version, when that digest is one of the `v:` words (same bytes, same
/// `--version`). The `r:` words name the records, so that all of them are read in one batch.
const PROBE: &str = r#"
dd=$1; shift
@JOBS_FN@
known=; names=
for a in "$@"; do case $a in v:*) known="$known${a#v:}
" ;; r:*) names="$names${a#r:}
" ;; esac; done
recs=$(hactl_recorded_list @DIGESTS@ "$names")
@VERSION_FN@
@HELD_NOTES_FN@
. /etc/os-release 2>/dev/null
echo "os $ID $VERSION_ID"
echo "init $(cat /proc/1/comm 2>/dev/null)"
echo "time $(date +%s%N)"
echo "boot $(awk '/^btime/ {print $2}' /proc/stat 2>/dev/null)"
echo "arch $(uname -m)"
if [ "$(id -u)" = 0 ]; then echo "privileged yes"; else echo "privileged no"; fi
command -v apt-get >/dev/null 2>&1 && echo "apt yes"
hactl_job_listen() { ss -Hltnp 2>/dev/null | awk '@LISTEN_AWK@'; }
hactl_bg hactl_job_listen
d=$dd; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
echo "free $(df -PB1 "$d" 2>/dev/null | awk 'NR==2 {print $4}')"
[ -d "$dd/member" ] && echo "member yes"
[ -d "$dd" ] && echo "datadir $(stat -c '%a %U %G' "$dd")"
id etcd >/dev/null 2>&1 && echo "etcduser yes"
if [ -x /usr/local/sbin/hactl-etcdctl ] && [ "$(systemctl is-active etcd.service 2>/dev/null)" = active ]; then
  hactl_job_members() { m=$(/usr/local/sbin/hactl-etcdctl --command-timeout=3s member list -w json 2>/dev/null | tr -d '\n') && echo "members $m"; }
  hactl_job_status() { s=$(/usr/local/sbin/hactl-etcdctl --command-timeout=3s endpoint status -w json 2>/dev/null | tr -d '\n') && echo "status $s"; }
  hactl_bg hactl_job_members
  hactl_bg hactl_job_status
fi
# The binary `etcd` names on PATH is started once, whichever list it is in.
ep=$(command -v etcd 2>/dev/null); ev=
for e in /usr/bin/etcd /usr/local/bin/etcd; do
  if [ -x "$e" ]; then v=$(hactl_version "$e"); echo "etcdbinary $e $v"; [ "$e" = "$ep" ] && ev=$v; fi
done
ip -o addr show 2>/dev/null | awk '{print "addr", $2, $4}'
[ -n "$ep" ] && echo "etcdversion ${ev:-$(hactl_version "$ep")}"
for k in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "/usr/local/bin/$k" ] && echo "kubeversion $k $(hactl_version "/usr/local/bin/$k")"
done
hactl_job_trust() {
  for c in /etc/hactl/pki/etcd/ca.crt /etc/hactl/pki/apiserver-etcd/ca.crt /etc/hactl/pki/kubernetes/ca.crt /etc/hactl/pki/kubernetes/signing-ca.crt /etc/hactl/pki/front-proxy/ca.crt; do
    [ -f "$c" ] && echo "trust $c $(base64 -w0 "$c" 2>/dev/null)"
  done
}
hactl_bg hactl_job_trust
# Units and files are gathered in the loop and read in batches after it: a process or two for
# all of them, not several per file (a host with Kubernetes has about 70 managed files).
units=; files=
for a in "$@"; do
  case $a in
  u:*) units="$units ${a#u:}" ;;
  f:*) [ -f "${a#f:}" ] && files="$files${a#f:}
" ;;
  b:*) b=${a#b:}; w=$(command -v "$b" 2>/dev/null) && echo "bin $b $w" ;;
  h:*) held_dir=${a#h:}; hcli=${held_dir#*|}; held_dir=${held_dir%%|*} ;;
  n:*) set -- $(printf '%s' "${a#n:}" | tr '|' ' ')
       n_name=$1 n_server=$2 n_ca=$3 n_cert=$4 n_key=$5
       d=/var/lib/containerd; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
       echo "snapfs $(stat -f -c %T "$d" 2>/dev/null)"
       c=/proc/sys/net/netfilter/nf_conntrack_max
       if [ ! -e "$c" ]; then echo "conntrackmax absent"; elif [ -w "$c" ]; then echo "conntrackmax writable"; else echo "conntrackmax readonly"; fi
       if command -v ctr >/dev/null 2>&1 && [ "$(systemctl is-active containerd.service 2>/dev/null)" = active ]; then
         hactl_job_images() { ctr -n k8s.io images ls 2>/dev/null | awk 'NR > 1 && $3 ~ /^sha256:/ {print "ctrimage", $1, $3}'; }
         hactl_bg hactl_job_images
       fi
       ip -o route show proto @PROTO@ 2>/dev/null | awk '$2 == "via" {print "podroute", $1, $3}'
       if [ -r "$n_key" ] && [ -r "$n_cert" ] && [ -r "$n_ca" ]; then
         hactl_job_node() {
           # Asked twice before it counts as unknown: one slow answer under load is no news.
           for try in 1 2; do
             out=$(curl -sS --max-time 4 -w '\n%{http_code}' --cacert "$n_ca" --cert "$n_cert" --key "$n_key" "$n_server/api/v1/nodes/$n_name" 2>&1)
             code=$(printf '%s\n' "$out" | tail -n 1)
             case $code in 200|404) break ;; esac
           done
           case $code in
           200) echo "node $(printf '%s\n' "$out" | sed '$d' | tr -d '\n')" ;;
           404) echo "node absent" ;;
           *) echo "node unknown $(printf '%s\n' "$out" | head -n 1)" ;;
           esac
         }
         hactl_bg hactl_job_node
       fi ;;
  esac
done
if [ -n "$units" ]; then
  # One systemctl for every unit; its blocks (blank-line separated) come in the order asked.
  hactl_job_units() {
    systemctl show -p ActiveState -p MainPID -p UnitFileState -p ExecMainStartTimestampMonotonic $units 2>/dev/null |
      awk -v names="$units" 'BEGIN { n = split(names, u, " "); i = 1 }
        /^$/ { if (i <= n) print "unit", u[i], s; i++; s = ""; next }
        { s = s $0 " " }
        END { for (; i <= n; i++) { print "unit", u[i], s; s = "" } }'
  }
  hactl_bg hactl_job_units
fi
if [ -n "$files" ]; then
  hactl_job_files() {
    # One stat for every file: size, mode, owner, group, mtime, path.
    st=$(printf '%s' "$files" | tr '\n' '\0' | xargs -0 stat -c '%s %a %U %G %Y %n' 2>/dev/null)
    # A large file's digest from its record (read above, in `recs`); the others, and a large file
    # without a record that matches it, hashed by one sha256sum.
    split=$(printf '%s\n--\n%s\n' "$recs" "$st" | awk -v min=@MIN_SIZE@ '
      $0 == "--" { s = 1; next }
      !s { if (NF > 1) { p = $0; sub(/^[^ ]* /, "", p); r[p] = $1 }; next }
      NF < 6 { next }
      { p = $0; sub(/^[^ ]* [^ ]* [^ ]* [^ ]* [^ ]* /, "", p)
        if ($1 + 0 >= min && (p in r)) print "file", p, r[p], $2, $3, $4, $5; else print "hash", p }')
    small=
    while read -r k rest; do
      case $k in
      file) echo "file $rest" ;;
      hash) small="$small$rest
" ;;
      esac
    done <<HACTL_SPLIT
$split
HACTL_SPLIT
    if [ -n "$small" ]; then
      sums=$(printf '%s' "$small" | tr '\n' '\0' | xargs -0 sha256sum 2>/dev/null)
      printf '%s\n--\n%s\n' "$st" "$sums" | awk '
        $0 == "--" { h = 1; next }
        !h { p = $0; sub(/^[^ ]* [^ ]* [^ ]* [^ ]* [^ ]* /, "", p); m[p] = $2 " " $3 " " $4 " " $5; next }
        length($0) > 66 { p = substr($0, 67); if (p in m) print "file", p, $1, m[p] }'
    fi
    # A file hactl did not write: no "Managed by hactl" in its first 3 lines.
    printf '%s' "$files" | tr '\n' '\0' | xargs -0 awk '
      BEGIN { for (i = 1; i < ARGC; i++) m[ARGV[i]] = 0 }
      FNR <= 3 && /Managed by hactl/ { m[FILENAME] = 1 }
      FNR >= 3 { nextfile }
      END { for (f in m) if (!m[f]) print "foreign", f }' 2>/dev/null
  }
  hactl_bg hactl_job_files
fi
# A load balancer: the servers a cut `up` left out of a backend (their notes), with HAProxy's
# status of each (column 18 of `show stat`, read raw so any version of the helper serves), all
# joined by one awk. No process started where there is no note.
if [ -n "${held_dir:-}" ]; then
  held=$(hactl_held_notes "$held_dir")
  [ -z "$held" ] || { printf '%s\n--\n' "$held"; "$hcli" show stat 2>/dev/null; } | awk '
    $0 == "--" { s = 1; FS = ","; next }
    !s { n[++k] = $1; t[$1] = $2; next }
    { st[$1 "," $2] = $18 }
    END { for (i = 1; i <= k; i++) print "heldserver", n[i], t[n[i]], st[n[i]] }'
fi
hactl_jobs_collect
# What is missing is a fact, not a failure (dash's `command -v` of a missing binary is 127).
exit 0
"#;

/// The probe's slow reads run side by side: each of etcdctl's two calls, `ss`, `systemctl show`,
/// `ctr images ls` and the Node's read through the API spends tens of milliseconds in its own
/// process start, TLS or D-Bus round trip, and one after another they were most of a host's
/// probe. `hactl_bg FN` runs the function `FN` (no arguments; it reads the probe's variables) in
/// the background, its output to a file of a private directory under `/dev/shm` or `/tmp`;
/// `hactl_jobs_collect` waits for them all, prints each one's output whole (facts are lines, in
/// no order the parser needs), and removes the directory. A job whose output did not end with
/// its completion mark (a full disk, a failed write) runs again in the foreground, as every job
/// does when no directory can be made, so a lost write never becomes a missing fact.
const JOBS_FN: &str = r#"hactl_jobs=$(mktemp -d /dev/shm/hactl-facts.XXXXXX 2>/dev/null || mktemp -d 2>/dev/null) || hactl_jobs=
[ -z "$hactl_jobs" ] || trap 'rm -rf "$hactl_jobs"' EXIT
[ -z "$hactl_jobs" ] || trap 'rm -rf "$hactl_jobs"; exit 1' HUP INT TERM
hactl_njobs=0
hactl_bg() {
  hactl_njobs=$((hactl_njobs + 1))
  eval "hactl_fn_$hactl_njobs=\$1"
  if [ -n "$hactl_jobs" ]; then
    { "$1"; echo hactl-job-done; } > "$hactl_jobs/$hactl_njobs" 2>/dev/null &
  else
    "$1"
  fi
}
hactl_jobs_collect() {
  [ -n "$hactl_jobs" ] || return 0
  wait
  # A job that left no output (no file, or an empty one) runs again; awk reads the others.
  hj_i=1; hj_files=; hj_again=
  while [ "$hj_i" -le "$hactl_njobs" ]; do
    if [ -s "$hactl_jobs/$hj_i" ]; then hj_files="$hj_files $hactl_jobs/$hj_i"; else hj_again="$hj_again $hj_i"; fi
    hj_i=$((hj_i + 1))
  done
  # One awk for all: a job's lines but its mark when the mark ends them; its number otherwise.
  if [ -n "$hj_files" ]; then
    { hj_more=$(awk '
        function flush() { if (f == "") return; if (n > 0 && l[n] == "hactl-job-done") { for (j = 1; j < n; j++) print l[j] } else { k = f; sub(/.*\//, "", k); print k > "/dev/stderr" }; n = 0 }
        FNR == 1 { flush(); f = FILENAME }
        { l[++n] = $0 }
        END { flush() }' $hj_files 2>&1 >&3); } 3>&1
    hj_again="$hj_again $hj_more"
  fi
  for hj_i in $hj_again; do
    case $hj_i in ''|*[!0-9]*) continue ;; esac
    eval "\"\$hactl_fn_$hj_i\""
  done
}"#;

/// The awk program that turns `ss -Hltnp` lines into `listen <port> <process>` facts: the port
/// after the local address's last colon, the process from `users:(("name",…` (`-` when `ss`
/// names none). One process for every line, where a `sed` per line was.
const LISTEN_AWK: &str = r#"{ port = $4; sub(/.*:/, "", port); name = "-"
  if (match($0, /\(\("[^"]*"/)) name = substr($0, RSTART + 3, RLENGTH - 4)
  print "listen", port, name }"#;

/// Shell function `hactl_version PATH`: the first line of `PATH --version`, or, when PATH's
/// digest record matches it (a `<sha256> <path>` line of `$recs`) and names a digest listed in
/// `$known` (`<sha256> <line>` lines), that line without starting PATH. The pairs are joined
/// once, by one awk, into `$vers` (`<path> <line>`), and looked up by the shell's own `read`.
const VERSION_FN: &str = r#"vers=
if [ -n "$known" ] && [ -n "$recs" ]; then
  vers=$(printf '%s\n--\n%s\n' "$known" "$recs" | awk '
    $0 == "--" { s = 1; next }
    !s { if (NF > 0) { d = $1; sub(/^[^ ]* ?/, ""); line[d] = $0 }; next }
    ($1 in line) { p = $0; sub(/^[^ ]* /, "", p); print p, line[$1] }')
fi
hactl_version() {
  while read -r vp vl; do
    [ "$vp" = "$1" ] && { echo "$vl"; return 0; }
  done <<HACTL_VERS
$vers
HACTL_VERS
  "$1" --version 2>/dev/null | head -n1
}"#;

/// The binaries whose versions the probe reads (their records are named to it, [`PROBE`]).
const VERSION_PATHS: [&str; 5] = [
    "/usr/bin/etcd",
    "/usr/local/bin/etcd",
    "/usr/local/bin/kube-apiserver",
    "/usr/local/bin/kube-controller-manager",
    "/usr/local/bin/kube-scheduler",
];

/// The read-only command that gathers facts for `query`.
pub fn probe_command(query: &Query) -> RemoteCommand {
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "{}{}",
            crate::digest_cache::shell_functions(),
            PROBE
                .replace("@JOBS_FN@", JOBS_FN)
                .replace("@VERSION_FN@", VERSION_FN)
                .replace("@HELD_NOTES_FN@", HELD_NOTES_FN)
                .replace("@LISTEN_AWK@", LISTEN_AWK)
                .replace("@PROTO@", &POD_ROUTE_PROTO.to_string())
                .replace("@DIGESTS@", crate::digest_cache::DIR)
                .replace("@MIN_SIZE@", &crate::digest_cache::MIN_SIZE.to_string())
        ),
        "hactl-facts".to_string(),
        query.data_dir.clone(),
    ];
    argv.extend(query.units.iter().map(|u| format!("u:{u}")));
    argv.extend(query.files.iter().map(|f| format!("f:{f}")));
    argv.extend(query.binaries.iter().map(|b| format!("b:{b}")));
    let mut recorded: Vec<&str> = query.files.iter().map(String::as_str).collect();
    recorded.extend(
        VERSION_PATHS
            .iter()
            .filter(|p| !query.files.iter().any(|f| f == *p)),
    );
    argv.extend(
        recorded
            .into_iter()
            .map(|p| format!("r:{} {p}", crate::digest_cache::record_name(p))),
    );
    argv.extend(
        query
            .known_versions
            .iter()
            .map(|(sha, line)| format!("v:{sha} {line}")),
    );
    if let Some((dir, cli)) = &query.held_notes {
        argv.push(format!("h:{dir}|{cli}"));
    }
    // Last: the node word sets the positional parameters for itself.
    if let Some(n) = &query.node {
        argv.push(format!("n:{}|{}|{}|{}|{}", n.name, n.server, n.ca, n.cert, n.key));
    }
    RemoteCommand::read_only(argv)
}

/// Errors while gathering facts.
#[derive(Debug, thiserror::Error)]
pub enum FactsError {
    #[error("failed to run the facts probe")]
    Transport(#[from] crate::ssh::Error),
    #[error("the facts probe exited with {status:?}: {stderr}")]
    Probe { status: Option<u32>, stderr: String },
}

/// Gathers facts from one host in one round trip.
pub async fn gather(t: &dyn Transport, query: &Query) -> Result<HostFacts, FactsError> {
    let out = t.run(&probe_command(query)).await?;
    if !out.success() {
        return Err(FactsError::Probe {
            status: out.status,
            stderr: out.stderr_str().trim().to_string(),
        });
    }
    let mut facts = parse(&out.stdout_str());
    if !facts.privileged && t.sudo() {
        // Commands run through `sudo -n`, which would have failed above; reaching here means
        // the probe ran as the login user without sudo.
        facts.privileged = false;
    }
    Ok(facts)
}

fn node(f: &mut HostFacts) -> &mut NodeFacts {
    f.node.get_or_insert_with(NodeFacts::default)
}

/// Parses the probe's output (one fact per line; unknown lines are ignored).
pub fn parse(text: &str) -> HostFacts {
    let mut f = HostFacts::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(key) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        match key {
            "os" => {
                f.os_id = rest.first().unwrap_or(&"").to_string();
                f.os_version = rest.get(1).unwrap_or(&"").to_string();
            }
            "init" => f.init = rest.join(" "),
            "time" => f.time_ns = rest.first().and_then(|t| t.parse().ok()).unwrap_or(0),
            "boot" => f.boot_time = rest.first().and_then(|t| t.parse().ok()).unwrap_or(0),
            "arch" => f.arch = rest.join(" "),
            "privileged" => f.privileged = rest.first() == Some(&"yes"),
            "apt" => f.apt = true,
            "listen" => {
                if let Some(port) = rest.first().and_then(|p| p.parse().ok()) {
                    f.listeners
                        .entry(port)
                        .or_default()
                        .insert(rest.get(1).unwrap_or(&"-").to_string());
                }
            }
            "free" => f.data_dir_free_bytes = rest.first().and_then(|b| b.parse().ok()),
            "member" => f.data_dir_has_member = true,
            "datadir" => {
                if let [mode, owner, group] = rest.as_slice() {
                    f.data_dir = Some(FileState {
                        sha256: String::new(),
                        mode: u32::from_str_radix(mode, 8).unwrap_or(0),
                        owner: owner.to_string(),
                        group: group.to_string(),
                        mtime: 0,
                    });
                }
            }
            "etcduser" => f.etcd_user = true,
            "heldserver" => {
                let mut words = rest.iter().copied();
                if let Some((backend, server, since)) = parse_held_note(&mut words) {
                    f.held_servers.push(HeldServer {
                        backend: backend.to_string(),
                        server: server.to_string(),
                        since: since.to_string(),
                        status: words.collect::<Vec<_>>().join(" "),
                    });
                }
            }
            "members" => f.members = serde_json::from_str(&rest.join(" ")).ok(),
            "etcdversion" => f.etcd_version = Some(rest.join(" ")),
            "status" => {
                f.etcd_status =
                    serde_json::from_str::<Vec<crate::etcd::health::EndpointStatus>>(&rest.join(" "))
                        .ok()
                        .and_then(|s| s.into_iter().next())
                        .map(|s| s.status)
            }
            "etcdbinary" => {
                if let Some((path, version)) = rest.split_first() {
                    f.etcd_binaries.insert(path.to_string(), version.join(" "));
                }
            }
            "kubeversion" => {
                if let Some((name, version)) = rest.split_first() {
                    f.kube_versions.insert(name.to_string(), version.join(" "));
                }
            }
            "bin" => {
                if let [name, path, ..] = rest.as_slice() {
                    f.binaries.insert(name.to_string(), path.to_string());
                }
            }
            "unit" => {
                if let Some((name, props)) = rest.split_first() {
                    let mut u = UnitState::default();
                    for p in props {
                        match p.split_once('=') {
                            Some(("ActiveState", v)) => u.active = v.to_string(),
                            Some(("MainPID", v)) => u.main_pid = v.parse().unwrap_or(0),
                            Some(("UnitFileState", v)) => u.enabled = v.to_string(),
                            Some(("ExecMainStartTimestampMonotonic", v)) => {
                                u.started_monotonic_us = v.parse().unwrap_or(0)
                            }
                            _ => {}
                        }
                    }
                    f.units.insert(name.to_string(), u);
                }
            }
            "trust" => {
                use base64::Engine as _;
                if let [path, b64] = rest.as_slice() {
                    if let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(b64) {
                        f.trusted
                            .insert(path.to_string(), String::from_utf8_lossy(&pem).into_owned());
                    }
                }
            }
            "foreign" => {
                if let Some(path) = rest.first() {
                    f.foreign.insert(path.to_string());
                }
            }
            "file" => {
                if let [path, sha, mode, owner, group, mtime @ ..] = rest.as_slice() {
                    f.files.insert(
                        path.to_string(),
                        FileState {
                            sha256: sha.to_string(),
                            mode: u32::from_str_radix(mode, 8).unwrap_or(0),
                            owner: owner.to_string(),
                            group: group.to_string(),
                            mtime: mtime.first().and_then(|m| m.parse().ok()).unwrap_or(0),
                        },
                    );
                }
            }
            "snapfs" => node(&mut f).snapshot_fs = rest.join(" "),
            "conntrackmax" => {
                node(&mut f).conntrack_max = match rest.first() {
                    Some(&"readonly") => ConntrackMax::ReadOnly,
                    Some(&"absent") => ConntrackMax::Absent,
                    _ => ConntrackMax::Writable,
                }
            }
            "ctrimage" => {
                if let [reference, digest] = rest.as_slice() {
                    node(&mut f)
                        .images
                        .insert(reference.to_string(), digest.to_string());
                }
            }
            "podroute" => {
                if let [dst, via] = rest.as_slice() {
                    node(&mut f).pod_routes.insert(dst.to_string(), via.to_string());
                }
            }
            "node" => {
                let raw = line.trim_start().strip_prefix("node").unwrap_or("").trim();
                node(&mut f).api = match raw {
                    "absent" => NodeApi::Absent,
                    _ if raw.starts_with("unknown") => {
                        NodeApi::Unknown(raw.trim_start_matches("unknown").trim().to_string())
                    }
                    json => match RegisteredNode::parse(json) {
                        Some(n) => NodeApi::Registered(n),
                        None => NodeApi::Unknown("the answer is not a Node".into()),
                    },
                };
            }
            "addr" => {
                if let [interface, cidr] = rest.as_slice() {
                    let (ip, prefix) = cidr.split_once('/').unwrap_or((cidr, ""));
                    if let (Ok(address), Ok(prefix_length)) = (ip.parse(), prefix.parse()) {
                        f.addresses.push(InterfaceAddress {
                            interface: interface.to_string(),
                            address,
                            prefix_length,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_recorded_probe() {
        let text = "os debian 13\ninit systemd\ntime 1763776000123456789\narch x86_64\nprivileged yes\napt yes\n\
listen 22 sshd\nlisten 2379 etcd\nfree 52428800000\nmember yes\netcdversion etcd Version: 3.5.16\n\
unit etcd.service ActiveState=active MainPID=412 UnitFileState=enabled \n\
file /etc/hactl/pki/etcd/ca.crt 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 644 root root\n\
bin etcd /usr/bin/etcd\netcdbinary /usr/local/bin/etcd etcd Version: 3.5.16\n\
status [{\"Endpoint\":\"https://127.0.0.1:2379\",\"Status\":{\"header\":{\"cluster_id\":1,\"member_id\":7,\"revision\":5,\"raft_term\":2},\"version\":\"3.4.23\",\"dbSize\":20480,\"leader\":7,\"raftIndex\":9,\"raftTerm\":2}}]\n\
kubeversion kube-apiserver Kubernetes v1.31.4\naddr lo 127.0.0.1/8\naddr host0 10.0.0.21/24\naddr host0 fe80::1/64\n";
        let f = parse(text);
        assert_eq!(f.interface_of("10.0.0.21".parse().unwrap()), Some("host0"));
        assert_eq!(f.interface_of("fe80::1".parse().unwrap()), Some("host0"));
        assert_eq!(f.interface_of("10.0.0.100".parse().unwrap()), None);
        assert_eq!((f.os_id.as_str(), f.os_version.as_str()), ("debian", "13"));
        assert_eq!(f.init, "systemd");
        assert_eq!(f.time_ns, 1763776000123456789);
        assert!(f.privileged && f.apt && f.data_dir_has_member);
        assert_eq!(f.listeners[&2379].iter().collect::<Vec<_>>(), ["etcd"]);
        assert_eq!(f.data_dir_free_bytes, Some(52428800000));
        assert_eq!(f.etcd_version.as_deref(), Some("etcd Version: 3.5.16"));
        let u = &f.units["etcd.service"];
        assert_eq!(
            (u.active.as_str(), u.main_pid, u.enabled.as_str()),
            ("active", 412, "enabled")
        );
        let file = &f.files["/etc/hactl/pki/etcd/ca.crt"];
        assert_eq!((file.mode, file.owner.as_str()), (0o644, "root"));
        assert_eq!(f.binaries["etcd"], "/usr/bin/etcd");
        assert_eq!(f.kube_versions["kube-apiserver"], "Kubernetes v1.31.4");
        assert_eq!(f.etcd_binaries["/usr/local/bin/etcd"], "etcd Version: 3.5.16");
        let status = f.etcd_status.unwrap();
        assert_eq!(
            (status.version.as_str(), status.header.member_id, status.leader),
            ("3.4.23", 7, 7)
        );
    }

    #[test]
    fn a_node_hosts_probe_reads_its_images_routes_and_node() {
        let node = r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"w1","labels":{"kubernetes.io/hostname":"w1"}},"spec":{"podCIDR":"10.244.3.0/24","podCIDRs":["10.244.3.0/24"],"taints":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"},{"key":"k","value":"v","effect":"NoExecute"}]},"status":{"conditions":[{"type":"Ready","status":"True","message":"kubelet is  posting ready status"}]}}"#;
        let text = format!(
            "snapfs overlayfs\nconntrackmax readonly\n\
ctrimage hactl.local/pause:3.4 sha256:{d}\n\
podroute 10.244.4.0/24 10.0.0.42\nnode {node}\n",
            d = "0e".repeat(32)
        );
        let f = parse(&text);
        let n = f.node.unwrap();
        assert_eq!(n.snapshot_fs, "overlayfs");
        assert_eq!(n.conntrack_max, ConntrackMax::ReadOnly);
        assert_eq!(
            n.images["hactl.local/pause:3.4"],
            format!("sha256:{}", "0e".repeat(32))
        );
        assert_eq!(n.pod_routes["10.244.4.0/24"], "10.0.0.42");
        let r = n.api.registered().unwrap();
        assert_eq!(r.pod_cidr.as_deref(), Some("10.244.3.0/24"));
        assert_eq!(r.labels["kubernetes.io/hostname"], "w1");
        assert!(r.ready);
        let not_ready = node.replace(r#""status":"True""#, r#""status":"False""#);
        let f = parse(&format!("node {not_ready}\n"));
        assert!(!f.node.unwrap().api.registered().unwrap().ready);
        assert_eq!(
            r.taints,
            ["node-role.kubernetes.io/master:NoSchedule", "k=v:NoExecute"]
        );
        assert_eq!(parse("node absent\n").node.unwrap().api, NodeApi::Absent);
        assert_eq!(
            parse("node unknown curl: (7) Failed to connect\n")
                .node
                .unwrap()
                .api,
            NodeApi::Unknown("curl: (7) Failed to connect".into())
        );
        assert_eq!(
            parse("node {\"kind\":\"Status\"}\n").node.unwrap().api,
            NodeApi::Unknown("the answer is not a Node".into())
        );
        assert_eq!(
            parse("os debian 13\n").node,
            None,
            "not a node host: nothing asked"
        );
        // The probe asks only with the node word, and passes what it needs.
        let cmd = probe_command(&Query {
            node: Some(NodeQuery {
                name: "w1".into(),
                server: "https://10.0.0.100:6443".into(),
                ca: "/ca".into(),
                cert: "/c".into(),
                key: "/k".into(),
            }),
            ..Query::default()
        });
        assert_eq!(
            cmd.argv.last().map(String::as_str),
            Some("n:w1|https://10.0.0.100:6443|/ca|/c|/k")
        );
        assert!(cmd.read_only);
        assert!(
            cmd.argv[2].contains("proto 76"),
            "the route protocol is filled in"
        );
    }

    #[test]
    fn files_written_after_a_unit_started_are_reported_beyond_the_slack() {
        // Booted at 1000; etcd started 500 s after boot (1500); kube-apiserver is stopped.
        let text = "boot 1000\n\
unit etcd.service ActiveState=active MainPID=412 UnitFileState=enabled ExecMainStartTimestampMonotonic=500000000\n\
unit kube-apiserver.service ActiveState=inactive MainPID=0 UnitFileState=enabled ExecMainStartTimestampMonotonic=0\n\
file /bin/etcd aa 755 root root 1400\nfile /ca.crt bb 644 root root 1502\nfile /peer.crt cc 644 root root 1503\n";
        let f = parse(text);
        assert_eq!(f.boot_time, 1000);
        assert_eq!(f.unit_started("etcd.service"), Some(1500));
        assert_eq!(f.files["/bin/etcd"].mtime, 1400);
        assert_eq!(
            f.written_after_start("etcd.service", ["/bin/etcd", "/ca.crt", "/peer.crt", "/missing"]),
            ["/peer.crt"],
            "written before the start, or within the slack, does not count"
        );
        assert_eq!(f.unit_started("kube-apiserver.service"), None);
        assert!(f
            .written_after_start("kube-apiserver.service", ["/peer.crt"])
            .is_empty());
        assert!(f.written_after_start("absent.service", ["/peer.crt"]).is_empty());
    }

    #[test]
    fn the_probe_is_read_only_and_names_its_queries() {
        let cmd = probe_command(&Query {
            data_dir: "/var/lib/etcd".into(),
            units: vec!["etcd.service".into()],
            files: vec!["/etc/a b".into()],
            binaries: vec!["etcd".into()],
            node: None,
            known_versions: vec![("ab".repeat(32), "Kubernetes v1.20.2".into())],
            held_notes: None,
        });
        assert!(cmd.read_only);
        assert_eq!(
            &cmd.argv[4..],
            ["/var/lib/etcd", "u:etcd.service", "f:/etc/a b", "b:etcd",]
                .into_iter()
                .map(String::from)
                .chain(
                    std::iter::once("/etc/a b")
                        .chain(VERSION_PATHS)
                        .map(|p| format!("r:{} {p}", crate::digest_cache::record_name(p)))
                )
                .chain([format!("v:{} Kubernetes v1.20.2", "ab".repeat(32))])
                .collect::<Vec<_>>()
        );
    }

    /// `ss -Hltnp` lines as Debian's iproute2 prints them: IPv4, IPv6, two processes on one
    /// socket (the first named), none named.
    #[test]
    fn listeners_are_read_from_ss_lines_by_one_awk() {
        let lines = "LISTEN 0      4096   127.0.0.1:2379  0.0.0.0:*   users:((\"etcd\",pid=81,fd=7))\n\
            LISTEN 0 4096 [::]:6443 [::]:* users:((\"kube-apiserver\",pid=9,fd=3),(\"x\",pid=1,fd=2))\n\
            LISTEN 0 128 0.0.0.0:22 0.0.0.0:*\n";
        let (ok, out) = crate::local_command::sh_with_input("awk \"$1\"", &[LISTEN_AWK], lines.as_bytes());
        assert!(ok, "{out}");
        let f = parse(&out);
        let got: Vec<(u16, Vec<&str>)> = f
            .listeners
            .iter()
            .map(|(p, n)| (*p, n.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            [
                (22, vec!["-"]),
                (2379, vec!["etcd"]),
                (6443, vec!["kube-apiserver"])
            ]
        );
    }

    /// The probe's background jobs under the real `sh`: every job's lines come out once, whole;
    /// a job whose output lost its end (here it closed its own output before the mark) or whose
    /// file is gone runs again in the foreground; the scratch directory is removed.
    #[test]
    fn background_jobs_print_each_output_once_and_run_a_lost_one_again() {
        let script = format!(
            r#"{JOBS_FN}
a() {{ echo "one 1"; echo "one 2"; }}
b() {{ sleep 0.2; echo "two"; }}
c() {{ echo "three"; [ -n "$fg" ] || exec >/dev/null; }}
d() {{ [ -n "$fg" ] || rm -f "$hactl_jobs/4"; echo "four"; }}
hactl_bg a; hactl_bg b; hactl_bg c; hactl_bg d
fg=yes
hactl_jobs_collect
echo "dir $hactl_jobs""#
        );
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        let dir = lines.pop().unwrap().strip_prefix("dir ").unwrap().to_string();
        assert!(!dir.is_empty(), "{text}");
        lines.sort();
        assert_eq!(lines, ["four", "one 1", "one 2", "three", "two"], "{text}");
        assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
        // The whole probe cleans up after itself too (its EXIT trap), here told to name its
        // directory just before it exits.
        let mut cmd = probe_command(&Query {
            units: vec!["hactl-no-such.service".into()],
            ..Query::default()
        });
        assert!(cmd.argv[2].ends_with("\nexit 0\n"), "{}", cmd.argv[2]);
        cmd.argv[2] = cmd.argv[2].replace("\nexit 0\n", "\necho \"jobsdir $hactl_jobs\"\nexit 0\n");
        let out = String::from_utf8_lossy(&cmd.run_in("sh").stdout).into_owned();
        let f = parse(&out);
        assert!(f.units.contains_key("hactl-no-such.service"), "{out}");
        let dir = out
            .lines()
            .find_map(|l| l.strip_prefix("jobsdir "))
            .unwrap_or_default();
        assert!(!dir.is_empty(), "the probe made no directory: {out}");
        assert!(!std::path::Path::new(dir).exists(), "the probe left {dir}");
    }

    #[test]
    fn the_probe_runs_in_a_real_shell() {
        let cmd = probe_command(&Query {
            data_dir: "/nonexistent/etcd".into(),
            units: vec![],
            files: vec!["/etc/hostname".into()],
            binaries: vec!["sh".into()],
            node: None,
            known_versions: vec![],
            held_notes: None,
        });
        let out = cmd.run_in("sh");
        let f = parse(&String::from_utf8_lossy(&out.stdout));
        assert!(f.time_ns > 0);
        assert!(
            f.data_dir_free_bytes.is_some(),
            "free space of the nearest existing parent"
        );
        assert!(!f.data_dir_has_member);
        assert!(f.binaries.contains_key("sh"));
    }

    /// A load balancer's notes of servers `up` took out: each with its time and HAProxy's status
    /// (read once, through the helper; here a stand-in printing a recorded `show stat`), and an
    /// empty line for a server HAProxy does not list. No note, no helper call.
    #[test]
    fn the_probe_reports_held_servers_with_haproxys_status() {
        let dir = tempfile::tempdir().unwrap();
        let notes = dir.path().join("held");
        std::fs::create_dir(&notes).unwrap();
        let calls = dir.path().join("calls");
        let cli = dir.path().join("cli");
        std::fs::write(
            &cli,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\nprintf '%s\\n' '# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status' \
                 'kubernetes-api,cp2,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT' 'etcd-client,cp3,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP'\n",
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let query = Query {
            data_dir: "/nonexistent/etcd".into(),
            held_notes: Some((notes.display().to_string(), cli.display().to_string())),
            ..Query::default()
        };
        let probe = || {
            parse(&String::from_utf8_lossy(
                &probe_command(&query).run_in("sh").stdout,
            ))
        };
        assert!(probe().held_servers.is_empty());
        assert!(!calls.exists(), "the helper ran without a note");
        std::fs::write(notes.join("kubernetes-api,cp2"), "2026-11-26T10:00:00Z\n").unwrap();
        std::fs::write(notes.join("etcd-client,cp3"), "2026-11-26T10:01:00Z\n").unwrap();
        std::fs::write(notes.join("etcd-client,cp9"), "").unwrap();
        let held = probe().held_servers;
        assert_eq!(
            held.iter()
                .map(|h| (
                    h.backend.as_str(),
                    h.server.as_str(),
                    h.since.as_str(),
                    h.status.as_str(),
                    h.out()
                ))
                .collect::<Vec<_>>(),
            [
                ("etcd-client", "cp3", "2026-11-26T10:01:00Z", "UP", false),
                ("etcd-client", "cp9", "-", "", false),
                ("kubernetes-api", "cp2", "2026-11-26T10:00:00Z", "MAINT", true),
            ]
        );
        assert_eq!(
            std::fs::read_to_string(&calls).unwrap(),
            "show stat\n",
            "one helper call"
        );
    }

    /// The files' batch: every existing file's digest (the large one hashed while it has no
    /// record, then taken from its record), mode, owner and mtime, and which files lack hactl's marker
    /// (an empty file too), as the per-file probe read them.
    #[test]
    fn the_probe_reads_every_file_in_one_batch() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        std::fs::write(path("managed"), "# Managed by hactl\nkey: value\n").unwrap();
        std::fs::write(path("foreign"), "one\ntwo\nthree\nManaged by hactl\n").unwrap();
        std::fs::write(path("empty"), "").unwrap();
        let big = vec![b'x'; crate::digest_cache::MIN_SIZE + 1];
        std::fs::write(path("big"), &big).unwrap();
        std::fs::set_permissions(
            path("managed"),
            std::os::unix::fs::PermissionsExt::from_mode(0o640),
        )
        .unwrap();
        let sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
        let names = ["managed", "foreign", "empty", "big", "missing"];
        let cmd = probe_command(&Query {
            data_dir: "/nonexistent/etcd".into(),
            units: vec![],
            files: names.iter().map(|n| path(n)).collect(),
            binaries: vec![],
            node: None,
            known_versions: vec![],
            held_notes: None,
        });
        let out = cmd.run_in("sh");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let f = parse(&String::from_utf8_lossy(&out.stdout));
        let got: Vec<&str> = f.files.keys().map(|k| k.as_str()).collect();
        let mut want: Vec<String> = names[..4].iter().map(|n| path(n)).collect();
        want.sort();
        assert_eq!(got, want, "every existing file, the missing one left out");
        assert_eq!(
            f.files[&path("managed")].sha256,
            sha(b"# Managed by hactl\nkey: value\n")
        );
        assert_eq!(f.files[&path("managed")].mode, 0o640);
        assert_eq!(f.files[&path("empty")].sha256, sha(b""));
        assert_eq!(f.files[&path("big")].sha256, sha(&big));
        let meta = std::fs::metadata(path("managed")).unwrap();
        assert_eq!(
            f.files[&path("managed")].mtime,
            std::os::unix::fs::MetadataExt::mtime(&meta)
        );
        assert!(!f.files[&path("managed")].owner.is_empty());
        let foreign: Vec<String> = f.foreign.iter().cloned().collect();
        // The big file (no marker, like the binaries hactl uploads) counts as foreign, as before.
        assert_eq!(foreign, [path("big"), path("empty"), path("foreign")]);

        // With a record of the big file (a digest that is not its content's, to show which was
        // used) in a records directory of the test's own, that record is the digest; the small
        // files are hashed as before.
        // A small file's record (none is written for one; here it is) is never read.
        let records = path("digests");
        let recorded = "e".repeat(64);
        for file in ["big", "managed"] {
            let status = std::process::Command::new("sh")
                .args([
                    "-c",
                    &format!(
                        "{}hactl_digest_record \"$1\" \"$2\" \"$3\"",
                        crate::digest_cache::shell_functions()
                    ),
                    "t",
                    &records,
                    &path(file),
                    &recorded,
                ])
                .status()
                .unwrap();
            assert!(status.success());
        }
        let mut cmd = cmd;
        cmd.argv[2] = cmd.argv[2].replace(crate::digest_cache::DIR, &records);
        let out = cmd.run_in("sh");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let f = parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(f.files[&path("big")].sha256, recorded, "the record");
        assert_eq!(
            f.files[&path("managed")].sha256,
            sha(b"# Managed by hactl\nkey: value\n"),
            "small: hashed"
        );
        assert_eq!(f.files[&path("empty")].sha256, sha(b""));
        assert_eq!(f.files.len(), 4);
    }

    #[test]
    fn a_fresh_host_without_the_binaries_is_a_fact_not_a_probe_failure() {
        // A fresh VM has none of etcd, HAProxy or curl: the probe must still succeed and say so
        // (it used to exit with the status of the last `command -v`: 127 under dash).
        let cmd = probe_command(&Query {
            data_dir: "/nonexistent/etcd".into(),
            units: vec![],
            files: vec!["/nonexistent/file".into()],
            binaries: vec!["sh".into(), "hactl-no-such-binary".into()],
            node: None,
            known_versions: vec![],
            held_notes: None,
        });
        for shell in ["sh", "bash"] {
            let out = cmd.run_in(shell);
            assert!(out.status.success(), "{shell}: {:?}", out.status);
            let f = parse(&String::from_utf8_lossy(&out.stdout));
            assert!(f.binaries.contains_key("sh"));
            assert!(!f.binaries.contains_key("hactl-no-such-binary"));
            assert!(f.files.is_empty());
        }
    }

    /// A binary's version is read from the digest list only when its record matches the file
    /// and names a listed digest; otherwise the binary is started. (The stand-in prints a
    /// version the list does not, so the output shows which way it went.)
    #[test]
    fn a_binarys_version_comes_from_a_known_digest_only_when_its_record_matches() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("digests");
        let bin = dir.path().join("kube-apiserver");
        std::fs::write(&bin, "#!/bin/sh\necho 'Kubernetes v9.9.9'\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (records, bin) = (records.to_str().unwrap(), bin.to_str().unwrap());
        let listed = "c".repeat(64);
        let names = format!("{} {bin}\n", crate::digest_cache::record_name(bin));
        let run = |known: &str| {
            let script = format!(
                "{}known=$1\nrecs=$(hactl_recorded_list \"$3\" \"$4\")\n{VERSION_FN}\nhactl_version \"$2\"",
                crate::digest_cache::shell_functions(),
            );
            let out = std::process::Command::new("sh")
                .args(["-c", &script, "t", known, bin, records, &names])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let known = format!("{listed} Kubernetes v1.20.2\n");
        assert_eq!(run(&known), "Kubernetes v9.9.9", "no record: started");
        let record = format!(
            "{}hactl_digest_record \"$1\" \"$2\" \"$3\"",
            crate::digest_cache::shell_functions()
        );
        let status = std::process::Command::new("sh")
            .args(["-c", &record, "t", records, bin, &listed])
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            run(&known),
            "Kubernetes v1.20.2",
            "a matching record of a listed digest"
        );
        assert_eq!(run(""), "Kubernetes v9.9.9", "nothing listed: started");
        let other = format!("{} Kubernetes v1.20.2\n", "d".repeat(64));
        assert_eq!(run(&other), "Kubernetes v9.9.9", "another digest listed: started");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::set_permissions(bin, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(
            run(&known),
            "Kubernetes v9.9.9",
            "the file changed since its record: started"
        );
    }
}
