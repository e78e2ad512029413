//! Who answered, and what the cluster looks like from them: the first thing replace, heal and
//! maintenance do. The member being replaced may be dead with its host, so an unreachable host
//! is recorded, not fatal; the others get their facts read ([`crate::phases::member_query_for`]).
//!
//! Invariant: observations only read.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::etcd::health::{self, Observation};
use crate::exec::connect::ConnectSettings;
use crate::exec::{Transport, Transports};
use crate::facts::{self, HostFacts};
use crate::inventory::{Host, Inventory, Role};

/// The hosts that answered, their facts, and why the others did not.
pub struct Reach {
    pub transports: Transports,
    pub facts: BTreeMap<String, HostFacts>,
    pub unreachable: BTreeMap<String, String>,
    /// The unreachable hosts that presented a changed SSH key (see
    /// [`Reach::refuse_changed_host_keys`]).
    pub key_changed: std::collections::BTreeSet<String>,
}

/// Connects to `hosts` and gathers facts from those that answer; an unreachable host is
/// recorded, not fatal (the member being replaced may be dead with its host).
pub async fn reach(
    inv: &Inventory,
    keys: crate::exec::connect::HostKeys<'_>,
    hosts: &[&Host],
    settings: &ConnectSettings,
) -> Reach {
    let connected = crate::exec::connect::reach(keys, hosts, settings).await;
    let mut r = Reach {
        transports: Transports::new(),
        facts: BTreeMap::new(),
        key_changed: connected
            .unreachable
            .iter()
            .filter(|(_, e)| e.host_key_changed)
            .map(|(h, _)| h.clone())
            .collect(),
        unreachable: connected
            .unreachable
            .into_iter()
            .map(|(h, e)| (h, e.text))
            .collect(),
    };
    // Every host's facts at once: one round trip per host, not one after another.
    let asks = hosts.iter().filter_map(|h| {
        let t = connected.transports.get(&h.name)?.clone();
        Some(async move {
            let q = crate::phases::member_query_for(inv, h);
            (h.name.clone(), t.clone(), facts::gather(t.as_ref(), &q).await)
        })
    });
    for (name, t, result) in futures::future::join_all(asks).await {
        match result {
            Ok(f) => {
                r.facts.insert(name.clone(), f);
                r.transports.insert(name, t);
            }
            Err(e) => {
                r.unreachable
                    .insert(name, format!("{:#}", anyhow::Error::from(e)));
            }
        }
    }
    r
}

impl Reach {
    /// Refuses (exit 3) when a host presented a changed SSH key, as
    /// [`crate::exec::connect::Reach::refuse_changed_host_keys`] does.
    pub fn refuse_changed_host_keys(&self) -> anyhow::Result<()> {
        let changed: Vec<(&str, &str)> = self
            .key_changed
            .iter()
            .filter_map(|h| Some((h.as_str(), self.unreachable.get(h)?.as_str())))
            .collect();
        crate::exec::connect::changed_host_keys_refusal(&changed)
    }

    /// The names of `hosts` this reach connected to, in their order.
    pub fn reached(&self, hosts: &[&Host]) -> Vec<String> {
        hosts
            .iter()
            .filter(|h| self.transports.contains_key(&h.name))
            .map(|h| h.name.clone())
            .collect()
    }

    /// Whether etcd is active on `host` per its facts.
    pub fn etcd_active(&self, host: &str) -> bool {
        self.facts
            .get(host)
            .and_then(|f| f.units.get(crate::etcd::UNIT))
            .is_some_and(|u| u.active == "active")
    }
    /// Hosts that can observe the cluster: reachable etcd hosts with etcd active, not in `except`,
    /// in inventory order.
    pub fn observers(&self, inv: &Inventory, except: &[&str]) -> Vec<(String, Arc<dyn Transport>)> {
        inv.with_role(Role::Etcd)
            .into_iter()
            .filter(|h| !except.contains(&h.name.as_str()) && self.etcd_active(&h.name))
            .filter_map(|h| Some((h.name.clone(), self.transports.get(&h.name)?.clone())))
            .collect()
    }
    /// Observes the cluster; a cluster no member can describe has lost quorum.
    pub async fn observe(&self, inv: &Inventory, except: &[&str]) -> anyhow::Result<Observation> {
        let observers = self.observers(inv, except);
        health::observe(&observers).await.map_err(|e| {
            crate::exit::refuse(
                crate::exit::REFUSED,
                format!(
                    "refused by quorum: no running member could list the cluster's members ({e}); quorum lost → start the stopped members whose data is intact (`hactl maintenance complete HOST` for a host in maintenance, `hactl up` when every host answers), else run `hactl recover`"
                ),
            )
        })
    }
}
