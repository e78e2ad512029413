//! Command-line arguments (clap derive only; no logic here).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "hactl",
    version = env!("HACTL_VERSION"),
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

/// The command line as clap sees it, with the exit-code table ([`crate::exit::help`]) after the
/// help of `hactl` and of every subcommand, so `--help` and the man pages carry it.
pub fn command() -> clap::Command {
    with_after_help(<Cli as clap::CommandFactory>::command(), &crate::exit::help())
}

/// As [`command`], for the man pages: roff fills consecutive lines into one paragraph, so each
/// row of the table is a paragraph of its own.
pub fn man_command() -> clap::Command {
    let table = crate::exit::help().lines().collect::<Vec<_>>().join("\n\n");
    with_after_help(<Cli as clap::CommandFactory>::command(), &table)
}

fn with_after_help(cmd: clap::Command, text: &str) -> clap::Command {
    cmd.after_help(text.to_string())
        .mut_subcommands(|c| with_after_help(c, text))
}

/// Parses the process's arguments against [`command`].
pub fn parse() -> Result<Cli, clap::Error> {
    let matches = command().try_get_matches()?;
    <Cli as clap::FromArgMatches>::from_arg_matches(&matches)
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
    Validate(ValidateArgs),
    /// Preflight: read-only checks of every host (SSH, sudo, OS, clock, ports, disk, binaries).
    Check(CheckArgs),
    /// Bring the hosts to the inventory: PKI, etcd (and, as configured, the rest). Idempotent.
    Up(UpCommandArgs),
    /// Print exactly what `up` would do (commands and files per phase and host); changes nothing.
    Plan(PlanArgs),
    /// Stop and remove what hactl installed; data dirs are moved aside, never deleted.
    Reset(ResetArgs),
    /// Show the cluster's health: members, leader, raft, revision, alarms, certificate expiry.
    Status(StatusArgs),
    /// Replace one etcd member, quorum-safely: remove, then add as a learner, then promote.
    Replace(ReplaceArgs),
    /// Remove one etcd member for good (the inventory no longer lists it), quorum-safely.
    Remove(RemoveArgs),
    /// Watch etcd members and repair a failed one within the safety budget (restart, then replace).
    Heal(HealArgs),
    /// Take one control-plane host out of service and back, within the quorum budget.
    #[command(subcommand)]
    Maintenance(MaintenanceCommand),
    /// etcd operations: snapshots; compaction, defragmentation, alarms.
    #[command(subcommand)]
    Etcd(EtcdCommand),
    /// Rebuild etcd after quorum is lost, from a snapshot file or the newest survivor (resumable).
    Recover(RecoverArgs),
    /// Rebuild a lost state directory from the running cluster, when no backup bundle is at hand
    /// (restore-bundle, which keeps every CA, comes first): reads back what the hosts hold and
    /// rotates the CAs whose keys were only in the lost directory, with writes flowing (resumable).
    Adopt(AdoptArgs),
    /// Build, run and break a lab of real hosts on this machine (systemd-nspawn; needs root).
    #[command(subcommand)]
    Lab(LabCommand),
    /// Certificates: list them (state directory and hosts), re-issue leaves and roll them out.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// Print the admin kubeconfig (the VIP, `system:masters`) that `up` wrote to the state directory.
    Kubeconfig(KubeconfigArgs),
    /// Print a shell completion script: `hactl completion bash > /etc/bash_completion.d/hactl`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Write man pages: hactl(1) and one per subcommand (hactl-up(1), …); hactl(1) to stdout without --out.
    Man {
        /// Directory for `hactl.1`, `hactl-up.1`, …
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// The shells `hactl completion` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    /// `json`: `{"file", "valid", "cluster", "hosts", "problems": [{"place", "message", "text"}]}`.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Every certificate in the state directory and on the hosts: expiry, issuer, SANs, serial,
    /// and whether each host's copy is the state directory's (read-only, one round trip per host).
    Check(CertsCheckArgs),
    /// Re-issue leaf certificates from the same CA and roll out what uses them, one host at a time.
    Renew(CertsRenewArgs),
    /// Replace a CA with no downtime, as resumable journaled steps: trust old and new (roll),
    /// re-issue the leaves from the new CA, roll, trust only the new, roll again (run it again
    /// to resume; `--stop-after STEP` pauses). `kubernetes` and `front-proxy` need a `kubernetes`
    /// section.
    RotateCa(CertsRotateCaArgs),
}

/// Which CA `certs rotate-ca` replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CaName {
    Etcd,
    Kubernetes,
    FrontProxy,
}

#[derive(Debug, Clone, Args)]
pub struct CertsRotateCaArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The CA to replace.
    #[arg(value_enum)]
    pub ca: CaName,
    #[command(flatten)]
    pub run: RunArgs,
    /// Stop once this step (C1, C1.roll, C2, …) is done, e.g. `C1.roll` to restart workloads
    /// while both CAs are trusted; running the command again resumes.
    #[arg(long, value_name = "STEP")]
    pub stop_after: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct AdoptArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CertsCheckArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub up: UpArgs,
    /// `json`: the same plan as data (phases, hosts, steps; uploads without content).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Args)]
pub struct KubeconfigArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
}

#[derive(Debug, Clone, Args)]
pub struct CertsRenewArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Certificates by name as `certs check` lists them in the state directory, e.g. `etcd/server-cp1`.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Every leaf certificate of the inventory.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Do not ask before restarting members and control-plane components.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print what the renewal would re-issue and `up`'s plan that would roll it out, as `hactl
    /// plan` prints it; change nothing (the state directory is only read, the new certificates
    /// are made in memory).
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run, `json`: the plan as `hactl plan -o json` prints it.
    #[arg(short, long, value_enum, default_value_t, requires = "dry_run")]
    pub output: OutputFormat,
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

impl ConnectArgs {
    /// What the library is told: the same three settings, without clap.
    pub fn settings(&self) -> crate::exec::connect::ConnectSettings {
        crate::exec::connect::ConnectSettings {
            concurrency: self.concurrency,
            accept_new_host_key: self.accept_new_host_key.clone(),
            connect_timeout: self.connect_timeout,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OutputFormat {
    /// A table for people.
    #[default]
    Table,
    /// JSON for machines.
    Json,
}

/// `--confirm-dead`: one flag, with one meaning, on `recover`, `replace` and `remove`.
#[derive(Debug, Clone, Args, Default)]
pub struct ConfirmDeadArgs {
    /// A host hactl cannot reach that you attest is powered off (it cannot be fenced over SSH,
    /// and could come back as a zombie serving old data); repeatable, or comma-separated. hactl
    /// records it and fences it for good the moment it answers again (`hactl up`, `hactl heal`;
    /// `hactl status` names it until then).
    #[arg(long = "confirm-dead", value_name = "HOST,...", value_delimiter = ',')]
    pub confirm_dead: Vec<String>,
}

/// The flags every day-two operation shares (the operation manager's): `--dry-run`, `--yes`,
/// `-o json` with `--dry-run`, and `--steal-lock`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Print the steps exactly as a live run sends them; change nothing (no lock, no journal).
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before changing anything (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// With --dry-run, `json`: the plan as data, `{"apiVersion", "kind": "OperationPlan",
    /// "operation", "run", "resumed", "summary", "confirmation", "resume", "decisions", "steps":
    /// [{"id", "code", "title", "host", "skipWhen", "checkFirst", "acts", "verify", "onFailure",
    /// "group", "changesCluster"}]}`, the same content as the text.
    #[arg(short, long, value_enum, default_value_t, requires = "dry_run")]
    pub output: OutputFormat,
    /// Take the cluster lock over from run RUN of another machine, once you are sure that run no
    /// longer runs (a holder running on this machine is never taken over).
    #[arg(long, value_name = "RUN")]
    pub steal_lock: Option<String>,
}

impl From<&RunArgs> for crate::operations::manager::Flags {
    fn from(a: &RunArgs) -> Self {
        crate::operations::manager::Flags {
            dry_run: a.dry_run,
            yes: a.yes,
            json: a.output == OutputFormat::Json,
            steal_lock: a.steal_lock.clone(),
            ..Default::default()
        }
    }
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

impl UpArgs {
    /// What the library is told (`converge::Options`), without clap.
    pub fn options(&self) -> crate::converge::Options {
        crate::converge::Options {
            connect: self.connect.settings(),
            yes: self.yes,
        }
    }
}

/// `hactl up`: [`UpArgs`], and `--dry-run`, which is `hactl plan` (the flag every command that
/// changes a cluster takes).
#[derive(Debug, Clone, Args)]
pub struct UpCommandArgs {
    #[command(flatten)]
    pub up: UpArgs,
    /// Print what `up` would do, exactly as `hactl plan` does; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run, `json`: the plan as `hactl plan -o json` prints it.
    #[arg(short, long, value_enum, default_value_t, requires = "dry_run")]
    pub output: OutputFormat,
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
    /// `--yes` skips typing the cluster name.
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum EtcdCommand {
    /// Snapshots: save one from the leader, or verify a file.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Compact to the current revision, defragment each member one at a time, disarm alarms.
    Maintenance(EtcdMaintenanceArgs),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Stream a snapshot from the leader to this machine, with its sidecar JSON and encrypted key bundle.
    Save(SnapshotSaveArgs),
    /// Check a snapshot file: size rule, appended sha256, status and a trial restore on a host.
    Verify(SnapshotVerifyArgs),
    /// Rebuild a lost state directory (CAs, service-account and encryption keys, VRRP password)
    /// from an encrypted bundle and the identity that opens it; then `hactl recover --from-snapshot`.
    RestoreBundle(SnapshotRestoreBundleArgs),
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotRestoreBundleArgs {
    /// The `<snapshot>.bundle.age` written beside a snapshot.
    pub bundle: PathBuf,
    /// The age identity that opens it (the copy of `backup-identity.txt` kept apart).
    #[arg(long)]
    pub identity: PathBuf,
    #[command(flatten)]
    pub inventory: InventoryArgs,
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotSaveArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Directory for `<cluster>-<UTC time>.db` and its sidecar (default: `backups/` in the state directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not write the encrypted bundle of CAs and keys.
    #[arg(long)]
    pub no_bundle: bool,
    /// Print the leader it would stream from and the files it would write; write nothing (no
    /// canary key, no high-water mark, no file, no recorded host key).
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SnapshotVerifyArgs {
    /// The snapshot file.
    pub file: PathBuf,
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Accept a file without etcd's appended sha256 (a raw copy of member/snap/db).
    #[arg(long)]
    pub skip_hash_check: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum RecoverMode {
    /// Restore one seed member, then join the others one at a time as learners.
    #[default]
    Seed,
    /// Restore every member from the same snapshot and start them together.
    All,
}

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("source").args(["from_snapshot", "from_member", "auto", "resume"]).required(true)))]
pub struct RecoverArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Restore from this snapshot file (taken with `hactl etcd snapshot save` or `etcdctl snapshot save`).
    #[arg(long, value_name = "FILE")]
    pub from_snapshot: Option<PathBuf>,
    /// Restore from this surviving member's data (copied, never opened in place).
    #[arg(long, value_name = "HOST")]
    pub from_member: Option<String>,
    /// Choose the source with the highest revision among the survivors.
    #[arg(long)]
    pub auto: bool,
    /// `seed` (restore one member, then join the others as learners) or `all`.
    #[arg(long, value_enum, default_value_t)]
    pub mode: RecoverMode,
    #[command(flatten)]
    pub dead: ConfirmDeadArgs,
    /// Proceed although quorum could be restored by starting the members (a deliberate rollback).
    /// Needs the cluster name typed on stdin; --yes does not replace it.
    #[arg(long)]
    pub force_destructive: bool,
    /// Allow a restore without a revision bump when no bump is possible (etcd 3.4 without a known high-water mark).
    #[arg(long)]
    pub accept_revision_rewind: bool,
    /// Accept losing up to this much (a source up to DUR old: 30m, 6h, 2d). Without it, a source
    /// more than 10000 revisions behind the high-water mark or older than 24h is refused (exit 3).
    #[arg(long, value_name = "DUR", value_parser = parse_window)]
    pub accept_data_loss_window: Option<std::time::Duration>,
    /// Restore a snapshot that has no appended sha256 (a raw member/snap/db copy).
    #[arg(long)]
    pub skip_hash_check: bool,
    /// Resume an interrupted run: every step's postcondition is checked again on the hosts.
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    /// The new membership, NAME=IP,... (default: every reachable etcd host of the inventory).
    /// Each NAME must be an etcd host of the inventory, at its inventory address.
    #[arg(long, value_name = "NAME=IP,...", value_delimiter = ',', value_parser = parse_member)]
    pub members: Vec<(String, std::net::IpAddr)>,
    /// The revision bump at restore: `auto` (max(10^9, 2 × (high-water mark − source revision)),
    /// emulated on etcd 3.4) or a number N ≥ 1 that must take the revision past the high-water mark.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_bump)]
    pub bump_revision: BumpRequest,
}

impl From<RecoverMode> for crate::operations::recover::Mode {
    fn from(m: RecoverMode) -> Self {
        match m {
            RecoverMode::Seed => crate::operations::recover::Mode::Seed,
            RecoverMode::All => crate::operations::recover::Mode::All,
        }
    }
}

/// `--bump-revision`: `auto` (None) or N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BumpRequest(pub Option<u64>);

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
    /// Continue run RUN after a failure or crash (every step re-checks its postcondition).
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    /// Remove this learner (hex ID) that no hactl run owns before starting.
    #[arg(long, value_name = "ID")]
    pub cleanup_learner: Option<String>,
    #[command(flatten)]
    pub dead: ConfirmDeadArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The etcd member, or the worker Node, to remove (its host's inventory name).
    pub member: String,
    /// (remove attests only the member it removes: `--confirm-dead MEMBER`.)
    #[command(flatten)]
    pub dead: ConfirmDeadArgs,
    /// Continue run RUN after a failure or crash (every step re-checks its postcondition).
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
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
    /// Say what would be done and why, with the steps it would run; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum MaintenanceCommand {
    /// Print the stop order, what would block it, and the budget left.
    Plan(MaintenancePlanArgs),
    /// Cordon, drain, stop the control plane on HOST (R-maint gated).
    Start(MaintenanceRunArgs),
    /// Bring HOST back in reverse order (also cancels a maintenance under way).
    Complete(MaintenanceRunArgs),
}

/// What every `maintenance` subcommand names: the host and the budget.
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
    /// How long Drain retries Evictions a PodDisruptionBudget refuses (429) and waits for evicted
    /// pods to go (`30s`, `10m`, `1h`, `2d`).
    #[arg(long, value_name = "DUR", default_value = "30m", value_parser = parse_window)]
    pub drain_timeout: std::time::Duration,
}

#[derive(Debug, Clone, Args)]
pub struct MaintenancePlanArgs {
    #[command(flatten)]
    pub target: MaintenanceArgs,
    /// `json`: `{"apiVersion", "kind": "MaintenancePlan", "host", "counts", "maxUnavailable",
    /// "blockers", "order", "verdict", "exitCode", "steps"}`, start's steps as `start --dry-run
    /// -o json` gives them.
    #[arg(short, long, value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// `maintenance start|complete`: the host, and the operation manager's flags (`complete` asks
/// nothing: it brings the host back).
#[derive(Debug, Clone, Args)]
pub struct MaintenanceRunArgs {
    #[command(flatten)]
    pub target: MaintenanceArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Clone, Args)]
pub struct EtcdMaintenanceArgs {
    #[command(flatten)]
    pub inventory: InventoryArgs,
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Compact the keyspace to the current revision: the older revisions are gone for good
    /// (a watch from an older revision then fails).
    #[arg(long)]
    pub compact: bool,
    /// Defragment each voting member, one at a time (a member does not answer while its
    /// defragmentation runs).
    #[arg(long)]
    pub defrag: bool,
    /// Disarm the alarms (NOSPACE) once there is room again.
    #[arg(long)]
    pub disarm: bool,
    /// Print the steps exactly as a live run sends them; change nothing (no lock).
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before compacting or defragmenting (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// `--accept-data-loss-window`, `--drain-timeout`: the grammar of `crate::duration` (`30s`, `10m`,
/// `1h30m`, `2d`), the same as the inventory's.
fn parse_window(s: &str) -> Result<std::time::Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// One `--members` entry: `NAME=IP`.
fn parse_member(s: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, ip) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=IP: write each member as e.g. cp1=10.0.0.11"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!(
            "{s:?} has no member name before '=': write e.g. cp1=10.0.0.11"
        ));
    }
    let ip = ip.trim().parse::<std::net::IpAddr>().map_err(|_| {
        format!("{s:?}: {ip:?} is not an IP address (etcd peer URLs use IP literals): write e.g. {name}=10.0.0.11")
    })?;
    Ok((name.to_string(), ip))
}

/// `--bump-revision`: `auto` or N ≥ 1.
fn parse_bump(s: &str) -> Result<BumpRequest, String> {
    if s == "auto" {
        return Ok(BumpRequest(None));
    }
    match s.parse::<u64>() {
        Ok(0) => Err(
            "0 is no bump: use auto, or N ≥ 1 (a restore without any bump needs --accept-revision-rewind and a tool without --bump-revision)"
                .into(),
        ),
        Ok(n) if n > i64::MAX as u64 / 2 => Err(format!("{n} is too large: etcd revisions are 64-bit signed")),
        Ok(n) => Ok(BumpRequest(Some(n))),
        Err(_) => Err(format!("{s:?} is neither auto nor a number of revisions (e.g. 1000000000)")),
    }
}

#[cfg(test)]
mod recover_flag_tests {
    use super::*;

    #[test]
    fn members_and_bump_parse_with_errors_that_say_the_fix() {
        assert_eq!(
            parse_member("cp1=10.0.0.11"),
            Ok(("cp1".to_string(), "10.0.0.11".parse().unwrap()))
        );
        assert!(parse_member("cp1").unwrap_err().contains("e.g. cp1=10.0.0.11"));
        assert!(parse_member("=10.0.0.1").unwrap_err().contains("no member name"));
        assert!(parse_member("cp1=host.example")
            .unwrap_err()
            .contains("not an IP address"));
        assert_eq!(parse_bump("auto"), Ok(BumpRequest(None)));
        assert_eq!(parse_bump("2000000000"), Ok(BumpRequest(Some(2_000_000_000))));
        assert!(parse_bump("0").unwrap_err().contains("use auto"));
        assert!(parse_bump("lots")
            .unwrap_err()
            .contains("neither auto nor a number"));
        let cli = Cli::try_parse_from([
            "hactl",
            "recover",
            "--auto",
            "--members",
            "cp1=10.0.0.11,cp2=10.0.0.12",
            "--bump-revision",
            "5",
        ])
        .unwrap();
        let Command::Recover(a) = cli.command else {
            panic!("not recover")
        };
        assert_eq!(a.members.len(), 2);
        assert_eq!(a.bump_revision, BumpRequest(Some(5)));
        let cli = Cli::try_parse_from(["hactl", "recover", "--auto"]).unwrap();
        let Command::Recover(a) = cli.command else {
            panic!("not recover")
        };
        assert!(a.members.is_empty() && a.bump_revision.0.is_none());
        let e = Cli::try_parse_from(["hactl", "recover", "--auto", "--members", "cp1=nope"]).unwrap_err();
        assert!(e.to_string().contains("--members"), "{e}");
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum LabCommand {
    /// Build (once) a Debian base image, boot the hosts, write an inventory for them.
    Up(LabUpArgs),
    /// Stop the lab's hosts and remove everything it made.
    Down {
        #[arg(long, default_value = "hactl", conflicts_with = "all")]
        name: String,
        /// Remove every lab.
        #[arg(long)]
        all: bool,
    },
    /// List labs, their hosts, addresses and states.
    Status,
    /// Run a command on a lab host (through nsenter, no SSH needed), or open a shell there.
    Ssh {
        #[arg(long, default_value = "hactl")]
        name: String,
        /// Host name: cp1, lb1, spare1, w1, …
        host: String,
        /// The command and its arguments, after `--`; none opens a login shell.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Build (once) kube-apiserver, kube-controller-manager and kube-scheduler from Debian's
    /// source package, and kubectl, into /var/cache/hactl/kubernetes/<version>; prints the
    /// directory. Returns at once when that cache is complete.
    KubeBinaries {
        /// Kubernetes version (the package archive carries the source of 1.20.2 only).
        #[arg(long, default_value = crate::lab::kubernetes::DEFAULT_VERSION)]
        kubernetes_version: String,
    },
    /// Build (once) the Debian base image lab hosts boot from, under /var/lib/hactl-lab/base, and
    /// print its directory; returns at once when it is cached. `lab up` builds it too; this builds
    /// it ahead (CI starts it while it compiles).
    Image {
        /// Debian suite: trixie (etcd 3.5, `lab up`'s default) or bookworm (etcd 3.4).
        #[arg(long, default_value = "trixie")]
        suite: String,
    },
    /// Break or repair one host: poweroff, poweron, power-cut, isolate, rejoin.
    Fault {
        #[arg(long, default_value = "hactl")]
        name: String,
        host: String,
        fault: crate::lab::Fault,
    },
}

#[derive(Debug, clap::Args)]
pub struct LabUpArgs {
    /// Lab name: names the bridge, the machines and the lab's directory.
    #[arg(long, default_value = "hactl")]
    pub name: String,
    #[arg(long, default_value_t = 3)]
    pub control_planes: u8,
    #[arg(long, default_value_t = 2)]
    pub load_balancers: u8,
    #[arg(long, default_value_t = 0)]
    pub spares: u8,
    /// Worker hosts (w1, w2, …), given the `worker` role in the inventory. Needs Kubernetes.
    #[arg(long, default_value_t = 0)]
    pub workers: u8,
    /// Debian suite of the hosts: trixie (etcd 3.5) or bookworm (etcd 3.4).
    #[arg(long, default_value = "trixie")]
    pub suite: String,
    /// Where to write the inventory (default: inventory.yaml in the lab's directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep the hosts' disks in memory (a tmpfs of the lab's own) rather than under the lab's
    /// directory: faster on a busy machine; what the hosts wrote is gone with the lab or when this
    /// machine restarts. Also set by HACTL_LAB_IN_MEMORY=1.
    #[arg(long)]
    pub in_memory: bool,
    /// Once the lab is up, bring the cluster up on it with that inventory.
    #[arg(long)]
    pub apply: bool,
    /// Leave the `kubernetes` section out of the inventory (etcd and the load balancers only).
    /// Without this, the Kubernetes binaries come from the cache, built on first use
    /// (`hactl lab kube-binaries`).
    #[arg(long)]
    pub no_kubernetes: bool,
    /// Kubernetes version of the lab's control plane.
    #[arg(long, default_value = crate::lab::kubernetes::DEFAULT_VERSION)]
    pub kubernetes_version: String,
}
