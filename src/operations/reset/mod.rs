//! reset: undo `up` on every host with a role (`hactl reset`; docs/how-to/reset.md), run by the
//! operation manager ([`crate::operations::manager`]) like every day-two operation: the one
//! lock, the cluster-identity check, the dry run (`-o json` included), the typed confirmation,
//! the journal, Ctrl-C between steps and `step N/M`.
//!
//! The plan is `up`'s library's ([`crate::converge::reset`]): built after the lock from the
//! hosts' facts, and refused before anything changes when a host does not answer or the
//! data-directory rule fails on an etcd host. Its steps ([`steps`]) are that plan, one step per
//! role and host (`RS1`–`RS5`). A stopped reset is continued by running it again: it plans from
//! what is left on the hosts, so nothing needs resuming from a journal.
//!
//! Invariants: data dirs and snapshots are moved aside, never deleted; hosts presenting a CA the
//! state directory does not know are refused (another cluster's hosts are never reset).

pub mod steps;

use std::time::Duration;

use async_trait::async_trait;

use crate::converge::reset::{self, Prepared, Reached};
use crate::exec::Transports;
use crate::exit;
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::Outcome;

/// `hactl reset` as an [`Operation`].
#[derive(Default)]
pub struct Reset {
    reached: Option<Reached>,
    prepared: Option<Prepared>,
}

impl Reset {
    pub fn new() -> Reset {
        Reset::default()
    }

    /// The plan, once [`Operation::plan`] built it.
    pub fn prepared(&self) -> Option<&Prepared> {
        self.prepared.as_ref()
    }
}

#[async_trait(?Send)]
impl Operation for Reset {
    fn kind(&self) -> &'static str {
        "reset"
    }

    fn command(&self) -> String {
        "reset".into()
    }

    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(None, "reset"))
    }

    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let reached = reset::reach(ctx.inv, ctx.host_keys(), ctx.connect).await?;
        let transports = reached.transports.clone();
        self.reached = Some(reached);
        Ok(transports)
    }

    async fn plan(&mut self, ctx: &Context<'_>, _run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let inv = ctx.inv;
        let reached = self.reached.as_ref().expect("reach runs before plan");
        let prepared = reset::prepare(inv, reached, ctx.connect).await?;
        reset::check_data_dirs(inv, &prepared).await?;
        let steps = steps::steps(&prepared.plan)?;
        let summary = if steps.is_empty() {
            "no changes: nothing of hactl's is installed\n".to_string()
        } else {
            format!(
                "reset: stop and remove what hactl installed on {} hosts of cluster {}, one role \
                 after another; data dirs and snapshots moved aside as <dir>.hactl-reset-{}\n",
                hosts_of(&prepared).len(),
                inv.name,
                prepared.stamp
            )
        };
        let planned = Planned {
            summary,
            decisions: serde_json::Value::Null,
            steps,
            confirmation: Confirmation::TypeNameUnlessYes {
                what: format!(
                    "this stops and removes what hactl installed on every host of cluster {} \
                     (data dirs are moved aside)",
                    inv.name
                ),
                name: inv.name.clone(),
            },
            resume: format!("hactl reset -i {}", inv.source.display()),
            mirror_hosts: Vec::new(),
            decided: Vec::new(),
        };
        self.prepared = Some(prepared);
        Ok(planned)
    }

    async fn report(
        &mut self,
        ctx: &Context<'_>,
        _run: &RunId,
        _outcome: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let p = self.prepared.as_ref().expect("plan runs before report");
        Ok(Report {
            code: exit::OK,
            text: report_text(ctx.inv, p),
        })
    }
}

/// The hosts the plan changes (the backup remote is not one of them).
fn hosts_of(p: &Prepared) -> Vec<&str> {
    let mut hosts: Vec<&str> = p
        .plan
        .phases
        .iter()
        .flat_map(|ph| {
            ph.hosts
                .iter()
                .filter(|h| !h.steps.is_empty())
                .map(|h| h.host.as_str())
        })
        .filter(|h| *h != crate::inventory::REMOTE_HOST_NAME)
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// What reset did: the hosts, where the data went, and the backup push key and snapshots.
fn report_text(inv: &crate::inventory::Inventory, p: &Prepared) -> String {
    let stamp = &p.stamp;
    let mut out = vec![format!(
        "reset: hactl's services stopped and its files removed on {} hosts; data dirs kept as {}.hactl-reset-{stamp}",
        hosts_of(p).len(),
        inv.etcd.data_dir
    )];
    let nodes: Vec<&str> = p
        .plan
        .phases
        .iter()
        .filter(|ph| ph.title == reset::NODE_PHASE)
        .flat_map(|ph| {
            ph.hosts
                .iter()
                .filter(|h| !h.steps.is_empty())
                .map(|h| h.host.as_str())
        })
        .collect();
    if !nodes.is_empty() {
        out.push(format!(
            "reset: on {}, the node components' data moved aside as {}",
            nodes.join(", "),
            crate::kubernetes::node::DATA_DIRS
                .iter()
                .map(|d| format!("{d}.hactl-reset-{stamp}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !p.push_key_hosts.is_empty() {
        out.push(format!(
            "reset: the backup push key removed on {} (key material is removed, not moved)",
            p.push_key_hosts.join(", ")
        ));
    }
    if let (Some(_), Some(remote)) = (&p.leftovers.authorized_on_remote, &inv.backup.remote) {
        out.push(format!(
            "reset: the push key's line removed from the authorized_keys of {} (the copies there stay)",
            remote.describe()
        ));
    }
    for (host, dirs) in &p.leftovers.snapshot_dirs {
        let moved: Vec<String> = dirs
            .iter()
            .map(|d| format!("{d} -> {d}.hactl-reset-{stamp}"))
            .collect();
        out.push(format!(
            "reset: snapshots moved aside on {host} (kept, never deleted): {}",
            moved.join(", ")
        ));
    }
    if p.push_key_hosts.is_empty()
        && p.leftovers.snapshot_dirs.is_empty()
        && p.leftovers.authorized_on_remote.is_none()
    {
        out.push("reset: no backup push key and no snapshot on the hosts".into());
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}
