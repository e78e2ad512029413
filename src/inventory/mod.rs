//! The cluster inventory: what the user declared, validated.
//!
//! `raw.rs` mirrors the YAML file; `validate.rs` checks it and reports **every** problem at once,
//! each with its place (`lab.yaml: hosts[2].address: duplicate of hosts[0]`). Everything else in
//! hactl takes an [`Inventory`], which is known to be consistent.
//! Invariant: hosts keep the order of the file; every output that lists hosts follows it.

pub mod raw;
pub mod validate;
pub mod versions;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use validate::{load, load_str, InventoryError, Problem};

/// API version this build reads and writes.
pub const API_VERSION: &str = "hactl.io/v1alpha1";
/// The only kind of document.
pub const KIND: &str = "Cluster";

/// A validated inventory.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// The file it was read from (used to resolve relative paths and name the state dir).
    pub source: PathBuf,
    pub name: String,
    pub hosts: Vec<Host>,
    pub vip: Option<Vip>,
    pub load_balancer: LoadBalancerSpec,
    pub etcd: EtcdSpec,
    pub kubernetes: Option<KubernetesSpec>,
    pub pki: PkiSpec,
    /// Absolute state directory for this cluster.
    pub state_dir: PathBuf,
    pub allow_single_member: bool,
    pub heal: HealSpec,
    pub backup: BackupSpec,
}

/// `spec.backup`, validated (see `raw::RawBackup`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackupSpec {
    pub enabled: bool,
    pub interval: std::time::Duration,
    /// As written in the inventory (a systemd time span), for the timer unit.
    pub interval_text: String,
    pub retention: u32,
    pub dir: String,
    /// `spec.backup.remote`, validated.
    pub remote: Option<BackupRemote>,
}

/// Where the leader's backup timer pushes each new snapshot (`spec.backup.remote`).
#[derive(Debug, Clone, PartialEq)]
pub struct BackupRemote {
    /// Reached by hactl as a host is (key verified against the cluster's known_hosts).
    pub ssh: SshSpec,
    /// Absolute directory on the remote host.
    pub path: String,
    pub retention: u32,
}

impl BackupRemote {
    /// `user@address:path`, as messages name it.
    pub fn describe(&self) -> String {
        let host = match self.ssh.address {
            IpAddr::V6(a) => format!("[{a}]"),
            a => a.to_string(),
        };
        format!("{}@{host}:{}", self.ssh.user, self.path)
    }
    /// The remote as a host hactl connects to (no roles; named `backup-remote`).
    pub fn host(&self) -> Host {
        Host {
            name: REMOTE_HOST_NAME.into(),
            address: self.ssh.address,
            prefix_length: if self.ssh.address.is_ipv4() { 32 } else { 128 },
            roles: vec![],
            interface: None,
            ssh: self.ssh.clone(),
        }
    }
}

/// The name the backup remote goes by in connections and messages.
pub const REMOTE_HOST_NAME: &str = "backup-remote";

impl Default for BackupSpec {
    fn default() -> Self {
        BackupSpec {
            enabled: true,
            interval: std::time::Duration::from_secs(3600),
            interval_text: "1h".into(),
            retention: 24,
            dir: "/var/lib/etcd-backups".into(),
            remote: None,
        }
    }
}

/// `spec.heal`, validated (see `raw::RawHeal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealSpec {
    pub max_unhealthy: usize,
    pub max_retry: u32,
    pub retry_period: std::time::Duration,
    pub min_healthy_period: std::time::Duration,
    pub unhealthy_timeout: std::time::Duration,
}

impl Default for HealSpec {
    fn default() -> Self {
        HealSpec {
            max_unhealthy: 1,
            max_retry: 3,
            retry_period: std::time::Duration::from_secs(600),
            min_healthy_period: std::time::Duration::from_secs(3600),
            unhealthy_timeout: std::time::Duration::from_secs(300),
        }
    }
}

/// `30s`, `10m`, `1h30m`, `2d`, `0s` (a bare number is seconds): the grammar of `crate::duration`,
/// shared with the command-line flags.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, crate::duration::DurationError> {
    crate::duration::parse(s)
}

/// What a host does in the cluster. A host may hold several roles, except `worker`, which is a
/// host's only role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Etcd,
    ControlPlane,
    LoadBalancer,
    /// Runs the node components only (kubelet, container runtime, kube-proxy) and ordinary pods.
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Etcd => "etcd",
            Role::ControlPlane => "control-plane",
            Role::LoadBalancer => "load-balancer",
            Role::Worker => "worker",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "etcd" => Some(Role::Etcd),
            "control-plane" => Some(Role::ControlPlane),
            "load-balancer" => Some(Role::LoadBalancer),
            "worker" => Some(Role::Worker),
            _ => None,
        }
    }
}

/// One machine, reached over SSH.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
    pub address: IpAddr,
    pub prefix_length: u8,
    pub roles: Vec<Role>,
    pub interface: Option<String>,
    pub ssh: SshSpec,
}

impl Host {
    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
    /// Whether the host runs the node components when the inventory has a kubernetes section
    /// (control-plane hosts and workers; see [`Inventory::node_hosts`]).
    pub fn is_node(&self) -> bool {
        self.has(Role::ControlPlane) || self.has(Role::Worker)
    }
    /// `address` as it appears in a URL (IPv6 in brackets).
    pub fn url_host(&self) -> String {
        match self.address {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => format!("[{a}]"),
        }
    }
}

/// How to reach a host (or a bastion) over SSH, after defaults were applied.
#[derive(Debug, Clone, PartialEq)]
pub struct SshSpec {
    pub address: IpAddr,
    pub port: u16,
    pub user: String,
    pub auth: SshAuth,
    /// Prefix every command with `sudo -n --`.
    pub sudo: bool,
    pub bastion: Option<Box<SshSpec>>,
    pub connect_timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SshAuth {
    /// A private key file (absolute path).
    KeyFile(PathBuf),
    /// The keys of the running ssh-agent.
    Agent,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Vip {
    pub address: IpAddr,
    pub router_id: u8,
    /// VRRP advertisement interval (`vip.advertInterval`), a multiple of 10 ms.
    pub advert_interval: std::time::Duration,
}

/// The default VRRP advertisement interval: a backup takes over about 3 intervals (plus a skew
/// under one interval) after the holder falls silent, so about 1.1 s; far enough above what a
/// busy host's scheduler delays keepalived by to not move the VIP for nothing.
pub const DEFAULT_ADVERT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(300);

/// `spec.loadBalancer`, validated (see `raw::RawLoadBalancer`).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancerSpec {
    /// HAProxy's `inter`: between checks of a server that is up.
    pub check_interval: std::time::Duration,
    pub fall: u32,
    pub rise: u32,
    /// HAProxy's `timeout connect`, and the connect part of a health check.
    pub connect_timeout: std::time::Duration,
    /// HAProxy's `timeout check`: how long a connected server may take to answer a health check.
    /// Apart from `connect_timeout`: a dead host is still found within `connect_timeout`, while a
    /// live apiserver busy for a second is not marked down, which would send its clients
    /// elsewhere (and cut every session open to an etcd member: `on-marked-down
    /// shutdown-sessions`).
    pub check_timeout: std::time::Duration,
}

impl Default for LoadBalancerSpec {
    /// A server that stops answering is marked down by the first failed client connection
    /// (`observe layer4`) or after `fall` checks; a client's connection that fails is retried on
    /// another server after at most `connect_timeout`, well under the 2 s an outage may last.
    fn default() -> Self {
        LoadBalancerSpec {
            check_interval: std::time::Duration::from_secs(1),
            fall: 2,
            rise: 2,
            connect_timeout: std::time::Duration::from_secs(1),
            check_timeout: std::time::Duration::from_secs(3),
        }
    }
}

/// Where a component's binaries come from.
#[derive(Debug, Clone, PartialEq)]
pub enum BinarySource {
    Package,
    /// `sha256: None` (an https:// URL only): the checksum published beside the tarball,
    /// `<url>.sha256`, is fetched over HTTPS and the tarball checked against it.
    Release {
        url: String,
        sha256: Option<String>,
    },
    Bundle {
        dir: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct EtcdSpec {
    pub version: Option<semver::Version>,
    pub source: BinarySource,
    pub data_dir: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub heartbeat_interval_ms: u32,
    pub election_timeout_ms: u32,
    pub quota_backend_bytes: u64,
    pub auto_compaction_retention: String,
    pub extra_args: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesMode {
    Systemd,
    StaticPod,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesSpec {
    pub version: semver::Version,
    pub source: BinarySource,
    pub service_cidr: ipnet::IpNet,
    pub pod_cidr: ipnet::IpNet,
    pub mode: KubernetesMode,
    /// Where the nodes' images come from (`kubernetes.images`).
    pub images: ImageSource,
    /// containerd, runc and the CNI plugins (`kubernetes.containerd`).
    pub containerd: BinarySource,
    /// The kubelet's and containerd's cgroup driver (`kubernetes.cgroupDriver`).
    pub cgroup_driver: CgroupDriver,
    /// The kubelet's hard eviction thresholds (`kubernetes.evictionHard`); empty: its defaults.
    pub eviction_hard: std::collections::BTreeMap<String, String>,
    /// Cluster DNS (`kubernetes.dns`); `None`: the cluster has none.
    pub dns: Option<DnsSpec>,
}

/// `kubernetes.dns`: the CoreDNS hactl deploys (docs/reference/kubernetes.md, "Cluster DNS").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSpec {
    /// The image the kubelets run (pulled, or imported from `kubernetes.images.dir`).
    pub image: String,
    /// The `kube-dns` Service address, the kubelets' `clusterDNS`.
    pub cluster_ip: std::net::IpAddr,
    /// The cluster's DNS domain, the kubelets' `clusterDomain`.
    pub domain: String,
    pub replicas: u32,
}

/// The cluster domain when `kubernetes.dns` names none (or there is no DNS).
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// The kubelet's eviction signals `kubernetes.evictionHard` may name.
pub const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

/// Where the nodes' container images come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// OCI archives and `images.json` in a directory on the operator machine: uploaded to each
    /// node, imported into containerd and checked against their digests.
    Dir(PathBuf),
    /// A registry or mirror the nodes pull from (`registry.k8s.io`, `mirror.example.com/k8s`).
    Registry(String),
}

/// The registry nodes pull from when the inventory names no image source.
pub const DEFAULT_IMAGE_REGISTRY: &str = "registry.k8s.io";

/// The cgroup driver of the kubelet and containerd (they must agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// systemd manages the pods' cgroups (what a host whose init is systemd should use).
    Systemd,
    /// The kubelet and runc write the cgroup hierarchies themselves (the lab: systemd-nspawn
    /// hosts on cgroup v1, where the hosts' systemd cannot manage controllers).
    Cgroupfs,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Systemd => "systemd",
            CgroupDriver::Cgroupfs => "cgroupfs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    EcdsaP256,
    Rsa2048,
    Rsa4096,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PkiSpec {
    pub key_type: KeyType,
    pub ca_validity_days: u32,
    pub cert_validity_days: u32,
    /// Leaves are re-issued, and `status` warns, this many days before they expire.
    pub renew_before_days: u32,
}

/// `spec.pki.renewBeforeDays` when the inventory leaves it out. A leaf is renewed, and a CA warned
/// about, when it expires within this many days, or within a third of its lifetime when that is
/// shorter (so short-lived certificates are not re-issued on every run: `pki::renewal_window`).
pub const DEFAULT_RENEW_BEFORE_DAYS: u32 = 30;

impl Inventory {
    /// Hosts holding `role`, in inventory order.
    pub fn with_role(&self, role: Role) -> Vec<&Host> {
        self.hosts.iter().filter(|h| h.has(role)).collect()
    }
    /// The hosts that run the node components (kubelet, containerd, kube-proxy): every
    /// control-plane host and every worker, in inventory order, when the inventory has a
    /// kubernetes section; none otherwise.
    pub fn node_hosts(&self) -> Vec<&Host> {
        if self.kubernetes.is_none() {
            return vec![];
        }
        self.hosts.iter().filter(|h| h.is_node()).collect()
    }
    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
    /// The inventory file's directory, against which relative paths resolve.
    pub fn base_dir(&self) -> &Path {
        self.source.parent().unwrap_or_else(|| Path::new("."))
    }
}
