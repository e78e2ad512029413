//! `hactl recover`: the recipe. R0 ([`crate::recover::start`]) reads the hosts, picks the source
//! and decides ([`crate::recover::decide`], pure), or reloads a resumed run's decisions; the steps come from
//! [`crate::recover::steps`] and the journaled runner executes them; [`crate::recover::report`]
//! says what happened.

use std::io::{BufRead, Write};

use anyhow::Context as _;

use crate::cli::{OutputFormat, RecoverArgs};
use crate::exec::journaled::{self, RunOptions};
use crate::exit::refuse;
use crate::inventory::Inventory;
use crate::operations::journal::Journal;
use crate::operations::run_dir::RunDir;
use crate::recover::{self as rec, report};

/// `hactl recover`.
pub async fn run(args: &RecoverArgs) -> anyhow::Result<i32> {
    let (inv, state) = super::load(&args.inventory)?;
    let _lock = if args.dry_run {
        None
    } else {
        Some(
            state
                .lock(crate::lock::LOCAL_LOCK)
                .context("cannot recover while another hactl run changes the cluster")?,
        )
    };
    if !state.file("pki/etcd/ca.key").exists() {
        return Err(refuse(
            crate::exit::REFUSED,
            format!(
                "the state directory {} has no etcd CA: a recover needs the cluster's PKI (restore it from a backup bundle first)",
                state.path.display()
            ),
        ));
    }
    let pki = crate::pki::ensure(&state.file("pki"), &inv, time::OffsetDateTime::now_utc())
        .context("failed to load the cluster's certificates")?;
    let tls = crate::etcd::client::client_tls(&state.file("pki"))?;
    let (decisions, transports) = match &args.resume {
        Some(run) => rec::start::resume(args, &inv, &state, run).await?,
        None => rec::start::assess_and_decide(args, &inv, &state).await?,
    };
    // R2.3: the members' certificates carry their addresses and come from the etcd CA (else they
    // are re-issued from the CA in the state directory), checked before anything changes.
    let pki = match rec::certs::ensure_member_certs(
        &state.file("pki"),
        &inv,
        &decisions.targets,
        &decisions.run,
        pki,
    ) {
        Ok((pki, reissued)) => {
            for line in reissued {
                eprintln!("{line}");
            }
            pki
        }
        Err(m) => return Err(refuse(crate::exit::REFUSED, m)),
    };
    let owner = crate::lock::Owner::new("recover", &decisions.run);
    let inputs = rec::steps::Inputs {
        inv: &inv,
        pki: &pki,
        state: &state,
        tls: &tls,
        owner,
        steal_lock: args.steal_lock.clone(),
    };
    let steps = rec::steps::build(&decisions, &inputs);
    let summary = report::plan_header(&decisions, &inv);
    if args.dry_run {
        let sudo = |s: &journaled::JournaledStep| {
            s.host
                .as_deref()
                .and_then(|h| inv.host(h))
                .is_some_and(|h| h.ssh.sudo)
        };
        match args.output {
            OutputFormat::Table => {
                print!("{summary}");
                for s in &steps {
                    print!("{}", s.render(sudo(s)));
                }
            }
            OutputFormat::Json => {
                let steps = steps.iter().map(|s| s.to_json(sudo(s))).collect();
                let json = report::plan_json(&decisions, &inv, steps);
                println!("{}", serde_json::to_string_pretty(&json)?);
            }
        }
        return Ok(crate::exit::OK);
    }
    let mut journal = if args.resume.is_some() {
        Journal::open(&state, &decisions.run)?
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
        confirm(args, &inv)?;
        let j = Journal::create(&state, &decisions.run)?;
        let json = serde_json::to_string_pretty(&decisions)?;
        state.write_file(
            RunDir::new(&state, &decisions.run).decisions_relative(),
            format!("{json}\n").as_bytes(),
            0o600,
        )?;
        rec::start::journal_r0(&j, &decisions, &json, args.force_destructive, &transports).await?;
        j
    };
    eprintln!(
        "recover: run {} (journal {})",
        decisions.run,
        journal
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    crate::exec::run::stop_between_steps_on_ctrl_c();
    let mirror_hosts: Vec<String> = transports.keys().cloned().collect();
    let started = std::time::Instant::now();
    match journaled::run(&steps, &transports, &mut journal, &RunOptions { mirror_hosts }).await {
        Ok(outcome) => {
            println!(
                "recover: run {} done in {:.1}s ({} steps done, {} already done)",
                decisions.run,
                started.elapsed().as_secs_f64(),
                outcome.done.len(),
                outcome.skipped.len()
            );
            print!("{}", report::finish_report(&decisions, &inv, &state));
            Ok(crate::exit::OK)
        }
        Err(failed) => {
            let resume = format!(
                "hactl recover -i {} --resume {}",
                args.inventory.inventory.display(),
                decisions.run
            );
            Err(failed.into_stopped("recover", &resume))
        }
    }
}

/// Confirmation: a typed cluster name for `--force-destructive` (stdin may be a pipe), else
/// `--yes` or a y/N on a terminal.
fn confirm(args: &RecoverArgs, inv: &Inventory) -> anyhow::Result<()> {
    if args.force_destructive {
        eprint!(
            "--force-destructive: this rolls cluster {} back although its quorum could be restored. Type the cluster name to proceed: ",
            inv.name
        );
        std::io::stderr().flush().ok();
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if answer.trim() != inv.name {
            return Err(refuse(
                crate::exit::REFUSED,
                "the name did not match: nothing was changed",
            ));
        }
        return Ok(());
    }
    if args.yes {
        return Ok(());
    }
    crate::output::confirm("recover stops etcd (and the Kubernetes control plane) on every reachable host")
}
