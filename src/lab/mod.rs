//! The lab: real Linux hosts on this machine, for trying hactl and for its end-to-end tests.
//!
//! Each host is a `systemd-nspawn` container booting real systemd from an overlayfs whose lower
//! layer is a Debian base image built once per suite with `debootstrap` and cached. All hosts of a
//! lab sit on a private Linux bridge with its own /24; the operator side holds `.1` on it.
//!
//! ```text
//! <root>/base/<suite>-<key>/                cached base image (renamed into place when complete;
//!                                           the key hashes its package list and baked-in files)
//! <root>/labs/<name>/lab.json               what `up` made: bridge, subnet, hosts, paths
//! <root>/labs/<name>/id_ed25519             the lab's SSH key; inventory.yaml, known_hosts, state/
//! <root>/labs/<name>/hosts/<host>/          upper/ work/ merged/ console.log
//! ```
//!
//! Each host runs in cgroups of its own, `hactl-lab-<machine>` at the root of every cgroup
//! hierarchy (`cgroup.rs`), so the hosts' systemd units and kubelets never share a cgroup tree.
//!
//! Invariants: everything a lab makes lives under its directory or is named after it (bridge,
//! machine names, cgroups), so `down` can find and remove all of it even from a half-built lab;
//! traffic only ever goes to the lab's own hosts on its own bridge; nothing host-specific is in the
//! base image; the machine's own settings (sysctls and the like) are left alone, except the inotify
//! limits, which are only ever raised.

mod cgroup;
mod fault;
mod host;
mod image;
mod inventory;
pub mod kubernetes;
mod net;
mod node_prep;
mod proc;

pub use fault::Fault;

use crate::local_command;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Default lab state directory; `HACTL_LAB_DIR` overrides it.
pub const DEFAULT_ROOT: &str = "/var/lib/hactl-lab";
/// How long a host may take from spawn to an SSH banner on port 22.
pub const BOOT_DEADLINE: Duration = Duration::from_secs(120);
/// How long a clean shutdown may take before the host's PID 1 is killed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// Where systemd-nspawn keeps a directory per running machine.
const NSPAWN_PROPAGATE: &str = "/run/systemd/nspawn/propagate";

/// Errors of the lab. Messages say what was being done; the cause is in `source`.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("hactl lab needs root: it creates bridges, mounts and containers; run it with sudo")]
    NotRoot,
    #[error("missing host tools ({tools}); install them with: {install}")]
    MissingTools { tools: String, install: String },
    #[error("invalid lab name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid lab shape: {0}")]
    InvalidShape(String),
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("failed to start `{command}`")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("failed to read or write lab state {path}")]
    State {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to write the inventory {path}: {message}")]
    Inventory { path: PathBuf, message: String },
    #[error("lab {name} is already up ({running} of {total} hosts running); use it, or run `hactl lab down --name {name}` first")]
    AlreadyUp {
        name: String,
        running: usize,
        total: usize,
    },
    #[error("no free 10.213.X.0/24 subnet left for a lab bridge")]
    NoSubnet,
    #[error("{host} ({address}) did not answer with an SSH banner within {seconds} s (what was made stays for inspection until `hactl lab down`); last lines of {log}:\n{tail}")]
    BootTimeout {
        host: String,
        address: Ipv4Addr,
        seconds: u64,
        log: PathBuf,
        tail: String,
    },
    #[error("{host} stopped while booting (what was made stays for inspection until `hactl lab down`); last lines of {log}:\n{tail}")]
    BootExited {
        host: String,
        log: PathBuf,
        tail: String,
    },
    #[error("no lab named {name} (no {path})")]
    NotFound { name: String, path: PathBuf },
    #[error("lab {lab} has no host {host} (hosts: {known})")]
    UnknownHost {
        lab: String,
        host: String,
        known: String,
    },
    #[error("{host} of lab {lab} is not running (run `hactl lab fault --name {lab} {host} poweron`)")]
    HostNotRunning { lab: String, host: String },
    #[error("{host}: {message}")]
    Host { host: String, message: String },
    #[error("lab {name} was not removed completely: {}", leftovers.join("; "))]
    Leftovers { name: String, leftovers: Vec<String> },
}

pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// What `up` builds.
#[derive(Debug, Clone)]
pub struct LabUpOptions {
    /// Lab name: `[a-z0-9-]`, 1 to 20 characters; names the bridge, machines and directory.
    pub name: String,
    pub control_planes: u8,
    pub load_balancers: u8,
    pub spares: u8,
    /// Hosts with the `worker` role (`w1`, `w2`, …), after the others.
    pub workers: u8,
    /// Debian suite of the base image: `trixie` (etcd 3.5) or `bookworm` (etcd 3.4).
    pub suite: String,
    /// Where the inventory YAML is written.
    pub out: PathBuf,
    /// Lab state directory (default [`lab_root`]).
    pub root: PathBuf,
    /// Keep the hosts' disks (their overlays' upper layers) in a tmpfs of the lab's own instead of
    /// under `root`: no disk writeback and free fsyncs, which matters on a loaded machine (the
    /// test suite); what the hosts wrote is lost with the lab, or when this machine restarts.
    /// Default: `HACTL_LAB_IN_MEMORY=1`.
    pub in_memory: bool,
}

impl LabUpOptions {
    /// The defaults: 3 control planes, 2 load balancers, no spares, trixie, the inventory at
    /// `<root>/labs/<name>/inventory.yaml`.
    pub fn new(name: &str) -> Self {
        let root = lab_root();
        LabUpOptions {
            name: name.to_string(),
            control_planes: 3,
            load_balancers: 2,
            spares: 0,
            workers: 0,
            suite: "trixie".to_string(),
            out: lab_dir(&root, name).join("inventory.yaml"),
            root,
            in_memory: std::env::var("HACTL_LAB_IN_MEMORY").is_ok_and(|v| v == "1"),
        }
    }
}

/// What a host is for in the lab; decides its address and its inventory roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostKind {
    ControlPlane,
    LoadBalancer,
    Spare,
    Worker,
}

/// One host of a lab, as recorded in `lab.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabHost {
    /// Host name inside the lab: `cp1`, `lb1`, `spare1`, `w1`.
    pub name: String,
    pub kind: HostKind,
    pub ip: Ipv4Addr,
    /// systemd-nspawn machine name, unique per lab: `<lab>-<host>`.
    pub machine: String,
    /// The systemd-nspawn process of the last boot (informational: lookups scan /proc).
    pub nspawn_pid: Option<u32>,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub merged: PathBuf,
    /// The host's console output (systemd-nspawn's stdout and stderr).
    pub log: PathBuf,
}

/// A lab, as recorded in `<root>/labs/<name>/lab.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lab {
    pub name: String,
    pub suite: String,
    pub root: PathBuf,
    /// The base image the hosts' overlays were made on (empty in a `lab.json` written before it
    /// was recorded: then `<root>/base/<suite>`).
    #[serde(default)]
    pub base: PathBuf,
    pub dir: PathBuf,
    pub bridge: String,
    /// The lab's subnet, `10.213.X.0/24`.
    pub subnet: String,
    /// The operator side's address on the bridge (`.1`).
    pub operator_address: Ipv4Addr,
    pub vip: Ipv4Addr,
    pub hosts: Vec<LabHost>,
    pub key_path: PathBuf,
    pub known_hosts: PathBuf,
    pub inventory_path: PathBuf,
    pub state_dir: PathBuf,
}

/// Whether a host's container is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    Running,
    /// Running, with its link to the bridge cut (`isolate`).
    Isolated,
    Stopped,
}

impl fmt::Display for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostState::Running => "running",
            HostState::Isolated => "isolated",
            HostState::Stopped => "stopped",
        })
    }
}

/// A lab and the state of each of its hosts, in host order.
#[derive(Debug, Clone)]
pub struct LabStatus {
    pub lab: Lab,
    pub hosts: Vec<HostState>,
}

/// The lab state directory: `HACTL_LAB_DIR`, else [`DEFAULT_ROOT`].
pub fn lab_root() -> PathBuf {
    std::env::var_os("HACTL_LAB_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT))
}

/// `<root>/labs/<name>`.
pub fn lab_dir(root: &Path, name: &str) -> PathBuf {
    root.join("labs").join(name)
}

/// Refuses anything but root: the lab creates bridges, mounts and containers.
pub fn require_root() -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user of the process.
    let euid = std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1);
    if euid == 0 {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

/// Makes sure debootstrap, systemd-nspawn, ip and the rest are installed; installs them with
/// apt-get when they are missing (the caller is root).
pub fn ensure_host_tools() -> Result<()> {
    const TOOLS: &[(&str, &str)] = &[
        ("debootstrap", "debootstrap"),
        ("systemd-nspawn", "systemd-container"),
        ("systemctl", "systemd"),
        ("ip", "iproute2"),
        ("nsenter", "util-linux"),
        ("setsid", "util-linux"),
        ("ssh-keygen", "openssh-client"),
        ("kill", "procps"),
    ];
    let missing: Vec<(&str, &str)> = TOOLS
        .iter()
        .copied()
        .filter(|(tool, _)| !proc::on_path(tool))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
    packages.sort_unstable();
    packages.dedup();
    let install = format!("apt-get install -y {}", packages.join(" "));
    let tools = missing.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ");
    if require_root().is_err() {
        return Err(LabError::MissingTools { tools, install });
    }
    eprintln!("lab: installing missing host tools ({tools}): {install}");
    let mut apt = local_command::new("apt-get");
    apt.env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y"])
        .args(&packages);
    if proc::run(&mut apt).is_err() {
        proc::run(local_command::new("apt-get").arg("update"))?;
        proc::run(&mut apt)?;
    }
    Ok(())
}

fn validate(opts: &LabUpOptions) -> Result<()> {
    let name = &opts.name;
    let bad = |reason| {
        Err(LabError::InvalidName {
            name: name.clone(),
            reason,
        })
    };
    if name.is_empty() || name.len() > 20 {
        return bad("it must be 1 to 20 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("only a-z, 0-9 and - are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("it must not start or end with -");
    }
    if opts.control_planes > 9 || opts.load_balancers > 9 || opts.spares > 9 || opts.workers > 9 {
        return Err(LabError::InvalidShape(
            "at most 9 hosts of each kind (addresses .11-.19, .21-.29, .31-.39, .41-.49)".into(),
        ));
    }
    if opts.control_planes == 0 {
        return Err(LabError::InvalidShape("at least one control-plane host".into()));
    }
    if opts.suite.is_empty() || !opts.suite.bytes().all(|b| b.is_ascii_lowercase()) {
        return Err(LabError::InvalidShape(format!(
            "suite {:?} is not a Debian suite name",
            opts.suite
        )));
    }
    Ok(())
}

/// Hosts of a lab in inventory order: cp1.. at .11, lb1.. at .21, spare1.. at .31, w1.. at .41
/// (the VIP is .100).
fn plan_hosts(opts: &LabUpOptions, dir: &Path, net: Ipv4Addr) -> Vec<LabHost> {
    let [a, b, c, _] = net.octets();
    let kinds = [
        (HostKind::ControlPlane, "cp", opts.control_planes, 11u8),
        (HostKind::LoadBalancer, "lb", opts.load_balancers, 21),
        (HostKind::Spare, "spare", opts.spares, 31),
        (HostKind::Worker, "w", opts.workers, 41),
    ];
    let mut hosts = Vec::new();
    for (kind, prefix, count, first) in kinds {
        for i in 0..count {
            let name = format!("{prefix}{}", i + 1);
            let hdir = dir.join("hosts").join(&name);
            hosts.push(LabHost {
                machine: format!("{}-{name}", opts.name),
                ip: Ipv4Addr::new(a, b, c, first + i),
                kind,
                nspawn_pid: None,
                upper: hdir.join("upper"),
                work: hdir.join("work"),
                merged: hdir.join("merged"),
                log: hdir.join("console.log"),
                name,
            });
        }
    }
    hosts
}

fn progress(name: &str, msg: impl fmt::Display) {
    eprintln!("lab {name}: {msg}");
}

/// Builds the base image of `suite` unless it is cached (what `up` boots its hosts from), and
/// returns its directory; nothing else is made.
pub fn base_image(suite: &str) -> Result<PathBuf> {
    require_root()?;
    let mut opts = LabUpOptions::new("image");
    opts.suite = suite.to_string();
    validate(&opts)?;
    ensure_host_tools()?;
    image::ensure_base(&opts.root, suite, &mut |m| eprintln!("lab: {m}"))
}

/// Builds (or reuses) the base image, makes the bridge, boots every host in parallel, waits for
/// each one's sshd, and writes the inventory. A lab left over under the same name is removed first.
pub fn up(opts: &LabUpOptions) -> Result<Lab> {
    require_root()?;
    validate(opts)?;
    ensure_host_tools()?;
    let started = Instant::now();
    let name = opts.name.as_str();
    let base = image::ensure_base(&opts.root, &opts.suite, &mut |m| progress(name, m))?;
    let base = base.as_path();

    let dir = lab_dir(&opts.root, name);
    if dir.exists() || net::bridge_exists(&net::bridge_name(name)) {
        if let Ok(old) = Lab::load(&opts.root, name) {
            let states = old.host_states();
            let running = states.iter().filter(|s| **s != HostState::Stopped).count();
            if running > 0 {
                return Err(LabError::AlreadyUp {
                    name: name.to_string(),
                    running,
                    total: states.len(),
                });
            }
        }
        progress(name, "removing what is left of an earlier lab of this name");
        down_at(&opts.root, name)?;
    }
    proc::create_private_dir(&dir)?;
    if opts.in_memory {
        // The hosts' overlays (upper and work dirs, which must share a file system) and their
        // console logs; `down` unmounts it with the overlays, deepest first.
        let hosts = dir.join("hosts");
        proc::create_private_dir(&hosts)?;
        proc::run(
            local_command::new("mount")
                .args(["-t", "tmpfs", "-o", "mode=0700", "hactl-lab"])
                .arg(&hosts),
        )?;
    }

    // Choosing a subnet and creating the bridge is one critical section across parallel `up`s.
    let (bridge, net_addr) = {
        let _lock = proc::lock_file(&opts.root.join("labs").join(".net.lock"))?;
        let net_addr = net::choose_subnet(&opts.root, name)?;
        let bridge = net::bridge_name(name);
        let [a, b, c, _] = net_addr.octets();
        let operator = Ipv4Addr::new(a, b, c, 1);
        // Record the lab before the bridge exists, so a crash leaves something `down` can read.
        let lab = new_lab(opts, base, &dir, &bridge, net_addr, operator);
        save(&lab)?;
        net::create_bridge(&bridge, operator)?;
        (bridge, net_addr)
    };
    let [a, b, c, _] = net_addr.octets();
    let mut lab = new_lab(opts, base, &dir, &bridge, net_addr, Ipv4Addr::new(a, b, c, 1));
    progress(
        name,
        format!(
            "bridge {bridge} with {} (operator {})",
            lab.subnet, lab.operator_address
        ),
    );

    host::generate_key(&lab.key_path, &format!("hactl-lab-{name}"))?;
    let public_key = fs_err::read_to_string(lab.key_path.with_extension("pub"))?;
    proc::create_private_dir(&lab.state_dir)?;

    let mut known_hosts = String::new();
    for h in &lab.hosts {
        let host_key = host::prepare(&lab, h, base, &public_key)?;
        known_hosts.push_str(&format!("{} {}\n", h.ip, host_key.trim()));
    }
    fs_err::write(&lab.known_hosts, known_hosts)?;
    save(&lab)?;

    host::raise_inotify_limits(&mut |m| progress(name, m));
    for i in 0..lab.hosts.len() {
        let pid = host::spawn(&lab, &lab.hosts[i])?;
        lab.hosts[i].nspawn_pid = Some(pid);
    }
    save(&lab)?;
    progress(name, format!("booting {} hosts", lab.hosts.len()));

    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = lab
            .hosts
            .iter()
            .map(|h| {
                s.spawn(move || {
                    let t = Instant::now();
                    host::wait_ready(h, BOOT_DEADLINE)?;
                    progress(
                        name,
                        format!("{} up ({}) in {:.1} s", h.name, h.ip, t.elapsed().as_secs_f64()),
                    );
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("boot waiter panicked"))
            .collect()
    });
    if let Some(err) = results.into_iter().find_map(|r| r.err()) {
        return Err(err);
    }

    inventory::write(&lab)?;
    progress(
        name,
        format!(
            "ready in {:.1} s; inventory {}",
            started.elapsed().as_secs_f64(),
            lab.inventory_path.display()
        ),
    );
    Ok(lab)
}

fn new_lab(
    opts: &LabUpOptions,
    base: &Path,
    dir: &Path,
    bridge: &str,
    net_addr: Ipv4Addr,
    operator: Ipv4Addr,
) -> Lab {
    let [a, b, c, _] = net_addr.octets();
    let out = if opts.out.is_absolute() {
        opts.out.clone()
    } else {
        std::env::current_dir()
            .map(|d| d.join(&opts.out))
            .unwrap_or_else(|_| opts.out.clone())
    };
    Lab {
        name: opts.name.clone(),
        suite: opts.suite.clone(),
        root: opts.root.clone(),
        base: base.to_path_buf(),
        dir: dir.to_path_buf(),
        bridge: bridge.to_string(),
        subnet: format!("{net_addr}/24"),
        operator_address: operator,
        vip: Ipv4Addr::new(a, b, c, 100),
        hosts: plan_hosts(opts, dir, net_addr),
        key_path: dir.join("id_ed25519"),
        known_hosts: dir.join("known_hosts"),
        inventory_path: out,
        state_dir: dir.join("state"),
    }
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("lab.json")
}

fn save(lab: &Lab) -> Result<()> {
    let path = state_path(&lab.dir);
    let text = serde_json::to_string_pretty(lab).map_err(|source| LabError::State {
        path: path.clone(),
        source,
    })?;
    let tmp = path.with_extension("json.tmp");
    fs_err::write(&tmp, text + "\n")?;
    fs_err::rename(&tmp, &path)?;
    Ok(())
}

impl Lab {
    /// Reads `<root>/labs/<name>/lab.json`.
    pub fn load(root: &Path, name: &str) -> Result<Lab> {
        let path = state_path(&lab_dir(root, name));
        let text = match fs_err::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LabError::NotFound {
                    name: name.to_string(),
                    path,
                })
            }
            Err(e) => return Err(e.into()),
        };
        serde_json::from_str(&text).map_err(|source| LabError::State { path, source })
    }

    /// The host named `name`.
    pub fn host(&self, name: &str) -> Result<&LabHost> {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .ok_or_else(|| LabError::UnknownHost {
                lab: self.name.clone(),
                host: name.to_string(),
                known: self
                    .hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The base image this lab's overlays were made on; an error when it is gone (a host booted
    /// on another lower layer than the one its upper layer was made on would be corrupt).
    pub fn base_image(&self) -> Result<PathBuf> {
        let base = if self.base.as_os_str().is_empty() {
            image::legacy_base(&self.root, &self.suite)
        } else {
            self.base.clone()
        };
        if base.is_dir() {
            Ok(base)
        } else {
            Err(LabError::Host {
                host: format!("lab {}", self.name),
                message: format!(
                    "its base image {} is gone: run `hactl lab down --name {}`, then `hactl lab up` again",
                    base.display(),
                    self.name
                ),
            })
        }
    }

    /// The running host's PID 1 as seen from outside, if it is running.
    pub fn pid1(&self, host: &str) -> Result<Option<u32>> {
        let h = self.host(host)?;
        Ok(host::nspawn_pid(h).and_then(proc::container_init))
    }

    /// A command that runs `argv` inside the host (`nsenter -t <pid 1> -a`), with a clean
    /// environment; an empty `argv` gives a login shell.
    pub fn command(&self, host: &str, argv: &[String]) -> Result<Command> {
        let pid1 = self.pid1(host)?.ok_or_else(|| LabError::HostNotRunning {
            lab: self.name.clone(),
            host: host.to_string(),
        })?;
        Ok(host::nsenter_command(pid1, argv))
    }

    /// Runs `argv` inside the host and returns its output (whatever its exit status).
    pub fn exec(&self, host: &str, argv: &[&str]) -> Result<Output> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut cmd = self.command(host, &argv)?;
        cmd.output().map_err(|source| LabError::Spawn {
            command: argv.join(" "),
            source,
        })
    }

    /// Applies a fault to one host; see [`Fault`].
    pub fn fault(&mut self, host: &str, fault: Fault) -> Result<()> {
        fault::apply(self, host, fault)?;
        save(self)
    }

    /// Each host's state, in host order.
    pub fn host_states(&self) -> Vec<HostState> {
        self.hosts.iter().map(|h| host::state(self, h)).collect()
    }
}

/// Removes everything the lab `name` made under [`lab_root`]; see [`down_at`].
pub fn down(name: &str) -> Result<()> {
    down_at(&lab_root(), name)
}

/// Removes everything the lab made: stops its hosts (SIGTERM to systemd-nspawn, then SIGKILL to
/// the host's PID 1 after [`SHUTDOWN_GRACE`]), unmounts its overlays, deletes its bridge and its
/// directory, then checks that nothing is left. Succeeds on a half-built or absent lab.
pub fn down_at(root: &Path, name: &str) -> Result<()> {
    require_root()?;
    let dir = lab_dir(root, name);
    let lab = Lab::load(root, name).ok();
    let bridge = lab
        .as_ref()
        .map(|l| l.bridge.clone())
        .unwrap_or_else(|| net::bridge_name(name));

    host::stop_all_under(&dir, name, SHUTDOWN_GRACE);
    proc::unmount_all_under(&dir)?;
    if net::bridge_exists(&bridge) {
        net::delete_bridge(&bridge)?;
    }
    // systemd-nspawn leaves its per-machine propagation directory behind when /run is not a
    // tmpfs (it refuses to delete recursively on a disk file system); they are empty by now.
    if let Ok(entries) = fs_err::read_dir(NSPAWN_PROPAGATE) {
        for e in entries.flatten() {
            if host::is_machine_of(&e.file_name().to_string_lossy(), name) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    if let Some(inv) = lab.as_ref().map(|l| &l.inventory_path) {
        if !inv.starts_with(&dir) && inv.is_file() {
            fs_err::remove_file(inv)?;
        }
    }
    if proc::mounts_under(&dir).is_empty() && dir.exists() {
        fs_err::remove_dir_all(&dir)?;
    }

    let mut leftovers = Vec::new();
    for pid in host::processes_of(&dir, name) {
        leftovers.push(format!("process {pid} still runs"));
    }
    for m in proc::mounts_under(&dir) {
        leftovers.push(format!("{} is still mounted", m.display()));
    }
    if net::bridge_exists(&bridge) {
        leftovers.push(format!("bridge {bridge} still exists"));
    }
    for machine in cgroup::machines_of(name) {
        leftovers.push(format!("the cgroups {} still exist", cgroup::name(&machine)));
    }
    if dir.exists() {
        leftovers.push(format!("{} still exists", dir.display()));
    }
    if let Ok(entries) = fs_err::read_dir(NSPAWN_PROPAGATE) {
        for e in entries.flatten() {
            if host::is_machine_of(&e.file_name().to_string_lossy(), name) {
                leftovers.push(format!("{} still exists", e.path().display()));
            }
        }
    }
    if leftovers.is_empty() {
        Ok(())
    } else {
        Err(LabError::Leftovers {
            name: name.to_string(),
            leftovers,
        })
    }
}

/// Every lab under `root`, with its hosts' states, sorted by name.
pub fn status_at(root: &Path) -> Result<Vec<LabStatus>> {
    let labs = root.join("labs");
    let mut names = Vec::new();
    match fs_err::read_dir(&labs) {
        Ok(entries) => {
            for e in entries {
                let e = e?;
                if e.path().join("lab.json").is_file() {
                    names.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    names.sort();
    names
        .iter()
        .map(|n| {
            let lab = Lab::load(root, n)?;
            let hosts = lab.host_states();
            Ok(LabStatus { lab, hosts })
        })
        .collect()
}

/// Every lab under [`lab_root`].
pub fn status() -> Result<Vec<LabStatus>> {
    status_at(&lab_root())
}

/// Applies `fault` to `host` of the lab `name` under [`lab_root`].
pub fn fault(name: &str, host: &str, f: Fault) -> Result<()> {
    require_root()?;
    Lab::load(&lab_root(), name)?.fault(host, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_get_fixed_addresses_and_unique_machine_names() {
        let mut opts = LabUpOptions::new("t1");
        opts.spares = 1;
        opts.workers = 2;
        let hosts = plan_hosts(&opts, Path::new("/x"), Ipv4Addr::new(10, 213, 7, 0));
        let got: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} {} {}", h.name, h.ip, h.machine))
            .collect();
        assert_eq!(
            got,
            [
                "cp1 10.213.7.11 t1-cp1",
                "cp2 10.213.7.12 t1-cp2",
                "cp3 10.213.7.13 t1-cp3",
                "lb1 10.213.7.21 t1-lb1",
                "lb2 10.213.7.22 t1-lb2",
                "spare1 10.213.7.31 t1-spare1",
                "w1 10.213.7.41 t1-w1",
                "w2 10.213.7.42 t1-w2",
            ]
        );
        assert!(hosts.iter().all(|h| host::is_machine_of(&h.machine, "t1")));
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", "Upper", "a_b", "-a", "a-", "abcdefghijklmnopqrstu"] {
            let opts = LabUpOptions::new(bad);
            assert!(validate(&opts).is_err(), "{bad:?} accepted");
        }
        assert!(validate(&LabUpOptions::new("ok-1")).is_ok());
    }
}
