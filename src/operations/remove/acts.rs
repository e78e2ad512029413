//! Operator-side steps of `hactl remove`: R-remove checked again right before `member remove`,
//! an apiserver rolled onto the remaining members, haproxy.cfg re-rendered. Each plans from
//! fresh facts with the phases `hactl up` uses, so "already done" means "the plan is empty".
//!
//! Invariant: a postcondition (`holds`) only reads; an act runs its plan live through `exec`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use async_trait::async_trait;

use crate::etcd::{health, safety};
use crate::exec::{self, Mode, Transports};
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory, Role};
use crate::operations::runner::LocalAct;
use crate::phases::configure_load_balancer::ConfigureLoadBalancer;
use crate::phases::{replace_control_plane as rcp, Ctx, EtcdView, Phase};
use crate::pki::Pki;
use crate::plan::{Parallelism, Plan, PlannedPhase};

/// What the operator-side steps share (owned: the runner keeps them behind `Arc`).
pub struct Inputs {
    pub inv: Inventory,
    pub pki: Pki,
    pub kubernetes: Option<crate::kubernetes::KubernetesInputs>,
    /// Members stopped by hactl maintenance (unhealthy for R-remove).
    pub in_maintenance: BTreeSet<String>,
}

impl Inputs {
    fn ctx<'a>(&'a self, facts: &'a BTreeMap<String, HostFacts>, view: &'a EtcdView) -> Ctx<'a> {
        Ctx::new(&self.inv, &self.pki, facts)
            .with_etcd(view)
            .with_kubernetes(self.kubernetes.as_ref())
    }
}

async fn facts_of(
    inv: &Inventory,
    hosts: &[&Host],
    transports: &Transports,
) -> anyhow::Result<BTreeMap<String, HostFacts>> {
    let mut facts = BTreeMap::new();
    for h in hosts {
        let t = transports
            .get(&h.name)
            .with_context(|| format!("no connection to {}", h.name))?;
        let f = crate::facts::gather(t.as_ref(), &crate::phases::query_for(inv, h))
            .await
            .map_err(anyhow::Error::from)
            .with_context(|| format!("failed to read the state of {}", h.name))?;
        facts.insert(h.name.clone(), f);
    }
    Ok(facts)
}

async fn run_live(plan: &Plan, transports: &Transports) -> anyhow::Result<serde_json::Value> {
    let report = exec::run(plan, Mode::Live, transports).await.map_err(|failed| {
        let details = failed.details();
        anyhow::Error::new(failed).context(details.trim_end().to_string())
    })?;
    Ok(serde_json::json!({ "commands_run": report.commands_run, "files_written": report.files_written }))
}

/// R-remove, evaluated again right before `member remove` from a fresh observation.
pub struct CheckRemove {
    pub inputs: std::sync::Arc<Inputs>,
    pub member: String,
}

#[async_trait]
impl LocalAct for CheckRemove {
    fn describe(&self) -> String {
        format!(
            "observe the cluster again and check R-remove for {} (at least 3 voters left, quorum with the unhealthy members)",
            self.member
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let observers: Vec<_> = self
            .inputs
            .inv
            .with_role(Role::Etcd)
            .into_iter()
            .filter_map(|h| Some((h.name.clone(), transports.get(&h.name)?.clone())))
            .collect();
        let obs = health::observe(&observers)
            .await
            .context("no remaining member could describe the cluster")?;
        let Some(m) = obs.voters().find(|m| m.name == self.member) else {
            return Ok(serde_json::json!({ "r_remove": "member already gone" }));
        };
        let counts = obs.counts(&self.inputs.in_maintenance, None);
        safety::r_remove_declared(&counts, obs.is_healthy(m))
            .into_result()
            .map_err(|r| {
                anyhow::Error::new(crate::exit::Refusal {
                    code: crate::exit::REFUSED,
                    message: r.to_string(),
                })
            })?;
        Ok(serde_json::json!({ "r_remove": "allowed", "numbers": counts.numbers() }))
    }
}

/// One remaining apiserver rolled onto the inventory's members (`--etcd-servers`), behind its
/// drained `kubernetes-api` backend (replace's P9 step builder).
pub struct RollApiserver {
    pub inputs: std::sync::Arc<Inputs>,
    pub host: String,
}

impl RollApiserver {
    async fn plan(&self, transports: &Transports) -> anyhow::Result<Plan> {
        let inv = &self.inputs.inv;
        let host = inv
            .host(&self.host)
            .with_context(|| format!("{} is not in the inventory", self.host))?;
        let facts = facts_of(inv, &[host], transports).await?;
        let stale = match rcp::etcd_servers_flag(inv, host) {
            Some(flag)
                if inv
                    .kubernetes
                    .as_ref()
                    .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::Systemd) =>
            {
                let t = &transports[&host.name];
                let out = t
                    .run(&rcp::running_flag_probe(&flag))
                    .await
                    .map_err(anyhow::Error::from)?;
                out.stdout_str().trim() == "stale"
            }
            _ => false,
        };
        let view = EtcdView::default();
        let hosts: Vec<_> = rcp::propagate_to(host, &self.inputs.ctx(&facts, &view), stale)?
            .into_iter()
            .filter(|h| transports.contains_key(&h.host) && !h.steps.is_empty())
            .collect();
        let mut plan = Plan::default();
        if !hosts.is_empty() {
            plan.push(PlannedPhase {
                title: format!("roll {}'s apiserver onto the remaining members", host.name),
                parallelism: Parallelism::OneAtATime,
                disruptive: true,
                hosts,
            });
        }
        Ok(plan)
    }
}

#[async_trait]
impl LocalAct for RollApiserver {
    fn describe(&self) -> String {
        format!(
            "plan {h}'s apiserver from fresh facts with the inventory's --etcd-servers; if it differs: its kubernetes-api backend to MAINT on every load balancer, files written, restart, /readyz, backend ready",
            h = self.host
        )
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        Ok(self.plan(transports).await?.is_empty())
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let plan = self.plan(transports).await?;
        run_live(&plan, transports).await
    }
}

/// haproxy.cfg (and keepalived's files) re-rendered on every load balancer from the inventory,
/// which no longer lists the member: `hactl up`'s configure phase from fresh facts.
pub struct ReconfigureBalancers {
    pub inputs: std::sync::Arc<Inputs>,
}

impl ReconfigureBalancers {
    async fn plan(&self, transports: &Transports) -> anyhow::Result<Plan> {
        let inv = &self.inputs.inv;
        let hosts: Vec<&Host> = inv
            .with_role(Role::LoadBalancer)
            .into_iter()
            .filter(|h| transports.contains_key(&h.name))
            .collect();
        let facts = facts_of(inv, &hosts, transports).await?;
        let view = EtcdView::default();
        let mut plan = Plan::default();
        for mut phase in ConfigureLoadBalancer.plan(&self.inputs.ctx(&facts, &view))? {
            phase
                .hosts
                .retain(|h| transports.contains_key(&h.host) && !h.steps.is_empty());
            if !phase.hosts.is_empty() {
                plan.push(phase);
            }
        }
        Ok(plan)
    }
}

#[async_trait]
impl LocalAct for ReconfigureBalancers {
    fn describe(&self) -> String {
        "plan the load balancers' configuration from fresh facts (hactl up's configure phase); write what differs and reload HAProxy".into()
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        Ok(self.plan(transports).await?.is_empty())
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let plan = self.plan(transports).await?;
        run_live(&plan, transports).await
    }
}
