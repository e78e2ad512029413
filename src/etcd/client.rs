//! The operator's own etcd client (etcd-client over mTLS), reaching a member's local client
//! port through an SSH port forward, so the operator needs no route to port 2379.
//!
//! Invariant: the member's server certificate carries `127.0.0.1` as a SAN, so TLS verifies
//! against the tunnel's loopback end without turning verification off.

use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use serde::Serialize;

use crate::exec::Transport;
use crate::pki::{CertFiles, Pki};

/// The PEMs a client needs: the etcd CA and hactl's client certificate.
#[derive(Clone)]
pub struct ClientTls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls([redacted])")
    }
}

/// The cluster's client credentials from the state directory's `pki/`.
pub fn client_tls(pki_dir: &std::path::Path) -> anyhow::Result<ClientTls> {
    use anyhow::Context as _;
    let read = |rel: &str| {
        crate::bounded::read_to_string(pki_dir.join(rel), crate::bounded::TEXT)
            .context("the cluster's PKI is missing; run `hactl up` first (or point --state-dir at the cluster's state)")
    };
    // During a rotation the members may serve either CA's certificate: trust both.
    let mut ca_pem = read("etcd/ca.crt")?;
    for extra in crate::pki::rotate::extra_trust(pki_dir, crate::pki::CaKind::Etcd)? {
        ca_pem.push_str(&extra);
    }
    Ok(ClientTls {
        ca_pem,
        cert_pem: read("etcd/hactl-client.crt")?,
        key_pem: read("etcd/hactl-client.key")?,
    })
}

impl ClientTls {
    pub fn from_pki(pki: &Pki) -> ClientTls {
        let client: &CertFiles = pki.etcd_client(crate::pki::EtcdClient::Hactl);
        ClientTls {
            ca_pem: pki.etcd_trust_pem(),
            cert_pem: client.cert_pem.clone(),
            key_pem: client.key_pem.expose().to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("failed to open a tunnel to {host}'s etcd client port")]
    Tunnel {
        host: String,
        #[source]
        source: crate::ssh::Error,
    },
    #[error("failed to reach etcd on {host} through the tunnel")]
    Etcd {
        host: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("etcd on {host} did not answer within {secs}s")]
    Timeout { host: String, secs: u64 },
}

/// A client connected to one member through its host's SSH session.
pub struct MemberClient {
    pub host: String,
    pub client: Client,
    _tunnel: crate::ssh::ForwardGuard,
}

/// Opens a tunnel to `127.0.0.1:client_port` on the host behind `t` and connects over mTLS.
pub async fn connect(
    t: &dyn Transport,
    client_port: u16,
    tls: &ClientTls,
    timeout: Duration,
) -> Result<MemberClient, ClientError> {
    let host = t.host().to_string();
    let (local, guard) = t
        .forward("127.0.0.1", client_port)
        .await
        .map_err(|source| ClientError::Tunnel {
            host: host.clone(),
            source,
        })?;
    let tls_options = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(tls.ca_pem.as_bytes()))
        .identity(Identity::from_pem(
            tls.cert_pem.as_bytes(),
            tls.key_pem.as_bytes(),
        ))
        .domain_name("127.0.0.1");
    let options = ConnectOptions::new()
        .with_tls(tls_options)
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    let endpoint = format!("https://127.0.0.1:{local}");
    let client = tokio::time::timeout(timeout, Client::connect([endpoint], Some(options)))
        .await
        .map_err(|_| ClientError::Timeout {
            host: host.clone(),
            secs: timeout.as_secs(),
        })?
        .map_err(|source| ClientError::Etcd {
            host: host.clone(),
            source,
        })?;
    Ok(MemberClient {
        host,
        client,
        _tunnel: guard,
    })
}

/// One member's view of itself, as `hactl status` shows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct MemberStatus {
    /// Inventory host name.
    pub host: String,
    /// Member ID in hex, as `etcdctl member list` prints it.
    pub id: String,
    pub version: String,
    /// Member ID of the leader this member follows, in hex; empty when it knows none.
    pub leader: String,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub revision: i64,
    pub db_size_bytes: i64,
    pub is_learner: bool,
    /// A linearizable read through this member succeeded.
    pub healthy: bool,
    /// Round trip of that read, in milliseconds.
    pub latency_ms: f64,
    /// Errors the member reported, or why it could not be reached.
    pub errors: Vec<String>,
}

/// Reads status, and checks health with a linearizable read, through one member.
pub async fn member_status(c: &mut MemberClient, timeout: Duration) -> MemberStatus {
    let mut s = MemberStatus {
        host: c.host.clone(),
        ..MemberStatus::default()
    };
    match tokio::time::timeout(timeout, c.client.status()).await {
        Ok(Ok(st)) => {
            s.version = st.version().to_string();
            s.leader = if st.leader() == 0 {
                String::new()
            } else {
                format!("{:x}", st.leader())
            };
            s.raft_term = st.raft_term();
            s.raft_index = st.raft_index();
            s.raft_applied_index = st.raft_applied_index();
            s.db_size_bytes = st.db_size();
            s.is_learner = st.is_learner();
            s.errors = st.errors().to_vec();
            if let Some(h) = st.header() {
                s.id = format!("{:x}", h.member_id());
                s.revision = h.revision();
            }
        }
        Ok(Err(e)) => s.errors.push(format!("status: {e}")),
        Err(_) => s
            .errors
            .push(format!("status: no answer within {}s", timeout.as_secs())),
    }
    if !s.is_learner && s.errors.is_empty() {
        let started = Instant::now();
        match tokio::time::timeout(timeout, c.client.get("hactl/health", None)).await {
            Ok(Ok(_)) => {
                s.healthy = true;
                s.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
            }
            Ok(Err(e)) => s.errors.push(format!("linearizable read: {e}")),
            Err(_) => s.errors.push(format!(
                "linearizable read: no answer within {}s",
                timeout.as_secs()
            )),
        }
    }
    s
}
