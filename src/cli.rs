//! Command-line arguments (clap derive only; no logic here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "hactl",
    version,
    about = "Bring up, and keep alive, a highly available Kubernetes control plane on hosts you own",
    propagate_version = true
)]
pub struct Cli {
    /// More log output on stderr (-v: debug, -vv: trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a commented example inventory.
    Init {
        /// Where to write it.
        #[arg(default_value = "inventory.yaml")]
        path: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Check the inventory file and print every problem with its place.
    Validate(InventoryArgs),
    /// Preflight: read-only checks of every host (SSH, sudo, OS, clock, ports, disk, binaries).
    Check(CheckArgs),
    /// Bring the hosts to the inventory: PKI, etcd (and, as configured, the rest). Idempotent.
    Up(UpArgs),
    /// Print exactly what `up` would do (commands and files per phase and host); changes nothing.
    Plan(UpArgs),
    /// Stop and remove what hactl installed; data dirs are moved aside, never deleted.
    Reset(ResetArgs),
    /// Show the cluster's health: members, leader, raft, revision, alarms, certificate expiry.
    Status(StatusArgs),
    /// Build, run and break a lab of real hosts on this machine (systemd-nspawn; needs root).
    #[command(subcommand)]
    Lab(crate::commands::lab::LabCommand),
}

/// Selects the inventory and the state directory.
#[derive(Debug, Clone, Args)]
pub struct InventoryArgs {
    /// The inventory file.
    #[arg(short, long, env = "HACTL_INVENTORY", default_value = "inventory.yaml")]
    pub inventory: PathBuf,
    /// The cluster's state directory (default: from the inventory, else `.hactl/<cluster>/` next to it).
    #[arg(long, env = "HACTL_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Connection settings shared by every command that reaches hosts.
#[derive(Debug, Clone, Args)]
pub struct ConnectArgs {
    /// Hosts contacted at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Accept a changed SSH host key for this host (after a re-install); repeatable.
    #[arg(long = "accept-new-host-key", value_name = "HOST")]
    pub accept_new_host_key: Vec<String>,
    /// Seconds to wait for each SSH connection (default: the inventory's `connectTimeout`).
    #[arg(long)]
    pub connect_timeout: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OutputFormat {
    /// A table for people.
    #[default]
    Table,
    /// JSON for machines.
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Do not ask before disruptive steps (restarts of running members).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Do not ask for the cluster name.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print the steps only.
    #[arg(long)]
    pub dry_run: bool,
}
