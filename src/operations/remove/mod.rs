//! remove: a quorum-safe removal of one etcd member the inventory no longer lists
//! (`hactl remove MEMBER`; docs/recovery.md, "Remove (RM1–RM11)").
//!
//! The operator deletes the host from the inventory (or keeps it with `roles: []`, so hactl can
//! reach it to fence it); `hactl up` then refuses and names this command. R0 observes the cluster
//! and decides ([`decide`], pure: R-remove for a declared removal, the host, the observer); the
//! steps ([`steps`]) are journaled data run by the operation manager
//! ([`crate::operations::manager`]), so `--dry-run` prints them and `--resume RUN` re-checks each
//! postcondition on the hosts.
//!
//! Invariants: the data dir is renamed to `<dataDir>.hactl-removed-<run>`, never deleted; the
//! `member remove` re-checks the ID and peer URL on the host and R-remove right before; the
//! member's servers leave every HAProxy before anything on it stops.

pub mod acts;
pub mod decide;
pub mod steps;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;

use crate::exec::Transports;
use crate::exit::{self, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::run_dir::RunDir;
use crate::operations::runner::Outcome;
use crate::operations::{self, reach, Reach};
use crate::state::StateDir;

pub use decide::Decisions;

/// What `hactl remove` is asked.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The member (its name, which was its host's inventory name).
    pub member: String,
    /// The member's host is gone for good: nothing is fenced or moved there.
    pub confirm_dead: bool,
    /// Continue this run.
    pub resume: Option<String>,
}

/// `hactl remove` as an [`Operation`].
pub struct Remove {
    opts: Options,
    reach: Option<Reach>,
    decisions: Option<Decisions>,
}

impl Remove {
    pub fn new(opts: Options) -> Remove {
        Remove {
            opts,
            reach: None,
            decisions: None,
        }
    }
}

#[async_trait(?Send)]
impl Operation for Remove {
    fn kind(&self) -> &'static str {
        "remove"
    }

    fn command(&self) -> String {
        format!("remove {}", self.opts.member)
    }

    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(self.opts.resume.as_deref(), "remove"))
    }

    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let inv = ctx.inv;
        // Every host with a role (etcd, apiservers, load balancers) and the member's own host.
        let mut hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
        if let Some(h) = inv.host(&self.opts.member).filter(|h| h.roles.is_empty()) {
            hosts.push(h);
        }
        let reach = reach::reach(inv, ctx.host_keys(), &hosts, ctx.connect).await;
        reach.refuse_changed_host_keys()?;
        let transports = reach.transports.clone();
        self.reach = Some(reach);
        Ok(transports)
    }

    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let (inv, state) = (ctx.inv, ctx.state);
        let reach = self.reach.as_ref().expect("reach runs before plan");
        let pki = crate::pki::ensure(&state.path.join("pki"), inv, time::OffsetDateTime::now_utc())
            .context("failed to prepare the cluster's certificates")?;
        let in_maintenance = operations::maintenance_record::in_maintenance(state);
        let member = self.opts.member.as_str();
        let decisions = if run.resumed {
            resume_decisions(inv, state, &run.id, member)?
        } else {
            let obs = reach.observe(inv, &[member]).await?;
            let reachable: BTreeSet<String> = reach.transports.keys().cloned().collect();
            decide::decide(
                &obs,
                &decide::Inputs {
                    inv,
                    member,
                    run: &run.id,
                    reachable: &reachable,
                    in_maintenance: &in_maintenance,
                    confirm_dead: self.opts.confirm_dead,
                },
            )
            .map_err(anyhow::Error::new)?
        };
        // With Kubernetes, a host that is no node of the inventory any more loses its Node too
        // (its pods drained, its node components stopped, the remaining nodes re-routed).
        let node_leaves = decide::node_leaves(inv, &decisions.member);
        // The hosts a run acts on must answer (the member's own only when not attested gone;
        // every node host when the remaining nodes are re-routed).
        let needed: Vec<&str> = inv
            .hosts
            .iter()
            .filter(|h| {
                h.has(Role::LoadBalancer)
                    || h.has(Role::ControlPlane) && inv.kubernetes.is_some()
                    || node_leaves && h.is_node()
            })
            .map(|h| h.name.as_str())
            .chain(decisions.host.as_deref())
            .chain([decisions.observer.as_str()])
            .collect();
        let down: Vec<String> = needed
            .iter()
            .filter_map(|h| reach.unreachable.get(*h).map(|e| format!("{h}: {e}")))
            .collect();
        if !down.is_empty() {
            return Err(refuse(
                exit::NEEDS_INPUT,
                format!(
                    "cannot reach hosts the removal acts on:\n{}\nbring them back, then run again",
                    down.join("\n")
                ),
            ));
        }
        let inputs = Arc::new(acts::Inputs {
            inv: inv.clone(),
            pki,
            kubernetes: crate::kubernetes::inputs::prepare(inv, state).await?,
            in_maintenance,
        });
        let mut steps = steps::build(&decisions, &inputs);
        let mut summary = decide::summary(&decisions);
        if node_leaves {
            // After RM11, with the member gone and the cluster verified: the node removal's own
            // steps (RN1-RN5, remove_node::steps), on the same run and host.
            let node = decide::node_decisions(&decisions);
            let node_inputs = Arc::new(crate::operations::remove_node::acts::Inputs {
                inv: inv.clone(),
                pki: inputs.pki.clone(),
                kubernetes: inputs.kubernetes.clone(),
                state: state.clone(),
            });
            steps.extend(crate::operations::remove_node::steps::build(&node, &node_inputs));
            summary.push_str(&format!(
                "then {}",
                crate::operations::remove_node::decide::summary(&node).trim_start_matches("remove ")
            ));
        }
        let planned = Planned {
            summary,
            decisions: serde_json::to_value(&decisions)?,
            steps,
            confirmation: Confirmation::Ask(format!(
                "remove takes member {} out of cluster {} for good",
                decisions.member, inv.name
            )),
            resume: format!(
                "hactl remove -i {} {} --resume {}",
                inv.source.display(),
                decisions.member,
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
        ctx: &Context<'_>,
        _run: &RunId,
        outcome: &Outcome,
        took: Duration,
    ) -> anyhow::Result<Report> {
        let d = self.decisions.as_ref().expect("plan runs before report");
        // The member history: the member's host fenced for good, or attested gone.
        let data_aside = d.aside(&ctx.inv.etcd.data_dir);
        let transports = self
            .reach
            .as_ref()
            .map(|r| r.transports.clone())
            .unwrap_or_default();
        let by = format!("remove {}", d.run);
        match &d.host {
            Some(h) => {
                operations::old_members::record_change(
                    ctx.inv,
                    ctx.state,
                    &transports,
                    &by,
                    Some((h, &data_aside)),
                    None,
                )
                .await
            }
            None => {
                operations::old_members::record_change(
                    ctx.inv,
                    ctx.state,
                    &transports,
                    &by,
                    None,
                    Some(&d.member),
                )
                .await
            }
        }
        let aside = d
            .host
            .as_ref()
            .map(|h| {
                format!(
                    "; its data dir on {h} is kept as {}",
                    d.aside(&ctx.inv.etcd.data_dir)
                )
            })
            .unwrap_or_default();
        Ok(Report {
            code: exit::OK,
            text: format!(
                "remove: member {} removed in {:.1}s ({} steps done, {} already done){aside}\n",
                d.member,
                took.as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len()
            ),
        })
    }
}

/// The decisions of run `run`, which must be a removal of `member` in this cluster.
fn resume_decisions(inv: &Inventory, state: &StateDir, run: &str, member: &str) -> anyhow::Result<Decisions> {
    let path = RunDir::new(state, run).decisions();
    let text = crate::bounded::read_to_string(&path, crate::bounded::TEXT).map_err(|e| {
        refuse(
            exit::REFUSED,
            format!("cannot resume run {run}: {e} (a run that stopped before it was confirmed changed nothing: start a new one)"),
        )
    })?;
    let d: Decisions =
        serde_json::from_str(&text).with_context(|| format!("{} is not a remove run", path.display()))?;
    if d.cluster != inv.name || d.member != member {
        return Err(refuse(
            exit::REFUSED,
            format!(
                "run {run} removes member {} of cluster {}, not {member} of {}",
                d.member, d.cluster, inv.name
            ),
        ));
    }
    Ok(d)
}
