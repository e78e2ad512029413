//! How a recover run begins (R0, docs/recovery.md "Recover (R0–R6)"): a new run assesses the
//! etcd hosts read-only, picks the source and decides; a resumed run reloads the decisions it
//! saved and checks it can still reach every host it acts on. Also journals R0's decisions.

use anyhow::Context as _;

use super::decide::{self, Assessed, Options};
use super::Decisions;
use crate::cli::RecoverArgs;
use crate::exec::Transports;
use crate::exit::refuse;
use crate::inventory::{Inventory, Role};
use crate::operations::journal::{self, Journal, StepState};
use crate::operations::run_dir::RunDir;
use crate::state::StateDir;

/// Connects to the etcd hosts: the reachable ones and why the others did not answer.
async fn connect_all(inv: &Inventory, state: &StateDir, args: &RecoverArgs) -> crate::exec::connect::Reach {
    crate::exec::connect::reach(state, &inv.with_role(Role::Etcd), &args.connect.settings()).await
}

/// A resumed run: its saved decisions, and transports to every host it acts on that is not
/// attested dead.
pub async fn resume(
    args: &RecoverArgs,
    inv: &Inventory,
    state: &StateDir,
    run: &str,
) -> anyhow::Result<(Decisions, Transports)> {
    let path = RunDir::new(state, run).decisions();
    let text = fs_err::read_to_string(&path).map_err(|e| {
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
    let reach = connect_all(inv, state, args).await;
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

/// R0: read-only assessment, the source, and the decisions.
pub async fn assess_and_decide(
    args: &RecoverArgs,
    inv: &Inventory,
    state: &StateDir,
) -> anyhow::Result<(Decisions, Transports)> {
    let reach = connect_all(inv, state, args).await;
    let hosts = super::assess::assess_hosts(inv, &reach.transports, args.connect.concurrency).await?;
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
    let opts = Options {
        run: journal::new_run_id(""),
        now: time::OffsetDateTime::now_utc(),
        mode: args.mode,
        members: args.members.clone(),
        confirm_dead: args.confirm_dead.clone(),
        force_destructive: args.force_destructive,
        accept_data_loss_window: args.accept_data_loss_window,
        bump_revision: args.bump_revision.0,
        accept_revision_rewind: args.accept_revision_rewind,
        in_maintenance: crate::operations::maintenance_record::in_maintenance(state)
            .into_iter()
            .collect(),
    };
    let targets = decide::targets(inv, &assessed, &opts).map_err(anyhow::Error::new)?;
    for note in &targets.notes {
        eprintln!("{note}");
    }
    let transports = reach.transports;
    let source =
        super::source::choose(args, inv, state, &transports, &assessed.hosts, &targets.targets).await?;
    let d =
        decide::decide(inv, &assessed, &opts, crate::hwm::read(state), source).map_err(anyhow::Error::new)?;
    Ok((d, transports))
}

/// Journals R0's decisions (R0.1 targets, R0.3 gate, R0.5 bump, R0.6 identity) under the sha256
/// of the saved decisions `json`, and mirrors each entry onto the targets.
pub async fn journal_r0(
    j: &Journal,
    decisions: &Decisions,
    json: &str,
    force_destructive: bool,
    transports: &Transports,
) -> anyhow::Result<()> {
    let sha = hex::encode(sha2::Digest::finalize(sha2::Digest::chain_update(
        <sha2::Sha256 as sha2::Digest>::new(),
        json.as_bytes(),
    )));
    for (step, out) in [
        (
            "R0.1",
            serde_json::json!({ "targets": decisions.targets, "confirmed_dead": decisions.confirmed_dead }),
        ),
        (
            "R0.3",
            serde_json::json!({ "gate": "no quorum, none restorable", "force_destructive": force_destructive }),
        ),
        ("R0.5", serde_json::to_value(decisions.bump)?),
        (
            "R0.6",
            serde_json::json!({ "expected_cluster_id": decisions.expected_cluster_id, "token": decisions.token }),
        ),
    ] {
        let e = j.append(step, StepState::Done, None, &sha, out)?;
        journal::mirror(transports, &decisions.targets, &e).await;
    }
    Ok(())
}
