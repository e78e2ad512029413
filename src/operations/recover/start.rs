//! How a recover run begins (R0, docs/recovery.md "Recover (R0–R6)"): a new run assesses the
//! etcd hosts read-only, picks the source and decides; a resumed run reloads the decisions it
//! saved and checks it can still reach every host it acts on. Also R0's journal entries.

use anyhow::Context as _;

use super::decide::{self, Assessed};
use super::steps::R;
use super::{Decisions, Options};
use crate::exec::connect::ConnectSettings;
use crate::exec::connect::Reach;
use crate::exec::Transports;
use crate::exit::refuse;
use crate::inventory::Inventory;
use crate::operations::run_dir::RunDir;
use crate::operations::runner::StepId;
use crate::state::StateDir;

/// A resumed run: its saved decisions, and transports to every host it acts on that is not
/// attested dead.
pub fn resume(
    inv: &Inventory,
    state: &StateDir,
    run: &str,
    reach: Reach,
) -> anyhow::Result<(Decisions, Transports)> {
    let path = RunDir::new(state, run).decisions();
    let text = crate::bounded::read_to_string(&path, crate::bounded::TEXT).map_err(|e| {
        refuse(
            crate::exit::REFUSED,
            format!("cannot resume run {run}: {e} (a run that stopped before its plan was confirmed changed nothing: start a new one)"),
        )
    })?;
    let d: Decisions =
        serde_json::from_str(&text).with_context(|| format!("{} is not a recover plan", path.display()))?;
    if d.cluster != inv.name {
        return Err(refuse(
            crate::exit::REFUSED,
            format!("run {run} belongs to cluster {}", d.cluster),
        ));
    }
    let (transports, down) = (reach.transports, reach.unreachable);
    let missing: Vec<String> = down
        .iter()
        .filter(|(h, _)| !d.confirmed_dead.contains(h))
        .map(|(h, e)| format!("{h}: {e}"))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(
            crate::exit::NEEDS_INPUT,
            format!("cannot reach hosts run {run} acts on:\n{}", missing.join("\n")),
        ));
    }
    Ok((d, transports))
}

/// R0: read-only assessment, the source, and the decisions of run `run`.
pub async fn assess_and_decide(
    opts: &Options,
    connect: &ConnectSettings,
    inv: &Inventory,
    state: &StateDir,
    run: &str,
    reach: Reach,
) -> anyhow::Result<(Decisions, Transports)> {
    let hosts = super::assess::assess_hosts(inv, &reach.transports, connect.concurrency).await?;
    eprintln!("assessment:");
    for a in &hosts {
        eprintln!("  {}", a.describe());
    }
    for (h, e) in &reach.unreachable {
        eprintln!("  {h}: unreachable: {e}");
    }
    let assessed = Assessed {
        hosts,
        down: reach.unreachable,
    };
    let inputs = decide::Options {
        run: run.to_string(),
        now: time::OffsetDateTime::now_utc(),
        mode: opts.mode,
        members: opts.members.clone(),
        confirm_dead: opts.confirm_dead.clone(),
        force_destructive: opts.force_destructive,
        accept_data_loss_window: opts.accept_data_loss_window,
        bump_revision: opts.bump_revision,
        accept_revision_rewind: opts.accept_revision_rewind,
        in_maintenance: crate::operations::maintenance_record::in_maintenance(state)
            .into_iter()
            .collect(),
    };
    let targets = decide::targets(inv, &assessed, &inputs).map_err(anyhow::Error::new)?;
    for note in &targets.notes {
        eprintln!("{note}");
    }
    let transports = reach.transports;
    let source = super::source::choose(
        opts,
        connect,
        inv,
        state,
        &transports,
        &assessed.hosts,
        &targets.targets,
    )
    .await?;
    let d = decide::decide(inv, &assessed, &inputs, crate::hwm::read(state), source)
        .map_err(anyhow::Error::new)?;
    Ok((d, transports))
}

/// R0's journal entries (R0.1 targets, R0.3 gate, R0.5 bump, R0.6 identity), each naming the
/// sha256 of the saved decisions.
pub fn r0_entries(
    decisions: &Decisions,
    force_destructive: bool,
    sha: &str,
) -> anyhow::Result<Vec<(StepId, serde_json::Value)>> {
    Ok(vec![
        (
            R::Targets.into(),
            serde_json::json!({ "targets": decisions.targets, "confirmed_dead": decisions.confirmed_dead, "decisions_sha256": sha }),
        ),
        (
            R::Gate.into(),
            serde_json::json!({ "gate": "no quorum, none restorable", "force_destructive": force_destructive }),
        ),
        (R::Bump.into(), serde_json::to_value(decisions.bump)?),
        (
            R::Identity.into(),
            serde_json::json!({ "expected_cluster_id": decisions.expected_cluster_id, "token": decisions.token }),
        ),
    ])
}
