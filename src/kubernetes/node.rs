//! The node components on every control-plane and worker host: containerd (with runc and the CNI
//! reference plugins), the kubelet, kube-proxy and the pod network (a bridge per node, each
//! node's pod CIDR routed to it by the other nodes: host-gw), rendered from the inventory, the
//! PKI, the facts of the host and the pod CIDRs the controller-manager allocated.
//!
//! Invariants:
//! - every remote path is a constant here (fixed paths: a dry run names exactly what a run writes);
//! - pure and deterministic: the same inventory, PKI and facts give byte-identical files, so a
//!   second `hactl up` plans nothing;
//! - the pod network is only rendered from pod CIDRs the API reported (read by each host's facts
//!   with its kubelet's credentials): a Node not registered yet, or an API that did not answer,
//!   leaves the network files as they are, never empties them.
//!
//! Identity: hactl issues each kubelet's client certificate (`system:node:<host>` in
//! `system:nodes`) and serving certificate from the Kubernetes CA itself, and kube-proxy's
//! (`system:kube-proxy`); see docs/reference/kubernetes.md ("Nodes") for why not TLS bootstrap.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

use super::files::{self as cp, CA_CRT, TLS_CIPHER_SUITES, TLS_MIN_VERSION};
use super::files::{cert, key};
use super::{KubernetesPlanError, MANIFEST_DIR};
use crate::facts::{ConntrackMax, HostFacts, NodeQuery};
use crate::inventory::{BinarySource, CgroupDriver, Host, ImageSource, Inventory, KubernetesSpec, Role};
use crate::pki::Pki;
use crate::plan::Upload;
use crate::render;

// Remote paths, one constant each.
pub const KUBELET_BIN: &str = "/usr/local/bin/kubelet";
pub const KUBE_PROXY_BIN: &str = "/usr/local/bin/kube-proxy";
pub const KUBELET_CLIENT_CRT: &str = "/etc/hactl/pki/kubelet/client.crt";
pub const KUBELET_CLIENT_KEY: &str = "/etc/hactl/pki/kubelet/client.key";
pub const KUBELET_SERVING_CRT: &str = "/etc/hactl/pki/kubelet/serving.crt";
pub const KUBELET_SERVING_KEY: &str = "/etc/hactl/pki/kubelet/serving.key";
pub const KUBE_PROXY_CRT: &str = "/etc/hactl/pki/kube-proxy/client.crt";
pub const KUBE_PROXY_KEY: &str = "/etc/hactl/pki/kube-proxy/client.key";
pub const KUBELET_KUBECONFIG: &str = "/etc/hactl/kubernetes/kubelet.kubeconfig";
pub const KUBELET_CONFIG: &str = "/etc/hactl/kubernetes/kubelet-config.yaml";
pub const KUBE_PROXY_KUBECONFIG: &str = "/etc/hactl/kubernetes/kube-proxy.kubeconfig";
pub const KUBELET_UNIT: &str = "kubelet.service";
pub const KUBELET_UNIT_PATH: &str = "/etc/systemd/system/kubelet.service";
pub const KUBE_PROXY_UNIT: &str = "kube-proxy.service";
pub const KUBE_PROXY_UNIT_PATH: &str = "/etc/systemd/system/kube-proxy.service";
pub const CONTAINERD_UNIT: &str = "containerd.service";
/// hactl's containerd unit, written only for release and bundle binaries (a package brings its own).
pub const CONTAINERD_UNIT_PATH: &str = "/etc/systemd/system/containerd.service";
pub const CONTAINERD_CONFIG: &str = "/etc/containerd/config.toml";
pub const CONTAINERD_SOCKET: &str = "unix:///run/containerd/containerd.sock";
/// Where the OCI archives of `kubernetes.images.dir` are kept on a node (imported from there).
pub const IMAGE_DIR: &str = "/var/lib/hactl/images";
pub const CNI_CONF_DIR: &str = "/etc/cni/net.d";
pub const CNI_CONFLIST: &str = "/etc/cni/net.d/10-hactl.conflist";
/// The bridge every node's pods hang off.
pub const CNI_BRIDGE: &str = "cni0";
pub const POD_NETWORK_SCRIPT: &str = "/usr/local/sbin/hactl-pod-network";
pub const POD_NETWORK_UNIT: &str = "hactl-pod-network.service";
pub const POD_NETWORK_UNIT_PATH: &str = "/etc/systemd/system/hactl-pod-network.service";
/// The routes to the other nodes' pod CIDRs and this node's masquerade rule (read by the script).
pub const POD_NETWORK_CONF: &str = "/etc/hactl/kubernetes/pod-network.conf";
/// The nat chain that holds a node's masquerade rule (jumped to from POSTROUTING).
pub const MASQUERADE_CHAIN: &str = "HACTL-POD-MASQUERADE";
pub const NODE_SYSCTL: &str = "/etc/sysctl.d/90-hactl-node.conf";
pub const NODE_MODULES: &str = "/etc/modules-load.d/hactl-node.conf";

/// Data the node components keep, moved aside (never deleted) by `reset` and `remove`.
pub const DATA_DIRS: [&str; 4] = [
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/cni",
    CNI_CONF_DIR,
];

/// The kubelet's local health endpoint.
pub const KUBELET_HEALTHZ: &str = "http://127.0.0.1:10248/healthz";
/// kube-proxy's health endpoint (its default `healthzBindAddress`, port 10256 on every address).
pub const KUBE_PROXY_HEALTHZ: &str = "http://127.0.0.1:10256/healthz";

/// One of the node components hactl runs as a systemd unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeComponent {
    Containerd,
    Kubelet,
    KubeProxy,
}

impl NodeComponent {
    pub const ALL: [NodeComponent; 3] = [
        NodeComponent::Containerd,
        NodeComponent::Kubelet,
        NodeComponent::KubeProxy,
    ];
    pub fn unit(self) -> &'static str {
        match self {
            NodeComponent::Containerd => CONTAINERD_UNIT,
            NodeComponent::Kubelet => KUBELET_UNIT,
            NodeComponent::KubeProxy => KUBE_PROXY_UNIT,
        }
    }
    /// The files it reads at start: a change to one needs a restart (units and binaries
    /// included). containerd re-reads the CNI configuration by itself.
    pub fn reads(self, containerd: &BinarySource) -> Vec<String> {
        let own = |paths: &[&str]| paths.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        match self {
            NodeComponent::Containerd => {
                let mut paths = own(&[CONTAINERD_CONFIG]);
                if !matches!(containerd, BinarySource::Package) {
                    paths.push(CONTAINERD_UNIT_PATH.into());
                    paths.extend(containerd_binaries().iter().map(|(_, path)| path.to_string()));
                }
                paths
            }
            NodeComponent::Kubelet => own(&[
                CA_CRT,
                KUBELET_CLIENT_CRT,
                KUBELET_CLIENT_KEY,
                KUBELET_SERVING_CRT,
                KUBELET_SERVING_KEY,
                KUBELET_KUBECONFIG,
                KUBELET_CONFIG,
                KUBELET_UNIT_PATH,
                KUBELET_BIN,
            ]),
            NodeComponent::KubeProxy => own(&[
                CA_CRT,
                KUBE_PROXY_CRT,
                KUBE_PROXY_KEY,
                KUBE_PROXY_KUBECONFIG,
                KUBE_PROXY_UNIT_PATH,
                KUBE_PROXY_BIN,
            ]),
        }
    }
}

/// The binaries a release or bundle of containerd provides, and where each is installed.
/// (A package installs its own: containerd and ctr in /usr/bin, runc in /usr/sbin, the CNI
/// plugins in /usr/lib/cni on Debian.)
pub fn containerd_binaries() -> [(&'static str, &'static str); 8] {
    [
        ("containerd", "/usr/local/bin/containerd"),
        (
            "containerd-shim-runc-v2",
            "/usr/local/bin/containerd-shim-runc-v2",
        ),
        ("ctr", "/usr/local/bin/ctr"),
        ("runc", "/usr/local/sbin/runc"),
        ("bridge", "/opt/cni/bin/bridge"),
        ("host-local", "/opt/cni/bin/host-local"),
        ("loopback", "/opt/cni/bin/loopback"),
        ("portmap", "/opt/cni/bin/portmap"),
    ]
}

/// The distribution packages of the node components (when `kubernetes.containerd.source` is
/// `package`), with a binary or file each is known by.
pub const NODE_PACKAGES: [(&str, &str); 3] = [
    ("containerd", "containerd"),
    ("runc", "runc"),
    ("containernetworking-plugins", "/usr/lib/cni/bridge"),
];

/// What kube-proxy needs on every node, whatever the containerd source: the packages and the
/// binary that shows each is there.
pub const PROXY_PACKAGES: [(&str, &str); 2] = [("iptables", "iptables"), ("conntrack", "conntrack")];

/// Where the CNI plugins are, by containerd's source.
pub fn cni_bin_dir(source: &BinarySource) -> &'static str {
    match source {
        BinarySource::Package => "/usr/lib/cni",
        _ => "/opt/cni/bin",
    }
}

/// The apiserver a host's kubelet and kube-proxy talk to: a control-plane host's own (as its
/// controller-manager and scheduler do), a worker's through the VIP (or the first control-plane
/// host without one).
pub fn node_apiserver_url(inv: &Inventory, host: &Host) -> String {
    if host.has(Role::ControlPlane) {
        cp::local_apiserver_url(host)
    } else {
        cp::cluster_url(inv)
    }
}

/// What the facts probe asks a node host about its Node (with its kubelet's credentials).
pub fn node_query(inv: &Inventory, host: &Host) -> NodeQuery {
    NodeQuery {
        name: host.name.clone(),
        server: node_apiserver_url(inv, host),
        ca: CA_CRT.into(),
        cert: KUBELET_CLIENT_CRT.into(),
        key: KUBELET_CLIENT_KEY.into(),
    }
}

/// Every path a node host holds for hactl's node layer, for the facts probe (image archives
/// are added by the caller, who knows the image set).
pub fn managed_paths(spec: &KubernetesSpec) -> Vec<String> {
    let mut paths: Vec<String> = [
        KUBELET_BIN,
        KUBE_PROXY_BIN,
        CA_CRT,
        KUBELET_CLIENT_CRT,
        KUBELET_CLIENT_KEY,
        KUBELET_SERVING_CRT,
        KUBELET_SERVING_KEY,
        KUBE_PROXY_CRT,
        KUBE_PROXY_KEY,
        KUBELET_KUBECONFIG,
        KUBELET_CONFIG,
        KUBE_PROXY_KUBECONFIG,
        KUBELET_UNIT_PATH,
        KUBE_PROXY_UNIT_PATH,
        CONTAINERD_CONFIG,
        CNI_CONFLIST,
        POD_NETWORK_SCRIPT,
        POD_NETWORK_UNIT_PATH,
        POD_NETWORK_CONF,
        NODE_SYSCTL,
        NODE_MODULES,
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    match &spec.containerd {
        BinarySource::Package => paths.push(NODE_PACKAGES[2].1.to_string()),
        _ => {
            paths.push(CONTAINERD_UNIT_PATH.into());
            paths.extend(containerd_binaries().iter().map(|(_, p)| p.to_string()));
        }
    }
    paths
}

/// The snapshotter containerd uses on a host: `native` where its data dir sits on overlayfs
/// (an overlay mount cannot take an overlayfs upper dir, so the overlayfs snapshotter fails
/// there: the lab's hosts, whose root is an overlay), `overlayfs` (containerd's default)
/// everywhere else.
pub fn snapshotter(facts: &HostFacts) -> &'static str {
    match facts.node.as_ref().map(|n| n.snapshot_fs.as_str()) {
        Some("overlayfs") => "native",
        _ => "overlayfs",
    }
}

/// The images a node needs and where they come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImages {
    /// containerd's sandbox image (the pause image).
    pub pause: String,
    /// The control-plane images by binary name (`kube-apiserver` → reference), for static-pod
    /// manifests.
    pub control_plane: BTreeMap<String, String>,
    /// The images shipped as archives (`kubernetes.images.dir`): empty for a registry.
    pub shipped: Vec<ShippedImage>,
}

/// One image hactl uploads to a node and imports into containerd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShippedImage {
    /// `hactl.local/pause:3.4`: the name containerd gives it on import.
    pub reference: String,
    /// `sha256:…`, the manifest digest containerd must show after the import.
    pub digest: String,
    /// The archive, to [`IMAGE_DIR`]`/<archive>` (read once on the operator machine).
    pub archive: Upload,
    /// Needed only on control-plane hosts in static-pod mode.
    pub control_plane: bool,
}

impl NodeImages {
    /// The images of a registry source: `<registry>/pause:<tag of the minor>` and the
    /// control-plane images of the version.
    pub fn from_registry(registry: &str, spec: &KubernetesSpec) -> NodeImages {
        let control_plane = super::Component::ALL
            .iter()
            .map(|c| {
                (
                    c.binary().to_string(),
                    format!("{registry}/{}:v{}", c.binary(), spec.version),
                )
            })
            .collect();
        NodeImages {
            pause: format!("{registry}/pause:{}", super::gates::pause_tag(spec.version.minor)),
            control_plane,
            shipped: vec![],
        }
    }

    /// The images of an image directory: its pause image always, the control-plane images of
    /// `spec.version` in static-pod mode (an error names what is missing), and every other image
    /// of the directory (the workloads' images of an air-gapped cluster, e.g. the lab's busybox)
    /// on every node. `read` gives an archive's content (a [`crate::plan::Blob`]).
    pub fn from_set(
        set: &crate::images::ImageSet,
        spec: &KubernetesSpec,
        mut read: impl FnMut(&crate::images::Image) -> std::io::Result<crate::plan::Blob>,
    ) -> Result<NodeImages, String> {
        let by_name = |suffix: &str| {
            set.images
                .iter()
                .find(|i| i.name.rsplit('/').next() == Some(suffix))
        };
        let pause = by_name("pause").ok_or_else(|| {
            format!(
                "{} lists no pause image (an image named <registry>/pause)",
                set.dir.join(crate::images::MANIFEST).display()
            )
        })?;
        let static_pod = spec.mode == crate::inventory::KubernetesMode::StaticPod;
        let mut shipped = Vec::new();
        let mut control_plane = BTreeMap::new();
        let mut ship = |image: &crate::images::Image, control_plane: bool| -> Result<(), String> {
            let blob = read(image).map_err(|e| format!("{}: {e}", set.archive_path(image).display()))?;
            shipped.push(ShippedImage {
                reference: image.reference.clone(),
                digest: image.digest.clone(),
                archive: Upload::of(
                    format!("{IMAGE_DIR}/{}", image.archive),
                    0o644,
                    "root",
                    "root",
                    &blob,
                ),
                control_plane,
            });
            Ok(())
        };
        ship(pause, false)?;
        for c in super::Component::ALL {
            let tag = format!("v{}", spec.version);
            match by_name(c.binary()).filter(|i| i.tag == tag) {
                Some(image) => {
                    control_plane.insert(c.binary().to_string(), image.reference.clone());
                    if static_pod {
                        ship(image, true)?;
                    }
                }
                None if static_pod => {
                    return Err(format!(
                        "{} lists no {} image tagged {tag}, which static-pod mode runs",
                        set.dir.join(crate::images::MANIFEST).display(),
                        c.binary()
                    ))
                }
                None => {}
            }
        }
        let is_control_plane = |image: &crate::images::Image| {
            super::Component::ALL
                .iter()
                .any(|c| image.name.rsplit('/').next() == Some(c.binary()))
        };
        for image in &set.images {
            if image.reference != pause.reference && !is_control_plane(image) {
                ship(image, false)?;
            }
        }
        Ok(NodeImages {
            pause: pause.reference.clone(),
            control_plane,
            shipped,
        })
    }

    /// The images `host` imports: the pause image and the workloads' images, and the
    /// control-plane images on a control-plane host in static-pod mode.
    pub fn for_host<'a>(&'a self, host: &Host) -> impl Iterator<Item = &'a ShippedImage> {
        let cp = host.has(Role::ControlPlane);
        self.shipped.iter().filter(move |i| cp || !i.control_plane)
    }
}

/// The images of the inventory's source: a registry's references (nothing read from disk), or
/// the image set [`super::inputs::prepare`] read from `kubernetes.images.dir`.
pub fn node_images(
    inv: &Inventory,
    inputs: &super::KubernetesInputs,
) -> Result<NodeImages, KubernetesPlanError> {
    let kube = inv
        .kubernetes
        .as_ref()
        .ok_or(KubernetesPlanError::MissingInputs)?;
    match &kube.images {
        ImageSource::Registry(registry) => Ok(NodeImages::from_registry(registry, kube)),
        ImageSource::Dir(_) => inputs.images.clone().ok_or(KubernetesPlanError::MissingInputs),
    }
}

/// The image archives' paths a host may hold (for the facts probe).
pub fn image_paths(images: &NodeImages, host: &Host) -> Vec<String> {
    images.for_host(host).map(|i| i.archive.path.clone()).collect()
}

/// The command that imports an uploaded archive into containerd's `k8s.io` namespace and checks
/// the digest containerd then shows for it: the import fails unless they agree.
pub fn import_image(image: &ShippedImage, snapshotter: &str) -> crate::plan::RemoteCommand {
    let script = "ctr -n k8s.io images import --snapshotter \"$1\" \"$2\" >/dev/null || exit 1
got=$(ctr -n k8s.io images ls \"name==$3\" | awk 'NR > 1 {print $3}')
[ \"$got\" = \"$4\" ] || { echo \"hactl: $3 imported from $2 has digest ${got:-none}, want $4\" >&2; exit 1; }";
    crate::plan::RemoteCommand::new([
        "sh",
        "-c",
        script,
        "hactl-import-image",
        snapshotter,
        image.archive.path.as_str(),
        image.reference.as_str(),
        image.digest.as_str(),
    ])
    .with_timeout(std::time::Duration::from_secs(600))
}

/// Whether containerd on the host shows `image` with its digest already.
pub fn image_present(facts: &HostFacts, image: &ShippedImage) -> bool {
    facts
        .node
        .as_ref()
        .and_then(|n| n.images.get(&image.reference))
        .is_some_and(|d| *d == image.digest)
}

/// The kubelet's command-line flags on `host` (the rest is in its config file); `pause` is the
/// sandbox image.
pub fn kubelet_flags(host: &Host, inv: &Inventory, pause: &str) -> Vec<String> {
    let Some(kube) = &inv.kubernetes else {
        return vec![];
    };
    let mut flags = vec![
        format!("--config={KUBELET_CONFIG}"),
        format!("--kubeconfig={KUBELET_KUBECONFIG}"),
        format!("--container-runtime-endpoint={CONTAINERD_SOCKET}"),
        format!("--node-ip={}", host.address),
        format!("--hostname-override={}", host.name),
    ];
    flags.extend(super::gates::kubelet_version_flags(kube.version.minor, pause));
    if host.has(Role::ControlPlane) {
        flags.push(format!(
            "--register-with-taints={}",
            super::gates::control_plane_taints(kube.version.minor).join(",")
        ));
    }
    flags
}

/// kube-proxy's flags on `host`: iptables mode; `--conntrack-max-per-core=0` (leave the
/// kernel's limit alone) where the host cannot set it (a network namespace, such as the lab's
/// hosts, sees `nf_conntrack_max` read-only, and kube-proxy would stop at the write).
pub fn kube_proxy_flags(host: &Host, inv: &Inventory, facts: &HostFacts) -> Vec<String> {
    let Some(kube) = &inv.kubernetes else {
        return vec![];
    };
    let mut flags = vec![
        format!("--kubeconfig={KUBE_PROXY_KUBECONFIG}"),
        "--proxy-mode=iptables".to_string(),
        format!("--cluster-cidr={}", kube.pod_cidr),
        format!("--hostname-override={}", host.name),
        format!("--bind-address={}", host.address),
        "--metrics-bind-address=127.0.0.1:10249".to_string(),
    ];
    if facts.node.as_ref().map(|n| n.conntrack_max) == Some(ConntrackMax::ReadOnly) {
        flags.push("--conntrack-max-per-core=0".to_string());
    }
    flags
}

/// What the kubelet's config file is rendered with.
#[derive(Debug, Clone, Serialize)]
pub struct KubeletConfigContext {
    pub address: String,
    pub client_ca: String,
    pub cgroup_driver: String,
    pub static_pod_path: String,
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_min_version: String,
    pub tls_cipher_suites: Vec<String>,
    /// `kubernetes.evictionHard` (empty: the kubelet's defaults).
    pub eviction_hard: BTreeMap<String, String>,
    /// `kubernetes.dns.domain`, or `cluster.local` without DNS.
    pub cluster_domain: String,
    /// The `kube-dns` Service address with `kubernetes.dns`; empty without (the kubelet then
    /// gives pods the host's resolver).
    pub cluster_dns: String,
}

/// The kubelet's configuration file on `host`: anonymous requests refused, every request
/// authenticated by the cluster CA or a token (webhook) and authorized by the apiserver
/// (webhook), no read-only port, the serving certificate hactl issued (no self-signed one, no
/// serving-certificate bootstrap), static pods from [`MANIFEST_DIR`].
pub fn kubelet_config(host: &Host, kube: &KubernetesSpec) -> Result<String, KubernetesPlanError> {
    Ok(render::render(
        "kubelet-config.yaml",
        &KubeletConfigContext {
            address: host.address.to_string(),
            client_ca: CA_CRT.into(),
            cgroup_driver: kube.cgroup_driver.as_str().into(),
            static_pod_path: MANIFEST_DIR.into(),
            tls_cert: KUBELET_SERVING_CRT.into(),
            tls_key: KUBELET_SERVING_KEY.into(),
            tls_min_version: TLS_MIN_VERSION.into(),
            tls_cipher_suites: TLS_CIPHER_SUITES.split(',').map(String::from).collect(),
            eviction_hard: kube.eviction_hard.clone(),
            cluster_domain: kube
                .dns
                .as_ref()
                .map_or(crate::inventory::DEFAULT_CLUSTER_DOMAIN, |d| d.domain.as_str())
                .to_string(),
            cluster_dns: kube
                .dns
                .as_ref()
                .map(|d| d.cluster_ip.to_string())
                .unwrap_or_default(),
        },
    )?)
}

/// What containerd's configuration is rendered with.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerdContext {
    pub sandbox_image: String,
    pub snapshotter: String,
    pub systemd_cgroup: bool,
    /// runc's path for a release or bundle; empty: `runc` from PATH (a package's).
    pub runc: String,
    pub cni_bin_dir: String,
    pub cni_conf_dir: String,
}

/// containerd's configuration (CRI plugin): the cgroup driver the kubelet uses, the sandbox
/// image hactl ships or names, the snapshotter that works on the host, the CNI plugins' place.
pub fn containerd_config(
    kube: &KubernetesSpec,
    images: &NodeImages,
    facts: &HostFacts,
) -> Result<String, KubernetesPlanError> {
    Ok(render::render(
        "containerd-config.toml",
        &ContainerdContext {
            sandbox_image: images.pause.clone(),
            snapshotter: snapshotter(facts).into(),
            systemd_cgroup: kube.cgroup_driver == CgroupDriver::Systemd,
            runc: match &kube.containerd {
                BinarySource::Package => String::new(),
                _ => containerd_binaries()[3].1.to_string(),
            },
            cni_bin_dir: cni_bin_dir(&kube.containerd).into(),
            cni_conf_dir: CNI_CONF_DIR.into(),
        },
    )?)
}

/// The CNI configuration of a node whose Node holds `pod_cidr`: a bridge ([`CNI_BRIDGE`],
/// the pods' gateway, hairpin on for a pod that reaches itself through a Service), addresses
/// from `pod_cidr` (host-local), no masquerade by the plugin (the pod network script
/// masquerades only what leaves the cluster's pod range, so pods see each other's own
/// addresses), and port mappings.
pub fn cni_conflist(pod_cidr: &IpNet) -> Result<String, KubernetesPlanError> {
    let default_route = match pod_cidr {
        IpNet::V4(_) => "0.0.0.0/0",
        IpNet::V6(_) => "::/0",
    };
    Ok(render::render(
        "10-hactl.conflist",
        &serde_json::json!({
            "bridge": CNI_BRIDGE,
            "subnet": pod_cidr.to_string(),
            "default_route": default_route,
        }),
    )?)
}

/// One route of a node to another node's pod CIDR.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PodRoute {
    #[serde(serialize_with = "as_text")]
    pub destination: IpNet,
    pub gateway: IpAddr,
    /// The node that holds `destination` (for people).
    pub node: String,
}

fn as_text<S: serde::Serializer>(net: &IpNet, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(net)
}

/// The routes `host` needs: every other node's pod CIDR through that node's address, in
/// inventory order; nodes whose pod CIDR is not known are left out. `cidrs`: node host name →
/// its Node's podCIDR.
pub fn pod_routes(inv: &Inventory, host: &Host, cidrs: &BTreeMap<String, IpNet>) -> Vec<PodRoute> {
    inv.node_hosts()
        .into_iter()
        .filter(|h| h.name != host.name)
        .filter_map(|h| {
            Some(PodRoute {
                destination: *cidrs.get(&h.name)?,
                gateway: h.address,
                node: h.name.clone(),
            })
        })
        .collect()
}

/// The pod network script's configuration on `host` (its own pod CIDR `own` and its routes).
pub fn pod_network_conf(
    kube: &KubernetesSpec,
    own: &IpNet,
    routes: &[PodRoute],
) -> Result<String, KubernetesPlanError> {
    Ok(render::render(
        "pod-network.conf",
        &serde_json::json!({
            "own": own.to_string(),
            "cluster": kube.pod_cidr.to_string(),
            "routes": routes,
        }),
    )?)
}

/// The pod CIDR `host`'s Node holds, as its facts read it from the API.
pub fn pod_cidr_of(facts: &HostFacts) -> Option<IpNet> {
    facts
        .node
        .as_ref()?
        .api
        .registered()?
        .pod_cidr
        .as_deref()?
        .parse()
        .ok()
}

/// The pod CIDR of every node host, as far as planning may rely on it: the one its Node holds;
/// for a host whose Node the API did not say anything about in this round (a timeout under
/// load, an apiserver restarting), the one the other hosts route to its address now. A Node
/// the API could not be asked about is not a Node that went away: dropping its CIDR would
/// take every route to its pods off the other hosts.
pub fn pod_cidrs(inv: &Inventory, all: &BTreeMap<String, HostFacts>) -> BTreeMap<String, IpNet> {
    inv.node_hosts()
        .into_iter()
        .filter_map(|h| {
            let facts = all.get(&h.name)?;
            if let Some(cidr) = pod_cidr_of(facts) {
                return Some((h.name.clone(), cidr));
            }
            let unknown = matches!(
                facts.node.as_ref().map(|n| &n.api),
                Some(crate::facts::NodeApi::Unknown(_))
            );
            if !unknown {
                return None;
            }
            let gateway = h.address.to_string();
            all.iter()
                .filter(|(name, _)| **name != h.name)
                .flat_map(|(_, f)| routes_in_place(f))
                .find(|(_, via)| *via == gateway)
                .and_then(|(dst, _)| dst.parse().ok())
                .map(|cidr| (h.name.clone(), cidr))
        })
        .collect()
}

/// The routes the host has now (hactl's, by its route protocol), as the facts read them.
pub fn routes_in_place(facts: &HostFacts) -> BTreeMap<String, String> {
    facts
        .node
        .as_ref()
        .map(|n| n.pod_routes.clone())
        .unwrap_or_default()
}

/// Whether the routes in place are exactly `routes`.
pub fn routes_match(facts: &HostFacts, routes: &[PodRoute]) -> bool {
    let want: BTreeMap<String, String> = routes
        .iter()
        .map(|r| (r.destination.to_string(), r.gateway.to_string()))
        .collect();
    routes_in_place(facts) == want
}

/// A unit of a node component.
#[derive(Debug, Clone, Serialize)]
pub struct NodeUnitContext {
    pub cluster: String,
    pub binary: String,
    pub flags: Vec<String>,
}

fn need<'a, T>(v: Option<&'a T>, name: &str) -> Result<&'a T, KubernetesPlanError> {
    v.ok_or_else(|| KubernetesPlanError::MissingCertificate(name.to_string()))
}

/// A host's node files, grouped by what reads them.
#[derive(Debug, Clone, Default)]
pub struct NodeFiles {
    /// The trust file, certificates, keys, kubeconfigs and the kubelet's config file.
    pub config: Vec<Upload>,
    /// containerd's configuration (a config hactl took over: kept as `.hactl-orig` first).
    pub containerd: Vec<Upload>,
    /// The sysctl and module files (applied with `sysctl -p`, and by systemd at boot).
    pub kernel: Vec<Upload>,
    /// The kubelet's, kube-proxy's, containerd's (release or bundle) and the pod network's units.
    pub units: Vec<Upload>,
    /// The pod network script.
    pub scripts: Vec<Upload>,
    /// The CNI configuration and the pod network script's configuration: only once the host's
    /// Node has its pod CIDR (empty before).
    pub network: Vec<Upload>,
}

impl NodeFiles {
    pub fn all(&self) -> impl Iterator<Item = &Upload> {
        self.config
            .iter()
            .chain(&self.containerd)
            .chain(&self.kernel)
            .chain(&self.units)
            .chain(&self.scripts)
            .chain(&self.network)
    }
}

/// Everything hactl writes for the node components on `host`, from the inventory, the PKI, the
/// images and the facts of every host (`all`: the pod CIDRs of the other nodes come from theirs).
pub fn node_files(
    host: &Host,
    inv: &Inventory,
    pki: &Pki,
    images: &NodeImages,
    all: &BTreeMap<String, HostFacts>,
) -> Result<NodeFiles, KubernetesPlanError> {
    let kube = inv
        .kubernetes
        .as_ref()
        .expect("node files are rendered for a kubernetes section");
    static EMPTY: std::sync::OnceLock<HostFacts> = std::sync::OnceLock::new();
    let facts = all
        .get(&host.name)
        .unwrap_or_else(|| EMPTY.get_or_init(HostFacts::default));
    let trust = need(pki.kubernetes_trust_pem().as_ref(), "kubernetes/ca")?.clone();
    let client = need(
        pki.kubelet_client(&host.name),
        &format!("kubernetes/kubelet-{}", host.name),
    )?;
    let serving = need(
        pki.kubelet_serving(&host.name),
        &format!("kubernetes/kubelet-serving-{}", host.name),
    )?;
    let proxy = need(pki.kube_proxy(), "kubernetes/kube-proxy")?;
    let server = node_apiserver_url(inv, host);
    let kubeconfig = |user: &str, cert_file: &str, key_file: &str| -> Result<Vec<u8>, KubernetesPlanError> {
        Ok(render::render(
            "kubeconfig.yaml",
            &cp::Kubeconfig {
                cluster: inv.name.clone(),
                server: server.clone(),
                user: user.into(),
                ca_file: Some(CA_CRT.into()),
                cert_file: Some(cert_file.into()),
                key_file: Some(key_file.into()),
                ca_data: None,
                cert_data: None,
                key_data: None,
            },
        )?
        .into_bytes())
    };
    let config = vec![
        Upload::new(CA_CRT, 0o644, "root", "root", trust.into_bytes()),
        cert(KUBELET_CLIENT_CRT, client),
        key(KUBELET_CLIENT_KEY, client),
        cert(KUBELET_SERVING_CRT, serving),
        key(KUBELET_SERVING_KEY, serving),
        cert(KUBE_PROXY_CRT, proxy),
        key(KUBE_PROXY_KEY, proxy),
        Upload::new(
            KUBELET_KUBECONFIG,
            0o600,
            "root",
            "root",
            kubeconfig(
                &crate::pki::kubelet_user(&host.name),
                KUBELET_CLIENT_CRT,
                KUBELET_CLIENT_KEY,
            )?,
        ),
        Upload::new(
            KUBELET_CONFIG,
            0o644,
            "root",
            "root",
            kubelet_config(host, kube)?.into_bytes(),
        ),
        Upload::new(
            KUBE_PROXY_KUBECONFIG,
            0o600,
            "root",
            "root",
            kubeconfig("system:kube-proxy", KUBE_PROXY_CRT, KUBE_PROXY_KEY)?,
        ),
    ];
    let containerd = vec![Upload::new(
        CONTAINERD_CONFIG,
        0o644,
        "root",
        "root",
        containerd_config(kube, images, facts)?.into_bytes(),
    )];
    let kernel = vec![
        Upload::new(
            NODE_MODULES,
            0o644,
            "root",
            "root",
            render::render("hactl-node.modules.conf", &serde_json::json!({}))?.into_bytes(),
        ),
        Upload::new(
            NODE_SYSCTL,
            0o644,
            "root",
            "root",
            render::render("hactl-node.sysctl.conf", &serde_json::json!({}))?.into_bytes(),
        ),
    ];
    let unit = |template: &str, binary: &str, flags: Vec<String>| -> Result<Vec<u8>, KubernetesPlanError> {
        Ok(render::render(
            template,
            &NodeUnitContext {
                cluster: inv.name.clone(),
                binary: binary.into(),
                flags,
            },
        )?
        .into_bytes())
    };
    let mut units = vec![
        Upload::new(
            KUBELET_UNIT_PATH,
            0o644,
            "root",
            "root",
            unit(
                "kubelet.service",
                KUBELET_BIN,
                kubelet_flags(host, inv, &images.pause),
            )?,
        ),
        Upload::new(
            KUBE_PROXY_UNIT_PATH,
            0o644,
            "root",
            "root",
            unit(
                "kube-proxy.service",
                KUBE_PROXY_BIN,
                kube_proxy_flags(host, inv, facts),
            )?,
        ),
        Upload::new(
            POD_NETWORK_UNIT_PATH,
            0o644,
            "root",
            "root",
            unit("hactl-pod-network.service", POD_NETWORK_SCRIPT, vec![])?,
        ),
    ];
    if !matches!(kube.containerd, BinarySource::Package) {
        units.push(Upload::new(
            CONTAINERD_UNIT_PATH,
            0o644,
            "root",
            "root",
            unit("containerd.service", containerd_binaries()[0].1, vec![])?,
        ));
    }
    let scripts = vec![Upload::new(
        POD_NETWORK_SCRIPT,
        0o755,
        "root",
        "root",
        render::render(
            "hactl-pod-network",
            &serde_json::json!({
                "conf": POD_NETWORK_CONF,
                "proto": crate::facts::POD_ROUTE_PROTO,
                "chain": MASQUERADE_CHAIN,
            }),
        )?
        .into_bytes(),
    )];
    let mut network = vec![];
    if let Some(own) = pod_cidr_of(facts) {
        let routes = pod_routes(inv, host, &pod_cidrs(inv, all));
        network = vec![
            Upload::new(
                CNI_CONFLIST,
                0o644,
                "root",
                "root",
                cni_conflist(&own)?.into_bytes(),
            ),
            Upload::new(
                POD_NETWORK_CONF,
                0o644,
                "root",
                "root",
                pod_network_conf(kube, &own, &routes)?.into_bytes(),
            ),
        ];
    }
    Ok(NodeFiles {
        config,
        containerd,
        kernel,
        units,
        scripts,
        network,
    })
}

/// Whether `host`'s Node is registered, as far as its facts know (`None`: they could not tell,
/// because no kubelet credentials are there yet or the API did not answer).
pub fn registered(facts: &HostFacts) -> Option<bool> {
    match facts.node.as_ref().map(|n| &n.api) {
        Some(crate::facts::NodeApi::Registered(_)) => Some(true),
        Some(crate::facts::NodeApi::Absent) => Some(false),
        _ => None,
    }
}

/// The labels a node host's Node must carry that it lacks (control-plane hosts only): what
/// hactl patches through the API.
pub fn missing_labels(host: &Host, kube: &KubernetesSpec, facts: &HostFacts) -> Vec<&'static str> {
    if !host.has(Role::ControlPlane) {
        return vec![];
    }
    let Some(node) = facts.node.as_ref().and_then(|n| n.api.registered()) else {
        return vec![];
    };
    super::gates::control_plane_labels(kube.version.minor)
        .into_iter()
        .filter(|l| !node.labels.contains_key(*l))
        .collect()
}

/// The merge patch that sets `labels` (empty values) on a Node.
pub fn labels_patch(labels: &[&str]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|l| (l.to_string(), serde_json::Value::String(String::new())))
        .collect();
    serde_json::json!({ "metadata": { "labels": map } })
}

/// The Node's path in the API.
pub fn node_path(name: &str) -> String {
    format!("/api/v1/nodes/{name}")
}

#[cfg(test)]
mod tests;
