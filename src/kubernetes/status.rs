//! `hactl status` for the Kubernetes layer: per control-plane host each component's unit state
//! and health endpoint; the holders of the controller-manager and scheduler Leases, read through
//! the apiserver of a healthy host over an SSH tunnel with the admin certificate.
//!
//! Invariant: read-only (every command sent is `read_only`; the API is only read with GET).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::lease::{self, HostComponents, Lease, LeaseRow};
use super::{probe, Component, API_PORT};
use crate::exec::Transport;
use crate::inventory::{Inventory, KubernetesMode, Role};

/// The Kubernetes part of `hactl status -o json`.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesStatus {
    pub components: Vec<ComponentRow>,
    pub leases: Vec<LeaseRow>,
    /// Why the Kubernetes layer is degraded; empty when it is healthy.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentRow {
    pub host: String,
    pub component: Component,
    /// systemd ActiveState (`active`, `failed`, …), `static-pod`, or `unknown` when unreachable.
    pub unit: String,
    /// `/readyz` (apiserver) or `/healthz` answered.
    pub healthy: bool,
    pub detail: String,
}

const TIMEOUT: Duration = Duration::from_secs(5);

/// Reads the Kubernetes layer's state; `conns` are the control-plane hosts' connections (or why
/// there is none). `pki_dir` is the state directory's `pki/` (the admin certificate is read there).
pub async fn gather(
    inv: &Inventory,
    pki_dir: &std::path::Path,
    conns: &BTreeMap<String, Result<Arc<dyn Transport>, String>>,
) -> KubernetesStatus {
    let Some(kube) = &inv.kubernetes else {
        return KubernetesStatus::default();
    };
    let mut status = KubernetesStatus::default();
    let mut health = Vec::new();
    for host in inv.with_role(Role::ControlPlane) {
        let mut hc = HostComponents {
            host: host.name.clone(),
            ..HostComponents::default()
        };
        let t = match conns.get(&host.name) {
            Some(Ok(t)) => Some(t.clone()),
            Some(Err(e)) => {
                status.problems.push(format!("{}: unreachable: {e}", host.name));
                None
            }
            None => None,
        };
        let units = match (&t, kube.mode) {
            (Some(t), KubernetesMode::Systemd) => unit_states(t.as_ref()).await,
            _ => BTreeMap::new(),
        };
        for component in Component::ALL {
            let unit = match (&t, kube.mode) {
                (None, _) => "unknown".to_string(),
                (Some(_), KubernetesMode::StaticPod) => "static-pod".to_string(),
                (Some(_), KubernetesMode::Systemd) => units
                    .get(&component.unit())
                    .cloned()
                    .unwrap_or_else(|| "unknown".into()),
            };
            let (healthy, detail) = match &t {
                None => (false, "no connection".to_string()),
                Some(t) => match t.run(&probe::healthy(component, host)).await {
                    Ok(out) if out.success() => (true, out.stdout_str().trim().to_string()),
                    Ok(out) => (
                        false,
                        format!("{} {}", out.stdout_str().trim(), out.stderr_str().trim())
                            .trim()
                            .to_string(),
                    ),
                    Err(e) => (false, format!("{:#}", anyhow::Error::from(e))),
                },
            };
            let running = kube.mode == KubernetesMode::StaticPod || unit == "active";
            let ok = healthy && running;
            match component {
                Component::ApiServer => hc.apiserver = ok,
                Component::ControllerManager => hc.controller_manager = ok,
                Component::Scheduler => hc.scheduler = ok,
            }
            if t.is_some() && !ok {
                status.problems.push(format!(
                    "{} on {} is not healthy (unit {unit}, {} {})",
                    component.binary(),
                    host.name,
                    probe::endpoint(component),
                    if detail.is_empty() {
                        "did not answer"
                    } else {
                        &detail
                    }
                ));
            }
            status.components.push(ComponentRow {
                host: host.name.clone(),
                component,
                unit,
                healthy,
                detail,
            });
        }
        health.push((hc, t));
    }
    // Leases, through the first host whose apiserver is healthy.
    let through = health.iter().find(|(h, t)| h.apiserver && t.is_some());
    let hosts: Vec<HostComponents> = health.iter().map(|(h, _)| h.clone()).collect();
    match through {
        None => status
            .problems
            .push("no apiserver is healthy, so the Leases cannot be read".into()),
        Some((h, t)) => {
            let host = inv.host(&h.host).expect("from the inventory");
            let t = t.as_ref().expect("checked above");
            match read_leases(t.as_ref(), &host.address.to_string(), pki_dir).await {
                Ok(leases) => {
                    let now = time::OffsetDateTime::now_utc();
                    for (lease, component) in leases {
                        let row = lease::evaluate(&lease, component, now, &hosts);
                        status.problems.extend(row.problems.iter().cloned());
                        status.leases.push(row);
                    }
                }
                Err(e) => status
                    .problems
                    .push(format!("cannot read the Leases through {}: {e:#}", h.host)),
            }
        }
    }
    status
}

async fn unit_states(t: &dyn Transport) -> BTreeMap<String, String> {
    let query = crate::facts::Query {
        data_dir: "/nonexistent".into(),
        units: Component::ALL.iter().map(|c| c.unit()).collect(),
        files: vec![],
        binaries: vec![],
    };
    match crate::facts::gather(t, &query).await {
        Ok(f) => f.units.into_iter().map(|(k, v)| (k, v.active)).collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// GETs both Leases through an SSH tunnel to `address:6443` on the host behind `t`.
async fn read_leases(
    t: &dyn Transport,
    address: &str,
    pki_dir: &std::path::Path,
) -> anyhow::Result<Vec<(Lease, Component)>> {
    let read = |rel: &str| crate::bounded::read(pki_dir.join(rel), crate::bounded::TEXT);
    let cas = super::api::trusted_cas(pki_dir)?;
    let mut identity_pem = read("kubernetes/admin.key")?;
    identity_pem.extend(read("kubernetes/admin.crt")?);
    let identity = reqwest::Identity::from_pem(&identity_pem)?;
    let (local, _guard) = t.forward(address, API_PORT).await?;
    // The apiserver certificate has 127.0.0.1 as a SAN: TLS verifies against the tunnel's end.
    let client = reqwest::Client::builder()
        .tls_certs_only(cas)
        .identity(identity)
        .timeout(TIMEOUT)
        .build()?;
    let mut out = Vec::new();
    for (name, component) in lease::LEASES {
        let url = format!(
            "https://127.0.0.1:{local}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{name}"
        );
        let resp = client.get(&url).send().await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            out.push((
                Lease {
                    metadata: lease::LeaseMeta {
                        name: name.to_string(),
                        namespace: "kube-system".into(),
                    },
                    spec: lease::LeaseSpec::default(),
                },
                component,
            ));
            continue;
        }
        let resp = resp.error_for_status()?;
        let body =
            crate::bounded::http_body(resp, crate::bounded::TEXT, &format!("the Lease {name}")).await?;
        out.push((serde_json::from_slice::<Lease>(&body)?, component));
    }
    Ok(out)
}

/// The human table of the Kubernetes layer.
pub fn table(s: &KubernetesStatus) -> String {
    let mut out = String::from("\nkubernetes\n");
    out.push_str(&format!(
        "{:<10} {:<24} {:<11} {}\n",
        "HOST", "COMPONENT", "UNIT", "HEALTH"
    ));
    for r in &s.components {
        out.push_str(&format!(
            "{:<10} {:<24} {:<11} {}\n",
            r.host,
            r.component.binary(),
            r.unit,
            if r.healthy { "ok" } else { "FAILING" }
        ));
    }
    for l in &s.leases {
        out.push_str(&format!(
            "lease {}: {} (renewed {:.1}s ago, duration {}s, transitions {})\n",
            l.name,
            if l.holder.is_empty() {
                "NO HOLDER"
            } else {
                &l.holder
            },
            l.age_seconds,
            l.lease_duration_seconds,
            l.transitions
        ));
    }
    out
}
