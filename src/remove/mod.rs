//! remove: a quorum-safe removal of one etcd member the inventory no longer lists
//! (`hactl remove MEMBER`; docs/recovery.md, "Remove (RM1–RM11)").
//!
//! The operator deletes the host from the inventory (or keeps it with `roles: []`, so hactl can
//! reach it to fence it); `hactl up` then refuses and names this command. R0 observes the cluster
//! and decides ([`decide`], pure: R-remove for a declared removal, the host, the observer); the
//! steps ([`steps`]) are journaled data run by `exec::journaled`, so `--dry-run` prints them and
//! `--resume RUN` re-checks each postcondition on the hosts.
//!
//! Invariants: the data dir is renamed to `<dataDir>.hactl-removed-<run>`, never deleted; the
//! `member remove` re-checks the ID and peer URL on the host and R-remove right before; the
//! member's servers leave every HAProxy before anything on it stops.

pub mod acts;
pub mod decide;
pub mod steps;

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::RemoveArgs;
use crate::exec::journaled::{self, RunOptions};
use crate::exit::{self, refuse};
use crate::inventory::{Host, Inventory, Role};
use crate::operations::journal::{new_run_id, Journal};
use crate::operations::run_dir::RunDir;
use crate::operations::{self, reach};
use crate::state::StateDir;

pub use decide::Decisions;

/// `hactl remove`, with the inventory loaded by the caller.
pub async fn run(inv: &Inventory, state: &StateDir, args: &RemoveArgs) -> anyhow::Result<i32> {
    let _lock = if args.dry_run {
        None
    } else {
        Some(state.lock(operations::OPERATION_LOCK).map_err(|e| {
            refuse(
                exit::NEEDS_INPUT,
                format!("another hactl operation holds this cluster: {e:#}; wait for it, then run again"),
            )
        })?)
    };
    let pki = crate::pki::ensure(&state.path.join("pki"), inv, time::OffsetDateTime::now_utc())
        .context("failed to prepare the cluster's certificates")?;
    // Every host with a role (etcd, apiservers, load balancers) and the member's own host.
    let mut hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    if let Some(h) = inv.host(&args.member).filter(|h| h.roles.is_empty()) {
        hosts.push(h);
    }
    let reach = reach::reach(inv, state, &hosts, &args.connect).await;
    let in_maintenance = operations::maintenance_record::in_maintenance(state);
    let decisions = match &args.resume {
        Some(run) => resume_decisions(inv, state, run, &args.member)?,
        None => {
            let obs = reach.observe(inv, &[args.member.as_str()]).await?;
            let reachable: BTreeSet<String> = reach.transports.keys().cloned().collect();
            decide::decide(
                &obs,
                &decide::Inputs {
                    inv,
                    member: &args.member,
                    run: &new_run_id("remove"),
                    reachable: &reachable,
                    in_maintenance: &in_maintenance,
                    confirm_dead: args.confirm_dead,
                },
            )
            .map_err(anyhow::Error::new)?
        }
    };
    // The hosts a run acts on must answer (the member's own only when not attested gone).
    let needed: Vec<&str> = inv
        .hosts
        .iter()
        .filter(|h| h.has(Role::LoadBalancer) || h.has(Role::ControlPlane) && inv.kubernetes.is_some())
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
    let steps = steps::build(&decisions, &inputs);
    let summary = decide::summary(&decisions);
    let sudo = |h: &Option<String>| h.as_deref().and_then(|h| inv.host(h)).is_some_and(|h| h.ssh.sudo);
    if args.dry_run {
        print!("{summary}");
        for s in &steps {
            print!("{}", s.render(sudo(&s.host)));
        }
        println!("(dry run: nothing was changed)");
        return Ok(exit::OK);
    }
    let mut journal = if args.resume.is_some() {
        Journal::open(state, &decisions.run)?
    } else {
        eprint!("{summary}");
        for s in &steps {
            eprintln!(
                "  [{}] {}{}",
                s.id,
                s.title,
                s.host.as_ref().map(|h| format!(" (on {h})")).unwrap_or_default()
            );
        }
        if !args.yes {
            crate::output::confirm(&format!(
                "remove takes member {} out of cluster {} for good",
                decisions.member, inv.name
            ))?;
        }
        let j = Journal::create(state, &decisions.run)?;
        let json = serde_json::to_string_pretty(&decisions)?;
        state.write_file(
            RunDir::new(state, &decisions.run).decisions_relative(),
            format!("{json}\n").as_bytes(),
            0o600,
        )?;
        j
    };
    eprintln!(
        "remove: run {} (journal {})",
        decisions.run,
        journal
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    crate::exec::run::stop_between_steps_on_ctrl_c();
    let started = std::time::Instant::now();
    let mirror_hosts: Vec<String> = inv
        .with_role(Role::Etcd)
        .into_iter()
        .filter(|h| reach.transports.contains_key(&h.name))
        .map(|h| h.name.clone())
        .collect();
    match journaled::run(
        &steps,
        &reach.transports,
        &mut journal,
        &RunOptions { mirror_hosts },
    )
    .await
    {
        Ok(outcome) => {
            let aside = decisions
                .host
                .as_ref()
                .map(|h| {
                    format!(
                        "; its data dir on {h} is kept as {}",
                        decisions.aside(&inv.etcd.data_dir)
                    )
                })
                .unwrap_or_default();
            println!(
                "remove: member {} removed in {:.1}s ({} steps done, {} already done){aside}",
                decisions.member,
                started.elapsed().as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len()
            );
            Ok(exit::OK)
        }
        Err(failed) => {
            let resume = format!(
                "hactl remove -i {} {} --resume {}",
                args.inventory.inventory.display(),
                decisions.member,
                decisions.run
            );
            Err(failed.into_stopped("remove", &resume))
        }
    }
}

/// The decisions of run `run`, which must be a removal of `member` in this cluster.
fn resume_decisions(inv: &Inventory, state: &StateDir, run: &str, member: &str) -> anyhow::Result<Decisions> {
    let path = RunDir::new(state, run).decisions();
    let text = fs_err::read_to_string(&path).map_err(|e| {
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
