//! Renders the files hactl places on hosts from `templates/` (embedded at build time) with tera.
//!
//! Invariant: rendering is pure and deterministic: the same inventory and PKI give byte-identical
//! files, so a second `hactl up` finds every sha256 matching and changes nothing.

use serde::Serialize;
use tera::{Context, Tera};

/// Templates, named after what they produce.
const TEMPLATES: &[(&str, &str)] = &[
    ("etcd.service", include_str!("../../templates/etcd.service.tera")),
    (
        "etcd-initial.env",
        include_str!("../../templates/etcd-initial.env.tera"),
    ),
    (
        "hactl-etcdctl",
        include_str!("../../templates/hactl-etcdctl.tera"),
    ),
    (
        "hactl-etcd-member",
        include_str!("../../templates/hactl-etcd-member.tera"),
    ),
    // The Kubernetes control plane (see `kubernetes::files`).
    (
        "kube-apiserver.service",
        include_str!("../../templates/kube-apiserver.service.tera"),
    ),
    (
        "kube-controller-manager.service",
        include_str!("../../templates/kube-controller-manager.service.tera"),
    ),
    (
        "kube-scheduler.service",
        include_str!("../../templates/kube-scheduler.service.tera"),
    ),
    (
        "kube-apiserver.yaml",
        include_str!("../../templates/kube-apiserver.yaml.tera"),
    ),
    (
        "kube-controller-manager.yaml",
        include_str!("../../templates/kube-controller-manager.yaml.tera"),
    ),
    (
        "kube-scheduler.yaml",
        include_str!("../../templates/kube-scheduler.yaml.tera"),
    ),
    (
        "kubeconfig.yaml",
        include_str!("../../templates/kubeconfig.yaml.tera"),
    ),
    (
        "encryption-config.yaml",
        include_str!("../../templates/encryption-config.yaml.tera"),
    ),
    (
        "audit-policy.yaml",
        include_str!("../../templates/audit-policy.yaml.tera"),
    ),
    // The node components (see `kubernetes::node`).
    (
        "kubelet-config.yaml",
        include_str!("../../templates/kubelet-config.yaml.tera"),
    ),
    (
        "kubelet.service",
        include_str!("../../templates/kubelet.service.tera"),
    ),
    (
        "kube-proxy.service",
        include_str!("../../templates/kube-proxy.service.tera"),
    ),
    (
        "containerd.service",
        include_str!("../../templates/containerd.service.tera"),
    ),
    (
        "containerd-config.toml",
        include_str!("../../templates/containerd-config.toml.tera"),
    ),
    (
        "10-hactl.conflist",
        include_str!("../../templates/10-hactl.conflist.tera"),
    ),
    (
        "pod-network.conf",
        include_str!("../../templates/pod-network.conf.tera"),
    ),
    (
        "hactl-pod-network",
        include_str!("../../templates/hactl-pod-network.tera"),
    ),
    (
        "hactl-pod-network.service",
        include_str!("../../templates/hactl-pod-network.service.tera"),
    ),
    (
        "hactl-node.sysctl.conf",
        include_str!("../../templates/hactl-node.sysctl.conf.tera"),
    ),
    (
        "hactl-node.modules.conf",
        include_str!("../../templates/hactl-node.modules.conf.tera"),
    ),
    // Load balancers (contexts in `phases::load_balancer`).
    ("haproxy.cfg", include_str!("../../templates/haproxy.cfg.tera")),
    (
        "keepalived.conf",
        include_str!("../../templates/keepalived.conf.tera"),
    ),
    (
        "hactl-haproxy",
        include_str!("../../templates/hactl-haproxy.tera"),
    ),
    (
        "hactl-check-haproxy",
        include_str!("../../templates/hactl-check-haproxy.tera"),
    ),
    (
        "hactl-load-balancer.sysctl.conf",
        include_str!("../../templates/hactl-load-balancer.sysctl.conf.tera"),
    ),
    (
        "hactl-etcd-snapshot",
        include_str!("../../templates/hactl-etcd-snapshot.tera"),
    ),
    // Scheduled backups (contexts in `phases::schedule_backups`).
    (
        "hactl-etcd-backup",
        include_str!("../../templates/hactl-etcd-backup.tera"),
    ),
    (
        "hactl-etcd-backup.service",
        include_str!("../../templates/hactl-etcd-backup.service.tera"),
    ),
    (
        "hactl-etcd-backup.timer",
        include_str!("../../templates/hactl-etcd-backup.timer.tera"),
    ),
];

/// A template failed to render (a bug in hactl, not in the inventory).
#[derive(Debug, thiserror::Error)]
#[error("failed to render template {template}")]
pub struct RenderError {
    pub template: String,
    #[source]
    pub source: tera::Error,
}

fn engine() -> &'static Tera {
    static ENGINE: std::sync::OnceLock<Tera> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut tera = Tera::default();
        tera.autoescape_on(vec![]);
        tera.add_raw_templates(TEMPLATES.iter().copied())
            .expect("embedded templates parse (checked by tests)");
        tera
    })
}

/// Renders template `name` with `context`.
pub fn render<C: Serialize>(name: &str, context: &C) -> Result<String, RenderError> {
    let ctx = Context::from_serialize(context).map_err(|source| RenderError {
        template: name.to_string(),
        source,
    })?;
    engine().render(name, &ctx).map_err(|source| RenderError {
        template: name.to_string(),
        source,
    })
}

/// The etcd unit of one member.
#[derive(Debug, Clone, Serialize)]
pub struct EtcdUnit {
    pub cluster: String,
    pub name: String,
    pub address: String,
    pub binary: String,
    pub data_dir: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub metrics_port: u16,
    /// etcd's HTTP client services, on loopback (the client URLs serve gRPC alone).
    pub http_port: u16,
    /// `hactl-etcd-member`, whose `stop` is the unit's `ExecStop=`.
    pub member_script: String,
    /// Also serve the metrics listener (`/health`, `/metrics`: no key is readable there) on the
    /// member's address, for the load balancers' health checks, which then need no client
    /// certificate (one that passes `--client-cert-auth` could read and write every key).
    pub health_on_address: bool,
    pub pki_dir: String,
    pub heartbeat_interval: u32,
    pub election_timeout: u32,
    pub quota_backend_bytes: u64,
    pub auto_compaction_retention: String,
    /// `--peer-cert-allowed-cn`: the peer port admits only certificates with this CN.
    pub peer_allowed_cn: Option<String>,
    pub extra_args: Vec<String>,
}

/// How a member first meets its cluster.
#[derive(Debug, Clone, Serialize)]
pub struct EtcdInitialEnv {
    pub name: String,
    /// `name=https://ip:2380,…`
    pub initial_cluster: String,
    /// `new` (bootstrap) or `existing` (learner join).
    pub state: String,
    pub token: String,
}

/// The local etcdctl wrapper.
#[derive(Debug, Clone, Serialize)]
pub struct EtcdctlWrapper {
    pub etcdctl: String,
    pub pki_dir: String,
    pub client_port: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_template_parses() {
        let _ = engine();
    }

    #[test]
    fn etcd_unit_renders_mtls_and_the_members_own_addresses() {
        let unit = render(
            "etcd.service",
            &EtcdUnit {
                cluster: "prod".into(),
                name: "cp1".into(),
                address: "10.0.0.11".into(),
                binary: "/usr/bin/etcd".into(),
                data_dir: "/var/lib/etcd".into(),
                client_port: 2379,
                peer_port: 2380,
                metrics_port: 2381,
                http_port: 2382,
                member_script: "/usr/local/sbin/hactl-etcd-member".into(),
                health_on_address: true,
                pki_dir: "/etc/hactl/pki/etcd".into(),
                heartbeat_interval: 100,
                election_timeout: 1000,
                quota_backend_bytes: 8 * 1024 * 1024 * 1024,
                auto_compaction_retention: "8h".into(),
                peer_allowed_cn: Some("etcd-peer".into()),
                extra_args: vec!["--log-level=warn".into()],
            },
        )
        .unwrap();
        insta::assert_snapshot!(unit);
    }

    #[test]
    fn member_script_renders_unchanged() {
        let out = render("hactl-etcd-member", &serde_json::json!({})).unwrap();
        assert!(out.starts_with("#!/bin/sh"));
        assert!(out.contains("member add \"$2\" --learner"));
    }
}
