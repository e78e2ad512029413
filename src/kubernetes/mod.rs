//! The Kubernetes control plane on the control-plane hosts: kube-apiserver, kube-controller-manager
//! and kube-scheduler, as systemd units (default) or static-pod manifests, wired to the etcd
//! cluster and the PKI.
//!
//! Invariants:
//! - every remote path hactl writes for Kubernetes is a constant here (fixed paths, so a dry run
//!   prints exactly what a live run writes);
//! - the flags of a component are built once ([`files::flags`]) and rendered into both the unit and
//!   the static-pod manifest, so the two modes cannot drift apart;
//! - nothing here opens a connection, except [`status`], which only reads, [`api`], the
//!   client maintenance and heal drive the API with ([`drain`] decides what it does, purely), and
//!   [`rbac`], which creates the one ClusterRoleBinding `up` keeps, and [`dns`], which reads the
//!   cluster DNS objects for planning (`up` applies them as planned API requests).

pub mod api;
pub mod bundle;
pub mod dns;
pub mod drain;
pub mod files;
pub mod gates;
pub mod handover;
pub mod inputs;
pub mod lease;
pub mod node;
pub mod objects;
pub mod probe;
pub mod published_ca;
pub mod rbac;
pub mod secrets;
pub mod skew;
pub mod status;

use crate::inventory::{Inventory, KubernetesSpec, Role};

/// Certificates and keys the Kubernetes components read (Kubernetes CA, apiserver, SA keys …).
pub const PKI_DIR: &str = "/etc/hactl/pki/kubernetes";
/// The front-proxy CA and client certificate (aggregation layer).
pub const FRONT_PROXY_DIR: &str = "/etc/hactl/pki/front-proxy";
/// kube-apiserver's etcd client: the etcd CA and the `kube-apiserver-etcd-client` certificate.
/// Separate from `/etc/hactl/pki/etcd` so control-plane hosts that are not etcd hosts work too.
pub const ETCD_CLIENT_DIR: &str = "/etc/hactl/pki/apiserver-etcd";
/// Kubeconfigs, the encryption configuration and the audit policy.
pub const CONFIG_DIR: &str = "/etc/hactl/kubernetes";
/// Where a kubelet looks for static pods (`kubernetes.mode: static-pod`).
pub const MANIFEST_DIR: &str = "/etc/kubernetes/manifests";
/// The audit log (its directory is created by systemd's `LogsDirectory=` or the pod's hostPath).
pub const AUDIT_LOG_DIR: &str = "/var/log/kubernetes";
/// Where release or bundle binaries are installed.
pub const BIN_DIR: &str = "/usr/local/bin";
/// The apiserver's secure port on every control-plane host (and on the VIP).
pub const API_PORT: u16 = 6443;
/// kube-controller-manager's and kube-scheduler's secure ports (bound to 127.0.0.1).
pub const CONTROLLER_MANAGER_PORT: u16 = 10257;
pub const SCHEDULER_PORT: u16 = 10259;

/// One control-plane component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Component {
    pub const ALL: [Component; 3] = [
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ];
    /// The binary, unit stem and static-pod name: `kube-apiserver`, …
    pub fn binary(self) -> &'static str {
        match self {
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }
    pub fn unit(self) -> String {
        format!("{}.service", self.binary())
    }
    pub fn unit_path(self) -> String {
        format!("/etc/systemd/system/{}.service", self.binary())
    }
    pub fn manifest_path(self) -> String {
        format!("{MANIFEST_DIR}/{}.yaml", self.binary())
    }
    pub fn binary_path(self) -> String {
        format!("{BIN_DIR}/{}", self.binary())
    }
}

/// Read-only shell condition, static-pod mode: no manifest of `components` is in the kubelet's
/// directory and no process of theirs runs on the host (a static pod's process is the host's to
/// see, with or without crictl). The one check that the kubelet stopped them, for every step
/// that moves manifests aside (replace, recover, maintenance).
pub fn static_pods_gone(components: &[Component]) -> String {
    if components.is_empty() {
        return "true".to_string();
    }
    let manifests: Vec<String> = components
        .iter()
        .map(|c| format!("[ ! -e {} ]", c.manifest_path()))
        .collect();
    format!(
        "{} && ! pgrep -f '{}' >/dev/null",
        manifests.join(" && "),
        process_pattern(components)
    )
}

/// The extended regular expression (`pgrep -f`) matching the command line of a process of
/// `components`, run as a unit or in a static pod's container.
fn process_pattern(components: &[Component]) -> String {
    let names: Vec<&str> = components.iter().map(|c| c.binary()).collect();
    format!("^(/usr/local/bin/)?({})( |$)", names.join("|"))
}

/// The inventory's Kubernetes section when this host runs the control plane.
pub fn spec_for<'a>(inv: &'a Inventory, host: &crate::inventory::Host) -> Option<&'a KubernetesSpec> {
    inv.kubernetes.as_ref().filter(|_| host.has(Role::ControlPlane))
}

/// Every path a control-plane host holds for hactl's Kubernetes layer, for the facts probe.
pub fn managed_paths(spec: &KubernetesSpec) -> Vec<String> {
    let mut paths: Vec<String> = files::REMOTE_FILES.iter().map(|p| p.to_string()).collect();
    for c in Component::ALL {
        match spec.mode {
            crate::inventory::KubernetesMode::Systemd => {
                paths.push(c.unit_path());
                paths.push(c.binary_path());
            }
            crate::inventory::KubernetesMode::StaticPod => {}
        }
        // In either mode: a manifest in systemd mode is a host to switch (phases::switch_mode).
        paths.push(c.manifest_path());
    }
    // A bundle's kubectl is uploaded too: without its hash in the facts every `up` would plan it.
    if spec.mode == crate::inventory::KubernetesMode::Systemd {
        paths.extend(OPTIONAL_BINARIES.iter().map(|b| format!("{BIN_DIR}/{b}")));
    }
    paths
}

/// What the Kubernetes phases need beyond the inventory, the PKI and the facts; read on the
/// operator machine by [`inputs::prepare`].
#[derive(Debug, Clone)]
pub struct KubernetesInputs {
    /// The control-plane binaries (and a bundle's kubectl) as uploads to [`BIN_DIR`] (hashed
    /// once); empty in static-pod mode.
    pub binaries: Vec<crate::plan::Upload>,
    /// The kubelet and kube-proxy as uploads to [`BIN_DIR`], for every node host.
    pub node_binaries: Vec<crate::plan::Upload>,
    /// containerd, its shim, ctr, runc and the CNI plugins from a release or bundle, as uploads
    /// to where [`node::containerd_binaries`] puts them; empty for packages.
    pub containerd_binaries: Vec<crate::plan::Upload>,
    /// The images of `kubernetes.images.dir`, read and checked on the operator machine; `None`
    /// for a registry (whose references need nothing from disk: [`node::node_images`]).
    pub images: Option<node::NodeImages>,
    /// The key Secrets are encrypted with at rest.
    pub encryption_key: secrets::EncryptionKey,
}

/// The binaries a systemd-mode control plane needs, and the ones taken when present.
pub const WANTED_BINARIES: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];
pub const OPTIONAL_BINARIES: [&str; 1] = ["kubectl"];
/// The binaries every node host (control plane or worker) runs, in either mode.
pub const NODE_BINARIES: [&str; 2] = ["kubelet", "kube-proxy"];

/// The binaries a bundle or release must hold in `mode`: the node binaries, and in systemd mode
/// the control plane's.
pub fn wanted_binaries(mode: crate::inventory::KubernetesMode) -> Vec<&'static str> {
    let mut wanted = NODE_BINARIES.to_vec();
    if mode == crate::inventory::KubernetesMode::Systemd {
        wanted.extend(WANTED_BINARIES);
    }
    wanted
}

impl KubernetesInputs {
    /// The inputs of `binaries` (node binaries taken apart from the control plane's) and the
    /// encryption key; no containerd binaries and no image set (see [`Self::with_node`]).
    pub fn new(
        binaries: Option<&crate::binaries::LocalBinaries>,
        encryption_key: secrets::EncryptionKey,
    ) -> Self {
        let upload = |name: &str, blob: &crate::plan::Blob| {
            crate::plan::Upload::of(format!("{BIN_DIR}/{name}"), 0o755, "root", "root", blob)
        };
        let files: Vec<&(String, crate::plan::Blob)> = binaries.iter().flat_map(|b| &b.files).collect();
        KubernetesInputs {
            binaries: files
                .iter()
                .filter(|(n, _)| !NODE_BINARIES.contains(&n.as_str()))
                .map(|(n, c)| upload(n, c))
                .collect(),
            node_binaries: files
                .iter()
                .filter(|(n, _)| NODE_BINARIES.contains(&n.as_str()))
                .map(|(n, c)| upload(n, c))
                .collect(),
            containerd_binaries: vec![],
            images: None,
            encryption_key,
        }
    }

    /// With containerd's release or bundle binaries and the image set of an image directory.
    pub fn with_node(
        mut self,
        containerd: Option<&crate::binaries::LocalBinaries>,
        images: Option<node::NodeImages>,
    ) -> Self {
        let places = node::containerd_binaries();
        self.containerd_binaries = containerd
            .iter()
            .flat_map(|b| &b.files)
            .filter_map(|(name, blob)| {
                let (_, path) = places.iter().find(|(n, _)| n == name)?;
                Some(crate::plan::Upload::of(*path, 0o755, "root", "root", blob))
            })
            .collect();
        self.images = images;
        self
    }
}

/// Why the Kubernetes layer cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum KubernetesPlanError {
    /// The rule `validate` applies too ([`crate::inventory::validate::kubernetes_source_refusal`]):
    /// only an inventory built in code, not read from a file, reaches the plan with it.
    #[error(
        "kubernetes.source: {}",
        crate::inventory::validate::KUBERNETES_PACKAGE_REFUSAL
    )]
    PackageSource,
    #[error("the version skew rules refuse this rollout, nothing was changed:\n{}", .0.iter().map(|v| format!("  - {v}")).collect::<Vec<_>>().join("\n"))]
    Skew(Vec<String>),
    #[error(
        "the PKI holds no {0} certificate although the inventory has a kubernetes section (a bug in hactl)"
    )]
    MissingCertificate(String),
    #[error("the Kubernetes inputs (binaries, encryption key) were not prepared (a bug in hactl)")]
    MissingInputs,
    #[error(transparent)]
    Render(#[from] crate::render::RenderError),
}

impl KubernetesPlanError {
    /// A safety rule said no (as opposed to a bug).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            KubernetesPlanError::PackageSource | KubernetesPlanError::Skew(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command lines `grep -E` (the regex dialect of `pgrep -f`) selects among `lines`.
    fn matching(pattern: &str, lines: &[&str]) -> Vec<String> {
        // grep exits 1 when nothing matched: the output tells.
        let (_, out) =
            crate::local_command::sh_with_input("grep -E \"$1\"", &[pattern], lines.join("\n").as_bytes());
        out.lines().map(str::to_string).collect()
    }

    #[test]
    fn static_pods_gone_looks_for_each_components_manifest_and_process_only() {
        let lines = [
            "kube-apiserver --advertise-address=10.0.0.11",
            "/usr/local/bin/kube-scheduler --config=/etc/kubernetes/scheduler.yaml",
            "kube-controller-manager",
            "/usr/bin/kube-apiserver-proxy",
            "tail -f /var/log/kube-apiserver.log",
            "kube-apiserverx --flag",
        ];
        assert_eq!(
            matching(&process_pattern(&Component::ALL), &lines),
            [lines[0], lines[1], lines[2]]
        );
        assert_eq!(
            matching(&process_pattern(&[Component::Scheduler]), &lines),
            [lines[1]]
        );
        let gone = static_pods_gone(&[Component::ApiServer, Component::Scheduler]);
        assert!(gone.starts_with(
            "[ ! -e /etc/kubernetes/manifests/kube-apiserver.yaml ] && [ ! -e /etc/kubernetes/manifests/kube-scheduler.yaml ] && ! pgrep -f "
        ), "{gone}");
        assert!(!gone.contains("controller-manager"), "{gone}");
        assert_eq!(static_pods_gone(&[]), "true");
    }
}
