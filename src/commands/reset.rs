//! `hactl reset`: takes the lock, builds reset's plan ([`crate::converge::reset`]), checks the
//! data-directory rule on every etcd host, asks for the cluster name, runs the plan and prints
//! what it did.
//!
//! Invariant: nothing changes on any host unless every host answered and the data-directory
//! rule held on every etcd host.

use std::io::{IsTerminal, Write};

use crate::cli::ResetArgs;
use crate::converge::reset;
use crate::exec::{self, Mode};

pub async fn run(args: &ResetArgs) -> anyhow::Result<i32> {
    let connect = args.connect.settings();
    if args.dry_run {
        // A dry run writes nothing: no lock, no state directory created, no host key recorded.
        let (inv, view) = super::load_read_only(&args.inventory)?;
        let prepared = reset::prepare(&inv, (&view).into(), &connect).await?;
        reset::check_data_dirs(&inv, &prepared).await?;
        if prepared.plan.is_empty() {
            println!("no changes: nothing of hactl's is installed");
        } else {
            exec::run(&prepared.plan, Mode::DryRun, &prepared.transports).await?;
        }
        return Ok(remote_left(&inv, &prepared, crate::exit::OK));
    }
    let (inv, state) = super::load(&args.inventory)?;
    let _lock = crate::operations::lock::take(&state, &inv, &connect, "reset").await?;
    let prepared = reset::prepare(&inv, (&state).into(), &connect).await?;
    reset::check_data_dirs(&inv, &prepared).await?;
    let (plan, transports, stamp) = (&prepared.plan, &prepared.transports, &prepared.stamp);
    if plan.is_empty() {
        println!("no changes: nothing of hactl's is installed");
        return Ok(remote_left(&inv, &prepared, crate::exit::FAILED));
    }
    eprint!("{plan}");
    if !args.yes {
        confirm_cluster_name(&inv.name)?;
    }
    exec::run::stop_between_steps_on_ctrl_c();
    match exec::run(plan, Mode::Live, transports).await {
        Ok(_) => {
            let mut hosts: Vec<&str> = plan
                .phases
                .iter()
                .flat_map(|p| p.hosts.iter().map(|h| h.host.as_str()))
                .collect();
            hosts.sort();
            hosts.dedup();
            hosts.retain(|h| *h != crate::inventory::REMOTE_HOST_NAME);
            println!(
                "reset: hactl's services stopped and its files removed on {} hosts; data dirs kept as {}.hactl-reset-{stamp}",
                hosts.len(),
                inv.etcd.data_dir
            );
            let nodes: Vec<&str> = plan
                .phases
                .iter()
                .filter(|p| p.title == reset::NODE_PHASE)
                .flat_map(|p| p.hosts.iter().map(|h| h.host.as_str()))
                .collect();
            if !nodes.is_empty() {
                println!(
                    "reset: on {}, the node components' data moved aside as {}",
                    nodes.join(", "),
                    crate::kubernetes::node::DATA_DIRS
                        .iter()
                        .map(|d| format!("{d}.hactl-reset-{stamp}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            println!("{}", summary(&inv, &prepared));
            Ok(remote_left(&inv, &prepared, crate::exit::FAILED_AFTER_CHANGES))
        }
        Err(failed) => {
            eprint!("{}", failed.details());
            Err(anyhow::Error::new(failed).context("reset stopped; run it again to finish"))
        }
    }
}

/// What reset did with the backup push key and the snapshots, one line each (what `plan` held).
fn summary(inv: &crate::inventory::Inventory, p: &reset::Prepared) -> String {
    let mut out = Vec::new();
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
            .map(|d| format!("{d} -> {d}.hactl-reset-{}", p.stamp))
            .collect();
        out.push(format!(
            "reset: snapshots moved aside on {host} (kept, never deleted): {}",
            moved.join(", ")
        ));
    }
    if out.is_empty() {
        out.push("reset: no backup push key and no snapshot on the hosts".into());
    }
    out.join("\n")
}

/// With the backup remote unreachable, the push key may still be authorized there: says so,
/// with what to do, and gives `code`; `OK` otherwise.
fn remote_left(inv: &crate::inventory::Inventory, p: &reset::Prepared, code: i32) -> i32 {
    let (Some(why), Some(remote)) = (&p.leftovers.remote_unreached, &inv.backup.remote) else {
        return crate::exit::OK;
    };
    eprintln!(
        "error: the backup push key may still be authorized on {}: {why}. Run `hactl reset -i {}` again once it answers, \
         or remove the line ending in `hactl backup push {}` from {}'s ~/.ssh/authorized_keys there",
        remote.describe(),
        inv.source.display(),
        inv.name,
        remote.ssh.user
    );
    code
}

/// Asks the operator to type the cluster name; refuses without a terminal.
fn confirm_cluster_name(name: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::NEEDS_INPUT,
            message: "reset stops and removes what hactl installed on every host; no terminal to confirm on: run again with --yes".into(),
        }));
    }
    eprint!("this stops and removes what hactl installed on every host of cluster {name} (data dirs are moved aside). Type the cluster name to proceed: ");
    std::io::stderr().flush().ok();
    let answer = crate::bounded::read_answer(std::io::stdin().lock())?;
    if answer.trim() == name {
        Ok(())
    } else {
        Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::REFUSED,
            message: "the name did not match: nothing was changed".into(),
        }))
    }
}
