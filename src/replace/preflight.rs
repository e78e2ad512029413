//! P0: every precondition of docs/recovery.md, "Replace and heal (P0–P10)" that hactl can see, or a refusal naming the rule; the
//! retry limit shared with heal.

use std::collections::BTreeSet;

use super::member::remove_step;
use super::Run;
use crate::etcd::health::Observation;
use crate::etcd::{self, hex_id, safety, Member};
use crate::exec::Mode;
use crate::exit::{self, refusal, refuse};
use crate::inventory::Role;
use crate::operations::{self, StepState};

impl Run {
    /// P0: every precondition of docs/recovery.md, "Replace and heal (P0–P10)" that hactl can see, or a refusal naming the rule.
    pub(super) async fn preflight(&mut self) -> anyhow::Result<Observation> {
        self.journal.record(
            "P0",
            StepState::Started,
            "",
            &format!("replace {} on {}", self.target, self.replacement.name),
        )?;
        self.refuse_over_retry_limit()?;
        let mut obs = self.observe().await?;
        // Single cluster view: every running member reports the same cluster and member set.
        let ids = obs.cluster_ids();
        let sets: BTreeSet<Vec<u64>> = self
            .reach
            .facts
            .values()
            .filter_map(|f| f.members.as_ref())
            .map(|m| {
                let mut v: Vec<u64> = m.members.iter().map(|x| x.id).collect();
                v.sort();
                v
            })
            .collect();
        let cluster_ids: BTreeSet<u64> = self
            .reach
            .facts
            .values()
            .filter_map(|f| f.members.as_ref().map(|m| m.header.cluster_id))
            .chain(ids.iter().copied())
            .collect();
        if cluster_ids.len() > 1 || sets.len() > 1 {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by single-cluster-view: members disagree ({} cluster IDs, {} different member sets); run `hactl status` and resolve it before changing membership",
                    cluster_ids.len(),
                    sets.len()
                ),
            ));
        }
        // The old member: by name, else by the peer URL of its host.
        let target_url = self.target_host.as_ref().map(|h| etcd::peer_url(&self.inv, h));
        self.old = obs
            .by_name(&self.target)
            .or_else(|| target_url.as_deref().and_then(|u| obs.members.by_peer_url(u)))
            .filter(|m| !m.is_learner)
            .cloned();
        if let Some(run) = &self.args.resume {
            // A resumed run knows the old ID from its journal: a voter at the same URL is new.
            if let Ok(entries) = crate::operations::journal::read_run(&self.state, run) {
                let old_id = entries
                    .iter()
                    .find(|e| e.step == "P0" && e.phase == crate::operations::journal::StepState::Done)
                    .and_then(|e| crate::operations::journal::detail(e).split("old member ").nth(1))
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|hex| u64::from_str_radix(hex, 16).ok());
                if let Some(id) = old_id {
                    self.old = obs.by_id(id).cloned();
                    if self.old.is_none() {
                        self.journal.record(
                            "P0",
                            StepState::Started,
                            "",
                            &format!("old member {id:x} is already removed"),
                        )?;
                    }
                }
            }
        }
        // Learners: ours (at the replacement's URL) is adopted; a foreign one blocks, unless named.
        let ours = self.new_member(&obs).filter(|m| m.is_learner).map(|m| m.id);
        let foreign: Vec<&Member> = obs.learners().filter(|m| Some(m.id) != ours).collect();
        if let Some(l) = foreign.first() {
            let id = hex_id(l.id);
            if self.args.cleanup_learner.as_deref() != Some(id.as_str()) {
                return Err(refuse(
                    exit::REFUSED,
                    format!(
                        "refused by no-transition: foreign learner {id} (peer URL {}) is in the cluster; etcd allows one learner, so no member can be added. If no hactl run owns it, remove it with `--cleanup-learner {id}` (removing a learner is quorum-neutral)",
                        l.peer_urls.join(",")
                    ),
                ));
            }
            let observer = self.observer_host(&obs);
            self.journal.record(
                "P0",
                StepState::Started,
                &observer.name,
                &format!("removing foreign learner {id}"),
            )?;
            let url = l.peer_urls.first().cloned().unwrap_or_default();
            operations::run_on(
                self.mode,
                &self.reach.transports,
                &format!("Remove foreign learner {id}"),
                observer,
                vec![remove_step(l.id, &url)],
            )
            .await?;
            if self.mode == Mode::Live {
                obs = self.observe().await?;
            }
        }
        let maintenance = operations::maintenance_record::maintenance_records(&self.state);
        let mut counts = obs.counts(&operations::maintenance_record::in_maintenance(&self.state), ours);
        if let Some((host, r)) = maintenance.iter().next() {
            counts.foreign_operation = Some(format!("maintenance of {host} (stage {})", r.stage));
        }
        let decision = match &self.old {
            Some(old) if self.args.planned => {
                let _ = old;
                safety::r_add(&counts)
            }
            Some(old) => safety::r_remove(&counts, obs.is_healthy(old)),
            None if self.new_member(&obs).is_some() => safety::Decision::Allowed,
            None => safety::r_add(&counts),
        };
        decision.into_result().map_err(refusal)?;
        // Versions: one minor everywhere.
        let minors: BTreeSet<String> = self
            .reach
            .facts
            .iter()
            .filter(|(h, _)| self.inv.host(h).is_some_and(|h| h.has(Role::Etcd)))
            .filter_map(|(_, f)| f.etcd_version.as_deref())
            .filter_map(|v| v.rsplit(' ').next())
            .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
            .collect();
        if minors.len() > 1 {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by versions: etcd hosts run different minor versions ({}); finish the upgrade first",
                    minors.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let detail = match &self.old {
            Some(o) => format!(
                "old member {} at {} ({}); {}",
                hex_id(o.id),
                o.peer_urls.join(","),
                if obs.is_healthy(o) { "healthy" } else { "unhealthy" },
                counts.numbers()
            ),
            None => format!("old member already removed; {}", counts.numbers()),
        };
        self.journal
            .record("P0", StepState::Done, &obs.observer, &detail)?;
        Ok(obs)
    }

    /// P0.10: `maxRetry` failed replacements of this member within `minHealthyPeriod` stop
    /// further attempts (KCP's loop protection), for replace as for heal.
    pub(super) fn refuse_over_retry_limit(&self) -> anyhow::Result<()> {
        let records = operations::remediation::load_records(&self.state);
        let Some(rec) = records.members.get(&self.target) else {
            return Ok(());
        };
        let policy = &self.inv.heal;
        let now = operations::remediation::unix_now();
        let recent = rec
            .last_failure
            .is_some_and(|t| now.saturating_sub(t) < policy.min_healthy_period.as_secs());
        if rec.retry_count >= policy.max_retry && recent {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused by retry-limit: {} failed {} replacement(s) within minHealthyPeriod={}s (maxRetry={}), the retry limit; last error: {}. Find the cause first (the replacement host's disk, its peer traffic on port {}), then remove the `{}` entry from {} (or wait for minHealthyPeriod to pass) and run again",
                    self.target,
                    rec.retry_count,
                    policy.min_healthy_period.as_secs(),
                    policy.max_retry,
                    rec.last_error,
                    self.inv.etcd.peer_port,
                    self.target,
                    self.state.path.join("heal.json").display()
                ),
            ));
        }
        Ok(())
    }
}
