//! Connecting to hosts, and who answered.
//!
//! Every command reaches its hosts here: [`connect`] opens one SSH session per host (host keys
//! verified against the cluster's `known_hosts`), and [`Reach`] sorts the answers into the hosts
//! that answered and why the others did not. A command then says what an unreachable host means
//! to it: [`Reach::require_all`] (nothing may change unless every host answers: `up`, `reset`) or
//! [`Reach::warn_unreachable`] (go on with those that answered: snapshots).
//!
//! Invariant: every host asked for gets an answer: its session or its error chain.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::exec::{Transport, Transports};
use crate::inventory::Host;
use crate::ssh::{ConnectOptions, Session};
use crate::state::{StateDir, StateView};

/// Where host keys are checked, and whether an unknown host's key may be recorded there: a
/// command that changes things pins keys in its state directory (trust on first use); a
/// read-only one ([`StateView`]) checks them against it and records nothing.
#[derive(Debug, Clone, Copy)]
pub enum HostKeys<'a> {
    Pin(&'a StateDir),
    ReadOnly(&'a StateView),
    /// A dry run of a command that may write: checked against the state directory's keys,
    /// nothing recorded.
    Check(&'a StateDir),
}

impl<'a> From<&'a StateDir> for HostKeys<'a> {
    fn from(state: &'a StateDir) -> Self {
        HostKeys::Pin(state)
    }
}

impl<'a> From<&'a StateView> for HostKeys<'a> {
    fn from(view: &'a StateView) -> Self {
        HostKeys::ReadOnly(view)
    }
}

impl HostKeys<'_> {
    fn load(self) -> Result<crate::ssh::KnownHosts, crate::ssh::Error> {
        match self {
            HostKeys::Pin(state) => crate::ssh::KnownHosts::load(state.known_hosts_path()),
            HostKeys::ReadOnly(view) => crate::ssh::KnownHosts::load_read_only(view.known_hosts_path()),
            HostKeys::Check(state) => crate::ssh::KnownHosts::load_read_only(state.known_hosts_path()),
        }
    }
}

/// How to reach hosts: what every command that connects is told (`cli::ConnectArgs` on the
/// command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectSettings {
    /// Hosts contacted at once.
    pub concurrency: usize,
    /// Hosts whose changed SSH host key is accepted (after a re-install).
    pub accept_new_host_key: Vec<String>,
    /// Seconds to wait for each SSH connection (`None`: the inventory's `connectTimeout`).
    pub connect_timeout: Option<u64>,
}

impl Default for ConnectSettings {
    /// The command line's defaults: 16 hosts at once, no changed key accepted.
    fn default() -> Self {
        ConnectSettings {
            concurrency: 16,
            accept_new_host_key: vec![],
            connect_timeout: None,
        }
    }
}

/// A host's connection, or why there is none.
pub type Connection = Result<Arc<dyn Transport>, ConnectFailure>;

/// Why a host has no connection: the error chain as text, and whether it waits on the operator
/// (a changed host key, which only `--accept-new-host-key HOST` lets through: exit 3, not 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectFailure {
    pub text: String,
    pub host_key_changed: bool,
}

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<String> for ConnectFailure {
    fn from(text: String) -> Self {
        ConnectFailure {
            text,
            host_key_changed: false,
        }
    }
}

impl From<&str> for ConnectFailure {
    fn from(text: &str) -> Self {
        text.to_string().into()
    }
}

impl From<crate::ssh::Error> for ConnectFailure {
    fn from(e: crate::ssh::Error) -> Self {
        let host_key_changed = matches!(e, crate::ssh::Error::HostKeyChanged { .. });
        ConnectFailure {
            text: format!("{:#}", anyhow::Error::from(e)),
            host_key_changed,
        }
    }
}

/// Connects to `hosts` (at most `args.concurrency` at once), verifying host keys against the
/// cluster's known_hosts. Every host gets an entry: its connection or its error chain.
pub async fn connect<'a>(
    keys: impl Into<HostKeys<'a>>,
    hosts: &[&Host],
    args: &ConnectSettings,
) -> BTreeMap<String, Connection> {
    connect_keeping_keys(keys, hosts, args).await.0
}

/// [`connect`], also handing back the host keys it checked (a read-only run lists the keys it
/// saw for the first time: [`crate::ssh::KnownHosts::unrecorded`]).
pub async fn connect_keeping_keys<'a>(
    keys: impl Into<HostKeys<'a>>,
    hosts: &[&Host],
    args: &ConnectSettings,
) -> (BTreeMap<String, Connection>, Option<Arc<crate::ssh::KnownHosts>>) {
    let known = match keys.into().load() {
        Ok(k) => Arc::new(k),
        Err(e) => {
            let msg = format!("{:#}", anyhow::Error::from(e));
            return (
                hosts
                    .iter()
                    .map(|h| (h.name.clone(), Err(msg.clone().into())))
                    .collect(),
                None,
            );
        }
    };
    let opts = ConnectOptions {
        known_hosts: known.clone(),
        accept_new_host_key: args.accept_new_host_key.clone(),
        timeout: args.connect_timeout.map(Duration::from_secs),
        agent_socket: None,
        key_passphrase: crate::ssh::PassphraseSource::default(),
    };
    (connect_with(hosts, &opts, args.concurrency).await, Some(known))
}

/// [`connect`] with options already built (tests, and callers with their own known_hosts).
pub async fn connect_with(
    hosts: &[&Host],
    opts: &ConnectOptions,
    concurrency: usize,
) -> BTreeMap<String, Connection> {
    let results: Vec<(String, Connection)> = futures::stream::iter(hosts.iter().map(|h| async move {
        let r = Session::connect(&h.name, &h.ssh, opts)
            .await
            .map(|s| Arc::new(s) as Arc<dyn Transport>)
            .map_err(ConnectFailure::from);
        (h.name.clone(), r)
    }))
    .buffer_unordered(concurrency.max(1))
    .collect()
    .await;
    results.into_iter().collect()
}

/// The hosts that answered and why the others did not; every host asked for is in one of the two.
#[derive(Clone, Default)]
pub struct Reach {
    pub transports: Transports,
    pub unreachable: BTreeMap<String, ConnectFailure>,
    /// The hosts asked for, in the order given (inventory order), for messages.
    asked: Vec<String>,
}

/// Exit 3 naming each host in `changed` (name, connection error) whose key changed, or `Ok` when
/// there is none.
pub fn changed_host_keys_refusal(changed: &[(&str, &str)]) -> anyhow::Result<()> {
    if changed.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = changed.iter().map(|(h, e)| format!("{h}: {e}")).collect();
    Err(crate::exit::refuse(
        crate::exit::NEEDS_INPUT,
        format!(
            "a host's SSH key changed, so hactl cannot tell a re-installed host from another machine \
             and will not count it as down; nothing was changed:\n{}",
            lines.join("\n")
        ),
    ))
}

/// Connects to `hosts` and sorts the answers.
pub async fn reach<'a>(keys: impl Into<HostKeys<'a>>, hosts: &[&Host], args: &ConnectSettings) -> Reach {
    Reach::sort(hosts, connect(keys, hosts, args).await)
}

impl Reach {
    /// Sorts `conns` (the answers of [`connect`]) for `hosts`; a host without an answer is
    /// "not connected".
    pub fn sort(hosts: &[&Host], mut conns: BTreeMap<String, Connection>) -> Reach {
        let mut r = Reach {
            asked: hosts.iter().map(|h| h.name.clone()).collect(),
            ..Reach::default()
        };
        for h in hosts {
            match conns.remove(&h.name) {
                Some(Ok(t)) => {
                    r.transports.insert(h.name.clone(), t);
                }
                Some(Err(e)) => {
                    r.unreachable.insert(h.name.clone(), e);
                }
                None => {
                    r.unreachable.insert(h.name.clone(), "not connected".into());
                }
            }
        }
        r
    }

    /// Every host's transport, or an error listing each host that did not answer, before
    /// anything changed.
    pub fn require_all(self) -> anyhow::Result<Transports> {
        if self.unreachable.is_empty() {
            return Ok(self.transports);
        }
        let failures: Vec<String> = self
            .asked
            .iter()
            .filter_map(|h| self.unreachable.get(h).map(|e| format!("{h}: {e}")))
            .collect();
        let text = format!(
            "cannot reach every host, so nothing was changed:\n{}\nfix the connection (or remove the host from the inventory) and run again",
            failures.join("\n")
        );
        // Only the operator can let a changed host key through: that is input (3), not a failure.
        if self.unreachable.values().all(|e| e.host_key_changed) {
            return Err(crate::exit::refuse(crate::exit::NEEDS_INPUT, text));
        }
        anyhow::bail!(text)
    }

    /// Refuses (exit 3) when a host presented a changed key: a command that changes the cluster
    /// counts an unreachable member as down, and a host that merely was re-installed is not down;
    /// only the operator can say which it is. Call before anything changes.
    pub fn refuse_changed_host_keys(&self) -> anyhow::Result<()> {
        let changed: Vec<(&str, &str)> = self
            .asked
            .iter()
            .filter_map(|h| {
                let e = self.unreachable.get(h).filter(|e| e.host_key_changed)?;
                Some((h.as_str(), e.text.as_str()))
            })
            .collect();
        changed_host_keys_refusal(&changed)
    }

    /// The hosts that answered; each other host is logged as a warning and left out.
    pub fn warn_unreachable(self) -> Transports {
        for (name, e) in &self.unreachable {
            tracing::warn!("{name}: unreachable: {e}");
        }
        self.transports
    }

    /// `host`'s connection as [`connect`] gave it.
    pub fn connection(&self, host: &str) -> Connection {
        match self.transports.get(host) {
            Some(t) => Ok(t.clone()),
            None => Err(self
                .unreachable
                .get(host)
                .cloned()
                .unwrap_or_else(|| "not connected".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory() -> crate::inventory::Inventory {
        let yaml = concat!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    agent: true\n",
            "  hosts:\n",
            "    - { name: cp3, address: 10.0.0.13, roles: [etcd] }\n",
            "    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n",
            "    - { name: cp2, address: 10.0.0.12, roles: [etcd] }\n",
            "  stateDir: /tmp/hactl-connect-test\n",
        );
        crate::inventory::load_str(std::path::Path::new("c.yaml"), yaml).unwrap()
    }

    #[test]
    fn every_host_is_sorted_and_refusals_list_them_in_the_order_asked() {
        let inv = inventory();
        let refs: Vec<&Host> = inv.hosts.iter().collect();
        let mut conns = BTreeMap::new();
        conns.insert("cp3".to_string(), Err("refused".into()));
        conns.insert("cp1".to_string(), Err("timed out".into()));
        let r = Reach::sort(&refs, conns);
        assert!(r.transports.is_empty());
        assert_eq!(r.unreachable.len(), 3);
        assert_eq!(
            r.connection("cp2").err().map(|e| e.text),
            Some("not connected".into())
        );
        let e = r.clone().require_all().err().unwrap();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::FAILED);
        let e = format!("{e:#}");
        assert!(
            e.contains("cp3: refused\ncp1: timed out\ncp2: not connected"),
            "{e}"
        );
        assert!(r.warn_unreachable().is_empty());
    }

    /// A changed host key waits on the operator (`--accept-new-host-key`): exit 3 when that is all
    /// that keeps hactl from the hosts, 1 when a host is also down.
    #[test]
    fn a_changed_host_key_alone_needs_input() {
        let inv = inventory();
        let refs: Vec<&Host> = inv.hosts.iter().collect();
        let changed = || {
            Err(ConnectFailure::from(crate::ssh::Error::HostKeyChanged {
                host: "cp1".into(),
                addr: "10.0.0.11:22".into(),
                known: "SHA256:old".into(),
                presented: "SHA256:new".into(),
                known_hosts: "/s/known_hosts".into(),
            }))
        };
        let mut conns = BTreeMap::new();
        for h in ["cp1", "cp2", "cp3"] {
            conns.insert(h.to_string(), changed());
        }
        let e = Reach::sort(&refs, conns.clone()).require_all().err().unwrap();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::NEEDS_INPUT, "{e:#}");
        assert!(format!("{e:#}").contains("--accept-new-host-key cp1"), "{e:#}");
        conns.insert("cp2".to_string(), Err("timed out".into()));
        let e = Reach::sort(&refs, conns).require_all().err().unwrap();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::FAILED, "{e:#}");
    }
}
