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
    /// Replace one etcd member, quorum-safely: remove, then add as a learner, then promote.
    Replace(ReplaceArgs),
    /// Watch etcd members and repair a failed one within the safety budget (restart, then replace).
    Heal(HealArgs),
    /// Take one control-plane host out of service and back, within the quorum budget.
    #[command(subcommand)]
    Maintenance(MaintenanceCommand),
    /// etcd housekeeping (compaction, defragmentation, alarms).
    #[command(subcommand)]
    Etcd(EtcdCommand),
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

#[derive(Debug, Clone, Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The etcd member (its name, which is its host's inventory name).
    pub member: String,
    /// Re-create the member on its own host (old data moved aside).
    #[arg(long, conflicts_with = "host")]
    pub reuse_host: bool,
    /// Re-create it on this host: give NEW the member's roles in the inventory first.
    #[arg(long, value_name = "NEW")]
    pub host: Option<String>,
    /// The member is healthy: add the new member first, then remove the old one (needs --host).
    #[arg(long)]
    pub planned: bool,
    /// Print the steps; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue run RUN-ID after a failure or crash (every step re-checks its postcondition).
    #[arg(long, value_name = "RUN-ID")]
    pub resume: Option<String>,
    /// Remove this learner (hex ID) that no hactl run owns before starting.
    #[arg(long, value_name = "ID")]
    pub cleanup_learner: Option<String>,
    /// The operator attests this host is powered off (it cannot be fenced over SSH).
    #[arg(long, value_name = "HOST")]
    pub confirm_dead: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct HealArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Look once, act at most once, exit (the default).
    #[arg(long, conflicts_with = "watch")]
    pub once: bool,
    /// Keep looking; log every decision with its reason.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between two looks with --watch.
    #[arg(long, default_value_t = 30)]
    pub interval: u64,
    /// Say what would be done and why; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum MaintenanceCommand {
    /// Print the stop order, what would block it, and the budget left.
    Plan(MaintenanceArgs),
    /// Cordon, drain, stop the control plane on HOST (R-maint gated).
    Start(MaintenanceArgs),
    /// Bring HOST back in reverse order (also cancels a maintenance under way).
    Complete(MaintenanceArgs),
}

#[derive(Debug, Clone, Args)]
pub struct MaintenanceArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    pub host: String,
    /// Hosts that may be in maintenance at once (never more than the budget allows).
    #[arg(long, default_value_t = 1)]
    pub max_unavailable: usize,
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Print the steps; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum EtcdCommand {
    /// Compact to the current revision, defragment each member one at a time, disarm alarms.
    Maintenance(EtcdMaintenanceArgs),
}

#[derive(Debug, Clone, Args)]
pub struct EtcdMaintenanceArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[arg(long)]
    pub compact: bool,
    #[arg(long)]
    pub defrag: bool,
    #[arg(long)]
    pub disarm: bool,
}
