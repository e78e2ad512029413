//! Subcommands: one file each, the top floor: parse → call the library → print. Nothing outside
//! `main.rs` imports this module.
//!
//! Invariant: `anyhow` with context lives here and in `main.rs` only.

pub mod adopt;
pub mod certs;
pub mod check;
pub mod completion;
pub mod etcd;
pub mod etcd_maintenance;
pub mod heal;
pub mod init;
pub mod kubeconfig;
pub mod lab;
pub mod maintenance;
pub mod recover;
pub mod remove;
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
        Command::Validate(args) => validate(&args),
        Command::Check(args) => check::run(&args).await,
        Command::Up(args) if args.dry_run => {
            up::plan(&crate::cli::PlanArgs {
                up: args.up,
                output: args.output,
            })
            .await
        }
        Command::Up(args) => up::up(&args.up).await,
        Command::Plan(args) => up::plan(&args).await,
        Command::Reset(args) => reset::run(&args).await,
        Command::Status(args) => status::run(&args).await,
        Command::Replace(args) => replace::run(&args).await,
        Command::Remove(args) => remove::run(&args).await,
        Command::Heal(args) => heal::run(&args).await,
        Command::Maintenance(cmd) => maintenance::run(&cmd).await,
        Command::Etcd(crate::cli::EtcdCommand::Snapshot(cmd)) => match cmd {
            crate::cli::SnapshotCommand::Save(args) => etcd::save(&args).await,
            crate::cli::SnapshotCommand::Verify(args) => etcd::verify(&args).await,
            crate::cli::SnapshotCommand::RestoreBundle(args) => etcd::restore_bundle(&args),
        },
        Command::Etcd(crate::cli::EtcdCommand::Maintenance(args)) => etcd_maintenance::run(&args).await,
        Command::Recover(args) => recover::run(&args).await,
        Command::Adopt(args) => adopt::run(&args).await,
        Command::Kubeconfig(args) => kubeconfig::run(&args),
        Command::Completion { shell } => completion::completion(shell),
        Command::Man { out } => completion::man(out.as_deref()),
        Command::Certs(crate::cli::CertsCommand::Check(args)) => certs::check(&args).await,
        Command::Certs(crate::cli::CertsCommand::Renew(args)) => certs::renew(&args).await,
        Command::Certs(crate::cli::CertsCommand::RotateCa(args)) => certs::rotate_ca(&args).await,
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
            let code = status::run(&crate::cli::StatusArgs {
                inventory: args.inventory.clone(),
                connect: args.connect.clone(),
                output: crate::cli::OutputFormat::Table,
            })
            .await?;
            lab::readyz_through_vip(&load_inventory(&args.inventory)?).await?;
            Ok(code)
        }
    }
}

/// The `kind` of `hactl validate -o json`'s document.
pub const VALIDATION_KIND: &str = "ValidationReport";

/// The body of `hactl validate -o json`: the file, whether it is valid, and every problem with
/// its place; the cluster's name and host count are `null` when the file is not valid.
pub fn validation_report(
    file: &str,
    loaded: &Result<inventory::Inventory, inventory::InventoryError>,
) -> serde_json::Value {
    match loaded {
        Ok(inv) => serde_json::json!({
            "file": file, "valid": true, "cluster": inv.name, "hosts": inv.hosts.len(), "problems": [],
        }),
        Err(err) => {
            let problems: Vec<serde_json::Value> = err
                .problems
                .iter()
                .map(|p| serde_json::json!({ "place": p.place, "message": p.message, "text": p.to_string() }))
                .collect();
            serde_json::json!({ "file": file, "valid": false, "cluster": null, "hosts": null, "problems": problems })
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
    let report = validation_report(&file, &inventory::load(&args.inventory.inventory));
    crate::output::print_document(VALIDATION_KIND, &report)?;
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

/// Loads the inventory and opens its state directory for reading only: nothing is created (a
/// missing directory is a view of nothing), nothing can be written through it.
pub fn load_read_only(args: &InventoryArgs) -> anyhow::Result<(Inventory, crate::state::StateView)> {
    let inv = load_inventory(args)?;
    let view = crate::state::StateView::open(&inv.state_dir)
        .with_context(|| format!("cannot use the state directory of cluster {}", inv.name))?;
    Ok((inv, view))
}

/// [`load`] for a command that may be a dry run: a dry run opens an existing state directory
/// and never creates one (it writes nothing; an operation without state is refused, exit 2).
pub fn load_for(args: &InventoryArgs, dry_run: bool) -> anyhow::Result<(Inventory, StateDir)> {
    let inv = load_inventory(args)?;
    let state = open_state_for(&inv, dry_run)?;
    Ok((inv, state))
}

/// The state directory of `inv`, created unless `dry_run` ([`load_for`]).
pub fn open_state_for(inv: &Inventory, dry_run: bool) -> anyhow::Result<StateDir> {
    let context = || format!("cannot use the state directory of cluster {}", inv.name);
    if !dry_run {
        return StateDir::open(&inv.state_dir).with_context(context);
    }
    match StateDir::open_existing(&inv.state_dir).with_context(context)? {
        Some(state) => Ok(state),
        None => Err(exit::refuse(
            exit::REFUSED,
            format!(
                "no state directory at {}: a dry run creates nothing, and this command needs the \
                 cluster's state (its CAs and journals): restore it (`hactl etcd snapshot \
                 restore-bundle`), or point --state-dir at it; with neither, `hactl adopt` \
                 rebuilds it from the running cluster",
                inv.state_dir.display()
            ),
        )),
    }
}

/// Loads the inventory and opens its state directory (created 0700; refused when too open).
pub fn load(args: &InventoryArgs) -> anyhow::Result<(Inventory, StateDir)> {
    let inv = load_inventory(args)?;
    let state = StateDir::open(&inv.state_dir)
        .with_context(|| format!("cannot use the state directory of cluster {}", inv.name))?;
    Ok((inv, state))
}
