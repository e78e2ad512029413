//! The files a control-plane host holds for the Kubernetes components, rendered from the
//! inventory, the PKI and the cluster's encryption key.
//!
//! Invariant: pure and deterministic, so a second `hactl up` finds every sha256 matching. Keys are
//! uploaded 0600 and never printed (an `Upload` shows only path, mode, owner, size and sha256).
//!
//! The Kubernetes CA **key** is uploaded to every control-plane host: kube-controller-manager signs
//! certificate signing requests (kubelet client and serving certificates) with it
//! (`--cluster-signing-key-file`). Whoever is root on a control-plane host can therefore mint
//! Kubernetes client certificates, as on any kubeadm control plane.

use serde::Serialize;

use super::{
    Component, KubernetesInputs, KubernetesPlanError, API_PORT, AUDIT_LOG_DIR, CONFIG_DIR,
    CONTROLLER_MANAGER_PORT, SCHEDULER_PORT,
};
use crate::inventory::{Host, Inventory, KubernetesMode, Role};
use crate::pki::{CertFiles, EtcdClient, KubernetesClient, Pki};
use crate::plan::Upload;
use crate::render;

// Remote paths, one constant each (fixed paths: a dry run names exactly what a run writes).
pub const CA_CRT: &str = "/etc/hactl/pki/kubernetes/ca.crt";
pub const CA_KEY: &str = "/etc/hactl/pki/kubernetes/ca.key";
/// The signing CA alone (`--cluster-signing-cert-file` wants exactly the certificate of
/// [`CA_KEY`]); [`CA_CRT`] is the trust file, which holds two CAs during a rotation.
pub const SIGNING_CA_CRT: &str = "/etc/hactl/pki/kubernetes/signing-ca.crt";
pub const APISERVER_CRT: &str = "/etc/hactl/pki/kubernetes/apiserver.crt";
pub const APISERVER_KEY: &str = "/etc/hactl/pki/kubernetes/apiserver.key";
pub const KUBELET_CLIENT_CRT: &str = "/etc/hactl/pki/kubernetes/apiserver-kubelet-client.crt";
pub const KUBELET_CLIENT_KEY: &str = "/etc/hactl/pki/kubernetes/apiserver-kubelet-client.key";
pub const CONTROLLER_MANAGER_CRT: &str = "/etc/hactl/pki/kubernetes/controller-manager.crt";
pub const CONTROLLER_MANAGER_KEY: &str = "/etc/hactl/pki/kubernetes/controller-manager.key";
pub const SCHEDULER_CRT: &str = "/etc/hactl/pki/kubernetes/scheduler.crt";
pub const SCHEDULER_KEY: &str = "/etc/hactl/pki/kubernetes/scheduler.key";
pub const SA_KEY: &str = "/etc/hactl/pki/kubernetes/sa.key";
pub const SA_PUB: &str = "/etc/hactl/pki/kubernetes/sa.pub";
pub const FRONT_PROXY_CA_CRT: &str = "/etc/hactl/pki/front-proxy/ca.crt";
pub const FRONT_PROXY_CLIENT_CRT: &str = "/etc/hactl/pki/front-proxy/client.crt";
pub const FRONT_PROXY_CLIENT_KEY: &str = "/etc/hactl/pki/front-proxy/client.key";
pub const ETCD_CA_CRT: &str = "/etc/hactl/pki/apiserver-etcd/ca.crt";
pub const ETCD_CLIENT_CRT: &str = "/etc/hactl/pki/apiserver-etcd/client.crt";
pub const ETCD_CLIENT_KEY: &str = "/etc/hactl/pki/apiserver-etcd/client.key";
pub const CONTROLLER_MANAGER_KUBECONFIG: &str = "/etc/hactl/kubernetes/controller-manager.kubeconfig";
pub const SCHEDULER_KUBECONFIG: &str = "/etc/hactl/kubernetes/scheduler.kubeconfig";
pub const ENCRYPTION_CONFIG: &str = "/etc/hactl/kubernetes/encryption-config.yaml";
pub const AUDIT_POLICY: &str = "/etc/hactl/kubernetes/audit-policy.yaml";
pub const AUDIT_LOG: &str = "/var/log/kubernetes/audit.log";

/// The lowest TLS version the apiserver, controller-manager and scheduler accept (CIS 1.2.x,
/// 1.3.x, 1.4.x): TLS 1.0 and 1.1 are refused.
pub const TLS_MIN_VERSION: &str = "VersionTLS12";
/// The TLS 1.2 cipher suites they accept: ECDHE key exchange with AEAD only (TLS 1.3's suites
/// are not configurable and all AEAD). These four names are spelt the same in every supported
/// minor (the ChaCha20 suites changed names in 1.22, so they are left out).
pub const TLS_CIPHER_SUITES: &str = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,\
TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,\
TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384";
/// The controller-manager's `--terminated-pod-gc-threshold` (CIS 1.3.1).
pub const TERMINATED_POD_GC_THRESHOLD: u32 = 1000;

/// Every file [`host_files`] writes, in its order (units, manifests and binaries come on top).
pub const REMOTE_FILES: &[&str] = &[
    CA_CRT,
    SIGNING_CA_CRT,
    CA_KEY,
    APISERVER_CRT,
    APISERVER_KEY,
    KUBELET_CLIENT_CRT,
    KUBELET_CLIENT_KEY,
    CONTROLLER_MANAGER_CRT,
    CONTROLLER_MANAGER_KEY,
    SCHEDULER_CRT,
    SCHEDULER_KEY,
    SA_KEY,
    SA_PUB,
    FRONT_PROXY_CA_CRT,
    FRONT_PROXY_CLIENT_CRT,
    FRONT_PROXY_CLIENT_KEY,
    ETCD_CA_CRT,
    ETCD_CLIENT_CRT,
    ETCD_CLIENT_KEY,
    CONTROLLER_MANAGER_KUBECONFIG,
    SCHEDULER_KUBECONFIG,
    ENCRYPTION_CONFIG,
    AUDIT_POLICY,
];

/// The files a component reads: a change to one of them needs that component restarted.
pub fn reads(component: Component) -> &'static [&'static str] {
    match component {
        Component::ApiServer => &[
            CA_CRT,
            APISERVER_CRT,
            APISERVER_KEY,
            KUBELET_CLIENT_CRT,
            KUBELET_CLIENT_KEY,
            SA_KEY,
            SA_PUB,
            FRONT_PROXY_CA_CRT,
            FRONT_PROXY_CLIENT_CRT,
            FRONT_PROXY_CLIENT_KEY,
            ETCD_CA_CRT,
            ETCD_CLIENT_CRT,
            ETCD_CLIENT_KEY,
            ENCRYPTION_CONFIG,
            AUDIT_POLICY,
        ],
        Component::ControllerManager => &[
            CA_CRT,
            SIGNING_CA_CRT,
            CA_KEY,
            SA_KEY,
            FRONT_PROXY_CA_CRT,
            CONTROLLER_MANAGER_CRT,
            CONTROLLER_MANAGER_KEY,
            CONTROLLER_MANAGER_KUBECONFIG,
        ],
        Component::Scheduler => &[CA_CRT, SCHEDULER_CRT, SCHEDULER_KEY, SCHEDULER_KUBECONFIG],
    }
}

/// The apiserver URL a host's own controller-manager and scheduler use: the local apiserver,
/// on the host address it binds (the serving certificate has every control-plane address).
pub fn local_apiserver_url(host: &Host) -> String {
    format!("https://{}:{API_PORT}", host.url_host())
}

/// The VIP URL (or, without a VIP, the first control-plane host's).
pub fn cluster_url(inv: &Inventory) -> String {
    match &inv.vip {
        Some(vip) => match vip.address {
            std::net::IpAddr::V6(a) => format!("https://[{a}]:{API_PORT}"),
            a => format!("https://{a}:{API_PORT}"),
        },
        None => local_apiserver_url(inv.with_role(Role::ControlPlane)[0]),
    }
}

/// The command-line flags of `component` on `host`, shared by the unit and the static-pod manifest.
pub fn flags(component: Component, host: &Host, inv: &Inventory) -> Vec<String> {
    let Some(kube) = &inv.kubernetes else {
        return vec![];
    };
    let mut flags = common_flags(component, host, inv, kube);
    // Version gates (flags only some minors have), kept apart from the common flags: see
    // `super::gates` for the upstream changelog entry behind each.
    flags.extend(super::gates::version_flags(component, kube.version.minor));
    flags
}

/// The flags every supported minor takes.
fn common_flags(
    component: Component,
    host: &Host,
    inv: &Inventory,
    kube: &crate::inventory::KubernetesSpec,
) -> Vec<String> {
    let f = |name: &str, value: &dyn std::fmt::Display| format!("--{name}={value}");
    match component {
        Component::ApiServer => {
            let etcd_servers = inv
                .with_role(Role::Etcd)
                .iter()
                .map(|h| crate::etcd::client_url(inv, h))
                .collect::<Vec<_>>()
                .join(",");
            vec![
                f("advertise-address", &host.address),
                f("bind-address", &host.address),
                f("secure-port", &API_PORT),
                f("allow-privileged", &true),
                f("authorization-mode", &"Node,RBAC"),
                f("enable-admission-plugins", &"NodeRestriction"),
                f("client-ca-file", &CA_CRT),
                f("tls-cert-file", &APISERVER_CRT),
                f("tls-private-key-file", &APISERVER_KEY),
                f("kubelet-client-certificate", &KUBELET_CLIENT_CRT),
                f("kubelet-client-key", &KUBELET_CLIENT_KEY),
                // Kubelets' serving certificates are checked against the cluster CA (their
                // `serverTLSBootstrap` CSRs are signed by the controller-manager with it).
                f("kubelet-certificate-authority", &CA_CRT),
                // On: HAProxy's `/readyz` health check and hactl's own probes ask without a
                // credential, which only `system:public-info-viewer` (health, version) allows.
                f("anonymous-auth", &true),
                f("tls-min-version", &TLS_MIN_VERSION),
                f("tls-cipher-suites", &TLS_CIPHER_SUITES),
                f(
                    "kubelet-preferred-address-types",
                    &"InternalIP,ExternalIP,Hostname",
                ),
                f("etcd-servers", &etcd_servers),
                f("etcd-cafile", &ETCD_CA_CRT),
                f("etcd-certfile", &ETCD_CLIENT_CRT),
                f("etcd-keyfile", &ETCD_CLIENT_KEY),
                f("service-cluster-ip-range", &kube.service_cidr),
                f(
                    "service-account-issuer",
                    &"https://kubernetes.default.svc.cluster.local",
                ),
                f("service-account-key-file", &SA_PUB),
                f("service-account-signing-key-file", &SA_KEY),
                f("requestheader-client-ca-file", &FRONT_PROXY_CA_CRT),
                f("requestheader-allowed-names", &"front-proxy-client"),
                f("requestheader-username-headers", &"X-Remote-User"),
                f("requestheader-group-headers", &"X-Remote-Group"),
                f("requestheader-extra-headers-prefix", &"X-Remote-Extra-"),
                f("proxy-client-cert-file", &FRONT_PROXY_CLIENT_CRT),
                f("proxy-client-key-file", &FRONT_PROXY_CLIENT_KEY),
                // Control-plane hosts need not run kube-proxy: reach aggregated APIs by endpoint.
                f("enable-aggregator-routing", &true),
                f("encryption-provider-config", &ENCRYPTION_CONFIG),
                f("audit-policy-file", &AUDIT_POLICY),
                f("audit-log-path", &AUDIT_LOG),
                f("audit-log-maxage", &30),
                f("audit-log-maxbackup", &10),
                f("audit-log-maxsize", &100),
                f("profiling", &false),
            ]
        }
        Component::ControllerManager => vec![
            f("bind-address", &"127.0.0.1"),
            f("secure-port", &CONTROLLER_MANAGER_PORT),
            f("kubeconfig", &CONTROLLER_MANAGER_KUBECONFIG),
            f("authentication-kubeconfig", &CONTROLLER_MANAGER_KUBECONFIG),
            f("authorization-kubeconfig", &CONTROLLER_MANAGER_KUBECONFIG),
            f("leader-elect", &true),
            f("cluster-name", &inv.name),
            f("client-ca-file", &CA_CRT),
            f("requestheader-client-ca-file", &FRONT_PROXY_CA_CRT),
            f("cluster-signing-cert-file", &SIGNING_CA_CRT),
            f("cluster-signing-key-file", &CA_KEY),
            f("root-ca-file", &CA_CRT),
            f("service-account-private-key-file", &SA_KEY),
            f("use-service-account-credentials", &true),
            f("controllers", &"*,bootstrapsigner,tokencleaner"),
            f("allocate-node-cidrs", &true),
            f("cluster-cidr", &kube.pod_cidr),
            f("service-cluster-ip-range", &kube.service_cidr),
            // Terminated pods are collected past this many (the default, 12500, lets them pile up).
            f("terminated-pod-gc-threshold", &TERMINATED_POD_GC_THRESHOLD),
            f("tls-min-version", &TLS_MIN_VERSION),
            f("tls-cipher-suites", &TLS_CIPHER_SUITES),
            f("profiling", &false),
        ],
        Component::Scheduler => vec![
            f("bind-address", &"127.0.0.1"),
            f("secure-port", &SCHEDULER_PORT),
            f("kubeconfig", &SCHEDULER_KUBECONFIG),
            f("authentication-kubeconfig", &SCHEDULER_KUBECONFIG),
            f("authorization-kubeconfig", &SCHEDULER_KUBECONFIG),
            f("leader-elect", &true),
            f("tls-min-version", &TLS_MIN_VERSION),
            f("tls-cipher-suites", &TLS_CIPHER_SUITES),
            f("profiling", &false),
        ],
    }
}

/// A kubeconfig: files on the host, or (for the admin's copy) data inline.
#[derive(Debug, Clone, Serialize)]
pub struct Kubeconfig {
    pub cluster: String,
    pub server: String,
    pub user: String,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub ca_data: Option<String>,
    pub cert_data: Option<String>,
    pub key_data: Option<String>,
}

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The kubeconfig the admin uses from the operator machine: the VIP, the Admin client
/// certificate (`system:masters`) inline. Secret: write it 0600.
pub fn admin_kubeconfig(inv: &Inventory, pki: &Pki) -> Result<String, KubernetesPlanError> {
    let trust = need(pki.kubernetes_trust_pem().as_ref(), "kubernetes/ca")?.clone();
    let admin = need(pki.kubernetes_client(KubernetesClient::Admin), "kubernetes/admin")?;
    Ok(render::render(
        "kubeconfig.yaml",
        &Kubeconfig {
            cluster: inv.name.clone(),
            server: cluster_url(inv),
            user: "admin".into(),
            ca_file: None,
            cert_file: None,
            key_file: None,
            // Both CAs during a rotation, so kubectl trusts the apiservers before and after their
            // serving certificates are re-issued.
            ca_data: Some(b64(&trust)),
            cert_data: Some(b64(&admin.cert_pem)),
            key_data: Some(b64(admin.key_pem.expose())),
        },
    )?)
}

fn host_kubeconfig(
    inv: &Inventory,
    host: &Host,
    user: &str,
    cert: &str,
    key: &str,
) -> Result<String, KubernetesPlanError> {
    Ok(render::render(
        "kubeconfig.yaml",
        &Kubeconfig {
            cluster: inv.name.clone(),
            server: local_apiserver_url(host),
            user: user.into(),
            ca_file: Some(CA_CRT.into()),
            cert_file: Some(cert.into()),
            key_file: Some(key.into()),
            ca_data: None,
            cert_data: None,
            key_data: None,
        },
    )?)
}

fn need<'a, T>(v: Option<&'a T>, name: &str) -> Result<&'a T, KubernetesPlanError> {
    v.ok_or_else(|| KubernetesPlanError::MissingCertificate(name.to_string()))
}

/// A certificate as an upload (0644, root). Shared with [`super::node`].
pub(super) fn cert(path: &str, files: &CertFiles) -> Upload {
    Upload::new(path, 0o644, "root", "root", files.cert_pem.clone().into_bytes())
}

/// A private key as an upload (0600, root only). Shared with [`super::node`].
pub(super) fn key(path: &str, files: &CertFiles) -> Upload {
    Upload::new(
        path,
        0o600,
        "root",
        "root",
        files.key_pem.expose().as_bytes().to_vec(),
    )
}

/// Certificates, keys, kubeconfigs, the encryption configuration and the audit policy of one
/// control-plane host, in the order of [`REMOTE_FILES`].
pub fn host_files(
    host: &Host,
    inv: &Inventory,
    pki: &Pki,
    inputs: &KubernetesInputs,
) -> Result<Vec<Upload>, KubernetesPlanError> {
    let ca = need(pki.kubernetes_ca(), "kubernetes/ca")?;
    let trust = need(pki.kubernetes_trust_pem().as_ref(), "kubernetes/ca")?.clone();
    let apiserver = need(
        pki.apiserver(&host.name),
        &format!("kubernetes/apiserver-{}", host.name),
    )?;
    let kubelet_client = need(
        pki.kubernetes_client(KubernetesClient::ApiServerKubeletClient),
        "kubernetes/apiserver-kubelet-client",
    )?;
    let cm = need(
        pki.kubernetes_client(KubernetesClient::ControllerManager),
        "kubernetes/controller-manager",
    )?;
    let sched = need(
        pki.kubernetes_client(KubernetesClient::Scheduler),
        "kubernetes/scheduler",
    )?;
    let sa = need(pki.service_account_key(), "sa")?;
    let fp_trust = need(pki.front_proxy_trust_pem().as_ref(), "front-proxy/ca")?.clone();
    let fp_client = need(pki.front_proxy_client(), "front-proxy/client")?;
    let etcd_client = pki.etcd_client(EtcdClient::ApiServer);

    let encryption = super::secrets::encryption_config(&inputs.encryption_key)?;
    let audit = render::render("audit-policy.yaml", &serde_json::json!({}))?;
    Ok(vec![
        // The signing CA and, during its rotation, the other one (`hactl certs rotate-ca kubernetes`).
        Upload::new(CA_CRT, 0o644, "root", "root", trust.into_bytes()),
        cert(SIGNING_CA_CRT, ca),
        key(CA_KEY, ca),
        cert(APISERVER_CRT, apiserver),
        key(APISERVER_KEY, apiserver),
        cert(KUBELET_CLIENT_CRT, kubelet_client),
        key(KUBELET_CLIENT_KEY, kubelet_client),
        cert(CONTROLLER_MANAGER_CRT, cm),
        key(CONTROLLER_MANAGER_KEY, cm),
        cert(SCHEDULER_CRT, sched),
        key(SCHEDULER_KEY, sched),
        Upload::new(
            SA_KEY,
            0o600,
            "root",
            "root",
            sa.key_pem.expose().as_bytes().to_vec(),
        ),
        Upload::new(SA_PUB, 0o644, "root", "root", sa.pub_pem.clone().into_bytes()),
        // The signing CA and, during its rotation, the other one (`hactl certs rotate-ca front-proxy`).
        Upload::new(FRONT_PROXY_CA_CRT, 0o644, "root", "root", fp_trust.into_bytes()),
        cert(FRONT_PROXY_CLIENT_CRT, fp_client),
        key(FRONT_PROXY_CLIENT_KEY, fp_client),
        Upload::new(
            ETCD_CA_CRT,
            0o644,
            "root",
            "root",
            pki.etcd_trust_pem().into_bytes(),
        ),
        cert(ETCD_CLIENT_CRT, etcd_client),
        key(ETCD_CLIENT_KEY, etcd_client),
        Upload::new(
            CONTROLLER_MANAGER_KUBECONFIG,
            0o600,
            "root",
            "root",
            host_kubeconfig(
                inv,
                host,
                "system:kube-controller-manager",
                CONTROLLER_MANAGER_CRT,
                CONTROLLER_MANAGER_KEY,
            )?
            .into_bytes(),
        ),
        Upload::new(
            SCHEDULER_KUBECONFIG,
            0o600,
            "root",
            "root",
            host_kubeconfig(inv, host, "system:kube-scheduler", SCHEDULER_CRT, SCHEDULER_KEY)?.into_bytes(),
        ),
        Upload::new(ENCRYPTION_CONFIG, 0o600, "root", "root", encryption.into_bytes()),
        Upload::new(AUDIT_POLICY, 0o644, "root", "root", audit.into_bytes()),
    ])
}

/// What a unit template is rendered with.
#[derive(Debug, Clone, Serialize)]
pub struct UnitContext {
    pub cluster: String,
    pub binary: String,
    pub flags: Vec<String>,
    /// Whether etcd runs on the same host (the apiserver then starts after it).
    pub local_etcd: bool,
}

/// The systemd unit of `component` on `host`.
pub fn unit(component: Component, host: &Host, inv: &Inventory) -> Result<Upload, KubernetesPlanError> {
    let text = render::render(
        &format!("{}.service", component.binary()),
        &UnitContext {
            cluster: inv.name.clone(),
            binary: component.binary_path(),
            flags: flags(component, host, inv),
            local_etcd: host.has(Role::Etcd),
        },
    )?;
    Ok(Upload::new(
        component.unit_path(),
        0o644,
        "root",
        "root",
        text.into_bytes(),
    ))
}

/// What a static-pod manifest template is rendered with.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestContext {
    pub image: String,
    pub flags: Vec<String>,
    /// Where the kubelet probes the component (the apiserver's bind address, or 127.0.0.1).
    pub probe_host: String,
    /// sha256 over the files the component reads: a changed certificate or configuration changes
    /// the manifest, and the kubelet then restarts the pod.
    pub config_sha256: String,
    /// The digest of the image's manifest when hactl ships it (`kubernetes.images.dir`): an image
    /// rebuilt under the same tag changes the manifest, and the kubelet then runs the new one
    /// (the image is named by its tag). Empty for a registry's image (its tag decides).
    pub image_digest: String,
    pub pki_dir: String,
    pub config_dir: String,
    pub audit_log_dir: String,
}

/// The static-pod manifest of `component` on `host`; `files` are the host's [`host_files`],
/// `image` the component's image reference ([`super::node::NodeImages::control_plane`]) and
/// `image_digest` its manifest's digest when hactl ships the image (else empty).
pub fn manifest(
    component: Component,
    host: &Host,
    inv: &Inventory,
    files: &[Upload],
    image: &str,
    image_digest: &str,
) -> Result<Upload, KubernetesPlanError> {
    let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
    for u in files
        .iter()
        .filter(|u| reads(component).contains(&u.path.as_str()))
    {
        sha2::Digest::update(&mut hasher, format!("{} {}\n", u.path, u.sha256));
    }
    let text = render::render(
        &format!("{}.yaml", component.binary()),
        &ManifestContext {
            image: image.to_string(),
            flags: flags(component, host, inv),
            probe_host: match component {
                Component::ApiServer => host.address.to_string(),
                _ => "127.0.0.1".into(),
            },
            config_sha256: hex::encode(sha2::Digest::finalize(hasher)),
            image_digest: image_digest.to_string(),
            pki_dir: "/etc/hactl/pki".into(),
            config_dir: CONFIG_DIR.into(),
            audit_log_dir: AUDIT_LOG_DIR.into(),
        },
    )?;
    Ok(Upload::new(
        component.manifest_path(),
        0o600,
        "root",
        "root",
        text.into_bytes(),
    ))
}

/// The unit or the manifest of `component`, by the inventory's mode; a manifest runs the
/// component's image from the inventory's image source.
pub fn runner(
    component: Component,
    host: &Host,
    inv: &Inventory,
    files: &[Upload],
    inputs: &KubernetesInputs,
) -> Result<Upload, KubernetesPlanError> {
    match inv.kubernetes.as_ref().map(|k| k.mode) {
        Some(KubernetesMode::StaticPod) => {
            let images = super::node::node_images(inv, inputs)?;
            let image = images
                .control_plane
                .get(component.binary())
                .ok_or(KubernetesPlanError::MissingInputs)?;
            let digest = images
                .shipped
                .iter()
                .find(|i| i.control_plane && &i.reference == image)
                .map(|i| i.digest.as_str())
                .unwrap_or_default();
            manifest(component, host, inv, files, image, digest)
        }
        _ => unit(component, host, inv),
    }
}
