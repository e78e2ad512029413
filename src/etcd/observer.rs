//! Observing the cluster through the operator's own etcd client ([`super::client`]) over SSH
//! tunnels, with a deadline on every request: the member list and alarms from one observer, the
//! status and a linearizable read through every member whose host answers, all at once.
//!
//! Why not the etcdctl probe ([`super::health::probe_command`]): that spawns four etcdctl
//! processes on the observer per observation and waits out etcdctl's timeouts on a member that
//! does not answer. Here the tunnels and TLS sessions are opened once per run and kept; a member
//! whose host is unreachable costs nothing, one whose etcd is down costs a refused connection.
//!
//! Invariant: observing only reads; the result is the same [`Observation`] the probe gives, so
//! the safety rules read it unchanged.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, Client};
use tokio::sync::Mutex;

use super::client::{self, ClientTls, MemberClient};
use super::health::{Alarm, EndpointHealth, EndpointStatus, Observation, ObserveError, StatusBody};
use super::{Header, Member, MemberList};
use crate::exec::Transport;

/// Observes through cached tunnels; one per run.
pub struct TunnelObserver {
    tls: ClientTls,
    client_port: u16,
    /// The deadline of each request (and of each connection).
    deadline: Duration,
    clients: Mutex<BTreeMap<String, MemberClient>>,
}

/// A host that may run a member: its name, its address (the host part of its client URL) and
/// its connection.
pub type MemberHost = (String, String, Arc<dyn Transport>);

fn header(h: Option<&etcd_client::ResponseHeader>) -> Header {
    Header {
        cluster_id: h.map(|h| h.cluster_id()).unwrap_or(0),
        member_id: h.map(|h| h.member_id()).unwrap_or(0),
        raft_term: h.map(|h| h.raft_term()).unwrap_or(0),
        revision: h.map(|h| h.revision()).unwrap_or(0),
    }
}

/// `https://10.0.0.13:2379` → `10.0.0.13`.
pub fn url_host(url: &str) -> &str {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => authority,
    }
}

impl TunnelObserver {
    pub fn new(tls: ClientTls, client_port: u16, deadline: Duration) -> TunnelObserver {
        TunnelObserver {
            tls,
            client_port,
            deadline,
            clients: Mutex::new(BTreeMap::new()),
        }
    }

    async fn client(&self, host: &str, t: &dyn Transport) -> Result<Client, String> {
        if let Some(c) = self.clients.lock().await.get(host) {
            return Ok(c.client.clone());
        }
        let c = client::connect(t, self.client_port, &self.tls, self.deadline)
            .await
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))?;
        let out = c.client.clone();
        self.clients.lock().await.insert(host.to_string(), c);
        Ok(out)
    }

    /// Drops a cached connection that failed, so the next observation connects again (the
    /// member may have restarted).
    async fn forget(&self, host: &str) {
        self.clients.lock().await.remove(host);
    }

    async fn within<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, String> {
        match tokio::time::timeout(self.deadline, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.deadline.as_millis())),
        }
    }

    /// Status and a linearizable read through the member on `host`.
    async fn member(
        &self,
        url: &str,
        host: &str,
        t: &dyn Transport,
    ) -> (Option<EndpointStatus>, EndpointHealth) {
        let mut health = EndpointHealth {
            endpoint: url.to_string(),
            health: false,
            error: String::new(),
        };
        let mut c = match self.client(host, t).await {
            Ok(c) => c,
            Err(e) => {
                health.error = e;
                return (None, health);
            }
        };
        let (status, read) = {
            let mut c2 = c.clone();
            tokio::join!(self.within(c.status()), self.within(c2.get("hactl/health", None)))
        };
        let status = match status {
            Ok(s) => Some(EndpointStatus {
                endpoint: url.to_string(),
                status: StatusBody {
                    header: header(s.header()),
                    version: s.version().to_string(),
                    leader: s.leader(),
                    raft_index: s.raft_index(),
                    raft_applied_index: s.raft_applied_index(),
                    is_learner: s.is_learner(),
                    errors: s.errors().to_vec(),
                },
            }),
            Err(e) => {
                health.error = e;
                None
            }
        };
        match read {
            Ok(_) => health.health = true,
            Err(e) => {
                if health.error.is_empty() {
                    health.error = e;
                }
            }
        }
        if status.is_none() {
            self.forget(host).await;
        }
        (status, health)
    }

    /// Asks `observers` in order (the first whose member lists the members wins), then every
    /// member on `hosts` at once.
    pub async fn observe(
        &self,
        observers: &[(String, Arc<dyn Transport>)],
        hosts: &[MemberHost],
    ) -> Result<Observation, ObserveError> {
        let mut why = Vec::new();
        for (name, t) in observers {
            let mut c = match self.client(name, t.as_ref()).await {
                Ok(c) => c,
                Err(e) => {
                    why.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let list = match self.within(c.member_list()).await {
                Ok(l) => l,
                Err(e) => {
                    self.forget(name).await;
                    why.push(format!("{name}: {e}"));
                    continue;
                }
            };
            let members = MemberList {
                header: header(list.header()),
                members: list
                    .members()
                    .iter()
                    .map(|m| Member {
                        id: m.id(),
                        name: m.name().to_string(),
                        peer_urls: m.peer_urls().to_vec(),
                        client_urls: m.client_urls().to_vec(),
                        is_learner: m.is_learner(),
                    })
                    .collect(),
            };
            let asks = members.members.iter().filter_map(|m| {
                let url = m.client_urls.first()?;
                let (host, _, t) = hosts.iter().find(|(_, addr, _)| addr == url_host(url))?;
                Some(async move { self.member(url, host, t.as_ref()).await })
            });
            let alarms = async {
                let mut c = c.clone();
                self.within(c.alarm(AlarmAction::Get, AlarmType::None, None))
                    .await
            };
            let (answers, alarms) = tokio::join!(futures::future::join_all(asks), alarms);
            let mut status = BTreeMap::new();
            let mut health = BTreeMap::new();
            for (s, h) in answers {
                if let Some(s) = s {
                    status.insert(s.endpoint.clone(), s);
                }
                health.insert(h.endpoint.clone(), h);
            }
            let alarms = alarms
                .map(|a| {
                    a.alarms()
                        .iter()
                        .map(|a| Alarm {
                            member_id: a.member_id(),
                            alarm: a.alarm().as_str_name().to_string(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            return Ok(Observation {
                observer: name.clone(),
                members,
                status,
                health,
                alarms,
            });
        }
        Err(ObserveError::NoObserver(why.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::url_host;

    #[test]
    fn the_host_of_a_client_url() {
        assert_eq!(url_host("https://10.0.0.13:2379"), "10.0.0.13");
        assert_eq!(url_host("https://[fd00::1]:2379"), "fd00::1");
        assert_eq!(url_host("https://cp1.example:2379/"), "cp1.example");
    }
}
