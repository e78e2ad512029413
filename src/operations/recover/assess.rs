//! R0.1/R0.2: what each reachable etcd host holds, in one read-only round trip: the etcd unit,
//! the Kubernetes units, the data dir, the local member's own view, the restore tool, free space,
//! the host's high-water mark.

use serde::Deserialize;

use crate::plan::RemoteCommand;

/// One host's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAssessment {
    pub host: String,
    pub etcd_active: bool,
    /// `member/wal` and `member/snap/db` exist.
    pub data_intact: bool,
    /// The data dir exists (intact or not).
    pub data_exists: bool,
    /// Installed units among the Kubernetes ones (`LoadState=loaded`).
    pub kube_units: Vec<String>,
    pub kubelet: bool,
    /// The local member's `endpoint status`, when it answered.
    pub status: Option<EndpointStatus>,
    /// `/health` on the metrics port said true.
    pub health: bool,
    pub tool: String,
    pub tool_bumps: bool,
    pub etcd_version: String,
    pub free_bytes: Option<u64>,
    pub hwm: Option<crate::hwm::Hwm>,
    /// Static-pod manifests of the control plane present (`kube-apiserver`, …).
    pub manifests: Vec<String>,
}

/// `etcdctl endpoint status -w json` for one endpoint (IDs are decimal here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct EndpointStatus {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub leader: u64,
    #[serde(rename = "raftIndex", default)]
    pub raft_index: u64,
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Header {
    #[serde(default)]
    pub cluster_id: u64,
    #[serde(default)]
    pub member_id: u64,
    #[serde(default)]
    pub revision: i64,
}

#[derive(Deserialize)]
struct StatusEntry {
    #[serde(rename = "Status")]
    status: EndpointStatus,
}

const PROBE: &str = r#"
dd=$1; metrics=$2
echo "etcd $(systemctl show etcd.service -p ActiveState --value 2>/dev/null)"
for u in kube-apiserver.service kube-controller-manager.service kube-scheduler.service kubelet.service; do
  echo "unit $u $(systemctl show "$u" -p LoadState --value 2>/dev/null)"
done
[ -e "$dd" ] && echo "data exists"
[ -d "$dd/member/wal" ] && [ -f "$dd/member/snap/db" ] && echo "data intact"
if [ "$(systemctl is-active etcd.service 2>/dev/null)" = active ] && [ -x /usr/local/sbin/hactl-etcdctl ]; then
  s=$(/usr/local/sbin/hactl-etcdctl --command-timeout=2s endpoint status -w json 2>/dev/null | tr -d '\n') && echo "status $s"
  curl -s -m 2 "http://127.0.0.1:$metrics/health" 2>/dev/null | grep -q '"health":"true"' && echo "health true"
fi
if command -v etcdutl >/dev/null 2>&1; then t=etcdutl; h=$(etcdutl snapshot restore --help 2>&1); else t=etcdctl; h=$(ETCDCTL_API=3 etcdctl snapshot restore --help 2>&1); fi
case "$h" in *--bump-revision*) b=yes ;; *) b=no ;; esac
echo "tool $t $b"
echo "version $(etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p')"
d=$dd; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
echo "free $(df -PB1 "$d" 2>/dev/null | awk 'NR==2 {print $4}')"
[ -f /var/lib/hactl/hwm.json ] && echo "hwm $(tr -d '\n' < /var/lib/hactl/hwm.json)"
for c in kube-apiserver kube-controller-manager kube-scheduler; do [ -e "/etc/kubernetes/manifests/$c.yaml" ] && echo "manifest $c"; done
true
"#;

/// The read-only probe.
pub fn probe_command(data_dir: &str, metrics_port: u16) -> RemoteCommand {
    RemoteCommand::read_only([
        "sh",
        "-c",
        PROBE,
        "hactl-recover-assess",
        data_dir,
        &metrics_port.to_string(),
    ])
}

const DB_REVISION: &str = r#"set -u
dd=$1 tmp=/var/lib/hactl/scratch/recover-auto-db
[ -f "$dd/member/snap/db" ] || { echo "no $dd/member/snap/db" >&2; exit 1; }
mkdir -p /var/lib/hactl/scratch
cp "$dd/member/snap/db" "$tmp" || { rm -f "$tmp"; exit 1; }
if command -v etcdutl >/dev/null 2>&1; then out=$(etcdutl snapshot status "$tmp" -w json 2>&1); rc=$?
else out=$(ETCDCTL_API=3 etcdctl snapshot status "$tmp" -w json 2>&1); rc=$?; fi
rm -f "$tmp"
[ $rc -eq 0 ] || { printf '%s\n' "$out" >&2; exit 1; }
printf '%s\n' "$out" | grep '^{' | tail -n1
"#;

/// `--auto` on a stopped survivor: the revision in its bbolt db, read by `snapshot status` on a
/// scratch copy (the member's own files are only read; the WAL may hold a few more writes).
/// Prints `snapshot status -w json`.
pub fn db_revision_command(data_dir: &str) -> RemoteCommand {
    RemoteCommand::read_only(["sh", "-c", DB_REVISION, "hactl-recover-db-revision", data_dir])
}

/// The revision in [`db_revision_command`]'s output.
pub fn parse_db_revision(text: &str) -> Option<i64> {
    serde_json::from_str::<crate::snapshot::Status>(text.trim())
        .ok()
        .map(|s| s.revision)
}

/// Parses the probe's output.
pub fn parse(host: &str, text: &str) -> HostAssessment {
    let mut a = HostAssessment {
        host: host.to_string(),
        ..HostAssessment::default()
    };
    for line in text.lines() {
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        match key {
            "etcd" => a.etcd_active = rest == "active",
            "unit" => {
                if let Some((unit, load)) = rest.split_once(' ') {
                    if load.trim() == "loaded" {
                        if unit == super::KUBELET_UNIT {
                            a.kubelet = true;
                        } else {
                            a.kube_units.push(unit.to_string());
                        }
                    }
                }
            }
            "data" if rest == "exists" => a.data_exists = true,
            "data" if rest == "intact" => a.data_intact = true,
            "status" => {
                a.status = serde_json::from_str::<Vec<StatusEntry>>(rest)
                    .ok()
                    .and_then(|v| v.into_iter().next())
                    .map(|e| e.status)
            }
            "health" => a.health = rest == "true",
            "tool" => {
                let mut w = rest.split_whitespace();
                a.tool = w.next().unwrap_or_default().to_string();
                a.tool_bumps = w.next() == Some("yes");
            }
            "version" => a.etcd_version = rest.to_string(),
            "free" => a.free_bytes = rest.parse().ok(),
            "hwm" => a.hwm = crate::hwm::parse(rest),
            "manifest" => a.manifests.push(rest.to_string()),
            _ => {}
        }
    }
    a
}

impl HostAssessment {
    pub fn view(&self) -> super::MemberView {
        super::MemberView {
            host: self.host.clone(),
            running: self.etcd_active,
            intact: self.data_intact,
            healthy_with_leader: self.health && self.status.as_ref().is_some_and(|s| s.leader != 0),
        }
    }
    /// One line for the operator.
    pub fn describe(&self) -> String {
        let state = match (self.etcd_active, self.data_intact, self.data_exists) {
            (true, _, _) => "running",
            (false, true, _) => "stopped-intact",
            (false, false, true) => "stopped-partial",
            (false, false, false) => "stopped-empty",
        };
        let mut s = format!("{}: {state}", self.host);
        if let Some(st) = &self.status {
            s.push_str(&format!(
                ", revision {}, leader {}",
                st.header.revision,
                if st.leader == 0 {
                    "none".to_string()
                } else {
                    format!("{:x}", st.leader)
                }
            ));
        }
        if !self.kube_units.is_empty() {
            s.push_str(&format!(", kubernetes units: {}", self.kube_units.join(" ")));
        }
        s.push_str(&format!(
            ", etcd {} ({}{})",
            if self.etcd_version.is_empty() {
                "?"
            } else {
                &self.etcd_version
            },
            self.tool,
            if self.tool_bumps {
                " with --bump-revision"
            } else {
                ", no --bump-revision"
            }
        ));
        s
    }
}

/// R0.1/R0.2: what each reachable host holds, in inventory order; a host whose probe fails
/// stops the recover before anything changed.
pub async fn assess_hosts(
    inv: &crate::inventory::Inventory,
    transports: &crate::exec::Transports,
    concurrency: usize,
) -> anyhow::Result<Vec<HostAssessment>> {
    use anyhow::{anyhow, Context as _};
    use futures::StreamExt;
    let probe = probe_command(&inv.etcd.data_dir, crate::etcd::METRICS_PORT);
    let assessed: Vec<anyhow::Result<HostAssessment>> =
        futures::stream::iter(transports.iter().map(|(h, t)| {
            let probe = probe.clone();
            async move {
                let out = t
                    .run(&probe)
                    .await
                    .with_context(|| format!("{h}: assessment failed"))?;
                if !out.success() {
                    return Err(anyhow!("{h}: assessment failed: {}", out.stderr_str().trim()));
                }
                Ok(parse(h, &out.stdout_str()))
            }
        }))
        .buffered(concurrency.max(1))
        .collect()
        .await;
    let mut hosts: Vec<HostAssessment> = Vec::new();
    for a in assessed {
        hosts.push(a?);
    }
    let order: Vec<String> = inv
        .with_role(crate::inventory::Role::Etcd)
        .iter()
        .map(|h| h.name.clone())
        .collect();
    hosts.sort_by_key(|a| order.iter().position(|n| *n == a.host));
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_recorded_probe_of_a_leaderless_survivor() {
        let text = r#"etcd active
unit kube-apiserver.service loaded
unit kube-controller-manager.service not-found
unit kube-scheduler.service loaded
unit kubelet.service loaded
data exists
data intact
status [{"Endpoint":"https://127.0.0.1:2379","Status":{"header":{"cluster_id":118695621463896846,"member_id":10313513424391359579,"revision":512,"raft_term":3},"version":"3.5.16","dbSize":20480,"leader":0,"raftIndex":14,"raftTerm":3,"raftAppliedIndex":14,"dbSizeInUse":16384}}]
tool etcdutl yes
version 3.5.16
free 1000
hwm {"revision":600,"time":"t","clusterId":"","source":"status"}
"#;
        let a = parse("cp1", text);
        assert!(a.etcd_active && a.data_intact && a.data_exists && a.kubelet && !a.health);
        assert_eq!(a.kube_units, ["kube-apiserver.service", "kube-scheduler.service"]);
        let st = a.status.clone().unwrap();
        assert_eq!(
            (st.header.revision, st.leader, st.header.member_id),
            (512, 0, 10313513424391359579)
        );
        assert_eq!((a.tool.as_str(), a.tool_bumps), ("etcdutl", true));
        assert_eq!(a.hwm.unwrap().revision, 600);
        assert_eq!(a.free_bytes, Some(1000));
        let v = parse("cp1", text).view();
        assert!(v.running && v.intact && !v.healthy_with_leader);
    }

    #[test]
    fn the_probe_runs_in_a_real_shell_and_only_reads() {
        let cmd = probe_command("/nonexistent/etcd", 2381);
        assert!(cmd.read_only);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .unwrap();
        assert!(out.status.success());
        let a = parse("here", &String::from_utf8_lossy(&out.stdout));
        assert!(!a.data_exists && !a.data_intact);
        assert!(a.free_bytes.is_some());
    }

    #[test]
    fn reads_the_revision_of_a_stopped_members_db() {
        assert_eq!(
            parse_db_revision("{\"hash\":1,\"revision\":512,\"totalKey\":9,\"totalSize\":20480}\n"),
            Some(512)
        );
        assert_eq!(parse_db_revision("Error: no such file"), None);
        assert!(db_revision_command("/var/lib/etcd").read_only);
    }
}
