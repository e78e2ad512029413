//! remove (node): taking a control-plane-less node host out of the cluster (`hactl remove NODE`
//! for a worker; a host that held an etcd member is [`super::remove`]'s). The operator gives the
//! host `roles: []` in the inventory (or deletes it and adds `--confirm-dead`); the removal then
//! cordons and drains the Node, stops its node components, deletes the Node, moves its data
//! aside (`<dir>.hactl-removed-<run>`) and routes the remaining nodes without it.
//!
//! Invariants: data dirs are renamed, never deleted; the Node is deleted only after its kubelet
//! stopped (a running kubelet would register it again); every step re-checks its postcondition,
//! so `--resume` continues where a run stopped.

pub mod acts;
pub mod decide;
pub mod steps;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;

use crate::exec::Transports;
use crate::exit::{self, refuse};
use crate::inventory::{Host, Role};
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::run_dir::RunDir;
use crate::operations::runner::Outcome;
use crate::operations::{reach, Reach};

pub use decide::Decisions;

/// What `hactl remove NODE` is asked, for a node host.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub node: String,
    /// The host is gone for good: nothing is stopped or moved there.
    pub confirm_dead: bool,
    pub resume: Option<String>,
}

/// Whether `hactl remove NAME` (or `--resume RUN`) is a node removal rather than a member
/// removal: see [`decide::is_node_removal`]; read from the state directory's PKI.
pub fn applies(state: &crate::state::StateDir, name: &str, resume: Option<&str>) -> bool {
    let pki = state.path.join("pki");
    decide::is_node_removal(
        pki.join(format!("kubernetes/kubelet-{name}.crt")).exists(),
        pki.join(format!("etcd/peer-{name}.crt")).exists(),
        resume,
    )
}

/// A node removal as an [`Operation`].
pub struct RemoveNode {
    opts: Options,
    reach: Option<Reach>,
    decisions: Option<Decisions>,
}

impl RemoveNode {
    pub fn new(opts: Options) -> RemoveNode {
        RemoveNode {
            opts,
            reach: None,
            decisions: None,
        }
    }
}

#[async_trait(?Send)]
impl Operation for RemoveNode {
    fn kind(&self) -> &'static str {
        "remove"
    }

    fn command(&self) -> String {
        format!("remove {}", self.opts.node)
    }

    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(
            self.opts.resume.as_deref(),
            decide::RUN_PREFIX,
        ))
    }

    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let inv = ctx.inv;
        // The node hosts (their routes change) and the control-plane hosts (the API), and the
        // node's own host unless it is attested gone.
        let mut hosts: Vec<&Host> = inv.node_hosts();
        if let Some(h) = inv.host(&self.opts.node).filter(|_| !self.opts.confirm_dead) {
            hosts.push(h);
        }
        let reach = reach::reach(inv, ctx.host_keys(), &hosts, ctx.connect).await;
        reach.refuse_changed_host_keys()?;
        let transports = reach.transports.clone();
        self.reach = Some(reach);
        Ok(transports)
    }

    async fn plan(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        transports: &Transports,
    ) -> anyhow::Result<Planned> {
        let (inv, state) = (ctx.inv, ctx.state);
        if inv.kubernetes.is_none() {
            return Err(refuse(
                exit::REFUSED,
                format!(
                    "refused: {} is not an etcd member and the inventory has no kubernetes section, so it is no Node either: nothing to remove",
                    self.opts.node
                ),
            ));
        }
        let reach = self.reach.as_ref().expect("reach runs before plan");
        let pki = crate::pki::ensure(&state.path.join("pki"), inv, time::OffsetDateTime::now_utc())
            .context("failed to prepare the cluster's certificates")?;
        let inputs = Arc::new(acts::Inputs {
            inv: inv.clone(),
            pki,
            kubernetes: crate::kubernetes::inputs::prepare(inv, state).await?,
            state: state.clone(),
        });
        let node = self.opts.node.as_str();
        let decisions = if run.resumed {
            let path = RunDir::new(state, &run.id).decisions();
            let text = fs_err::read_to_string(&path).map_err(|e| {
                refuse(
                    exit::REFUSED,
                    format!("cannot resume run {}: {e} (a run that stopped before it was confirmed changed nothing: start a new one)", run.id),
                )
            })?;
            let d: Decisions = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a node removal", path.display()))?;
            if d.cluster != inv.name || d.node != node {
                return Err(refuse(
                    exit::REFUSED,
                    format!(
                        "run {} removes Node {} of cluster {}, not {node} of {}",
                        run.id, d.node, d.cluster, inv.name
                    ),
                ));
            }
            d
        } else {
            let api = crate::operations::node::connect_api(inv, state, transports, ctx.connect, node).await?;
            let registered = api
                .node(node)
                .await
                .with_context(|| format!("cannot read Node {node}"))?
                .is_some();
            decide::decide(&decide::Inputs {
                inv,
                node,
                run: &run.id,
                registered,
                reachable: reach.transports.contains_key(node),
                confirm_dead: self.opts.confirm_dead,
            })
            .map_err(anyhow::Error::new)?
        };
        let down: Vec<String> = inv
            .node_hosts()
            .iter()
            .filter_map(|h| reach.unreachable.get(&h.name).map(|e| format!("{}: {e}", h.name)))
            .collect();
        if !down.is_empty() {
            return Err(refuse(
                exit::NEEDS_INPUT,
                format!(
                    "cannot reach node hosts whose routes the removal changes:\n{}\nbring them back, then run again",
                    down.join("\n")
                ),
            ));
        }
        let planned = Planned {
            summary: decide::summary(&decisions),
            decisions: serde_json::to_value(&decisions)?,
            steps: steps::build(&decisions, &inputs),
            confirmation: Confirmation::Ask(format!(
                "remove takes Node {} out of cluster {} for good (its pods are evicted)",
                decisions.node, inv.name
            )),
            resume: format!(
                "hactl remove -i {} {} --resume {}",
                inv.source.display(),
                decisions.node,
                decisions.run
            ),
            mirror_hosts: reach.reached(&inv.with_role(Role::Etcd)),
            decided: vec![],
        };
        self.decisions = Some(decisions);
        Ok(planned)
    }

    async fn report(
        &mut self,
        _ctx: &Context<'_>,
        _run: &RunId,
        outcome: &Outcome,
        took: Duration,
    ) -> anyhow::Result<Report> {
        let d = self.decisions.as_ref().expect("plan runs before report");
        let aside = d
            .host
            .as_ref()
            .map(|h| {
                format!(
                    "; its data on {h} is kept as {}",
                    crate::kubernetes::node::DATA_DIRS
                        .iter()
                        .map(|dir| format!("{dir}.{}", d.aside()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .unwrap_or_default();
        Ok(Report {
            code: exit::OK,
            text: format!(
                "remove: Node {} removed in {:.1}s ({} steps done, {} already done){aside}\n",
                d.node,
                took.as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len()
            ),
        })
    }
}
