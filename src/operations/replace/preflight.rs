//! P0's reading of the hosts: a fresh observation and what the hosts' facts say
//! (member sets, cluster IDs, etcd versions), handed to the pure [`super::decide`].

use std::collections::BTreeSet;

use super::decide::{self, Decisions};
use super::Run;
use crate::etcd::health::Observation;
use crate::inventory::Role;
use crate::operations;

impl Run {
    /// P0 (the retry limit was asked in `reach`, before any host): every precondition of docs/recovery.md, "Replace and heal
    /// (P0–P10)" that hactl can see ([`decide::decide`]), or a refusal naming the rule.
    pub(super) async fn preflight(
        &self,
        resumed_old: Option<u64>,
    ) -> anyhow::Result<(Observation, Decisions)> {
        eprintln!("P0: replace {} on {}", self.target, self.replacement.name);
        let obs = self.observe().await?;
        let facts = self.reach.facts.values().filter_map(|f| f.members.as_ref());
        let member_sets: BTreeSet<Vec<u64>> = facts
            .clone()
            .map(|m| {
                let mut v: Vec<u64> = m.members.iter().map(|x| x.id).collect();
                v.sort();
                v
            })
            .collect();
        let cluster_ids: BTreeSet<u64> = facts.map(|m| m.header.cluster_id).collect();
        let minors: BTreeSet<String> = self
            .reach
            .facts
            .iter()
            .filter(|(h, _)| self.inv.host(h).is_some_and(|h| h.has(Role::Etcd)))
            .filter_map(|(_, f)| f.etcd_version.as_deref())
            .filter_map(|v| v.rsplit(' ').next())
            .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
            .collect();
        let maintenance = operations::maintenance_record::maintenance_records(&self.state)
            .iter()
            .next()
            .map(|(host, r)| format!("maintenance of {host} (stage {})", r.stage));
        let target_url = self
            .target_host
            .as_ref()
            .map(|h| crate::etcd::peer_url(&self.inv, h));
        let d = decide::decide(
            &obs,
            &decide::Inputs {
                run: &self.run_id,
                member: &self.target,
                replacement: &self.replacement.name,
                target_url: target_url.as_deref(),
                new_url: &self.new_url,
                planned: self.opts.planned,
                resumed_old,
                cleanup_learner: self.opts.cleanup_learner.as_deref(),
                member_sets: &member_sets,
                cluster_ids: &cluster_ids,
                minors: &minors,
                in_maintenance: &operations::maintenance_record::in_maintenance(&self.state),
                maintenance,
            },
        )?;
        eprintln!("P0: {}", d.detail);
        Ok((obs, d))
    }
}
