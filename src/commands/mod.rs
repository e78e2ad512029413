//! Subcommands: one file each, the top floor: parse → call the library → print. Nothing outside
//! `main.rs` imports this module.
//!
//! Invariant: `anyhow` with context lives here and in `main.rs` only.

pub mod certs;
pub mod check;
pub mod etcd;
pub mod etcd_maintenance;
pub mod heal;
pub mod init;
pub mod lab;
pub mod maintenance;
pub mod recover;
pub mod replace;
pub mod reset;
pub mod status;
pub mod up;

use anyhow::Context;

use crate::cli::{Cli, Command, ConnectArgs, InventoryArgs};
use crate::inventory::{self, Inventory};
use crate::state::StateDir;

pub use crate::exit::{self, exit_code_of, Refusal};

/// Runs one command line; returns the exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Init { path, force } => {
            init::run(&path, force)?;
            Ok(exit::OK)
        }
        Command::Validate(args) => {
            let inv = load_inventory(&args)?;
            println!(
                "{}: valid: cluster {}, {} hosts",
                args.inventory.display(),
                inv.name,
                inv.hosts.len()
            );
            Ok(exit::OK)
        }
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
            crate::cli::SnapshotCommand::RestoreBundle(args) => etcd::restore_bundle(&args),
        },
        Command::Etcd(crate::cli::EtcdCommand::Maintenance(args)) => etcd_maintenance::run(&args).await,
        Command::Recover(args) => recover::run(&args).await,
        Command::Certs(crate::cli::CertsCommand::Check(args)) => certs::check(&args).await,
        Command::Certs(crate::cli::CertsCommand::Renew(args)) => certs::renew(&args).await,
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
