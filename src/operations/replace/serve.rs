//! P8–P10: the replacement serves behind the load balancers (and runs the control plane when
//! the inventory has a kubernetes section), the new member list reaches every other apiserver,
//! and the cluster is verified.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, Context as _};

use super::Run;
use crate::etcd::{hex_id, probe, safety};
use crate::exec::Mode;
use crate::exit::{self};
use crate::inventory::{Host, Role};
use crate::operations::{self, StepState};
use crate::phases::Ctx;
use crate::plan::Step;

impl Run {
    /// Fresh facts (the `up` query: Kubernetes files and units included) of reachable `hosts`.
    pub(super) async fn fresh_facts(
        &self,
        hosts: &[&Host],
    ) -> anyhow::Result<std::collections::BTreeMap<String, crate::facts::HostFacts>> {
        let mut facts = std::collections::BTreeMap::new();
        for h in hosts {
            if let Some(t) = self.reach.transports.get(&h.name) {
                let q = crate::phases::query_for(&self.inv, h);
                let f = crate::facts::gather(t.as_ref(), &q)
                    .await
                    .map_err(anyhow::Error::from)
                    .with_context(|| format!("failed to read the state of {}", h.name))?;
                facts.insert(h.name.clone(), f);
            }
        }
        Ok(facts)
    }

    /// P8: the replacement serves. With a kubernetes section its apiserver (with
    /// `--etcd-servers` = every member), controller-manager and scheduler are installed and
    /// started and `/readyz` answers; then the load balancers take it: haproxy.cfg re-rendered
    /// when the host name changed (the old server leaves, the new one joins), its servers readied
    /// (`kubernetes-api` only where an apiserver was started), keepalived started again.
    pub(super) async fn p8_replacement_serves(&self) -> anyhow::Result<()> {
        let r = &self.replacement;
        let kube = crate::phases::replace_control_plane::runs_kubernetes(&self.inv, r);
        let lbs = !self.inv.with_role(Role::LoadBalancer).is_empty();
        if kube {
            let inputs = crate::kubernetes::inputs::prepare(&self.inv, &self.state).await?;
            let facts = self.fresh_facts(&[r]).await?;
            let ctx = Ctx::new(&self.inv, &self.pki, &facts).with_kubernetes(inputs.as_ref());
            let steps = crate::phases::replace_control_plane::start_on_replacement(r, &ctx)?;
            operations::run_on(
                Mode::Live,
                &self.reach.transports,
                "P8 start the Kubernetes control plane on the replacement",
                r,
                steps,
            )
            .await?;
            self.journal().record(
                "P8 kubernetes",
                StepState::Done,
                &r.name,
                "kube-apiserver answers /readyz; controller-manager and scheduler running",
            )?;
        }
        if lbs {
            if r.name != self.target {
                let n = self
                    .balancers
                    .reconfigure(Mode::Live, &self.inv, &self.pki)
                    .await?;
                self.journal().record(
                    "P8 lb-configure",
                    StepState::Done,
                    "",
                    &format!("haproxy.cfg re-rendered for the new membership ({n} step(s))"),
                )?;
            }
            let mut backends = vec![crate::phases::load_balancer::Backend::EtcdClient];
            if kube {
                backends.push(crate::phases::load_balancer::Backend::KubernetesApi);
            }
            self.balancers
                .ready_backends(
                    Mode::Live,
                    &self.inv,
                    self.journal(),
                    "P8 lb-ready",
                    &r.name,
                    &backends,
                    Duration::from_secs(60),
                )
                .await?;
            self.balancers
                .restore_vip(Mode::Live, self.journal(), "P8 vip", r)
                .await?;
        }
        Ok(())
    }

    /// P9: every other apiserver gets the new member list in `--etcd-servers` (and a serving
    /// certificate with the new address), one host at a time: its `kubernetes-api` backend in
    /// MAINT on every load balancer, files written, restart, `/readyz`, backend ready. Each host
    /// is journaled (`P9 apiserver@HOST`); a resumed run re-plans it from fresh facts and the
    /// running process's command line, so a host already rolled is skipped.
    pub(super) async fn p9_propagate(&self) -> anyhow::Result<()> {
        let others: Vec<&Host> = crate::phases::install_kubernetes::control_plane_hosts(&self.inv)
            .into_iter()
            .filter(|h| h.name != self.replacement.name)
            .collect();
        let inputs = crate::kubernetes::inputs::prepare(&self.inv, &self.state).await?;
        let mut transports = self.reach.transports.clone();
        for (name, t) in &self.balancers.transports {
            transports.insert(name.clone(), t.clone());
        }
        for host in others {
            let step = format!("P9 apiserver@{}", host.name);
            let Some(t) = self.reach.transports.get(&host.name) else {
                let why = self
                    .reach
                    .unreachable
                    .get(&host.name)
                    .cloned()
                    .unwrap_or_default();
                bail!(
                    "cannot reach control-plane host {} to give its apiserver the new member list ({why}); bring it back, then continue with --resume",
                    host.name
                );
            };
            let facts = self.fresh_facts(&[host]).await?;
            let stale = match crate::phases::replace_control_plane::etcd_servers_flag(&self.inv, host) {
                Some(flag)
                    if self
                        .inv
                        .kubernetes
                        .as_ref()
                        .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::Systemd) =>
                {
                    let probe = crate::phases::replace_control_plane::running_flag_probe(&flag);
                    let out = t.run(&probe).await.map_err(anyhow::Error::from)?;
                    out.stdout_str().trim() == "stale"
                }
                _ => false,
            };
            let ctx = Ctx::new(&self.inv, &self.pki, &facts).with_kubernetes(inputs.as_ref());
            let hosts: Vec<crate::plan::HostSteps> =
                crate::phases::replace_control_plane::propagate_to(host, &ctx, stale)?
                    .into_iter()
                    .filter(|h| transports.contains_key(&h.host))
                    .collect();
            if hosts.is_empty() {
                self.journal().record(
                    &step,
                    StepState::Skipped,
                    &host.name,
                    "its apiserver already runs with the new member list",
                )?;
                continue;
            }
            self.journal().record(
                &step,
                StepState::Started,
                &host.name,
                "drain, update, restart, /readyz, ready",
            )?;
            let mut plan = crate::plan::Plan::default();
            plan.push(crate::plan::PlannedPhase {
                title: format!("P9 roll the new member list into {}'s apiserver", host.name),
                parallelism: crate::plan::Parallelism::OneAtATime,
                disruptive: true,
                hosts,
            });
            crate::exec::run(&plan, Mode::Live, &transports)
                .await
                .map_err(|failed| {
                    let details = failed.details();
                    anyhow::Error::new(failed).context(details.trim_end().to_string())
                })?;
            self.journal().record(&step, StepState::Done, &host.name, "")?;
        }
        Ok(())
    }

    /// P10: one leader, then every inventory etcd host a healthy voter and no learner left. A
    /// degraded cluster is the verdict (exit 5) the report gives.
    pub(super) async fn p10_verify(&self) -> anyhow::Result<serde_json::Value> {
        let mut obs = self.observe().await?;
        // P7's verification has just seen every member healthy: when this look agrees (one
        // leader, every member healthy) there is nothing to wait for; otherwise wait for one
        // leader on the hosts and look again.
        let settled = obs.leader().is_some() && obs.members.members.iter().all(|m| obs.is_healthy(m));
        if !settled {
            let observer = self.observer_host(&obs);
            operations::run_on(
                Mode::Live,
                &self.reach.transports,
                "P10 verify",
                observer,
                vec![Step::Wait(probe::cluster_has_one_leader(Duration::from_secs(60)))],
            )
            .await?;
            obs = self.observe().await?;
        }
        let counts = obs.counts(&BTreeSet::new(), None);
        let desired = self.inv.with_role(Role::Etcd).len();
        let new = self.new_member(&obs).map(|m| hex_id(m.id)).unwrap_or_default();
        let degraded = match safety::r_final(counts.voters, desired, false) {
            safety::Decision::Refused(r) => Some(r.to_string()),
            _ if counts.unhealthy() > 0 || counts.learners > 0 => Some(counts.numbers()),
            _ => None,
        };
        if let Some(why) = degraded {
            // Done, but the cluster is degraded: the report exits 5 with this line.
            *self.verdict.lock().expect("never poisoned") =
                Some((exit::DEGRADED, format!("replace: degraded: {why}")));
            return Ok(serde_json::json!({ "degraded": why }));
        }
        operations::remediation::record_success(&self.state, &self.target)?;
        let line = format!(
            "replace: {} replaced by member {} ({new}) on {}; {} voters, all healthy; journal {}",
            self.target,
            self.replacement.name,
            self.replacement.name,
            counts.voters,
            self.journal()
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        *self.verdict.lock().expect("never poisoned") = Some((exit::OK, line));
        Ok(serde_json::json!({
            "detail": format!(
                "member {} replaced by {} ({new}); {}",
                self.target,
                self.replacement.name,
                counts.numbers()
            )
        }))
    }
}
