//! The read-only look at one host for old members and zombies ([`command`]), in one round trip:
//! hactl's units (loaded, active, enabled, fenced), every etcd process and the data dir it
//! runs on, the configured data dir, the local etcd's own `endpoint status` (its cluster ID and
//! member ID, with the host's own certificates) and `/health`, the static-pod manifests; and,
//! on a current member, what its log says about peers that dial it with another cluster ID.
//!
//! Why the log: a member refuses a peer of another cluster before any raft message is read, and
//! etcd 3.4 and 3.5 count no metric for it (rafthttp's peer metrics, such as
//! `etcd_network_peer_received_failures_total`, count only messages from known peers), so the
//! refusal's log line is the one trace on the member's side: etcd 3.5 (and 3.4 with zap) logs
//! `"msg":"request cluster ID mismatch"` with `remote-peer-server-name` (the dialler's member
//! ID) and `remote-peer-cluster-id`; etcd 3.4 with its default logger logs
//! `request cluster ID mismatch (got <remote> want <local>)`, without the dialler's ID.
//!
//! Invariant: the command only reads ([`RemoteCommand::read_only`]); the parser takes recorded
//! output, so the classification in `decide.rs` is table-tested from real lines.

use std::collections::{BTreeMap, BTreeSet};

use crate::plan::RemoteCommand;

/// The units the probe reports, in the order a fence stops them.
pub const UNITS: [&str; 7] = [
    "kube-scheduler.service",
    "kube-controller-manager.service",
    "kube-apiserver.service",
    crate::etcd::UNIT,
    crate::backup::TIMER,
    crate::load_balancer::KEEPALIVED_UNIT,
    crate::load_balancer::HAPROXY_UNIT,
];

/// The static-pod manifests a fence moves aside.
pub const MANIFESTS: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];

const PROBE: &str = r#"dd=$1 metrics=$2 since=$3; shift 3
for u in "$@"; do
  echo "unit $u $(systemctl show "$u" -p LoadState -p ActiveState -p UnitFileState -p MainPID 2>/dev/null | tr '\n' ' ')"
  if [ -e "/etc/systemd/system/$u.d/hactl-fence.conf" ] || [ -e "/run/systemd/system/$u.d/hactl-fence.conf" ]; then echo "fence $u"; fi
done
wal() { w=$(ls "$2/member/wal/"*.wal 2>/dev/null | head -n1); [ -n "$w" ] && echo "wal $1$(od -An -v -tx1 -N 256 "$w" | tr -s ' \n' ' ')"; }
for p in $(pgrep -x etcd 2>/dev/null); do
  d=$(tr '\0' '\n' < "/proc/$p/cmdline" 2>/dev/null | awk 'f { print; exit } /^--data-dir=/ { sub(/^--data-dir=/, ""); print; exit } /^--data-dir$/ { f = 1 }')
  echo "proc $p ${d:--}"
  [ -n "$d" ] && wal "$p" "$d"
done
wal data "$dd"
[ -d "$dd/member" ] && echo "data member"
[ -e "$dd" ] && echo "data exists"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -e "/etc/kubernetes/manifests/$c.yaml" ] && echo "manifest $c"
done
if [ -x /usr/local/sbin/hactl-etcdctl ] && pgrep -x etcd >/dev/null 2>&1; then
  s=$(/usr/local/sbin/hactl-etcdctl --dial-timeout=2s --command-timeout=2s endpoint status -w json 2>/dev/null | tr -d '\n') && echo "status $s"
  curl -s -m 2 "http://127.0.0.1:$metrics/health" 2>/dev/null | grep -q '"health":"true"' && echo "health true"
fi
if [ -n "$since" ]; then
  journalctl -u etcd.service --since "-${since}s" -o cat --no-pager 2>/dev/null | grep -F 'request cluster ID mismatch' \
    | sed 's/.*request cluster ID mismatch/mismatch/' | sort | uniq -c | sort -rn | head -n 20
fi
true"#;

/// How far back a member's log is read for peers of another cluster: long enough that a zombie
/// that dials every few hundred milliseconds shows many times, short enough that one fenced a
/// minute ago is soon gone from `status`.
pub const LOG_WINDOW_SECS: u64 = 90;

/// The probe for a host: `log_window` (seconds) also reads its etcd log for refused peers (on
/// the current members; `None` elsewhere).
pub fn command(data_dir: &str, metrics_port: u16, log_window: Option<u64>) -> RemoteCommand {
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        PROBE.into(),
        "hactl-old-members".into(),
        data_dir.into(),
        metrics_port.to_string(),
        log_window.map(|s| s.to_string()).unwrap_or_default(),
    ];
    argv.extend(UNITS.iter().map(|u| u.to_string()));
    RemoteCommand::read_only(argv)
}

/// One unit as systemd reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitSeen {
    /// `loaded`, `not-found`, …
    pub load: String,
    /// `active`, `inactive`, `failed`, …
    pub active: String,
    /// `enabled`, `disabled`, …
    pub enabled: String,
    pub main_pid: u32,
}

impl UnitSeen {
    pub fn installed(&self) -> bool {
        self.load == "loaded"
    }
    pub fn running(&self) -> bool {
        matches!(self.active.as_str(), "active" | "activating" | "reloading")
    }
}

/// An etcd process and the data dir it was started with (`-` when none was on its command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdProcess {
    pub pid: u32,
    pub data_dir: String,
    /// Whose member its data is: the metadata at the head of its WAL.
    pub wal: Option<WalMetadata>,
}

/// The member ID and cluster ID a data dir belongs to, as its WAL records them (every WAL file
/// starts with a CRC record, then a metadata record: `etcdserverpb.Metadata{NodeID, ClusterID}`).
/// Read from the files, so it is known also of an etcd that does not serve (an old member
/// without its peers never becomes ready and answers no client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalMetadata {
    pub member_id: u64,
    pub cluster_id: u64,
}

/// The metadata record in the first bytes of a WAL file: frames of an 8-byte little-endian
/// length (the top byte's low bits the padding when its top bit is set), then a `walpb.Record`
/// (`type` = 1, `crc` = 2, `data` = 3); the metadata record has type 1.
pub fn wal_metadata(bytes: &[u8]) -> Option<WalMetadata> {
    fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*at)?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    /// A message's varint fields (number, value) and its one bytes field (`data`).
    type Fields<'a> = (Vec<(u64, u64)>, Option<&'a [u8]>);
    /// Varint fields of a message: field number → value; `data` (field 3, bytes) aside.
    fn fields(b: &[u8]) -> Option<Fields<'_>> {
        let (mut at, mut out, mut data) = (0usize, Vec::new(), None);
        while at < b.len() {
            let tag = varint(b, &mut at)?;
            match tag & 7 {
                0 => out.push((tag >> 3, varint(b, &mut at)?)),
                2 => {
                    let len = usize::try_from(varint(b, &mut at)?).ok()?;
                    let end = at.checked_add(len)?;
                    data = Some(b.get(at..end)?);
                    at = end;
                }
                _ => return None,
            }
        }
        Some((out, data))
    }
    let mut at = 0usize;
    for _ in 0..4 {
        let frame: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        let len_field = u64::from_le_bytes(frame);
        let rec = usize::try_from(len_field & !(0xffu64 << 56)).ok()?;
        let pad = if len_field >> 63 == 1 {
            ((len_field >> 56) & 0x7) as usize
        } else {
            0
        };
        let record = bytes.get(at + 8..at + 8 + rec)?;
        at += 8 + rec + pad;
        let (f, data) = fields(record)?;
        if f.iter().any(|(n, v)| *n == 1 && *v == 1) {
            let (m, _) = fields(data?)?;
            let get = |n| m.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
            return Some(WalMetadata {
                member_id: get(1)?,
                cluster_id: get(2)?,
            });
        }
    }
    None
}

/// Hex bytes as `od -An -tx1` prints them.
fn hex_bytes(text: &str) -> Vec<u8> {
    text.split_whitespace()
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect()
}

/// The local etcd's own view of itself (IDs are decimal in etcdctl's JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalStatus {
    pub cluster_id: u64,
    pub member_id: u64,
    pub leader: u64,
}

/// Peers a member refused for another cluster ID, as its log shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Log lines in the window.
    pub count: u64,
    /// The dialler's member ID (hex), when the log names it (zap logging).
    pub remote_member: Option<String>,
    /// The dialler's cluster ID (hex).
    pub remote_cluster: String,
    /// The refusing member's cluster ID (hex), when the log names it.
    pub local_cluster: Option<String>,
}

/// What the probe saw on one host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSeen {
    pub host: String,
    pub units: BTreeMap<String, UnitSeen>,
    /// Units with hactl's fence drop-in.
    pub fenced: BTreeSet<String>,
    pub processes: Vec<EtcdProcess>,
    /// The configured data dir holds `member/`.
    pub data_member: bool,
    /// Whose member the configured data dir holds (its WAL's metadata).
    pub data_wal: Option<WalMetadata>,
    /// The configured data dir exists.
    pub data_exists: bool,
    pub manifests: Vec<String>,
    pub status: Option<LocalStatus>,
    pub healthy: bool,
    pub refused: Vec<Refused>,
}

impl HostSeen {
    pub fn unit(&self, name: &str) -> Option<&UnitSeen> {
        self.units.get(name)
    }
    /// etcd runs here: a process, or the unit active.
    pub fn etcd_running(&self) -> bool {
        !self.processes.is_empty() || self.unit(crate::etcd::UNIT).is_some_and(UnitSeen::running)
    }
    /// The etcd processes that are not the unit's main process (started some other way).
    pub fn stray_processes(&self) -> Vec<&EtcdProcess> {
        let main = self.unit(crate::etcd::UNIT).map(|u| u.main_pid).unwrap_or(0);
        self.processes.iter().filter(|p| p.pid != main).collect()
    }
    /// Nothing of an old member is left to fence: no etcd runs, hactl's etcd unit (when
    /// installed) is fenced and not enabled, and the data dir holds no member.
    pub fn fenced_for_good(&self) -> bool {
        let unit_ok = match self.unit(crate::etcd::UNIT) {
            Some(u) if u.installed() => self.fenced.contains(crate::etcd::UNIT) && u.enabled != "enabled",
            _ => true,
        };
        !self.etcd_running() && unit_ok && !self.data_member
    }
}

/// Parses [`command`]'s output from `host`.
pub fn parse(host: &str, text: &str) -> HostSeen {
    let mut s = HostSeen {
        host: host.to_string(),
        ..HostSeen::default()
    };
    for line in text.lines() {
        let trimmed = line.trim_start();
        // `uniq -c` lines: "<count> mismatch…"
        if let Some((count, rest)) = trimmed.split_once(' ') {
            if let (Ok(n), Some(m)) = (count.parse::<u64>(), rest.strip_prefix("mismatch")) {
                if let Some(r) = parse_refused(n, m) {
                    s.refused.push(r);
                }
                continue;
            }
        }
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "unit" => {
                let mut words = rest.split_whitespace();
                let Some(name) = words.next() else { continue };
                let mut u = UnitSeen::default();
                for kv in words {
                    match kv.split_once('=') {
                        Some(("LoadState", v)) => u.load = v.to_string(),
                        Some(("ActiveState", v)) => u.active = v.to_string(),
                        Some(("UnitFileState", v)) => u.enabled = v.to_string(),
                        Some(("MainPID", v)) => u.main_pid = v.parse().unwrap_or(0),
                        _ => {}
                    }
                }
                s.units.insert(name.to_string(), u);
            }
            "fence" => {
                s.fenced.insert(rest.trim().to_string());
            }
            "proc" => {
                let mut w = rest.split_whitespace();
                if let (Some(pid), Some(dir)) = (w.next().and_then(|p| p.parse().ok()), w.next()) {
                    s.processes.push(EtcdProcess {
                        pid,
                        data_dir: dir.to_string(),
                        wal: None,
                    });
                }
            }
            "wal" => {
                let (who, hex) = rest.split_once(' ').unwrap_or((rest, ""));
                let meta = wal_metadata(&hex_bytes(hex));
                if who == "data" {
                    s.data_wal = meta;
                } else if let Some(p) = s.processes.iter_mut().find(|p| p.pid.to_string() == who) {
                    p.wal = meta;
                }
            }
            "data" => match rest.trim() {
                "member" => s.data_member = true,
                "exists" => s.data_exists = true,
                _ => {}
            },
            "manifest" => s.manifests.push(rest.trim().to_string()),
            "status" => s.status = parse_status(rest),
            "health" => s.healthy = rest.trim() == "true",
            _ => {}
        }
    }
    s
}

fn parse_status(json: &str) -> Option<LocalStatus> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    let st = v.as_array()?.first()?.get("Status")?;
    let header = st.get("header")?;
    Some(LocalStatus {
        cluster_id: header.get("cluster_id")?.as_u64()?,
        member_id: header.get("member_id").and_then(|m| m.as_u64()).unwrap_or(0),
        leader: st.get("leader").and_then(|l| l.as_u64()).unwrap_or(0),
    })
}

/// One aggregated refusal: the text after `request cluster ID mismatch` in a zap JSON line
/// (`","local-member-id":…,"remote-peer-server-name":"<id>",…,"remote-peer-cluster-id":"<id>"}`)
/// or in a capnslog line (` (got <remote> want <local>)`).
fn parse_refused(count: u64, rest: &str) -> Option<Refused> {
    let field = |name: &str| -> Option<String> {
        let key = format!("\"{name}\":\"");
        let start = rest.find(&key)? + key.len();
        let end = rest[start..].find('"')?;
        Some(rest[start..start + end].to_string()).filter(|v| !v.is_empty())
    };
    if let Some(remote_cluster) = field("remote-peer-cluster-id") {
        return Some(Refused {
            count,
            remote_member: field("remote-peer-server-name"),
            remote_cluster,
            local_cluster: field("local-member-cluster-id"),
        });
    }
    let got = rest.split("(got ").nth(1)?;
    let (remote, local) = got.split_once(" want ")?;
    Some(Refused {
        count,
        remote_member: None,
        remote_cluster: remote.trim().to_string(),
        local_cluster: Some(local.trim_end_matches(')').trim().to_string()),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Recorded on a lab host (etcd 3.5.16, Debian trixie) after a recover onto other hosts:
    /// the old member restarted by hand (`systemd-run`) on its preserved data dir, its unit fenced.
    /// The zombie runs, answers no client (without its peers it never becomes ready: `etcdctl
    /// endpoint status` prints `[]`), and its WAL says whose member it is.
    pub(crate) const ZOMBIE: &str = r#"unit kube-scheduler.service MainPID=0 LoadState=not-found ActiveState=inactive UnitFileState= 
unit kube-controller-manager.service MainPID=0 LoadState=not-found ActiveState=inactive UnitFileState= 
unit kube-apiserver.service MainPID=0 LoadState=not-found ActiveState=inactive UnitFileState= 
unit etcd.service MainPID=0 LoadState=loaded ActiveState=inactive UnitFileState=disabled 
fence etcd.service
unit hactl-etcd-backup.timer LoadState=loaded ActiveState=inactive UnitFileState=disabled 
fence hactl-etcd-backup.timer
unit keepalived.service MainPID=0 LoadState=loaded ActiveState=inactive UnitFileState=disabled 
unit haproxy.service MainPID=0 LoadState=loaded ActiveState=inactive UnitFileState=disabled 
proc 143 /var/lib/etcd.hactl-retired-20261124-045856-1b19
wal 143 04 00 00 00 00 00 00 84 08 04 10 00 00 00 00 00 1e 00 00 00 00 00 00 82 08 01 10 83 bb ac d6 02 1a 14 08 a6 91 a2 b8 df d9 b7 b1 02 10 ef c2 a4 9b d8 ad f5 8d 02 00 00 0e 00 00 00 00 00 00 82 08 05 10 b7 bb c0 a3 02 1a 04 08 00 10 00 00 00 72 00 00 00 00 00 00 86 08 02 10 ce e6 d8 ea 04 1a 68 08 01 10 01 18 01 22 60 08 00 10 00 18 a6 91 a2 b8 df d9 b7 b1 02 22 50 7b 22 69 64 22 3a 31 37 31
status []
"#;

    /// A current member whose log refused a zombie: zap lines (etcd 3.5) and capnslog lines
    /// (etcd 3.4's default logger), aggregated by the probe's `uniq -c`.
    pub(crate) const MEMBER_WITH_REFUSALS: &str = r#"unit etcd.service LoadState=loaded ActiveState=active UnitFileState=enabled MainPID=612 
proc 612 /var/lib/etcd
data member
data exists
status [{"Endpoint":"https://127.0.0.1:2379","Status":{"header":{"cluster_id":13647126678164213893,"member_id":1,"revision":9,"raft_term":2},"version":"3.5.16","leader":1}}]
health true
   1184 mismatch","local-member-id":"a1684e3e1918715d","local-member-cluster-id":"bd64556880bc1085","local-member-server-version":"3.5.16","local-member-server-minimum-cluster-version":"3.0.0","remote-peer-server-name":"262decdf70888a6","remote-peer-server-version":"3.5.16","remote-peer-server-minimum-cluster-version":"3.0.0","remote-peer-cluster-id":"21bd56d8369216f"}
     12 mismatch (got 6f1f0ddab2c3e4f1 want bd64556880bc1085)
"#;

    #[test]
    fn parses_a_zombie_on_a_fenced_host() {
        let s = parse("cp1", ZOMBIE);
        assert_eq!(s.units.len(), 7);
        assert!(!s.unit("kube-apiserver.service").unwrap().installed());
        let etcd = s.unit("etcd.service").unwrap();
        assert_eq!((etcd.enabled.as_str(), etcd.main_pid), ("disabled", 0));
        assert!(s.fenced.contains("etcd.service"));
        assert_eq!(s.processes.len(), 1);
        assert_eq!(s.processes[0].pid, 143);
        assert_eq!(
            s.processes[0].data_dir,
            "/var/lib/etcd.hactl-retired-20261124-045856-1b19"
        );
        let wal = s.processes[0].wal.unwrap();
        assert_eq!(
            (format!("{:x}", wal.member_id), format!("{:x}", wal.cluster_id)),
            ("262decdf70888a6".to_string(), "21bd56d8369216f".to_string())
        );
        assert_eq!(s.stray_processes().len(), 1);
        assert!(s.etcd_running() && !s.fenced_for_good());
        assert!(s.status.is_none(), "a zombie without its peers answers no client");
        assert!(!s.healthy && !s.data_member);
    }

    /// The head of a WAL etcd 3.5.16 (Debian trixie) wrote for a member started with no name and
    /// no initial cluster: it logged `cluster-id cdf818194e3a8c32`, `local-member-id
    /// 8e9e05c52164694d` (the spec's defaults pitfall). A CRC record, then the metadata.
    #[test]
    fn reads_the_member_and_cluster_id_from_a_real_wal_head() {
        let head = "04 00 00 00 00 00 00 84 08 04 10 00 00 00 00 00 20 00 00 00 00 00 00 00 08 01 10 bb 81 c7 fc 05 1a 16 08 cd d2 91 8b d2 b8 81 cf 8e 01 10 b2 98 ea f1 94 83 86 fc cd 01 0e 00 00 00 00 00 00 82 08 05 10 94 bb c7 ed 0e 1a 04 08 00 10 00 00 00 74 00 00 00 00 00 00 84 08 02 10 c2 ee 92 95 0b";
        let m = wal_metadata(&hex_bytes(head)).unwrap();
        assert_eq!(format!("{:x}", m.cluster_id), "cdf818194e3a8c32");
        assert_eq!(format!("{:x}", m.member_id), "8e9e05c52164694d");
        // Cut short, or not a WAL: nothing, never a panic.
        assert_eq!(wal_metadata(&hex_bytes(&head[..60])), None);
        assert_eq!(wal_metadata(b"hello world, not a wal at all"), None);
        assert_eq!(wal_metadata(&[0xff; 64]), None);
    }

    #[test]
    fn parses_the_refusals_a_members_log_shows() {
        let s = parse("spare1", MEMBER_WITH_REFUSALS);
        assert!(s.healthy && s.data_member && s.stray_processes().is_empty());
        assert_eq!(
            s.refused,
            [
                Refused {
                    count: 1184,
                    remote_member: Some("262decdf70888a6".into()),
                    remote_cluster: "21bd56d8369216f".into(),
                    local_cluster: Some("bd64556880bc1085".into()),
                },
                Refused {
                    count: 12,
                    remote_member: None,
                    remote_cluster: "6f1f0ddab2c3e4f1".into(),
                    local_cluster: Some("bd64556880bc1085".into()),
                }
            ]
        );
    }

    #[test]
    fn the_probe_runs_in_a_real_shell_and_only_reads() {
        let cmd = command("/nonexistent/etcd", 2381, Some(90));
        assert!(cmd.read_only);
        let out = cmd.run_in("sh");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let s = parse("here", &String::from_utf8_lossy(&out.stdout));
        assert_eq!(s.units.len(), UNITS.len());
        assert!(!s.data_exists && !s.data_member);
        // Nothing of hactl's here: nothing to fence.
        assert!(s.fenced_for_good() || s.etcd_running());
    }
}
