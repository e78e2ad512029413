//! Subcommands: one file each, each a short recipe over the library.
//!
//! Invariant: `anyhow` with context lives here and in `main.rs` only.

pub mod balancers;
pub mod check;
pub mod completion;
pub mod etcd;
pub mod etcd_maintenance;
pub mod heal;
pub mod init;
pub mod kubeconfig;
pub mod lab;
pub mod maintenance;
pub mod membership;
pub mod node;
pub mod recover;
pub mod replace;
pub mod reset;
pub mod status;
pub mod up;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;

use crate::cli::{Cli, Command, ConnectArgs, InventoryArgs};
use crate::exec::Transport;
use crate::inventory::{self, Host, Inventory};
use crate::state::StateDir;

/// Exit codes shared by every command (see ../shared/specs/recovery.md §2.3).
pub mod exit {
    pub const OK: i32 = 0;
    /// A failure, or checks that did not pass.
    pub const FAILED: i32 = 1;
    /// Refused by a safety rule; nothing changed.
    pub const REFUSED: i32 = 2;
    /// Needs operator input (attestation, a lock held by another run).
    pub const NEEDS_INPUT: i32 = 3;
    /// Failed after changes; `--resume` possible.
    pub const FAILED_AFTER_CHANGES: i32 = 4;
    /// Post-verification failed; state safe but degraded.
    pub const DEGRADED: i32 = 5;
}

/// A refusal: a safety rule said no. Carries its exit code so `main` can return it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

/// The exit code for an error that reached `main`.
pub fn exit_code_of(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|e| e.downcast_ref::<Refusal>().map(|r| r.code))
        .unwrap_or(exit::FAILED)
}

/// Runs one command line; returns the exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Init { path, force } => {
            init::run(&path, force)?;
            Ok(exit::OK)
        }
        Command::Validate(args) => validate(&args),
        Command::Check(args) => check::run(&args).await,
        Command::Up(args) => up::up(&args).await,
        Command::Plan(args) => up::plan(&args).await,
        Command::Reset(args) => reset::run(&args).await,
        Command::Status(args) => status::run(&args).await,
        Command::Replace(args) => replace::run(&args).await,
        Command::Heal(args) => heal::run(&args).await,
        Command::Maintenance(cmd) => maintenance::run(&cmd).await,
        Command::Etcd(crate::cli::EtcdCommand::Snapshot(cmd)) => match cmd {
            crate::cli::SnapshotCommand::Save(args) => etcd::save(&args).await,
            crate::cli::SnapshotCommand::Verify(args) => etcd::verify(&args).await,
        },
        Command::Etcd(crate::cli::EtcdCommand::Maintenance(args)) => etcd_maintenance::run(&args).await,
        Command::Recover(args) => recover::run(&args).await,
        Command::Kubeconfig(args) => kubeconfig::run(&args),
        Command::Completion { shell } => completion::completion(shell),
        Command::Man { out } => completion::man(out.as_deref()),
        Command::Lab(cmd) => {
            let Some(inventory) = lab::run(cmd).await? else {
                return Ok(exit::OK);
            };
            // `lab up --apply`: bring the cluster up on the new lab and show its state.
            let args = crate::cli::UpArgs {
                inventory: InventoryArgs {
                    inventory,
                    state_dir: None,
                },
                connect: ConnectArgs {
                    concurrency: 16,
                    accept_new_host_key: vec![],
                    connect_timeout: None,
                },
                yes: true,
            };
            up::up(&args).await?;
            status::run(&crate::cli::StatusArgs {
                inventory: args.inventory.clone(),
                connect: args.connect.clone(),
                output: crate::cli::OutputFormat::Table,
            })
            .await
        }
    }
}

/// `hactl validate`: every problem with its place (text), or the same as JSON on stdout.
fn validate(args: &crate::cli::ValidateArgs) -> anyhow::Result<i32> {
    let file = args.inventory.inventory.display().to_string();
    if args.output == crate::cli::OutputFormat::Table {
        let inv = load_inventory(&args.inventory)?;
        println!("{file}: valid: cluster {}, {} hosts", inv.name, inv.hosts.len());
        return Ok(exit::OK);
    }
    let report = match inventory::load(&args.inventory.inventory) {
        Ok(inv) => serde_json::json!({
            "file": file, "valid": true, "cluster": inv.name, "hosts": inv.hosts.len(), "problems": [],
        }),
        Err(err) => {
            let problems: Vec<serde_json::Value> = err
                .problems
                .iter()
                .map(|p| serde_json::json!({ "place": p.place, "message": p.message, "text": p.to_string() }))
                .collect();
            serde_json::json!({ "file": file, "valid": false, "problems": problems })
        }
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(if report["valid"] == true {
        exit::OK
    } else {
        exit::FAILED
    })
}

/// Loads and validates the inventory, without touching the state directory.
pub fn load_inventory(args: &InventoryArgs) -> anyhow::Result<Inventory> {
    let mut inv = inventory::load(&args.inventory)?;
    if let Some(dir) = &args.state_dir {
        inv.state_dir =
            std::path::absolute(dir).with_context(|| format!("bad state dir {}", dir.display()))?;
    }
    Ok(inv)
}

/// Loads the inventory and opens its state directory (created 0700; refused when too open).
pub fn load(args: &InventoryArgs) -> anyhow::Result<(Inventory, StateDir)> {
    let inv = load_inventory(args)?;
    let state = StateDir::open(&inv.state_dir)
        .with_context(|| format!("cannot use the state directory of cluster {}", inv.name))?;
    Ok((inv, state))
}

/// A host's connection, or why there is none.
pub type Connection = Result<Arc<dyn Transport>, String>;

/// Connects to `hosts` (at most `args.concurrency` at once), verifying host keys against the
/// cluster's known_hosts. Every host gets an entry: its connection or its error chain.
pub async fn connect(
    inv: &Inventory,
    state: &StateDir,
    hosts: &[&Host],
    args: &ConnectArgs,
) -> BTreeMap<String, Connection> {
    let _ = inv;
    let known = match crate::ssh::KnownHosts::load(state.known_hosts_path()) {
        Ok(k) => Arc::new(k),
        Err(e) => {
            let msg = format!("{:#}", anyhow::Error::from(e));
            return hosts.iter().map(|h| (h.name.clone(), Err(msg.clone()))).collect();
        }
    };
    let opts = crate::ssh::ConnectOptions {
        known_hosts: known,
        accept_new_host_key: args.accept_new_host_key.clone(),
        timeout: args.connect_timeout.map(Duration::from_secs),
        agent_socket: None,
        key_passphrase: crate::ssh::PassphraseSource::default(),
    };
    let results: Vec<(String, Connection)> = futures::stream::iter(hosts.iter().map(|h| {
        let opts = &opts;
        async move {
            let r = crate::ssh::Session::connect(&h.name, &h.ssh, opts)
                .await
                .map(|s| Arc::new(s) as Arc<dyn Transport>)
                .map_err(|e| format!("{:#}", anyhow::Error::from(e)));
            (h.name.clone(), r)
        }
    }))
    .buffer_unordered(args.concurrency.max(1))
    .collect()
    .await;
    results.into_iter().collect()
}
