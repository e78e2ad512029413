//! etcd: where hactl puts things on members, what `member list` says, and (in `client.rs`) the
//! operator's own client through an SSH tunnel.
//!
//! Invariant: peer and client URLs use IP literals (`https://<ip>:2380`), never host names, so a
//! restore or join never depends on name resolution.

pub mod client;
pub mod data_dir;
pub mod errors;
pub mod health;
pub mod observer;
pub mod safety;
pub mod upgrade;

use serde::Deserialize;

use crate::inventory::{Host, Inventory};

/// Certificates and keys of the member on each etcd host.
pub const PKI_DIR: &str = "/etc/hactl/pki/etcd";
/// The unit hactl installs; it overrides the distribution's unit of the same name.
pub const UNIT_PATH: &str = "/etc/systemd/system/etcd.service";
pub const UNIT: &str = "etcd.service";
/// The CN of every member's peer certificate, which the PKI issues: the only CN the peer port
/// admits once every member holds such a certificate (`--peer-cert-allowed-cn`).
pub use crate::pki::ETCD_PEER_CN as PEER_CN;
/// How a member first met its cluster; written only while its data dir is empty.
pub const INITIAL_ENV_PATH: &str = "/etc/hactl/etcd-initial.env";
/// etcdctl with the host's client certificate.
pub const ETCDCTL_WRAPPER: &str = "/usr/local/sbin/hactl-etcdctl";
/// Idempotent membership steps (add learner, promote).
pub const MEMBER_SCRIPT: &str = "/usr/local/sbin/hactl-etcd-member";
/// Where a recover stages its work on each host (`<dir>/<run>/`, the staged snapshot among it):
/// beside the default data dir, on the same filesystem, so the final swap is a rename.
pub const RECOVER_WORK_DIR: &str = "/var/lib/etcd.hactl";
/// Where release and bundle binaries go.
pub const BIN_DIR: &str = "/usr/local/bin";
/// etcd's metrics and plain `/health` listener: on loopback, and on the member's address when
/// load balancers health-check it (plain HTTP, no certificate; it serves no key).
pub const METRICS_PORT: u16 = 2381;
/// etcd's HTTP client services (`/health`, `/version`, the JSON gateway), with a client
/// certificate, on loopback only: the client URLs serve gRPC alone, so a stopping member drains
/// its clients gracefully (docs/how-to/upgrades.md, "Direct clients during a restart").
pub const HTTP_PORT: u16 = 2382;

/// In the state directory: the token of the current lineage, written by `hactl recover`.
pub const TOKEN_FILE: &str = "etcd-token";

/// The cluster token of the original lineage (a recover makes a new one).
pub fn token(inv: &Inventory) -> String {
    format!("hactl-{}", inv.name)
}

pub fn peer_url(inv: &Inventory, host: &Host) -> String {
    format!("https://{}:{}", host.url_host(), inv.etcd.peer_port)
}

pub fn client_url(inv: &Inventory, host: &Host) -> String {
    format!("https://{}:{}", host.url_host(), inv.etcd.client_port)
}

/// `etcdctl member list -w json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MemberList {
    pub header: Header,
    #[serde(default)]
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Header {
    #[serde(default)]
    pub cluster_id: u64,
    #[serde(default)]
    pub member_id: u64,
    #[serde(default)]
    pub raft_term: u64,
    /// The store revision when the member answered.
    #[serde(default)]
    pub revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Member {
    #[serde(rename = "ID")]
    pub id: u64,
    /// Empty until the member has started once.
    #[serde(default)]
    pub name: String,
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

impl Member {
    /// A member that was added but has never started (no name published yet).
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }
}

impl MemberList {
    pub fn by_peer_url(&self, url: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.peer_urls.iter().any(|u| u == url))
    }
    pub fn voters(&self) -> usize {
        self.members.iter().filter(|m| !m.is_learner).count()
    }
}

/// A member ID as etcd prints it in `member list` (hex).
pub fn hex_id(id: u64) -> String {
    format!("{id:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_member_list_json_from_etcdctl() {
        let json = r#"{"header":{"cluster_id":8530264372582893876,"member_id":1234,"raft_term":3},"members":[{"ID":10501334649042878790,"name":"cp1","peerURLs":["https://10.0.0.11:2380"],"clientURLs":["https://10.0.0.11:2379"]},{"ID":42,"peerURLs":["https://10.0.0.14:2380"],"isLearner":true}]}"#;
        let list: MemberList = serde_json::from_str(json).unwrap();
        assert_eq!(list.header.cluster_id, 8530264372582893876);
        assert_eq!(list.members.len(), 2);
        assert_eq!(list.voters(), 1);
        let learner = list.by_peer_url("https://10.0.0.14:2380").unwrap();
        assert!(learner.is_learner && !learner.is_started());
        assert_eq!(hex_id(list.members[0].id), "91bc3c398fb3c146");
    }
}

/// Probes run on etcd hosts through the local etcdctl wrapper.
pub mod probe {
    use std::time::Duration;

    use crate::plan::{Check, RemoteCommand};

    /// The local member answers a health check (a linearizable read through it).
    pub fn local_health() -> RemoteCommand {
        RemoteCommand::read_only([super::ETCDCTL_WRAPPER, "endpoint", "health"])
    }
    /// Every member in the member list answers a health check.
    pub fn cluster_health() -> RemoteCommand {
        RemoteCommand::read_only([super::ETCDCTL_WRAPPER, "endpoint", "health", "--cluster"])
    }
    /// Every member answers `endpoint status` and all name the same, non-zero leader.
    pub fn one_leader() -> RemoteCommand {
        let script = format!(
            "l=$({} endpoint status --cluster -w json | grep -o '\"leader\":[0-9]*' | sort -u) \
&& [ \"$(printf '%s\\n' \"$l\" | wc -l)\" = 1 ] && [ \"$l\" != '\"leader\":0' ]",
            super::ETCDCTL_WRAPPER
        );
        RemoteCommand {
            read_only: true,
            ..RemoteCommand::script(script)
        }
    }
    /// The last lines of the etcd unit's journal.
    pub fn journal_tail() -> RemoteCommand {
        RemoteCommand::read_only([
            "journalctl",
            "-u",
            super::UNIT,
            "-n",
            "25",
            "--no-pager",
            "-o",
            "cat",
        ])
    }
    pub fn member_healthy(host: &str, timeout: Duration) -> Check {
        Check::command(format!("etcd member {host} is healthy"), local_health(), timeout)
            .diagnose_with(journal_tail())
    }
    pub fn cluster_healthy(why: &str, timeout: Duration) -> Check {
        Check::command(
            format!("every etcd member is healthy ({why})"),
            cluster_health(),
            timeout,
        )
    }
    /// The member's metrics (loopback, plain HTTP) name `MAJOR.MINOR` as the cluster version:
    /// every member runs that minor and the leader has moved the cluster (and its stored
    /// version) to it. bash's `/dev/tcp`, so hosts need no HTTP client.
    pub fn cluster_version(major: u64, minor: u64) -> RemoteCommand {
        let script = format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 \
&& grep -q '^etcd_cluster_version{{cluster_version=\"{major}.{minor}\"}} 1' <&3",
            port = super::METRICS_PORT
        );
        RemoteCommand::read_only(["bash", "-c", script.as_str()])
    }
    pub fn cluster_version_is(major: u64, minor: u64, timeout: Duration) -> Check {
        Check::command(
            format!("the etcd cluster version is {major}.{minor}"),
            cluster_version(major, minor),
            timeout,
        )
    }
    pub fn cluster_has_one_leader(timeout: Duration) -> Check {
        Check::command(
            "every etcd member is healthy and names the same leader",
            one_leader(),
            timeout,
        )
    }
}
