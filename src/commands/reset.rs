//! `hactl reset`: stops and removes what hactl installed on the hosts.
//!
//! Invariant: data dirs are moved aside (`<dir>.hactl-reset-<UTC time>`), never deleted;
//! distribution packages stay installed (other software may use them).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context as _;

use crate::cli::ResetArgs;
use crate::etcd;
use crate::exec::{self, Mode};
use crate::facts::HostFacts;
use crate::inventory::{Host, Inventory, Role};
use crate::phases::etcd_files::managed_paths;
use crate::plan::{HostSteps, Parallelism, Plan, PlannedPhase, RemoteCommand, Step};

/// The steps that undo `up` on one etcd host, from what its facts show is there.
pub fn reset_steps(inv: &Inventory, facts: &HostFacts, stamp: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    // Scheduled backups first, so no snapshot starts while etcd stops; the snapshots stay.
    if facts.files.contains_key(crate::backup::TIMER_PATH)
        || facts
            .units
            .get(crate::backup::TIMER)
            .is_some_and(|u| u.active == "active")
    {
        steps.push(Step::Run(RemoteCommand::new([
            "systemctl",
            "disable",
            "--now",
            crate::backup::TIMER,
        ])));
    }
    let unit_known = facts.files.contains_key(etcd::UNIT_PATH)
        || facts.units.get(etcd::UNIT).is_some_and(|u| u.active == "active");
    if unit_known {
        steps.push(Step::Run(RemoteCommand::new([
            "systemctl",
            "disable",
            "--now",
            etcd::UNIT,
        ])));
    }
    if facts.data_dir.is_some() {
        let aside = format!("{}.hactl-reset-{stamp}", inv.etcd.data_dir);
        steps.push(Step::Run(RemoteCommand::new([
            "mv",
            "--no-clobber",
            "--",
            &inv.etcd.data_dir,
            &aside,
        ])));
    }
    let present: Vec<String> = managed_paths(&inv.etcd.source)
        .into_iter()
        .chain(crate::backup::managed_paths())
        .filter(|p| facts.files.contains_key(p))
        .collect();
    if !present.is_empty() {
        let mut argv = vec!["rm".to_string(), "-f".to_string(), "--".to_string()];
        argv.extend(present.iter().cloned());
        steps.push(Step::Run(RemoteCommand::new(argv)));
    }
    if facts.files.contains_key(etcd::UNIT_PATH) || facts.files.contains_key(crate::backup::TIMER_PATH) {
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
    }
    steps
}

pub fn plan(inv: &Inventory, facts: &BTreeMap<String, HostFacts>, stamp: &str) -> Plan {
    let mut plan = Plan::default();
    let hosts = inv
        .with_role(Role::Etcd)
        .into_iter()
        .map(|h| HostSteps {
            host: h.name.clone(),
            sudo: h.ssh.sudo,
            steps: facts
                .get(&h.name)
                .map(|f| reset_steps(inv, f, stamp))
                .unwrap_or_default(),
        })
        .collect();
    plan.push(PlannedPhase {
        title: "Stop and remove etcd".into(),
        parallelism: Parallelism::All,
        disruptive: true,
        hosts,
    });
    plan
}

pub async fn run(args: &ResetArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let _lock = state
        .lock("up")
        .context("cannot reset while another hactl run changes the cluster")?;
    let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
    let transports = crate::exec::connect::reach(&state, &hosts, &args.connect)
        .await
        .require_all()?;
    let facts = super::up::gather_facts(&inv, &hosts, &transports, args.connect.concurrency).await?;
    let stamp = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .context("failed to format the time")?;
    let plan = plan(&inv, &facts, &stamp);
    if plan.is_empty() {
        println!("no changes: nothing of hactl's is installed");
        return Ok(crate::exit::OK);
    }
    if args.dry_run {
        exec::run(&plan, Mode::DryRun, &transports).await?;
        return Ok(crate::exit::OK);
    }
    eprint!("{plan}");
    if !args.yes {
        confirm_cluster_name(&inv.name)?;
    }
    exec::run::stop_between_steps_on_ctrl_c();
    match exec::run(&plan, Mode::Live, &transports).await {
        Ok(_) => {
            println!(
                "reset: etcd stopped and removed on {} hosts; data dirs kept as {}.hactl-reset-{stamp}",
                plan.phases.iter().map(|p| p.hosts.len()).sum::<usize>(),
                inv.etcd.data_dir
            );
            Ok(crate::exit::OK)
        }
        Err(failed) => {
            eprint!("{}", failed.details());
            Err(anyhow::Error::new(failed).context("reset stopped; run it again to finish"))
        }
    }
}

/// Asks the operator to type the cluster name; refuses without a terminal.
fn confirm_cluster_name(name: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::NEEDS_INPUT,
            message: "reset stops etcd on every host; no terminal to confirm on: run again with --yes".into(),
        }));
    }
    eprint!("this stops etcd on every host of cluster {name}. Type the cluster name to proceed: ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if answer.trim() == name {
        Ok(())
    } else {
        Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::REFUSED,
            message: "the name did not match: nothing was changed".into(),
        }))
    }
}
