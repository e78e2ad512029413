//! Raw → validated inventory: parse the YAML, check it, apply defaults.
//!
//! Invariant: validation never stops at the first problem. It walks the whole file and returns
//! either a consistent [`Inventory`] or an [`InventoryError`] listing **every** problem, each with
//! its place: `lab.yaml: hosts[2].address: duplicate of hosts[0]`.
//!
//! Places are YAML paths: top-level fields as written (`apiVersion`, `metadata.name`), fields
//! under `spec` without the `spec.` prefix (`hosts[2].address`, `vip.address`, `etcd.version`).
//! A parse error has no path, only a position: `lab.yaml:7:3: unknown field ...`.
//! Problems come in schema order (apiVersion, kind, metadata, ssh, hosts in file order, the
//! etcd member count, vip, etcd, kubernetes, pki, stateDir), so the output is deterministic.
//!
//! The only I/O besides reading the file: key files and bundle directories are checked on disk,
//! because a missing key is better reported with every other problem than at connect time.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde_saphyr::MessageFormatter;

use super::raw::{RawBastion, RawInventory, RawSourceKind, RawSsh};
use super::{
    BinarySource, CgroupDriver, DnsSpec, EtcdSpec, Host, ImageSource, Inventory, KeyType, KubernetesMode,
    KubernetesSpec, PkiSpec, Role, SshAuth, SshSpec, Vip, API_VERSION, DEFAULT_IMAGE_REGISTRY, KIND,
};

/// The upper limits of the numeric fields (the lower ones are 0 or 1, said where they are
/// checked); docs/reference/inventory.md states each. A value past them would overflow a
/// timestamp or a timer, or names something no cluster needs.
pub mod limits {
    use std::time::Duration;

    /// `ssh.connectTimeout` (seconds): an hour.
    pub const CONNECT_TIMEOUT_SECS: u64 = 3600;
    /// `etcd.heartbeatInterval` (ms): electionTimeout must be at least 5 × this and at most
    /// 50000.
    pub const HEARTBEAT_MS: u32 = 10_000;
    /// `etcd.electionTimeout` (ms): the most etcd accepts.
    pub const ELECTION_MS: u32 = 50_000;
    /// `etcd.quotaBackendBytes`: at least 1 MiB (a smaller backend fills at once)...
    pub const QUOTA_MIN: u64 = 1 << 20;
    /// ... and at most 8 GiB, etcd's documented maximum (it warns above it).
    pub const QUOTA_MAX: u64 = 8 << 30;
    /// `etcd.autoCompactionRetention`: a year.
    pub const COMPACTION_RETENTION: Duration = Duration::from_secs(365 * 86_400);
    /// `pki.caValidityDays`: 100 years (a certificate's end must stay a valid X.509 time).
    pub const CA_VALIDITY_DAYS: u32 = 36_500;
    /// `heal.maxUnhealthy`: F of the largest cluster (7 members tolerate 3 failures).
    pub const MAX_UNHEALTHY: usize = 3;
    /// `heal.maxRetry`.
    pub const MAX_RETRY: u32 = 100;
    /// `heal.retryPeriod`, `heal.minHealthyPeriod`, `heal.unhealthyTimeout`, `backup.interval`.
    pub const PERIOD: Duration = Duration::from_secs(30 * 86_400);
    /// `backup.retention`, `backup.remote.retention`.
    pub const RETENTION: u32 = 10_000;
}

/// One thing wrong with the inventory, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The inventory's file name as given (`lab.yaml`).
    pub file: String,
    /// A YAML path (`hosts[2].address`), a `line:column` position for a parse error, or empty
    /// when the problem is the whole file (it cannot be read).
    pub place: String,
    /// Lowercase; says what is wrong and, where it helps, what to write instead.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.place.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else if self.place.starts_with(|c: char| c.is_ascii_digit()) {
            // A position: `lab.yaml:7:3: ...`, the form editors and terminals jump to.
            write!(f, "{}:{}: {}", self.file, self.place, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.place, self.message)
        }
    }
}

/// Every problem found in one inventory file. `Display` prints a header line and then each
/// problem on its own line, indented by two spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryError {
    /// The inventory's file name as given (`lab.yaml`).
    pub file: String,
    /// In schema order; never empty.
    pub problems: Vec<Problem>,
}

impl fmt::Display for InventoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "inventory {} has {n} problem{}",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for InventoryError {}

/// Reads and validates the inventory at `path`.
pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
    match crate::bounded::read_to_string(path, crate::bounded::TEXT) {
        Ok(text) => load_str(path, &text),
        Err(err) => {
            let message = if err.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{}: no such file; `hactl init` writes an example to start from",
                    path.display()
                )
            } else {
                // The error names the path (and, past the limit, the limit).
                format!("cannot be read: {err}")
            };
            Err(InventoryError {
                file: file_name(path),
                problems: vec![Problem {
                    file: file_name(path),
                    place: String::new(),
                    message,
                }],
            })
        }
    }
}

/// Validates `text`, the content of the inventory file `source`. `source` names the file in
/// messages, and relative paths in the inventory (`keyFile`, `bundleDir`, `stateDir`) resolve
/// against its directory.
pub fn load_str(source: &Path, text: &str) -> Result<Inventory, InventoryError> {
    let file = file_name(source);
    let options = serde_saphyr::options! {
        // `yes`/`no`/`on` are strings in YAML 1.2; refuse them instead of guessing.
        strict_booleans: true,
        with_snippet: false,
    };
    let raw: RawInventory = match serde_saphyr::from_str_with_options(text, options) {
        Ok(raw) => raw,
        Err(err) => {
            let place = err
                .location()
                .map(|at| format!("{}:{}", at.line(), at.column()))
                .unwrap_or_default();
            let message = serde_saphyr::UserMessageFormatter
                .format_message(err.without_snippet())
                .into_owned();
            return Err(InventoryError {
                file: file.clone(),
                problems: vec![Problem { file, place, message }],
            });
        }
    };
    let source = std::path::absolute(source).unwrap_or_else(|_| source.to_path_buf());
    let base_dir = source
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let mut checker = Checker {
        file,
        base_dir,
        problems: Vec::new(),
    };
    let inventory = checker.inventory(raw, source);
    if checker.problems.is_empty() {
        Ok(inventory.expect("an inventory without problems is complete"))
    } else {
        Err(InventoryError {
            file: checker.file,
            problems: checker.problems,
        })
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Walks a [`RawInventory`], collecting problems. Each section returns `None` when it had one;
/// the final `Inventory` is only assembled when every section succeeded.
struct Checker {
    file: String,
    base_dir: PathBuf,
    problems: Vec<Problem>,
}

/// Authentication as written at one level (spec `ssh`, a host's `ssh`, a bastion).
#[derive(Debug, Clone)]
enum Auth {
    /// Neither `keyFile` nor `agent` written here: inherit.
    Unset,
    /// Only `agent: false`: written, but gives no way in.
    Disabled,
    /// Written, but wrong; already reported.
    Invalid,
    Ok(SshAuth),
}

/// One level of SSH settings, checked once (so a bad spec-level value is reported once, not
/// once per host).
#[derive(Debug, Clone)]
struct SshLevel {
    user: Option<String>,
    port: Option<u16>,
    auth: Auth,
    sudo: Option<bool>,
    bastion: Option<Result<BastionLevel, ()>>,
    connect_timeout: Option<u64>,
}

#[derive(Debug, Clone)]
struct BastionLevel {
    address: IpAddr,
    port: u16,
    user: Option<String>,
    auth: Auth,
}

/// A host as far as it could be read; the cross-host checks run on these.
struct HostDraft {
    name: String,
    address: Option<IpAddr>,
    prefix_length: Option<u8>,
    roles: Vec<Role>,
    interface: Option<String>,
    ssh: Option<SshSpec>,
}

impl HostDraft {
    fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
    fn subnet(&self) -> Option<IpNet> {
        IpNet::new(self.address?, self.prefix_length?)
            .ok()
            .map(|n| n.trunc())
    }
}

impl Checker {
    fn report(&mut self, place: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            file: self.file.clone(),
            place: place.into(),
            message: message.into(),
        });
    }

    fn inventory(&mut self, raw: RawInventory, source: PathBuf) -> Option<Inventory> {
        if raw.api_version != API_VERSION {
            self.report(
                "apiVersion",
                format!("{:?} is not supported: use {API_VERSION}", raw.api_version),
            );
        }
        if raw.kind != KIND {
            self.report("kind", format!("{:?} is not supported: use {KIND}", raw.kind));
        }
        let name = raw.metadata.name;
        if !is_dns_label(&name, 40) {
            self.report(
                "metadata.name",
                format!(
                    "{name:?} is not a valid cluster name: use at most 40 lowercase letters, \
                     digits and '-', starting and ending with a letter or digit"
                ),
            );
        }
        let spec = raw.spec;

        let spec_ssh = self.ssh_level(&spec.ssh, "ssh");
        let drafts = self.hosts(&spec_ssh, &spec.hosts);
        self.etcd_members(&drafts, spec.allow_single_member);
        let vip = self.vip(&spec.vip, &drafts);
        let load_balancer = self.load_balancer(&spec.load_balancer);
        let etcd = self.etcd(&spec.etcd);
        let kubernetes = self.kubernetes(&spec.kubernetes, &drafts, vip.as_ref());
        let pki = self.pki(&spec.pki);
        let heal = self.heal(&spec.heal);
        let mut backup = self.backup(&spec.backup);
        if let Some(raw) = &spec.backup.remote {
            backup.remote = self.backup_remote(raw, &spec_ssh, backup.retention);
        }
        if let Some(etcd) = &etcd {
            let nested = |inner: &str, outer: &str| {
                inner == outer
                    || inner
                        .strip_prefix(outer)
                        .is_some_and(|rest| rest.starts_with('/'))
            };
            if nested(&backup.dir, &etcd.data_dir) || nested(&etcd.data_dir, &backup.dir) {
                // `reset` and `recover` move the data dir aside (and the backups with it), and the
                // backup timer would chmod and prune inside etcd's data.
                self.report(
                    "backup.dir",
                    format!(
                        "{} overlaps etcd.dataDir ({}): keep snapshots in a directory of their own, \
                         e.g. /var/lib/etcd-backups",
                        backup.dir, etcd.data_dir
                    ),
                );
            }
        }
        // A pinned etcd the Kubernetes version does not work with is refused here, before any
        // host is reached (etcd from the package is checked by `up` against what the hosts run).
        // (A Kubernetes older than hactl installs is refused on its own, by `plan`.)
        if let (Some(etcd), Some(Some(kube))) = (&etcd, &kubernetes) {
            if let Some(pinned) = etcd
                .version
                .as_ref()
                .filter(|_| kube.version.minor >= super::versions::MIN_KUBERNETES_MINOR)
            {
                if let Some(problem) = super::versions::etcd_problem(&kube.version, pinned) {
                    self.report(
                        "kubernetes.version",
                        format!(
                            "{problem}: set etcd.version (and its source) to a release Kubernetes {} \
                             supports, e.g. 3.5.16, or choose a Kubernetes version that supports \
                             etcd {pinned}",
                            kube.version
                        ),
                    );
                }
            }
        }
        let state_dir = match &spec.state_dir {
            Some(dir) if dir.as_os_str().is_empty() => {
                self.report(
                    "stateDir",
                    "empty: remove it to use .hactl/<name>/ next to the inventory",
                );
                None
            }
            Some(dir) => Some(self.resolve(dir)),
            None => Some(self.base_dir.join(".hactl").join(&name)),
        };

        let hosts = drafts
            .into_iter()
            .map(|d| {
                Some(Host {
                    name: d.name,
                    address: d.address?,
                    prefix_length: d.prefix_length?,
                    roles: d.roles,
                    interface: d.interface,
                    ssh: d.ssh?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Inventory {
            source,
            name,
            hosts,
            vip: vip?,
            load_balancer,
            etcd: etcd?,
            kubernetes: kubernetes?,
            pki: pki?,
            state_dir: state_dir?,
            allow_single_member: spec.allow_single_member,
            heal,
            backup,
        })
    }

    fn backup(&mut self, raw: &super::raw::RawBackup) -> super::BackupSpec {
        let mut b = super::BackupSpec::default();
        if let Some(e) = raw.enabled {
            b.enabled = e;
        }
        if let Some(v) = &raw.interval {
            match super::parse_duration(v) {
                Ok(d) if d > limits::PERIOD => self.report(
                    "backup.interval",
                    format!(
                        "{v} is outside 1s..{}: choose a value in that range (default 1h)",
                        crate::duration::format(limits::PERIOD)
                    ),
                ),
                Ok(d) if d.as_secs() >= 1 => {
                    b.interval = d;
                    b.interval_text = format!("{}s", d.as_secs());
                }
                Ok(_) => self.report(
                    "backup.interval",
                    format!("{v:?} is zero: use at least 1s, e.g. 1h"),
                ),
                Err(e) => self.report("backup.interval", e.to_string()),
            }
        }
        if let Some(n) = raw.retention {
            if n == 0 {
                self.report(
                    "backup.retention",
                    "0 would delete every snapshot: keep at least 1 (default 24)",
                );
            } else if self.in_range("backup.retention", n, 1, limits::RETENTION, "default 24") {
                b.retention = n;
            }
        }
        if let Some(dir) = &raw.dir {
            match host_dir(dir, "/var/lib/etcd-backups") {
                Ok(dir) => b.dir = dir,
                Err(message) => self.report("backup.dir", message),
            }
        }
        b
    }

    /// `backup.remote`: an IP literal, a port, a user and a key as for a host (inheriting
    /// `spec.ssh`), an absolute path that is no system directory, a retention of at least 1.
    fn backup_remote(
        &mut self,
        raw: &super::raw::RawBackupRemote,
        spec: &SshLevel,
        retention: u32,
    ) -> Option<super::BackupRemote> {
        let place = "backup.remote";
        let before = self.problems.len();
        let address = match raw.address.parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                self.report(
                    format!("{place}.address"),
                    format!(
                        "{:?} is not an IP address: write the remote's IPv4 or IPv6 address (hactl does not resolve names, as for hosts)",
                        raw.address
                    ),
                );
                None
            }
        };
        let own = self.ssh_level(
            &RawSsh {
                user: raw.user.clone(),
                port: raw.port,
                key_file: raw.key_file.clone(),
                ..RawSsh::default()
            },
            place,
        );
        let path = match host_dir(&raw.path, "/srv/etcd-backups") {
            Ok(p) => Some(p),
            Err(message) => {
                self.report(format!("{place}.path"), message);
                None
            }
        };
        match raw.retention {
            Some(0) => self.report(
                format!("{place}.retention"),
                "0 would delete every remote snapshot: keep at least 1 (default: backup.retention)",
            ),
            Some(n) => {
                self.in_range(
                    &format!("{place}.retention"),
                    n,
                    1,
                    limits::RETENTION,
                    "default: backup.retention",
                );
            }
            None => {}
        }
        let ssh = self.host_ssh(spec, &own, address?, place);
        if self.problems.len() != before {
            return None;
        }
        Some(super::BackupRemote {
            ssh: SshSpec {
                // The remote is reached directly, never through the hosts' bastion, and hactl
                // acts there as the remote's user (its home, its directory), never through sudo.
                bastion: None,
                sudo: false,
                ..ssh?
            },
            path: path?,
            retention: raw.retention.unwrap_or(retention),
        })
    }

    fn heal(&mut self, raw: &super::raw::RawHeal) -> super::HealSpec {
        let mut h = super::HealSpec::default();
        if let Some(n) = raw.max_unhealthy {
            if self.in_range("heal.maxUnhealthy", n, 0, limits::MAX_UNHEALTHY, "default 1") {
                h.max_unhealthy = n;
            }
        }
        if let Some(n) = raw.max_retry {
            if self.in_range("heal.maxRetry", n, 0, limits::MAX_RETRY, "default 3") {
                h.max_retry = n;
            }
        }
        for (field, value, slot) in [
            ("retryPeriod", &raw.retry_period, &mut h.retry_period),
            (
                "minHealthyPeriod",
                &raw.min_healthy_period,
                &mut h.min_healthy_period,
            ),
            (
                "unhealthyTimeout",
                &raw.unhealthy_timeout,
                &mut h.unhealthy_timeout,
            ),
        ] {
            if let Some(v) = value {
                match super::parse_duration(v) {
                    Ok(d) if d > limits::PERIOD => self.report(
                        format!("heal.{field}"),
                        format!(
                            "{v} is outside 0s..{}: choose a value in that range",
                            crate::duration::format(limits::PERIOD)
                        ),
                    ),
                    Ok(d) => *slot = d,
                    Err(e) => self.report(format!("heal.{field}"), e.to_string()),
                }
            }
        }
        h
    }

    /// A path from the inventory: `~/` is the home directory, relative paths start at the
    /// inventory file's directory.
    fn resolve(&self, path: &Path) -> PathBuf {
        if let Ok(rest) = path.strip_prefix("~") {
            if let Some(home) = std::env::var_os("HOME") {
                return PathBuf::from(home).join(rest);
            }
        }
        let joined = self.base_dir.join(path);
        std::path::absolute(&joined).unwrap_or(joined)
    }

    // ── SSH ──────────────────────────────────────────────────────────────────────────────────

    fn ssh_level(&mut self, raw: &RawSsh, place: &str) -> SshLevel {
        if let Some(user) = &raw.user {
            self.check_user(user, &format!("{place}.user"));
        }
        if raw.port == Some(0) {
            self.report(
                format!("{place}.port"),
                "0 is not a port: use 22 or the port sshd listens on",
            );
        }
        let auth = self.auth(raw.key_file.as_deref(), raw.agent, place);
        let bastion = raw
            .bastion
            .as_ref()
            .map(|b| self.bastion(b, &format!("{place}.bastion")));
        match raw.connect_timeout {
            Some(0) => self.report(
                format!("{place}.connectTimeout"),
                "0 seconds leaves no time to connect: use a positive number of seconds (default 10)",
            ),
            Some(n) => {
                self.in_range(
                    &format!("{place}.connectTimeout"),
                    n,
                    1,
                    limits::CONNECT_TIMEOUT_SECS,
                    "default 10",
                );
            }
            None => {}
        }
        SshLevel {
            user: raw.user.clone(),
            port: raw.port,
            auth,
            sudo: raw.sudo,
            bastion,
            connect_timeout: raw.connect_timeout,
        }
    }

    fn check_user(&mut self, user: &str, place: &str) {
        let ok = !user.is_empty()
            && !user.starts_with('-')
            && user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !ok {
            self.report(
                place,
                format!("{user:?} is not a valid user name: use letters, digits, '.', '_' and '-'"),
            );
        }
    }

    fn auth(&mut self, key_file: Option<&Path>, agent: Option<bool>, place: &str) -> Auth {
        match (key_file, agent) {
            (None, None) => Auth::Unset,
            (None, Some(false)) => Auth::Disabled,
            (None, Some(true)) => Auth::Ok(SshAuth::Agent),
            (Some(_), Some(true)) => {
                self.report(
                    place,
                    "both keyFile and agent: true are set: keep one (keyFile for a key on disk, \
                     agent for the keys of the running ssh-agent)",
                );
                Auth::Invalid
            }
            (Some(key), _) => {
                let path = self.resolve(key);
                let place = format!("{place}.keyFile");
                if key.as_os_str().is_empty() {
                    self.report(place, "empty: give the path of a private key file");
                    Auth::Invalid
                } else if !path.exists() {
                    self.report(place, format!("{}: no such file", path.display()));
                    Auth::Invalid
                } else if !path.is_file() {
                    self.report(place, format!("{}: not a file", path.display()));
                    Auth::Invalid
                } else {
                    Auth::Ok(SshAuth::KeyFile(path))
                }
            }
        }
    }

    fn bastion(&mut self, raw: &RawBastion, place: &str) -> Result<BastionLevel, ()> {
        let before = self.problems.len();
        let address = raw.address.parse::<IpAddr>().ok();
        if address.is_none() {
            self.report(
                format!("{place}.address"),
                format!(
                    "{:?} is not an IP address: write the bastion's IPv4 or IPv6 address \
                     (hactl does not resolve names: every address it connects to is written in \
                     the inventory, so a DNS change cannot redirect it){}",
                    raw.address,
                    resolve_hint(&raw.address)
                ),
            );
        }
        if raw.port == Some(0) {
            self.report(
                format!("{place}.port"),
                "0 is not a port: use 22 or the port sshd listens on",
            );
        }
        if let Some(user) = &raw.user {
            self.check_user(user, &format!("{place}.user"));
        }
        let auth = self.auth(raw.key_file.as_deref(), raw.agent, place);
        match address {
            Some(address) if self.problems.len() == before => Ok(BastionLevel {
                address,
                port: raw.port.unwrap_or(22),
                user: raw.user.clone(),
                auth,
            }),
            _ => Err(()),
        }
    }

    /// The SSH settings of one host: its own level over the spec level over the defaults.
    fn host_ssh(&mut self, spec: &SshLevel, own: &SshLevel, address: IpAddr, place: &str) -> Option<SshSpec> {
        let user = own
            .user
            .clone()
            .or_else(|| spec.user.clone())
            .unwrap_or_else(|| "root".to_string());
        let auth = match (&own.auth, &spec.auth) {
            (Auth::Unset, inherited) => inherited.clone(),
            (own, _) => own.clone(),
        };
        let auth = match auth {
            Auth::Ok(auth) => Some(auth),
            Auth::Invalid => None,
            Auth::Unset | Auth::Disabled => {
                // Reported once for the whole file when no host has a way in: see `hosts`.
                self.report(
                    format!("{place}.ssh"),
                    "no ssh authentication: set keyFile or agent: true here or in spec ssh",
                );
                None
            }
        };
        let timeout = own.connect_timeout.or(spec.connect_timeout).unwrap_or(10);
        let bastion = match own.bastion.as_ref().or(spec.bastion.as_ref()) {
            None => None,
            Some(Err(())) => return None,
            Some(Ok(b)) => {
                let bastion_auth = match &b.auth {
                    Auth::Ok(a) => a.clone(),
                    Auth::Unset | Auth::Disabled => auth.clone()?,
                    Auth::Invalid => return None,
                };
                Some(Box::new(SshSpec {
                    address: b.address,
                    port: b.port,
                    user: b.user.clone().unwrap_or_else(|| user.clone()),
                    auth: bastion_auth,
                    sudo: false,
                    bastion: None,
                    connect_timeout_secs: timeout,
                }))
            }
        };
        Some(SshSpec {
            address,
            port: own.port.or(spec.port).unwrap_or(22),
            sudo: own.sudo.or(spec.sudo).unwrap_or(user != "root"),
            user,
            auth: auth?,
            bastion,
            connect_timeout_secs: timeout,
        })
    }

    // ── hosts ────────────────────────────────────────────────────────────────────────────────

    fn hosts(&mut self, spec_ssh: &SshLevel, raw: &[super::raw::RawHost]) -> Vec<HostDraft> {
        if raw.is_empty() {
            self.report(
                "hosts",
                "no hosts: list at least one (3 for a highly available cluster)",
            );
            return Vec::new();
        }
        // When no level anywhere gives a way to authenticate, say so once, not per host.
        let spec_has_auth = matches!(spec_ssh.auth, Auth::Ok(_) | Auth::Invalid);
        let any_host_auth = raw
            .iter()
            .any(|h| h.ssh.key_file.is_some() || h.ssh.agent == Some(true));
        let no_auth_anywhere = !spec_has_auth && !any_host_auth;
        if no_auth_anywhere {
            self.report(
                "ssh",
                "no ssh authentication: set keyFile: <private key> or agent: true \
                 (here for every host, or per host)",
            );
        }

        let mut drafts: Vec<HostDraft> = Vec::with_capacity(raw.len());
        for (i, host) in raw.iter().enumerate() {
            let place = format!("hosts[{i}]");
            if !is_dns_label(&host.name, 63) {
                self.report(
                    format!("{place}.name"),
                    format!(
                        "{:?} is not a valid host name: use at most 63 lowercase letters, digits \
                         and '-', starting and ending with a letter or digit",
                        host.name
                    ),
                );
            } else if let Some(j) = drafts.iter().position(|d| d.name == host.name) {
                self.report(format!("{place}.name"), format!("duplicate of hosts[{j}]"));
            }

            let address = match host.address.parse::<IpAddr>() {
                Err(_) => {
                    self.report(
                        format!("{place}.address"),
                        format!(
                            "{:?} is not an IP address: write the host's IPv4 or IPv6 address \
                             (hactl does not resolve names: etcd's URLs, the certificates' IP SANs, \
                             HAProxy's backends and keepalived's peers are written with it, and a \
                             name that later resolved elsewhere would break them){}",
                            host.address,
                            resolve_hint(&host.address)
                        ),
                    );
                    None
                }
                Ok(a) if a.is_unspecified() || a.is_multicast() => {
                    self.report(
                        format!("{place}.address"),
                        format!("{a} cannot be a host's address: write the address the host is reached at"),
                    );
                    None
                }
                Ok(a) => {
                    if let Some(j) = drafts.iter().position(|d| d.address == Some(a)) {
                        self.report(format!("{place}.address"), format!("duplicate of hosts[{j}]"));
                    }
                    Some(a)
                }
            };

            let prefix_length = match (address, host.prefix_length) {
                (Some(IpAddr::V4(_)), None) => Some(24),
                (Some(IpAddr::V6(_)), None) => Some(64),
                (Some(a), Some(p)) => {
                    let max = if a.is_ipv4() { 32 } else { 128 };
                    if p == 0 || p > max {
                        self.report(
                            format!("{place}.prefixLength"),
                            format!("{p} is not a prefix length for {a}: use 1 to {max}"),
                        );
                        None
                    } else {
                        Some(p)
                    }
                }
                (None, _) => None,
            };

            let mut roles = Vec::with_capacity(host.roles.len());
            for (k, role) in host.roles.iter().enumerate() {
                let role_place = format!("{place}.roles[{k}]");
                match Role::parse(role) {
                    None => self.report(
                        role_place,
                        format!("unknown role {role:?}: use etcd, control-plane, load-balancer or worker"),
                    ),
                    Some(r) => match host.roles.iter().position(|o| o == role) {
                        Some(first) if first < k => {
                            self.report(role_place, format!("duplicate of roles[{first}]"))
                        }
                        _ => roles.push(r),
                    },
                }
            }
            if roles.contains(&Role::Worker) && roles.len() > 1 {
                let k = host.roles.iter().position(|r| r == "worker").unwrap_or(0);
                self.report(
                    format!("{place}.roles[{k}]"),
                    "a worker holds no other role: remove worker, or the other roles",
                );
            }

            if let Some(interface) = &host.interface {
                let ok = !interface.is_empty()
                    && interface.len() <= 15
                    && interface
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c));
                if !ok {
                    self.report(
                        format!("{place}.interface"),
                        format!(
                            "{interface:?} is not a network interface name: at most 15 letters, \
                             digits, '.', '_', '-' (as `ip link` shows them), or remove it to detect"
                        ),
                    );
                }
            }

            let own_ssh = self.ssh_level(&host.ssh, &format!("{place}.ssh"));
            // With no authentication anywhere, that was reported once at `ssh`.
            let ssh = match address {
                Some(address) if !no_auth_anywhere => self.host_ssh(spec_ssh, &own_ssh, address, &place),
                _ => None,
            };

            drafts.push(HostDraft {
                name: host.name.clone(),
                address,
                prefix_length,
                roles,
                interface: host.interface.clone(),
                ssh,
            });
        }
        drafts
    }

    /// Quorum arithmetic on the number of etcd members.
    fn etcd_members(&mut self, hosts: &[HostDraft], allow_single_member: bool) {
        if hosts.is_empty() {
            return; // already reported
        }
        let n = hosts.iter().filter(|h| h.has(Role::Etcd)).count();
        let message = match n {
            0 => Some("no host has the etcd role: give it to 3 hosts (or 5)".to_string()),
            1 if !allow_single_member => Some(
                "1 etcd member survives no failure: use 3 members, or set \
                 allowSingleMember: true for a development cluster"
                    .to_string(),
            ),
            n if n > 7 => Some(format!(
                "{n} etcd members: more than 7 slows every write and adds little fault \
                 tolerance; use 3, 5 or 7"
            )),
            // 2 → "use 3": one member is no improvement; 6 → "use 5 or 7".
            n if n % 2 == 0 => Some(format!(
                "{n} etcd members: an even count adds no fault tolerance; use {}",
                if n == 2 {
                    "3".to_string()
                } else {
                    format!("{} or {}", n - 1, n + 1)
                }
            )),
            _ => None,
        };
        if let Some(message) = message {
            self.report("hosts", message);
        }
    }

    // ── vip ──────────────────────────────────────────────────────────────────────────────────

    /// `Some(None)`: no VIP, and none needed.
    fn vip(&mut self, raw: &Option<super::raw::RawVip>, hosts: &[HostDraft]) -> Option<Option<Vip>> {
        let balancers: Vec<usize> = (0..hosts.len())
            .filter(|&i| hosts[i].has(Role::LoadBalancer))
            .collect();
        let Some(raw) = raw else {
            if let Some(&i) = balancers.first() {
                self.report(
                    "vip",
                    format!(
                        "required because hosts[{i}] has the load-balancer role: set vip.address \
                         to a free address in the load balancers' subnet"
                    ),
                );
                return None;
            }
            return Some(None);
        };
        let before = self.problems.len();
        if balancers.is_empty() && !hosts.is_empty() {
            self.report(
                "vip",
                "no host has the load-balancer role to hold this address: give the role to 2 \
                 hosts, or remove vip",
            );
        }
        let address = match raw.address.parse::<IpAddr>() {
            Err(_) => {
                self.report(
                    "vip.address",
                    format!(
                        "{:?} is not an IP address: write a free IPv4 or IPv6 address in the \
                         load balancers' subnet (keepalived holds an address, not a name, and the \
                         apiserver certificates carry it as an IP SAN){}",
                        raw.address,
                        resolve_hint(&raw.address)
                    ),
                );
                None
            }
            Ok(a) => Some(a),
        };
        if let Some(address) = address {
            if let Some(i) = hosts.iter().position(|h| h.address == Some(address)) {
                self.report("vip.address", format!("equal to hosts[{i}].address"));
            } else {
                self.vip_subnet(address, hosts, &balancers);
            }
        }
        let router_id = raw.router_id.unwrap_or(51);
        if router_id == 0 {
            self.report(
                "vip.routerId",
                "0 is not a virtual router id: use 1 to 255, unique on the network (default 51)",
            );
        }
        let advert_interval = match &raw.advert_interval {
            None => super::DEFAULT_ADVERT_INTERVAL,
            Some(text) => self
                .duration_in(
                    "vip.advertInterval",
                    text,
                    Duration::from_millis(100)..=Duration::from_secs(10),
                    "default 300ms",
                )
                .inspect(|d| {
                    if d.as_millis() % 10 != 0 {
                        self.report(
                            "vip.advertInterval",
                            format!(
                                "{text}: keepalived counts in hundredths of a second: use a \
                                 multiple of 10ms (default 300ms)"
                            ),
                        );
                    }
                })
                .unwrap_or(super::DEFAULT_ADVERT_INTERVAL),
        };
        if self.problems.len() != before {
            return None;
        }
        Some(Some(Vip {
            address: address?,
            router_id,
            advert_interval,
        }))
    }

    /// An integer field within `min..=max`; reports the field otherwise (`hint` names the
    /// default). True when it is within.
    fn in_range<T: PartialOrd + fmt::Display + Copy>(
        &mut self,
        field: &str,
        value: T,
        min: T,
        max: T,
        hint: &str,
    ) -> bool {
        if value < min || value > max {
            self.report(
                field,
                format!("{value} is outside {min}..{max}: choose a value in that range ({hint})"),
            );
            return false;
        }
        true
    }

    /// A duration field within `range`; reports the field otherwise (`hint` names the default).
    fn duration_in(
        &mut self,
        field: &str,
        text: &str,
        range: std::ops::RangeInclusive<Duration>,
        hint: &str,
    ) -> Option<Duration> {
        match super::parse_duration(text) {
            Err(e) => {
                self.report(field, e.to_string());
                None
            }
            Ok(d) if !range.contains(&d) => {
                self.report(
                    field,
                    format!(
                        "{text} is outside {}..{}: choose a value in that range ({hint})",
                        crate::duration::format_millis(*range.start()),
                        crate::duration::format_millis(*range.end())
                    ),
                );
                None
            }
            Ok(d) => Some(d),
        }
    }

    // ── loadBalancer ─────────────────────────────────────────────────────────────────────────

    fn load_balancer(&mut self, raw: &super::raw::RawLoadBalancer) -> super::LoadBalancerSpec {
        let mut lb = super::LoadBalancerSpec::default();
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        for (field, text, range, hint, target) in [
            (
                "checkInterval",
                &raw.check_interval,
                ms(100)..=s(60),
                "default 1s",
                &mut lb.check_interval,
            ),
            (
                "connectTimeout",
                &raw.connect_timeout,
                ms(100)..=s(30),
                "default 1s",
                &mut lb.connect_timeout,
            ),
            (
                "checkTimeout",
                &raw.check_timeout,
                ms(100)..=s(60),
                "default 3s",
                &mut lb.check_timeout,
            ),
        ] {
            if let Some(text) = text {
                if let Some(d) = self.duration_in(&format!("loadBalancer.{field}"), text, range, hint) {
                    *target = d;
                }
            }
        }
        for (field, value, target) in [("fall", raw.fall, &mut lb.fall), ("rise", raw.rise, &mut lb.rise)] {
            match value {
                Some(n) if (1..=10).contains(&n) => *target = n,
                Some(n) => self.report(
                    format!("loadBalancer.{field}"),
                    format!("{n} is outside 1..10: choose a count in that range (default 2)"),
                ),
                None => {}
            }
        }
        lb
    }

    /// keepalived can only hold an address in a subnet of the interface it runs on: the VIP must
    /// be in every load balancer's subnet (or, without load balancers, in some host's subnet).
    fn vip_subnet(&mut self, vip: IpAddr, hosts: &[HostDraft], balancers: &[usize]) {
        let candidates: Vec<usize> = if balancers.is_empty() {
            (0..hosts.len()).collect()
        } else {
            balancers.to_vec()
        };
        let with_subnet: Vec<(usize, IpNet)> = candidates
            .iter()
            .filter_map(|&i| hosts[i].subnet().map(|net| (i, net)))
            .collect();
        if with_subnet.is_empty() {
            return; // no usable host address: reported there
        }
        let outside: Vec<&(usize, IpNet)> = with_subnet
            .iter()
            .filter(|(_, net)| !net.contains(&vip))
            .collect();
        if outside.len() == with_subnet.len() {
            let mut subnets: Vec<String> = Vec::new();
            for (_, net) in &with_subnet {
                let s = net.to_string();
                if !subnets.contains(&s) {
                    subnets.push(s);
                }
            }
            let whose = if balancers.is_empty() {
                "host's"
            } else {
                "load balancer's"
            };
            self.report(
                "vip.address",
                format!(
                    "{vip} is in no {whose} subnet ({}): keepalived can only hold an address of \
                     the network it is on",
                    subnets.join(", ")
                ),
            );
        } else {
            for (i, net) in outside {
                self.report(
                    "vip.address",
                    format!(
                        "{vip} is outside the subnet of hosts[{i}] ({net}): keepalived there \
                         could not hold it"
                    ),
                );
            }
        }
    }

    // ── binaries ─────────────────────────────────────────────────────────────────────────────

    fn version(&mut self, raw: &str, place: &str, example: &str) -> Option<semver::Version> {
        match parse_version(raw) {
            Some(v) => Some(v),
            None => {
                self.report(
                    place,
                    format!("{raw:?} is not a version (use MAJOR.MINOR.PATCH, e.g. {example})"),
                );
                None
            }
        }
    }

    fn source(
        &mut self,
        kind: RawSourceKind,
        release_url: Option<&str>,
        sha256: Option<&str>,
        bundle_dir: Option<&Path>,
        section: &str,
    ) -> Option<BinarySource> {
        let before = self.problems.len();
        let name = match kind {
            RawSourceKind::Package => "package",
            RawSourceKind::Release => "release",
            RawSourceKind::Bundle => "bundle",
        };
        let stray = |field: &str, belongs: &str| {
            format!(
                "only used with source: {belongs}, but source is {name}: remove {field} or set \
                 source: {belongs}"
            )
        };
        if kind != RawSourceKind::Release {
            if release_url.is_some() {
                self.report(format!("{section}.releaseUrl"), stray("releaseUrl", "release"));
            }
            if sha256.is_some() {
                self.report(format!("{section}.sha256"), stray("sha256", "release"));
            }
        }
        if kind != RawSourceKind::Bundle && bundle_dir.is_some() {
            self.report(format!("{section}.bundleDir"), stray("bundleDir", "bundle"));
        }
        let source = match kind {
            RawSourceKind::Package => Some(BinarySource::Package),
            RawSourceKind::Release => {
                let url = match release_url {
                    None => {
                        self.report(
                            format!("{section}.releaseUrl"),
                            "required when source is release: the https:// address of the \
                             release tarball",
                        );
                        None
                    }
                    Some(url) if !is_http_url(url) => {
                        self.report(
                            format!("{section}.releaseUrl"),
                            format!("{url:?} is not an http:// or https:// address"),
                        );
                        None
                    }
                    Some(url) => Some(url.to_string()),
                };
                let sha256 = match sha256 {
                    // Over HTTPS, or from this machine (a loopback mirror, where no one stands
                    // between the two), the checksum published beside the tarball is fetched
                    // instead; over plain HTTP through a network it could be changed with it.
                    None if url
                        .as_deref()
                        .is_some_and(|u| u.starts_with("https://") || is_loopback_url(u)) =>
                    {
                        Some(None)
                    }
                    None => {
                        self.report(
                            format!("{section}.sha256"),
                            "required when releaseUrl is not https:// (or a loopback address): \
                             the sha256 of the tarball (64 hex digits), so a changed download is \
                             refused",
                        );
                        None
                    }
                    Some(s) if s.len() != 64 || !s.chars().all(|c| c.is_ascii_hexdigit()) => {
                        self.report(
                            format!("{section}.sha256"),
                            format!("{s:?} is not a sha256: write 64 hex digits"),
                        );
                        None
                    }
                    Some(s) => Some(Some(s.to_ascii_lowercase())),
                };
                Some(BinarySource::Release {
                    url: url?,
                    sha256: sha256?,
                })
            }
            RawSourceKind::Bundle => match bundle_dir {
                None => {
                    self.report(
                        format!("{section}.bundleDir"),
                        "required when source is bundle: the directory holding the binaries",
                    );
                    None
                }
                Some(dir) => {
                    let path = self.resolve(dir);
                    if path.is_dir() {
                        Some(BinarySource::Bundle { dir: path })
                    } else {
                        self.report(
                            format!("{section}.bundleDir"),
                            format!("{}: no such directory", path.display()),
                        );
                        None
                    }
                }
            },
        };
        if self.problems.len() == before {
            source
        } else {
            None
        }
    }

    // ── etcd ─────────────────────────────────────────────────────────────────────────────────

    fn etcd(&mut self, raw: &super::raw::RawEtcd) -> Option<EtcdSpec> {
        let before = self.problems.len();
        let version = raw
            .version
            .as_ref()
            .map(|v| self.version(v, "etcd.version", "3.5.16"));
        let source = self.source(
            raw.source,
            raw.release_url.as_deref(),
            raw.sha256.as_deref(),
            raw.bundle_dir.as_deref(),
            "etcd",
        );

        let data_dir = match host_dir(
            raw.data_dir.as_deref().unwrap_or("/var/lib/etcd"),
            "/var/lib/etcd",
        ) {
            Ok(dir) => dir,
            Err(message) => {
                self.report("etcd.dataDir", message);
                String::new()
            }
        };

        let client_port = raw.client_port.unwrap_or(2379);
        let peer_port = raw.peer_port.unwrap_or(2380);
        if client_port == 0 {
            self.report("etcd.clientPort", "0 is not a port: use 2379");
        }
        if peer_port == 0 {
            self.report("etcd.peerPort", "0 is not a port: use 2380");
        } else if peer_port == client_port {
            self.report(
                "etcd.peerPort",
                format!("equal to clientPort ({client_port}): give peers their own port, e.g. 2380"),
            );
        }

        let heartbeat = raw.heartbeat_interval.unwrap_or(100);
        let election = raw.election_timeout.unwrap_or(1000);
        if heartbeat == 0 {
            self.report(
                "etcd.heartbeatInterval",
                "0 ms: use a positive interval (default 100)",
            );
        } else if heartbeat > limits::HEARTBEAT_MS {
            self.in_range(
                "etcd.heartbeatInterval",
                heartbeat,
                1,
                limits::HEARTBEAT_MS,
                "default 100",
            );
        } else if u64::from(election) < 5 * u64::from(heartbeat) {
            self.report(
                "etcd.electionTimeout",
                format!(
                    "{election} ms is less than 5 × heartbeatInterval ({heartbeat} ms): use at \
                     least {}",
                    5 * u64::from(heartbeat)
                ),
            );
        } else if election > limits::ELECTION_MS {
            self.report(
                "etcd.electionTimeout",
                format!(
                    "{election} ms is more than etcd accepts: use at most {}",
                    limits::ELECTION_MS
                ),
            );
        }

        let quota = raw.quota_backend_bytes.unwrap_or(8 << 30);
        if quota == 0 {
            self.report(
                "etcd.quotaBackendBytes",
                "0 bytes: give the quota in bytes, e.g. 8589934592 (8 GiB, the default)",
            );
        } else {
            self.in_range(
                "etcd.quotaBackendBytes",
                quota,
                limits::QUOTA_MIN,
                limits::QUOTA_MAX,
                "default 8589934592, 8 GiB, etcd's documented maximum",
            );
        }
        let retention = raw.auto_compaction_retention.as_deref().unwrap_or("8h");
        match retention_duration(retention) {
            None => self.report(
                "etcd.autoCompactionRetention",
                format!(
                    "{retention:?} is not a retention period: use hours (8) or a duration such as 8h or 30m"
                ),
            ),
            Some(d) if d > limits::COMPACTION_RETENTION => self.report(
                "etcd.autoCompactionRetention",
                format!(
                    "{retention} is longer than {}: choose a shorter period (default 8h)",
                    crate::duration::format(limits::COMPACTION_RETENTION)
                ),
            ),
            Some(_) => {}
        }
        for (i, arg) in raw.extra_args.iter().enumerate() {
            if let Err(message) = etcd_extra_arg(arg) {
                self.report(format!("etcd.extraArgs[{i}]"), message);
            }
        }

        if self.problems.len() != before {
            return None;
        }
        Some(EtcdSpec {
            version: version.flatten(),
            source: source?,
            data_dir,
            client_port,
            peer_port,
            heartbeat_interval_ms: heartbeat,
            election_timeout_ms: election,
            quota_backend_bytes: quota,
            auto_compaction_retention: retention.to_string(),
            extra_args: raw.extra_args.clone(),
        })
    }

    // ── kubernetes ───────────────────────────────────────────────────────────────────────────

    /// `Some(None)`: no kubernetes section (control-plane hosts then run etcd only).
    fn kubernetes(
        &mut self,
        raw: &Option<super::raw::RawKubernetes>,
        hosts: &[HostDraft],
        vip: Option<&Option<Vip>>,
    ) -> Option<Option<KubernetesSpec>> {
        let control_plane = hosts.iter().position(|h| h.has(Role::ControlPlane));
        // Without a kubernetes section the control-plane hosts run etcd only: the Kubernetes
        // components are installed once the section names a version and a source.
        let Some(raw) = raw else {
            if let Some(i) = hosts.iter().position(|h| h.has(Role::Worker)) {
                self.report(
                    "kubernetes",
                    format!(
                        "required because hosts[{i}] has the worker role: add a kubernetes section \
                         (version and source), or remove the worker role"
                    ),
                );
                return None;
            }
            return Some(None);
        };
        let before = self.problems.len();
        if control_plane.is_none() && !hosts.is_empty() {
            self.report(
                "kubernetes",
                "no host has the control-plane role: give it to the hosts that run the apiserver \
                 (3 for high availability), or remove the kubernetes section",
            );
        }
        let version = match &raw.version {
            None => {
                self.report(
                    "kubernetes.version",
                    "required: the Kubernetes version to run, e.g. 1.31.4",
                );
                None
            }
            Some(v) => self.version(v, "kubernetes.version", "1.31.4"),
        };
        let source = self.source(
            raw.source,
            raw.release_url.as_deref(),
            raw.sha256.as_deref(),
            raw.bundle_dir.as_deref(),
            "kubernetes",
        );
        let service_cidr = self.cidr(
            raw.service_cidr.as_deref().unwrap_or("10.96.0.0/12"),
            "kubernetes.serviceCidr",
            "10.96.0.0/12",
        );
        let pod_cidr = self.cidr(
            raw.pod_cidr.as_deref().unwrap_or("10.244.0.0/16"),
            "kubernetes.podCidr",
            "10.244.0.0/16",
        );
        if let (Some(service), Some(pod)) = (service_cidr, pod_cidr) {
            if service.contains(&pod) || pod.contains(&service) {
                self.report(
                    "kubernetes.podCidr",
                    format!("{pod} overlaps serviceCidr ({service}): give pods a separate range"),
                );
            }
        }
        for (field, net) in [("serviceCidr", service_cidr), ("podCidr", pod_cidr)] {
            let Some(net) = net else { continue };
            for (i, host) in hosts.iter().enumerate() {
                if let Some(a) = host.address.filter(|a| net.contains(a)) {
                    self.report(
                        format!("kubernetes.{field}"),
                        format!(
                            "{net} contains hosts[{i}].address ({a}): pick a range the hosts' \
                             network does not use"
                        ),
                    );
                }
            }
            if let Some(Some(vip)) = vip {
                if net.contains(&vip.address) {
                    self.report(
                        format!("kubernetes.{field}"),
                        format!("{net} contains vip.address ({}): pick another range", vip.address),
                    );
                }
            }
        }
        let mode = match raw.mode.as_deref() {
            None | Some("systemd") => Some(KubernetesMode::Systemd),
            Some("static-pod") => Some(KubernetesMode::StaticPod),
            Some(other) => {
                self.report(
                    "kubernetes.mode",
                    format!("unknown mode {other:?}: use systemd or static-pod"),
                );
                None
            }
        };
        if let (Some(mode), Some(source)) = (&mode, &source) {
            if let Some(refusal) = kubernetes_source_refusal(mode, source) {
                self.report("kubernetes.source", refusal);
            }
        }
        if let Some(pod) = pod_cidr {
            // The controller-manager gives each Node a /24 (IPv4) or /64 (IPv6) out of podCidr.
            let (mask, default) = if pod.addr().is_ipv4() {
                (24, "/16")
            } else {
                (64, "/48")
            };
            if pod.prefix_len() > mask {
                self.report(
                    "kubernetes.podCidr",
                    format!(
                        "{pod} is smaller than the /{mask} each node gets from it: use a larger \
                         range, e.g. a {default}"
                    ),
                );
            }
        }
        self.node_subnet(hosts);
        let images = self.images(raw.images.as_ref());
        let containerd = self.source(
            raw.containerd.source,
            raw.containerd.release_url.as_deref(),
            raw.containerd.sha256.as_deref(),
            raw.containerd.bundle_dir.as_deref(),
            "kubernetes.containerd",
        );
        let cgroup_driver = match raw.cgroup_driver.as_deref() {
            None | Some("systemd") => Some(CgroupDriver::Systemd),
            Some("cgroupfs") => Some(CgroupDriver::Cgroupfs),
            Some(other) => {
                self.report(
                    "kubernetes.cgroupDriver",
                    format!("unknown cgroup driver {other:?}: use systemd or cgroupfs"),
                );
                None
            }
        };
        let eviction_hard = raw.eviction_hard.clone().unwrap_or_default();
        for (signal, threshold) in &eviction_hard {
            if !super::EVICTION_SIGNALS.contains(&signal.as_str()) {
                self.report(
                    format!("kubernetes.evictionHard.{signal}"),
                    format!(
                        "not an eviction signal: use one of {}",
                        super::EVICTION_SIGNALS.join(", ")
                    ),
                );
            }
            let percent = threshold
                .strip_suffix('%')
                .and_then(|p| p.parse::<f64>().ok())
                .is_some_and(|p| (0.0..=100.0).contains(&p));
            let quantity = !threshold.is_empty()
                && threshold.starts_with(|c: char| c.is_ascii_digit())
                && threshold.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
            if !(percent || quantity) {
                self.report(
                    format!("kubernetes.evictionHard.{signal}"),
                    format!(
                        "{threshold:?} is not a threshold: write a percentage (5%) or a quantity (100Mi)"
                    ),
                );
            }
        }
        if raw.eviction_hard.as_ref().is_some_and(|m| m.is_empty()) {
            self.report(
                "kubernetes.evictionHard",
                "empty: list every threshold the kubelet should keep (an empty map would turn \
                 eviction off), or remove the field for the kubelet's defaults",
            );
        }
        let dns = self.dns(raw.dns.as_ref(), service_cidr);
        if self.problems.len() != before {
            return None;
        }
        Some(Some(KubernetesSpec {
            version: version?,
            source: source?,
            service_cidr: service_cidr?,
            pod_cidr: pod_cidr?,
            mode: mode?,
            images: images?,
            containerd: containerd?,
            cgroup_driver: cgroup_driver?,
            eviction_hard,
            dns: dns?,
        }))
    }

    /// `kubernetes.dns`: `Some(None)` without the section; `None` when it has a problem (reported).
    fn dns(
        &mut self,
        raw: Option<&super::raw::RawDns>,
        service_cidr: Option<IpNet>,
    ) -> Option<Option<DnsSpec>> {
        let Some(raw) = raw else { return Some(None) };
        let before = self.problems.len();
        let example = "registry.k8s.io/coredns/coredns:v1.8.0";
        let image = match raw.image.as_deref() {
            None | Some("") => {
                self.report(
                    "kubernetes.dns.image",
                    format!(
                        "required: the CoreDNS image the nodes can pull or that kubernetes.images.dir \
                         holds, e.g. {example} (hactl ships none); remove kubernetes.dns for a \
                         cluster without DNS"
                    ),
                );
                None
            }
            Some(image) => match image_reference_problem(image) {
                Some(why) => {
                    self.report("kubernetes.dns.image", format!("{image:?} {why}, e.g. {example}"));
                    None
                }
                None => Some(image.to_string()),
            },
        };
        let cluster_ip = match (raw.cluster_ip.as_deref(), service_cidr) {
            (_, None) => None,
            (None, Some(net)) => match default_dns_ip(&net) {
                Some(ip) => Some(ip),
                None => {
                    self.report(
                        "kubernetes.dns.clusterIp",
                        format!("serviceCidr {net} has no tenth address: name an address of it"),
                    );
                    None
                }
            },
            (Some(text), Some(net)) => match text.parse::<IpAddr>() {
                Err(_) => {
                    self.report(
                        "kubernetes.dns.clusterIp",
                        format!(
                            "{text:?} is not an IP address: write one of serviceCidr {net}, e.g. {}",
                            default_dns_ip(&net).map(|i| i.to_string()).unwrap_or_default()
                        ),
                    );
                    None
                }
                Ok(ip) if !net.contains(&ip) || ip == net.network() || ip == net.broadcast() => {
                    self.report(
                        "kubernetes.dns.clusterIp",
                        format!("{ip} is not a Service address of serviceCidr {net}: pick one inside it"),
                    );
                    None
                }
                Ok(ip) if Some(ip) == first_service_ip(&net) => {
                    self.report(
                        "kubernetes.dns.clusterIp",
                        format!(
                            "{ip} is the `kubernetes` Service's address (the first of serviceCidr): \
                             pick another, e.g. {}",
                            default_dns_ip(&net).map(|i| i.to_string()).unwrap_or_default()
                        ),
                    );
                    None
                }
                Ok(ip) => Some(ip),
            },
        };
        let domain = raw
            .domain
            .clone()
            .unwrap_or_else(|| super::DEFAULT_CLUSTER_DOMAIN.to_string());
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if domain.len() > 253 || !domain.split('.').all(label_ok) {
            self.report(
                "kubernetes.dns.domain",
                format!(
                    "{domain:?} is not a DNS domain: lower-case labels of letters, digits and \
                     '-', joined by dots, e.g. cluster.local"
                ),
            );
        }
        let replicas = raw.replicas.unwrap_or(2);
        if !(1..=10).contains(&replicas) {
            self.report(
                "kubernetes.dns.replicas",
                format!("{replicas}: run 1 to 10 CoreDNS replicas (2, the default, survives one node)"),
            );
        }
        if self.problems.len() != before {
            return None;
        }
        Some(Some(DnsSpec {
            image: image?,
            cluster_ip: cluster_ip?,
            domain,
            replicas,
        }))
    }

    /// Host-gw routing sends pod traffic straight to the node that holds the pod CIDR, so every
    /// node host (control plane and workers) must be on one network: the first node host's.
    fn node_subnet(&mut self, hosts: &[HostDraft]) {
        let nodes: Vec<(usize, &HostDraft)> = hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.has(Role::ControlPlane) || h.has(Role::Worker))
            .collect();
        let Some((first, net)) = nodes.iter().find_map(|(i, h)| Some((*i, h.subnet()?))) else {
            return;
        };
        for (i, h) in &nodes {
            let Some(address) = h.address else { continue };
            if !net.contains(&address) {
                self.report(
                    format!("hosts[{i}].address"),
                    format!(
                        "{address} is not in {net}, the network of hosts[{first}]: every control-plane \
                         and worker host must be on one network, since pod traffic is routed from \
                         node to node directly (host-gw)"
                    ),
                );
            }
        }
    }

    /// `kubernetes.images`: a directory of OCI archives, or a registry (the default).
    fn images(&mut self, raw: Option<&super::raw::RawImages>) -> Option<ImageSource> {
        let Some(raw) = raw else {
            return Some(ImageSource::Registry(DEFAULT_IMAGE_REGISTRY.into()));
        };
        match (&raw.dir, &raw.registry) {
            (Some(_), Some(_)) => {
                self.report(
                    "kubernetes.images",
                    "set dir or registry, not both: dir for archives hactl uploads, registry for \
                     one the nodes pull from",
                );
                None
            }
            (None, None) => {
                self.report(
                    "kubernetes.images",
                    "empty: set dir (a directory of OCI archives with images.json) or registry, \
                     or remove the section to pull from registry.k8s.io",
                );
                None
            }
            (Some(dir), None) => {
                let path = self.resolve(dir);
                if path.is_dir() {
                    Some(ImageSource::Dir(path))
                } else {
                    self.report(
                        "kubernetes.images.dir",
                        format!(
                            "{}: no such directory (`scripts/node-images.sh` builds one)",
                            path.display()
                        ),
                    );
                    None
                }
            }
            (None, Some(registry)) => {
                let ok = !registry.is_empty()
                    && !registry.contains("://")
                    && !registry.ends_with('/')
                    && registry
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-._:/".contains(c));
                if ok {
                    Some(ImageSource::Registry(registry.clone()))
                } else {
                    self.report(
                        "kubernetes.images.registry",
                        format!(
                            "{registry:?} is not a registry: write a host and optional path without \
                             a scheme or trailing slash, e.g. registry.k8s.io or mirror.example.com/k8s"
                        ),
                    );
                    None
                }
            }
        }
    }

    fn cidr(&mut self, raw: &str, place: &str, example: &str) -> Option<IpNet> {
        match raw.parse::<IpNet>() {
            Err(_) => {
                self.report(
                    place,
                    format!("{raw:?} is not a CIDR: write ADDRESS/PREFIX, e.g. {example}"),
                );
                None
            }
            Ok(net) if net.trunc() != net => {
                self.report(
                    place,
                    format!(
                        "{raw} has host bits set: write the network address, {}",
                        net.trunc()
                    ),
                );
                None
            }
            Ok(net) => Some(net),
        }
    }

    // ── pki ──────────────────────────────────────────────────────────────────────────────────

    fn pki(&mut self, raw: &super::raw::RawPki) -> Option<PkiSpec> {
        let before = self.problems.len();
        let key_type = match raw.key_type.as_deref() {
            None | Some("ecdsa-p256") => Some(KeyType::EcdsaP256),
            Some("rsa-2048") => Some(KeyType::Rsa2048),
            Some("rsa-4096") => Some(KeyType::Rsa4096),
            Some(other) => {
                self.report(
                    "pki.keyType",
                    format!("unknown key type {other:?}: use ecdsa-p256, rsa-2048 or rsa-4096"),
                );
                None
            }
        };
        let ca = raw.ca_validity_days.unwrap_or(3650);
        let cert = raw.cert_validity_days.unwrap_or(365);
        if ca == 0 {
            self.report(
                "pki.caValidityDays",
                "0 days: use a positive number (default 3650)",
            );
        } else {
            self.in_range(
                "pki.caValidityDays",
                ca,
                1,
                limits::CA_VALIDITY_DAYS,
                "default 3650",
            );
        }
        if cert == 0 {
            self.report(
                "pki.certValidityDays",
                "0 days: use a positive number (default 365)",
            );
        } else if ca != 0 && cert > ca {
            self.report(
                "pki.certValidityDays",
                format!(
                    "{cert} days is longer than caValidityDays ({ca}): a certificate cannot \
                     outlive its CA"
                ),
            );
        }
        let renew = raw.renew_before_days.unwrap_or(super::DEFAULT_RENEW_BEFORE_DAYS);
        if renew == 0 || (cert != 0 && renew >= cert) {
            self.report(
                "pki.renewBeforeDays",
                format!("{renew} days: use a positive number below certValidityDays ({cert}), e.g. 30"),
            );
        }
        if self.problems.len() != before {
            return None;
        }
        Some(PkiSpec {
            key_type: key_type?,
            ca_validity_days: ca,
            cert_validity_days: cert,
            renew_before_days: renew,
        })
    }
}

/// Why the Kubernetes binaries cannot come from `source` in `mode`, or `None` when they can.
/// The one rule `validate` and `plan` share, so the two never disagree: every control-plane and
/// worker host runs a kubelet and kube-proxy (and in systemd mode the server binaries), and no
/// distribution packages them, so `package` is refused in either mode.
pub fn kubernetes_source_refusal(_mode: &KubernetesMode, source: &BinarySource) -> Option<&'static str> {
    match source {
        BinarySource::Package => Some(KUBERNETES_PACKAGE_REFUSAL),
        _ => None,
    }
}

/// What `kubernetes.source: package` is refused with.
pub const KUBERNETES_PACKAGE_REFUSAL: &str = "package is not available: Debian has no kubelet, kube-proxy, \
kube-apiserver, kube-controller-manager or kube-scheduler package; set kubernetes.source to release \
(releaseUrl: the kubernetes-server-linux-amd64.tar.gz of your version, with its sha256) or bundle \
(bundleDir: a directory holding the binaries)";

/// Flags the etcd unit (or its initial env) already sets, with the inventory field that sets each
/// where there is one. etcd takes the last copy of a flag, so an extra one would silently win.
const ETCD_FLAGS_SET: &[(&str, Option<&str>)] = &[
    ("name", None),
    ("data-dir", Some("etcd.dataDir")),
    ("listen-client-urls", Some("etcd.clientPort")),
    ("advertise-client-urls", Some("etcd.clientPort")),
    ("listen-peer-urls", Some("etcd.peerPort")),
    ("initial-advertise-peer-urls", Some("etcd.peerPort")),
    ("listen-metrics-urls", None),
    ("listen-client-http-urls", None),
    ("cert-file", None),
    ("key-file", None),
    ("trusted-ca-file", None),
    ("client-cert-auth", None),
    ("peer-cert-file", None),
    ("peer-key-file", None),
    ("peer-trusted-ca-file", None),
    ("peer-client-cert-auth", None),
    ("peer-cert-allowed-cn", None),
    ("heartbeat-interval", Some("etcd.heartbeatInterval")),
    ("election-timeout", Some("etcd.electionTimeout")),
    ("quota-backend-bytes", Some("etcd.quotaBackendBytes")),
    ("auto-compaction-mode", Some("etcd.autoCompactionRetention")),
    ("auto-compaction-retention", Some("etcd.autoCompactionRetention")),
    ("snapshot-count", None),
    ("strict-reconfig-check", None),
    ("initial-cluster", None),
    ("initial-cluster-state", None),
    ("initial-cluster-token", None),
];

/// Checks one `etcd.extraArgs` entry: a `--name[=value]` flag hactl does not set itself, with a
/// value systemd passes through as written (ExecStart expands `%` and `$`, honours quotes and
/// `;`, splits at whitespace, and a trailing `\` would join the next line of the unit).
fn etcd_extra_arg(arg: &str) -> Result<(), String> {
    let Some(flag) = arg
        .strip_prefix("--")
        .filter(|f| !f.is_empty() && !f.starts_with('-'))
    else {
        return Err(format!("{arg:?} is not a flag: write --name=value"));
    };
    let name = flag.split_once('=').map_or(flag, |(n, _)| n);
    if let Some(c) = arg
        .chars()
        .find(|c| matches!(c, '%' | '$' | '"' | '\'' | '`' | ';') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "{arg:?} holds {c:?}, which systemd's ExecStart would expand, unquote or split: write \
             the value plainly (no %, $, quotes, ;, whitespace or trailing \\)"
        ));
    }
    if arg.ends_with('\\') {
        return Err(format!(
            "{arg:?} ends in a backslash, which would join the next line of the unit: remove it"
        ));
    }
    if let Some((_, field)) = ETCD_FLAGS_SET.iter().find(|(f, _)| *f == name) {
        let instead = field.map_or_else(
            || "hactl manages it".to_string(),
            |field| format!("set {field} instead"),
        );
        return Err(format!(
            "{arg:?}: hactl sets --{name} itself, and etcd would take this later copy silently: \
             remove it ({instead})"
        ));
    }
    Ok(())
}

/// Directories hactl must never create, chown, chmod or move aside on a host, compared after
/// normalising (one trailing `/` dropped; `.`, `..` and empty segments are refused before).
const SYSTEM_DIRS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/lost+found",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/snap",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/lib",
    "/usr/local/sbin",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
    "/var",
    "/var/backups",
    "/var/cache",
    "/var/lib",
    "/var/local",
    "/var/lock",
    "/var/log",
    "/var/mail",
    "/var/opt",
    "/var/run",
    "/var/spool",
    "/var/tmp",
];

/// Trees whose contents are not kept on disk (or not files at all): nothing of etcd's belongs
/// anywhere under them.
const VOLATILE_TREES: &[&str] = &["/dev", "/proc", "/run", "/sys", "/tmp", "/var/run", "/var/tmp"];

/// Checks a directory that hactl creates, chowns, chmods or moves aside on hosts (`etcd.dataDir`,
/// `backup.dir`) and returns it normalised (no trailing `/`); the error is the message to report.
///
/// Strings are not compared raw: `/.`, `/etc/` and `//etc` all name a system directory, so
/// `.`, `..` and empty segments are refused first, and what remains is compared segment-wise.
fn host_dir(dir: &str, example: &str) -> Result<String, String> {
    if !dir.starts_with('/') {
        return Err(format!(
            "{dir:?} is not an absolute path: write one, e.g. {example}"
        ));
    }
    if !dir
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        return Err(format!(
            "{dir:?}: use a plain absolute path (letters, digits, '/', '.', '_', '-'), e.g. {example}"
        ));
    }
    let trimmed = if dir.len() > 1 {
        dir.strip_suffix('/').unwrap_or(dir)
    } else {
        dir
    };
    if trimmed != "/"
        && trimmed[1..]
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(format!(
            "{dir:?} has a '.', '..' or empty segment: write the directory plainly, e.g. {example}"
        ));
    }
    if SYSTEM_DIRS.contains(&trimmed) {
        return Err(format!(
            "{dir:?} is the system directory {trimmed}: hactl creates, chmods and moves this \
             directory aside, so give it one of its own, e.g. {example}"
        ));
    }
    if let Some(tree) = VOLATILE_TREES
        .iter()
        .find(|t| trimmed.strip_prefix(*t).is_some_and(|rest| rest.starts_with('/')))
    {
        return Err(format!(
            "{dir:?} is under {tree}, which does not keep files across reboots (or holds no \
             files at all): use e.g. {example}"
        ));
    }
    Ok(trimmed.to_string())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most `max` characters.
fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// For an address field given a host name: `; `getent hosts NAME` prints what it resolves to
/// here`, so the user can write the address. Empty for a value that is no host name (a typo'd
/// IP, text with spaces), where the hint would mislead.
fn resolve_hint(value: &str) -> String {
    let name = value.trim_end_matches('.').to_ascii_lowercase();
    let is_name = name.split('.').all(|l| is_dns_label(l, 63))
        && name.len() <= 253
        && name.bytes().any(|b| b.is_ascii_lowercase());
    if is_name {
        format!("; `getent hosts {value}` prints what it resolves to here")
    } else {
        String::new()
    }
}

/// `MAJOR.MINOR.PATCH` with an optional leading `v` (and semver pre-release/build parts).
fn parse_version(s: &str) -> Option<semver::Version> {
    semver::Version::parse(s.strip_prefix('v').unwrap_or(s)).ok()
}

/// `http://127.x.y.z[:port]/…`, `http://[::1][:port]/…` or `http://localhost[:port]/…`: a server
/// on this machine.
fn is_loopback_url(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_http_url(s: &str) -> bool {
    let rest = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://"));
    match rest {
        Some(rest) => {
            let host = rest.split('/').next().unwrap_or("");
            !host.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

/// etcd's periodic retention: a bare number of hours, or a Go duration of h/m/s units.
/// etcd's `--auto-compaction-retention` in periodic mode: a bare number of hours, or Go duration
/// terms of `h`, `m`, `s`, `ms`; `None` when it is neither (or too long to count).
fn retention_duration(s: &str) -> Option<Duration> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u64>().ok()?.checked_mul(3600).map(Duration::from_secs);
    }
    let mut rest = s;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, millis) = [("ms", 1), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)]
            .into_iter()
            .find(|(u, _)| rest.starts_with(u))?;
        rest = &rest[unit.len()..];
        total = total.checked_add(Duration::from_millis(n.checked_mul(millis)?))?;
    }
    (!s.is_empty()).then_some(total)
}

/// Why `image` is not an image reference hactl deploys (`None`: it is one): no spaces or
/// scheme, and a tag or a digest named (an image without one would run whatever `latest` is).
pub fn image_reference_problem(image: &str) -> Option<&'static str> {
    if image.contains("://") {
        return Some("has a scheme: write the reference without it");
    }
    if image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("contains white space: write one image reference");
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    let named = image.contains('@')
        || last
            .split_once(':')
            .is_some_and(|(n, t)| !n.is_empty() && !t.is_empty());
    if !named || image.starts_with('/') || image.ends_with('/') {
        return Some("names no tag or digest: pin the image with one");
    }
    None
}

/// The first address of a Service range (the `kubernetes` Service's).
pub fn first_service_ip(net: &IpNet) -> Option<IpAddr> {
    nth_address(net, 1)
}

/// The tenth address of a Service range: the cluster DNS Service's by custom (10.96.0.10).
pub fn default_dns_ip(net: &IpNet) -> Option<IpAddr> {
    nth_address(net, 10)
}

fn nth_address(net: &IpNet, n: u128) -> Option<IpAddr> {
    let ip = match net.network() {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).checked_add(u32::try_from(n).ok()?)?.into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).checked_add(n)?.into()),
    };
    (net.contains(&ip) && ip != net.broadcast()).then_some(ip)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_loopback_mirror_counts_as_this_machine() {
        for url in [
            "http://127.0.0.1:8080/e.tar.gz",
            "http://127.1.2.3/e.tar.gz",
            "http://[::1]:80/e",
            "http://localhost/e",
        ] {
            assert!(is_loopback_url(url), "{url}");
        }
        for url in [
            "https://127.0.0.1/e",
            "http://10.0.0.1/e",
            "http://127.0.0.1.example.com/e",
            "http://[::2]/e",
        ] {
            assert!(!is_loopback_url(url), "{url}");
        }
    }

    use super::*;

    #[test]
    fn a_host_name_in_an_address_field_gets_the_command_that_resolves_it() {
        assert_eq!(
            resolve_hint("cp1.lan"),
            "; `getent hosts cp1.lan` prints what it resolves to here"
        );
        assert_eq!(
            resolve_hint("Jump.Example.com."),
            "; `getent hosts Jump.Example.com.` prints what it resolves to here"
        );
        for not_a_name in [
            "10.0.0.300",
            "10.0.0.1/24",
            "a b",
            "",
            "-x.lan",
            "cp1;reboot",
            "fe80::1%eth0",
        ] {
            assert_eq!(resolve_hint(not_a_name), "", "{not_a_name:?}");
        }
    }

    /// The problems of an inventory with three control planes, a worker at `worker_address` and
    /// `kubernetes` (the section's body) as written.
    fn node_problems(worker_address: &str, kubernetes: &str) -> Vec<String> {
        let yaml = [
            "apiVersion: hactl.io/v1alpha1",
            "kind: Cluster",
            "metadata:",
            "  name: n",
            "spec:",
            "  ssh:",
            "    agent: true",
            "  hosts:",
            "  - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }",
            "  - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }",
            "  - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }",
            &format!("  - {{ name: w1, address: {worker_address}, roles: [worker] }}"),
            "  kubernetes:",
            "    version: 1.20.2",
            "    source: bundle",
            "    bundleDir: /",
            kubernetes,
        ]
        .join("\n");
        match load_str(Path::new("/tmp/n.yaml"), &yaml) {
            Ok(_) => vec![],
            Err(e) => e.problems.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn the_node_fields_are_checked_with_their_places() {
        assert_eq!(node_problems("10.0.0.41", ""), Vec::<String>::new());
        let inv = load_str(
            Path::new("/tmp/n.yaml"),
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: n\nspec:\n  ssh:\n    agent: true\n  hosts:\n  - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }\n  - { name: w1, address: 10.0.0.41, roles: [worker] }\n  allowSingleMember: true\n  kubernetes:\n    version: 1.20.2\n    source: bundle\n    bundleDir: /\n",
        )
        .unwrap();
        let kube = inv.kubernetes.as_ref().unwrap();
        assert_eq!(kube.images, ImageSource::Registry("registry.k8s.io".into()));
        assert_eq!(kube.containerd, BinarySource::Package);
        assert_eq!(kube.cgroup_driver, CgroupDriver::Systemd);
        assert!(kube.eviction_hard.is_empty());
        let names: Vec<&str> = inv.node_hosts().iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["cp1", "w1"]);

        // (a worker's address, the kubernetes section's extra lines) -> the problems
        let table: [(&str, &str, &[&str]); 9] = [
            (
                "10.0.1.41",
                "",
                &["n.yaml: hosts[3].address: 10.0.1.41 is not in 10.0.0.0/24, the network of hosts[0]: every control-plane and worker host must be on one network, since pod traffic is routed from node to node directly (host-gw)"],
            ),
            (
                "10.0.0.41",
                "    images:\n      dir: /\n      registry: r.example.com",
                &["n.yaml: kubernetes.images: set dir or registry, not both: dir for archives hactl uploads, registry for one the nodes pull from"],
            ),
            (
                "10.0.0.41",
                "    images: {}",
                &["n.yaml: kubernetes.images: empty: set dir (a directory of OCI archives with images.json) or registry, or remove the section to pull from registry.k8s.io"],
            ),
            (
                "10.0.0.41",
                "    images:\n      registry: https://r.example.com/",
                &["n.yaml: kubernetes.images.registry: \"https://r.example.com/\" is not a registry: write a host and optional path without a scheme or trailing slash, e.g. registry.k8s.io or mirror.example.com/k8s"],
            ),
            (
                "10.0.0.41",
                "    images:\n      dir: /nonexistent/images",
                &["n.yaml: kubernetes.images.dir: /nonexistent/images: no such directory (`scripts/node-images.sh` builds one)"],
            ),
            (
                "10.0.0.41",
                "    cgroupDriver: docker",
                &["n.yaml: kubernetes.cgroupDriver: unknown cgroup driver \"docker\": use systemd or cgroupfs"],
            ),
            (
                "10.0.0.41",
                "    evictionHard:\n      disk.available: 5%\n      memory.available: lots",
                &[
                    "n.yaml: kubernetes.evictionHard.disk.available: not an eviction signal: use one of memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available",
                    "n.yaml: kubernetes.evictionHard.memory.available: \"lots\" is not a threshold: write a percentage (5%) or a quantity (100Mi)",
                ],
            ),
            (
                "10.0.0.41",
                "    evictionHard: {}",
                &["n.yaml: kubernetes.evictionHard: empty: list every threshold the kubelet should keep (an empty map would turn eviction off), or remove the field for the kubelet's defaults"],
            ),
            (
                "10.0.0.41",
                "    podCidr: 10.244.0.0/25",
                &["n.yaml: kubernetes.podCidr: 10.244.0.0/25 is smaller than the /24 each node gets from it: use a larger range, e.g. a /16"],
            ),
        ];
        for (address, extra, want) in table {
            assert_eq!(node_problems(address, extra), want, "{extra}");
        }
        let bundle = node_problems("10.0.0.41", "    containerd:\n      source: bundle");
        assert_eq!(
            bundle,
            ["n.yaml: kubernetes.containerd.bundleDir: required when source is bundle: the directory holding the binaries"]
        );
    }

    #[test]
    fn the_dns_fields_are_checked_with_their_places() {
        let good = "    dns:\n      image: registry.k8s.io/coredns/coredns:v1.8.0\n";
        assert_eq!(node_problems("10.0.0.41", good), Vec::<String>::new());
        let table: [(&str, &[&str]); 6] = [
            (
                "    dns: {}",
                &["n.yaml: kubernetes.dns.image: required: the CoreDNS image the nodes can pull or that kubernetes.images.dir holds, e.g. registry.k8s.io/coredns/coredns:v1.8.0 (hactl ships none); remove kubernetes.dns for a cluster without DNS"],
            ),
            (
                "    dns:\n      image: coredns/coredns",
                &["n.yaml: kubernetes.dns.image: \"coredns/coredns\" names no tag or digest: pin the image with one, e.g. registry.k8s.io/coredns/coredns:v1.8.0"],
            ),
            (
                "    dns:\n      image: https://r.example/coredns:1.8",
                &["n.yaml: kubernetes.dns.image: \"https://r.example/coredns:1.8\" has a scheme: write the reference without it, e.g. registry.k8s.io/coredns/coredns:v1.8.0"],
            ),
            (
                "    dns:\n      image: r.example:5000/coredns:1.8\n      clusterIp: 10.96.0.1",
                &["n.yaml: kubernetes.dns.clusterIp: 10.96.0.1 is the `kubernetes` Service's address (the first of serviceCidr): pick another, e.g. 10.96.0.10"],
            ),
            (
                "    dns:\n      image: r.example/coredns@sha256:00\n      clusterIp: 10.0.0.53",
                &["n.yaml: kubernetes.dns.clusterIp: 10.0.0.53 is not a Service address of serviceCidr 10.96.0.0/12: pick one inside it"],
            ),
            (
                "    dns:\n      image: r.example/coredns:1.8\n      domain: Cluster.Local\n      replicas: 0",
                &[
                    "n.yaml: kubernetes.dns.domain: \"Cluster.Local\" is not a DNS domain: lower-case labels of letters, digits and '-', joined by dots, e.g. cluster.local",
                    "n.yaml: kubernetes.dns.replicas: 0: run 1 to 10 CoreDNS replicas (2, the default, survives one node)",
                ],
            ),
        ];
        for (extra, want) in table {
            assert_eq!(node_problems("10.0.0.41", extra), want, "{extra}");
        }
        let net: IpNet = "10.96.0.0/12".parse().unwrap();
        assert_eq!(default_dns_ip(&net), Some("10.96.0.10".parse().unwrap()));
        assert_eq!(default_dns_ip(&"10.0.0.0/29".parse().unwrap()), None);
        assert_eq!(
            default_dns_ip(&"fd00::/108".parse().unwrap()),
            Some("fd00::a".parse().unwrap())
        );
    }

    #[test]
    fn kubernetes_package_source_is_refused_in_either_mode() {
        let bundle = BinarySource::Bundle { dir: "/b".into() };
        let release = BinarySource::Release {
            url: "https://example.com/k.tar.gz".into(),
            sha256: Some("ab".repeat(32)),
        };
        let table = [
            (KubernetesMode::Systemd, BinarySource::Package, true),
            (KubernetesMode::Systemd, bundle.clone(), false),
            (KubernetesMode::Systemd, release.clone(), false),
            (KubernetesMode::StaticPod, BinarySource::Package, true),
            (KubernetesMode::StaticPod, bundle, false),
            (KubernetesMode::StaticPod, release, false),
        ];
        for (mode, source, refused) in table {
            assert_eq!(
                kubernetes_source_refusal(&mode, &source).is_some(),
                refused,
                "{mode:?} {source:?}"
            );
        }
    }

    fn with_remote(remote: &str) -> Result<Inventory, InventoryError> {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id");
        std::fs::write(&key, "k").unwrap();
        let mut hosts = String::new();
        for i in 1..=3 {
            hosts.push_str(&format!(
                "    - {{ name: cp{i}, address: 10.0.0.1{i}, roles: [etcd] }}\n"
            ));
        }
        let text = format!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    user: admin\n    keyFile: {}\n  hosts:\n{hosts}  backup:\n    retention: 7\n    remote:\n{remote}",
            key.display()
        );
        load_str(&dir.path().join("c.yaml"), &text)
    }

    #[test]
    fn a_backup_remote_is_validated_like_a_host() {
        let inv = with_remote("      address: 10.0.0.30\n      path: /srv/etcd\n").unwrap();
        let r = inv.backup.remote.unwrap();
        assert_eq!(
            (r.ssh.user.as_str(), r.ssh.port, r.ssh.sudo),
            ("admin", 22, false)
        );
        assert_eq!((r.path.as_str(), r.retention), ("/srv/etcd", 7));
        assert_eq!(r.describe(), "admin@10.0.0.30:/srv/etcd");
        let err = with_remote(
            "      address: backup.example\n      port: 0\n      user: \"-x\"\n      path: relative\n      retention: 0\n      keyFile: /no/such/key\n",
        )
        .unwrap_err()
        .to_string();
        for place in [
            "backup.remote.address",
            "backup.remote.port",
            "backup.remote.user",
            "backup.remote.path",
            "backup.remote.retention",
            "backup.remote.keyFile",
        ] {
            assert!(err.contains(place), "no {place} in:\n{err}");
        }
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("cp1", 63));
        assert!(is_dns_label("a", 63));
        assert!(is_dns_label("lab-01", 40));
        assert!(!is_dns_label("", 63));
        assert!(!is_dns_label("-a", 63));
        assert!(!is_dns_label("a-", 63));
        assert!(!is_dns_label("Cp1", 63));
        assert!(!is_dns_label("cp_1", 63));
        assert!(!is_dns_label("cp.1", 63));
        assert!(is_dns_label(&"a".repeat(40), 40));
        assert!(!is_dns_label(&"a".repeat(41), 40));
    }

    #[test]
    fn versions_accept_a_leading_v_only() {
        assert_eq!(parse_version("3.5.16"), Some(semver::Version::new(3, 5, 16)));
        assert_eq!(parse_version("v1.31.4"), Some(semver::Version::new(1, 31, 4)));
        assert_eq!(parse_version("3.5"), None);
        assert_eq!(parse_version("vv3.5.1"), None);
        assert_eq!(parse_version("latest"), None);
    }

    #[test]
    fn retention_periods() {
        for ok in ["8", "8h", "30m", "1h30m", "90s", "500ms"] {
            assert!(retention_duration(ok).is_some(), "{ok}");
        }
        // Too long to count: refused, not wrapped around.
        for bad in [
            "",
            "h",
            "8d",
            "8 h",
            "1.5h",
            "-1",
            "99999999999999999999",
            "9999999999999999h",
        ] {
            assert!(retention_duration(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn urls() {
        assert!(is_http_url("https://github.com/etcd-io/etcd/releases/x.tar.gz"));
        assert!(is_http_url("http://mirror.lan/etcd.tgz"));
        assert!(!is_http_url("ftp://x/y"));
        assert!(!is_http_url("https:///y"));
        assert!(!is_http_url("https://x/a b"));
    }

    #[test]
    fn problem_display_uses_a_colon_before_positions() {
        let p = |place: &str| Problem {
            file: "lab.yaml".into(),
            place: place.into(),
            message: "m".into(),
        };
        assert_eq!(p("hosts[2].address").to_string(), "lab.yaml: hosts[2].address: m");
        assert_eq!(p("7:3").to_string(), "lab.yaml:7:3: m");
        assert_eq!(p("").to_string(), "lab.yaml: m");
    }

    #[test]
    fn error_display_lists_every_problem_under_a_header() {
        let err = InventoryError {
            file: "lab.yaml".into(),
            problems: vec![
                Problem {
                    file: "lab.yaml".into(),
                    place: "kind".into(),
                    message: "a".into(),
                },
                Problem {
                    file: "lab.yaml".into(),
                    place: "hosts".into(),
                    message: "b".into(),
                },
            ],
        };
        assert_eq!(
            err.to_string(),
            "inventory lab.yaml has 2 problems\n  lab.yaml: kind: a\n  lab.yaml: hosts: b"
        );
    }

    #[test]
    fn a_missing_file_is_one_problem() {
        let err = load(Path::new("/nonexistent/hactl/lab.yaml")).unwrap_err();
        assert_eq!(err.problems.len(), 1);
        assert_eq!(
            err.to_string(),
            "inventory lab.yaml has 1 problem\n  lab.yaml: /nonexistent/hactl/lab.yaml: no such \
             file; `hactl init` writes an example to start from"
        );
    }
}
