//! Operator-side steps of a node removal: the drain (cordon, then Evictions wave by wave, budgets
//! respected), the Node's deletion, and the remaining nodes' pod network planned from fresh facts
//! with `hactl up`'s own phases (so "already done" means "that plan is empty").
//!
//! Invariant: a postcondition (`holds`) only reads.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_trait::async_trait;

use crate::exec::{Mode, Transports};
use crate::inventory::{Inventory, Role};
use crate::kubernetes::api::ApiClient;
use crate::kubernetes::drain::{self, Eviction};
use crate::operations::runner::LocalAct;
use crate::phases::{Ctx, Phase};
use crate::pki::Pki;
use crate::plan::Plan;

/// How long the drain may take before the step fails (a budget that never allows the eviction).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

/// What the operator-side steps share.
pub struct Inputs {
    pub inv: Inventory,
    pub pki: Pki,
    pub kubernetes: Option<crate::kubernetes::KubernetesInputs>,
    pub state: crate::state::StateDir,
}

impl Inputs {
    /// The first control-plane apiserver that answers `/readyz`, over the run's connections.
    async fn api(&self, transports: &Transports) -> anyhow::Result<ApiClient> {
        crate::kubernetes::rbac::first_ready(&self.inv, transports, &self.state.path.join("pki"))
            .await
            .map(|(_, api)| api)
            .map_err(|e| anyhow::anyhow!("no apiserver answered /readyz ({e}); the Kubernetes steps need one: check `hactl status`"))
    }
}

/// Cordon and drain the Node.
pub struct Drain {
    pub inputs: std::sync::Arc<Inputs>,
    pub node: String,
    /// The host is attested gone (`--confirm-dead`): no kubelet will ever confirm a pod's end,
    /// so a pod already terminating does not hold the drain up (deleting the Node next lets the
    /// API's pod garbage collector remove it; its controller has replaced it already).
    pub host_gone: bool,
}

/// The pods a drain still waits for: all of them, or with the host gone those not already
/// terminating.
fn waiting_for(
    pods: Vec<crate::kubernetes::objects::Pod>,
    host_gone: bool,
) -> Vec<crate::kubernetes::objects::Pod> {
    pods.into_iter()
        .filter(|p| !(host_gone && p.metadata.deletion_timestamp.is_some()))
        .collect()
}

#[async_trait]
impl LocalAct for Drain {
    fn describe(&self) -> String {
        format!(
            "cordon Node {} (spec.unschedulable) and evict its pods in waves of ascending priority, \
             PodDisruptionBudgets respected (up to {}s)",
            self.node,
            DRAIN_TIMEOUT.as_secs()
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let api = self.inputs.api(transports).await?;
        if api.node(&self.node).await?.is_none() {
            return Ok(serde_json::json!({ "node": "not registered" }));
        }
        api.set_unschedulable(&self.node, true)
            .await
            .with_context(|| format!("cannot cordon Node {}", self.node))?;
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut evicted = 0usize;
        let mut attempt = 0;
        loop {
            let pods = waiting_for(api.pods_on_node(&self.node).await?, self.host_gone);
            let plan = drain::plan(&pods);
            let Some(wave) = plan.waves.first() else {
                return Ok(serde_json::json!({ "evicted": evicted, "stay": plan.kept.len() }));
            };
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the drain of {} ran out of {}s with pods still to evict: {} (a PodDisruptionBudget \
                     allows no disruption?); the Node stays cordoned: fix the cause and run again with --resume",
                    self.node,
                    DRAIN_TIMEOUT.as_secs(),
                    plan.evictions()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let mut blocked = false;
            for pod in &wave.pods {
                match api.evict(pod).await? {
                    Eviction::Accepted => evicted += 1,
                    Eviction::Gone => {}
                    Eviction::Blocked { .. } => blocked = true,
                    Eviction::Failed { code, message } => {
                        anyhow::bail!(
                            "the eviction of pod {pod} from {} was answered {code}: {message}",
                            self.node
                        )
                    }
                }
            }
            let wait = if blocked {
                attempt += 1;
                drain::backoff(attempt)
            } else {
                Duration::from_millis(500)
            };
            tokio::time::sleep(wait).await;
        }
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let api = self.inputs.api(transports).await?;
        Ok(match api.node(&self.node).await? {
            None => true,
            Some(n) => {
                n.spec.unschedulable
                    && drain::plan(&waiting_for(api.pods_on_node(&self.node).await?, self.host_gone))
                        .waves
                        .is_empty()
            }
        })
    }
}

/// Delete the Node.
pub struct DeleteNode {
    pub inputs: std::sync::Arc<Inputs>,
    pub node: String,
}

#[async_trait]
impl LocalAct for DeleteNode {
    fn describe(&self) -> String {
        format!("DELETE /api/v1/nodes/{}", self.node)
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let api = self.inputs.api(transports).await?;
        let path = crate::kubernetes::node::node_path(&self.node);
        let (code, body) = api.request(reqwest::Method::DELETE, &path, "", None).await?;
        match code {
            200 | 202 | 404 => Ok(serde_json::json!({ "deleted": self.node })),
            _ => Err(crate::kubernetes::api::status_error(format!("DELETE {path}"), code, &body).into()),
        }
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let api = self.inputs.api(transports).await?;
        Ok(api.node(&self.node).await?.is_none())
    }
}

/// The remaining nodes' pod network (routes, CNI configuration) from fresh facts.
pub struct Reroute {
    pub inputs: std::sync::Arc<Inputs>,
}

impl Reroute {
    async fn plan(&self, transports: &Transports) -> anyhow::Result<Plan> {
        let inv = &self.inputs.inv;
        let hosts = inv.node_hosts();
        let mut facts = std::collections::BTreeMap::new();
        for h in hosts {
            let t = transports
                .get(&h.name)
                .with_context(|| format!("no connection to {}", h.name))?;
            let f = crate::facts::gather(t.as_ref(), &crate::phases::query_for(inv, h))
                .await
                .with_context(|| format!("failed to read the state of {}", h.name))?;
            facts.insert(h.name.clone(), f);
        }
        let ctx = Ctx::new(inv, &self.inputs.pki, &facts).with_kubernetes(self.inputs.kubernetes.as_ref());
        let phases: [Box<dyn Phase>; 2] = [
            Box::new(crate::phases::configure_nodes::ConfigureNodes),
            Box::new(crate::phases::start_nodes::StartNodes),
        ];
        Ok(crate::phases::build(&phases, &ctx)?)
    }
}

#[async_trait]
impl LocalAct for Reroute {
    fn describe(&self) -> String {
        "plan `hactl up`'s node phases for the remaining control-plane and worker hosts from fresh \
         facts (their routes and CNI configuration without the removed Node) and run it"
            .into()
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let plan = self.plan(transports).await?;
        let report = crate::exec::run(&plan, Mode::Live, transports)
            .await
            .map_err(|failed| {
                let details = failed.details();
                anyhow::Error::new(failed).context(details.trim_end().to_string())
            })?;
        Ok(serde_json::json!({ "commands_run": report.commands_run, "files_written": report.files_written }))
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        let any = self
            .inputs
            .inv
            .hosts
            .iter()
            .any(|h| h.has(Role::ControlPlane) || h.has(Role::Worker));
        Ok(!any || self.plan(transports).await?.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminating_pod_holds_the_drain_up_only_while_its_host_can_end_it() {
        let pod = |name: &str, deleting: bool| {
            let mut p = crate::kubernetes::objects::Pod::default();
            p.metadata.name = name.into();
            p.metadata.deletion_timestamp = deleting.then(|| "2026-11-25T07:00:00Z".to_string());
            p
        };
        let names = |pods: Vec<crate::kubernetes::objects::Pod>| -> Vec<String> {
            pods.into_iter().map(|p| p.metadata.name).collect()
        };
        let pods = || vec![pod("a", false), pod("b", true)];
        assert_eq!(names(waiting_for(pods(), false)), ["a", "b"]);
        assert_eq!(names(waiting_for(pods(), true)), ["a"]);
    }
}
