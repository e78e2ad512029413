//! The serde mirror of the inventory file, exactly as written by the user.
//!
//! Invariant: every struct here denies unknown fields, and nothing here is trusted: `validate.rs`
//! turns a [`RawInventory`] into an [`crate::inventory::Inventory`] or a list of every problem.
//! docs/reference/inventory.md has an entry for every field here (tests/doc_commands.rs checks it).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The whole file: `apiVersion: hactl.io/v1alpha1`, `kind: Cluster`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawInventory {
    pub api_version: String,
    pub kind: String,
    pub metadata: RawMetadata,
    pub spec: RawSpec,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawMetadata {
    /// Cluster name: `[a-z0-9-]`, at most 40 characters. Names the state directory.
    pub name: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSpec {
    /// SSH settings every host inherits unless it overrides them.
    #[serde(default)]
    pub ssh: RawSsh,
    pub hosts: Vec<RawHost>,
    /// The floating address of the control plane, held by one load-balancer host at a time.
    #[serde(default)]
    pub vip: Option<RawVip>,
    /// HAProxy tuning on the load-balancer hosts (defaults chosen for a LAN; see the field docs).
    #[serde(default)]
    pub load_balancer: RawLoadBalancer,
    #[serde(default)]
    pub etcd: RawEtcd,
    #[serde(default)]
    pub kubernetes: Option<RawKubernetes>,
    #[serde(default)]
    pub pki: RawPki,
    /// Where hactl keeps this cluster's state on the operator machine; default `.hactl/<name>/`
    /// next to the inventory file. Relative paths are relative to the inventory file.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// A single etcd member is refused unless this is true (development only).
    #[serde(default)]
    pub allow_single_member: bool,
    /// Automatic repair of etcd members by `hactl heal` (docs/recovery.md, "Replace and heal (P0–P10)").
    #[serde(default)]
    pub heal: RawHeal,
    /// Scheduled snapshots on every etcd host (a systemd timer), see `hactl status`.
    #[serde(default)]
    pub backup: RawBackup,
}

/// `spec.backup`: the local snapshot timer on every etcd host.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBackup {
    /// Install and run the timer (default true); `false` disables the timer, keeps the files.
    pub enabled: Option<bool>,
    /// Time between two snapshots, a systemd time span like `30m` or `1h` (default 1h).
    pub interval: Option<String>,
    /// Snapshots kept per host, newest first (default 24).
    pub retention: Option<u32>,
    /// Absolute directory on the hosts (default `/var/lib/etcd-backups`).
    pub dir: Option<String>,
    /// An SSH/SFTP destination the leader pushes each new snapshot (and its checksum) to.
    #[serde(default)]
    pub remote: Option<RawBackupRemote>,
}

/// `spec.backup.remote`: reached like an inventory host (an IP literal, a pinned host key), with
/// the operator's key for setting it up and a key of its own for the hosts' pushes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBackupRemote {
    /// An IPv4 or IPv6 literal.
    pub address: String,
    /// SSH port (default 22).
    pub port: Option<u16>,
    /// The account the snapshots are written as (default: `spec.ssh.user`, else root).
    pub user: Option<String>,
    /// The operator's private key for that account (default: `spec.ssh.keyFile`).
    pub key_file: Option<PathBuf>,
    /// Absolute directory on the remote host.
    pub path: String,
    /// Snapshots kept there, newest first (default: `backup.retention`).
    pub retention: Option<u32>,
}

/// `spec.heal`: limits of automatic remediation; durations like `30s`, `10m`, `1h`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHeal {
    /// Most members heal repairs at once, counted over the whole cluster (default 1).
    pub max_unhealthy: Option<usize>,
    /// Failed remediations of one member within `minHealthyPeriod` before heal refuses (default 3).
    pub max_retry: Option<u32>,
    /// Least time between two remediations of one member (default 10m).
    pub retry_period: Option<String>,
    /// A member healthy this long has its retry count reset (default 1h).
    pub min_healthy_period: Option<String>,
    /// How long a member must look unhealthy, from two vantage points, before heal acts (default 5m).
    pub unhealthy_timeout: Option<String>,
}

/// SSH settings; every field is optional so hosts can override only what differs.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSsh {
    pub user: Option<String>,
    pub port: Option<u16>,
    /// A private key file; relative paths are relative to the inventory file.
    pub key_file: Option<PathBuf>,
    /// Use the keys of the running ssh-agent (`SSH_AUTH_SOCK`).
    pub agent: Option<bool>,
    /// Prefix commands with `sudo -n` (default: true when the user is not root).
    pub sudo: Option<bool>,
    /// A jump host reached first; the host is then reached through it.
    pub bastion: Option<RawBastion>,
    /// Seconds to wait for a connection (default 10).
    pub connect_timeout: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawBastion {
    pub address: String,
    pub port: Option<u16>,
    pub user: Option<String>,
    pub key_file: Option<PathBuf>,
    pub agent: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHost {
    /// Host name: also the etcd member name and the Kubernetes node name.
    pub name: String,
    /// An IPv4 or IPv6 literal; etcd peer and client URLs use it.
    pub address: String,
    /// Prefix length of the host's subnet (default 24 for IPv4, 64 for IPv6).
    #[serde(default)]
    pub prefix_length: Option<u8>,
    /// `etcd`, `control-plane`, `load-balancer`; a host may hold several, or none (a spare).
    /// `worker` (a host that runs only the node components) is a host's only role.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Network interface that carries `address` (keepalived binds the VIP there); default: detected.
    #[serde(default)]
    pub interface: Option<String>,
    #[serde(default)]
    pub ssh: RawSsh,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawVip {
    pub address: String,
    /// keepalived virtual_router_id, 1..=255 (default 51).
    #[serde(default)]
    pub router_id: Option<u8>,
    /// VRRP advertisement interval, a duration from 100ms to 10s in steps of 10ms (default
    /// 300ms): a backup takes the VIP over about 3 intervals after the holder falls silent.
    #[serde(default)]
    pub advert_interval: Option<String>,
}

/// `spec.loadBalancer`: HAProxy's health checks and connection handling on the load balancers.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLoadBalancer {
    /// Time between health checks of a server that is up, 100ms to 60s (default 1s).
    #[serde(default)]
    pub check_interval: Option<String>,
    /// Failed checks that mark a server down, 1 to 10 (default 2).
    #[serde(default)]
    pub fall: Option<u32>,
    /// Good checks that bring a server back, 1 to 10 (default 2).
    #[serde(default)]
    pub rise: Option<u32>,
    /// How long a connection to a server may take before HAProxy tries another, 100ms to 30s
    /// (default 1s).
    #[serde(default)]
    pub connect_timeout: Option<String>,
    /// How long a server may take to answer a health check once connected, 100ms to 60s
    /// (default 3s).
    #[serde(default)]
    pub check_timeout: Option<String>,
}

/// Where a component's binaries come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RawSourceKind {
    /// The distribution's package, installed with apt-get (what the lab uses).
    #[default]
    Package,
    /// An official release tarball at `releaseUrl`, checked against `sha256` before use.
    Release,
    /// A directory of binaries on the operator machine (`bundleDir`).
    Bundle,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEtcd {
    /// Expected etcd version, `MAJOR.MINOR.PATCH` (for `package`, what the package must provide).
    pub version: Option<String>,
    #[serde(default)]
    pub source: RawSourceKind,
    pub release_url: Option<String>,
    pub sha256: Option<String>,
    pub bundle_dir: Option<PathBuf>,
    /// Absolute data directory (default `/var/lib/etcd`).
    pub data_dir: Option<String>,
    /// Client port (default 2379) and peer port (default 2380).
    pub client_port: Option<u16>,
    pub peer_port: Option<u16>,
    /// Milliseconds (defaults 100 and 1000).
    pub heartbeat_interval: Option<u32>,
    pub election_timeout: Option<u32>,
    /// Backend quota in bytes (default 8 GiB).
    pub quota_backend_bytes: Option<u64>,
    /// Auto-compaction retention, e.g. `8h` (periodic mode).
    pub auto_compaction_retention: Option<String>,
    /// Extra flags appended to the etcd command line, `--name=value` strings.
    #[serde(default)]
    pub extra_args: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawKubernetes {
    /// Kubernetes version, `MAJOR.MINOR.PATCH`.
    pub version: Option<String>,
    #[serde(default)]
    pub source: RawSourceKind,
    pub release_url: Option<String>,
    pub sha256: Option<String>,
    pub bundle_dir: Option<PathBuf>,
    /// Service CIDR (default 10.96.0.0/12); its first address is the `kubernetes` Service IP.
    pub service_cidr: Option<String>,
    /// Pod CIDR for the controller-manager (default 10.244.0.0/16).
    pub pod_cidr: Option<String>,
    /// `systemd` (default) or `static-pod`.
    pub mode: Option<String>,
    /// Where the nodes' container images come from (the pause image; in static-pod mode the
    /// control-plane images): a directory of OCI archives or a registry (default: a registry,
    /// `registry.k8s.io`).
    #[serde(default)]
    pub images: Option<RawImages>,
    /// containerd and runc (with the CNI reference plugins) on every node host.
    #[serde(default)]
    pub containerd: RawContainerd,
    /// The kubelet's and containerd's cgroup driver: `systemd` (default) or `cgroupfs`.
    pub cgroup_driver: Option<String>,
    /// The kubelet's hard eviction thresholds, signal → threshold (`imagefs.available: 5%`);
    /// replaces the kubelet's defaults as a whole (default: the kubelet's own).
    #[serde(default)]
    pub eviction_hard: Option<std::collections::BTreeMap<String, String>>,
    /// Cluster DNS (CoreDNS), deployed only when this names its image.
    pub dns: Option<RawDns>,
}

/// `kubernetes.dns`: CoreDNS, from an image the inventory names (hactl ships none).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDns {
    /// The CoreDNS image with a tag or digest, e.g. `registry.k8s.io/coredns/coredns:v1.8.0`.
    pub image: Option<String>,
    /// The `kube-dns` Service address (default: the tenth address of serviceCidr).
    pub cluster_ip: Option<String>,
    /// The cluster's DNS domain (default `cluster.local`).
    pub domain: Option<String>,
    /// CoreDNS replicas (default 2).
    pub replicas: Option<u32>,
}

/// `kubernetes.images`: set exactly one of `dir` and `registry`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawImages {
    /// A directory on the operator machine holding OCI image archives and their `images.json`
    /// (what `scripts/node-images.sh` writes); hactl uploads and imports them on every node.
    pub dir: Option<PathBuf>,
    /// A registry (or mirror) the nodes pull from, e.g. `registry.k8s.io` or
    /// `mirror.example.com/k8s`.
    pub registry: Option<String>,
}

/// `kubernetes.containerd`: where containerd, runc and the CNI plugins come from.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawContainerd {
    /// `package` (default: the distribution's containerd, runc and CNI plugins), `release` or
    /// `bundle`.
    #[serde(default)]
    pub source: RawSourceKind,
    /// A tarball holding containerd, containerd-shim-runc-v2, ctr, runc and the CNI plugins
    /// bridge, host-local, loopback and portmap (containerd's `cri-containerd-cni` release).
    pub release_url: Option<String>,
    pub sha256: Option<String>,
    /// A directory on the operator machine holding those eight binaries and a `SHA256SUMS`
    /// file that lists each of them.
    pub bundle_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPki {
    /// `ecdsa-p256` (default), `rsa-2048`, `rsa-4096`.
    pub key_type: Option<String>,
    /// Validity in days: CAs (default 3650) and leaf certificates (default 365).
    pub ca_validity_days: Option<u32>,
    pub cert_validity_days: Option<u32>,
    /// Leaves are re-issued by `up`, and `status` warns, this many days before they expire
    /// (default 30; a third of the lifetime when that is shorter).
    pub renew_before_days: Option<u32>,
}
