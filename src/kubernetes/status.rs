//! `hactl status` for the Kubernetes layer: per control-plane host each component's unit state
//! and health endpoint; the holders of the controller-manager and scheduler Leases, read through
//! the apiserver of a healthy host over an SSH tunnel with the admin certificate.
//!
//! Invariant: read-only (every command sent is `read_only`; the API is only read with GET).

use std::collections::BTreeMap;
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
    /// Every Node the API lists and every node host of the inventory without one, in
    /// inventory order (Nodes the inventory does not know last, by name).
    pub nodes: Vec<NodeRow>,
    /// The cluster DNS (`kubernetes.dns`); `null` when the inventory names none.
    pub dns: Option<DnsRow>,
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

/// One Node, as `hactl status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    /// The inventory host of that name runs the node components (false: a Node hactl does not
    /// manage).
    pub in_inventory: bool,
    /// Registered with the API.
    pub registered: bool,
    /// The `Ready` condition: `True`, `False` or `Unknown` (empty, `null`, when not registered).
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub ready: String,
    /// Empty (`null`) when not registered.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub kubelet_version: String,
    /// `key=value:effect`.
    pub taints: Vec<String>,
    /// Empty (`null`) until the controller-manager gives the Node one.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub pod_cidr: String,
    pub unschedulable: bool,
}

/// The cluster DNS, as `hactl status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct DnsRow {
    /// The image the inventory names.
    pub image: String,
    /// The `kube-dns` Service address the kubelets give pods.
    pub cluster_ip: String,
    /// The Deployment exists.
    pub deployed: bool,
    pub ready_replicas: u64,
    pub replicas: u64,
}

/// The DNS row and its problem (with what to do), from the Deployment as the API answered it
/// (`None`: not found). Pure.
pub fn dns_row(
    spec: &crate::inventory::DnsSpec,
    deployment: Option<&serde_json::Value>,
) -> (DnsRow, Option<String>) {
    let mut row = DnsRow {
        image: spec.image.clone(),
        cluster_ip: spec.cluster_ip.to_string(),
        replicas: u64::from(spec.replicas),
        ..DnsRow::default()
    };
    let Some(d) = deployment else {
        let problem = format!(
            "cluster DNS: Deployment {}/{} is missing: run `hactl up` to deploy it",
            super::dns::NAMESPACE,
            super::dns::DEPLOYMENT
        );
        return (row, Some(problem));
    };
    row.deployed = true;
    (row.ready_replicas, row.replicas) = super::dns::deployment_readiness(d);
    let problem = (row.ready_replicas < row.replicas).then(|| {
        format!(
            "cluster DNS: {} of {} CoreDNS pods ready (image {}): pods cannot resolve names \
             meanwhile; see `kubectl -n {} get pods -l k8s-app=kube-dns` (ErrImagePull: the \
             nodes cannot pull the image; fix kubernetes.dns.image or put its archive in \
             kubernetes.images.dir and run `hactl up`)",
            row.ready_replicas,
            row.replicas,
            spec.image,
            super::dns::NAMESPACE
        )
    });
    (row, problem)
}

/// Where a Node stands for `status`: one of the inventory's node hosts, or a Node the
/// inventory does not name (a host taken away without deleting its Node, or a kubelet hactl does
/// not manage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOwner {
    Inventory,
    Foreign,
}

/// The problem a registered Node makes in `status`, with what to do, or `None` when it is Ready.
/// Every Node that is not Ready degrades the cluster (exit 5): its pods are not looked after,
/// whether hactl manages the host or not. Pure.
pub fn node_problem(n: &super::objects::Node, owner: NodeOwner) -> Option<String> {
    let ready = n.status.ready();
    if ready == "True" {
        return None;
    }
    let name = &n.metadata.name;
    let why = n
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!(": {} {}", c.reason, c.message).trim_end().to_string())
        .unwrap_or_default();
    let stage = n
        .metadata
        .annotations
        .get(super::api::MAINTENANCE_STAGE_ANNOTATION)
        .filter(|s| s.as_str() != "Complete");
    let todo = match (owner, stage) {
        (_, Some(stage)) => format!(
            "{name} is in maintenance (stage {stage}): its kubelet talks to its own apiserver, \
             which the maintenance stopped; `hactl maintenance complete {name}` brings it back"
        ),
        (NodeOwner::Inventory, None) => format!(
            "if {name} is up, see `journalctl -u kubelet -u containerd` there, and `hactl up` starts \
             node components that are stopped; if it is gone for good, `hactl remove {name}` (a \
             worker) or `hactl replace` (a control-plane host)"
        ),
        (NodeOwner::Foreign, None) => format!(
            "{name} is not in the inventory: if that host is gone, delete its Node \
             (`kubectl delete node {name}`)"
        ),
    };
    Some(format!("Node {name} is not Ready (Ready={ready}{why}); {todo}"))
}

/// The rows and problems of the Nodes: each node host of the inventory (registered or not),
/// then every other Node. Pure.
pub fn node_rows(inv: &Inventory, nodes: &[super::objects::Node]) -> (Vec<NodeRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let row = |n: &super::objects::Node, in_inventory: bool| NodeRow {
        name: n.metadata.name.clone(),
        in_inventory,
        registered: true,
        ready: n.status.ready().to_string(),
        kubelet_version: n.status.node_info.kubelet_version.clone(),
        taints: n.spec.taints.iter().map(|t| t.to_string()).collect(),
        pod_cidr: n.spec.pod_cidr.clone().unwrap_or_default(),
        unschedulable: n.spec.unschedulable,
    };
    for host in inv.node_hosts() {
        match nodes.iter().find(|n| n.metadata.name == host.name) {
            Some(n) => {
                problems.extend(node_problem(n, NodeOwner::Inventory));
                rows.push(row(n, true));
            }
            None => {
                problems.push(format!(
                    "{} runs no registered Node: run `hactl up` to install and start its kubelet, \
                     or see its log (`journalctl -u kubelet` on {})",
                    host.name, host.name
                ));
                rows.push(NodeRow {
                    name: host.name.clone(),
                    in_inventory: true,
                    ..NodeRow::default()
                });
            }
        }
    }
    let mut others: Vec<&super::objects::Node> = nodes
        .iter()
        .filter(|n| !inv.node_hosts().iter().any(|h| h.name == n.metadata.name))
        .collect();
    others.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for n in others {
        problems.extend(node_problem(n, NodeOwner::Foreign));
        rows.push(row(n, false));
    }
    (rows, problems)
}

/// Generous: status only reads, and a slow host (an overloaded VM in CI took over 5 s) that
/// is reported as not answering sends the operator after the wrong problem.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Reads the Kubernetes layer's state; `conns` are the control-plane hosts' connections (or why
/// there is none). `pki_dir` is the state directory's `pki/` (the admin certificate is read there).
pub async fn gather(
    inv: &Inventory,
    pki_dir: &std::path::Path,
    conns: &BTreeMap<String, crate::exec::connect::Connection>,
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
            let dns = kube.dns.as_ref();
            match read_leases(t.as_ref(), &host.address.to_string(), pki_dir, dns.is_some()).await {
                Ok((leases, nodes, deployment)) => {
                    let now = time::OffsetDateTime::now_utc();
                    for (lease, component) in leases {
                        let row = lease::evaluate(&lease, component, now, &hosts);
                        status.problems.extend(row.problems.iter().cloned());
                        status.leases.push(row);
                    }
                    let (rows, problems) = node_rows(inv, &nodes);
                    status.nodes = rows;
                    status.problems.extend(problems);
                    if let Some(spec) = dns {
                        let (row, problem) = dns_row(spec, deployment.as_ref());
                        status.dns = Some(row);
                        status.problems.extend(problem);
                    }
                }
                Err(e) => status.problems.push(format!(
                    "cannot read the Leases and Nodes through {}: {e:#}",
                    h.host
                )),
            }
        }
    }
    status
}

async fn unit_states(t: &dyn Transport) -> BTreeMap<String, String> {
    let query = crate::facts::Query {
        data_dir: "/nonexistent".into(),
        units: Component::ALL.iter().map(|c| c.unit()).collect(),
        ..crate::facts::Query::default()
    };
    match crate::facts::gather(t, &query).await {
        Ok(f) => f.units.into_iter().map(|(k, v)| (k, v.active)).collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// What [`read_leases`] reads: the Leases, the Nodes and the DNS Deployment (when asked for and
/// found).
type ApiReads = (
    Vec<(Lease, Component)>,
    Vec<super::objects::Node>,
    Option<serde_json::Value>,
);

/// GETs both Leases and every Node (and, with `dns`, the CoreDNS Deployment) through an SSH
/// tunnel to `address:6443` on the host behind `t`.
async fn read_leases(
    t: &dyn Transport,
    address: &str,
    pki_dir: &std::path::Path,
    dns: bool,
) -> anyhow::Result<ApiReads> {
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
    let resp = client
        .get(format!("https://127.0.0.1:{local}/api/v1/nodes"))
        .send()
        .await?
        .error_for_status()?;
    let body = crate::bounded::http_body(resp, crate::bounded::TEXT, "the Nodes").await?;
    let nodes = serde_json::from_slice::<super::objects::List<super::objects::Node>>(&body)?.items;
    let deployment = if dns {
        let path = format!(
            "/apis/apps/v1/namespaces/{}/deployments/{}",
            super::dns::NAMESPACE,
            super::dns::DEPLOYMENT
        );
        let resp = client
            .get(format!("https://127.0.0.1:{local}{path}"))
            .send()
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            None
        } else {
            let resp = resp.error_for_status()?;
            let body = crate::bounded::http_body(resp, crate::bounded::TEXT, "the DNS Deployment").await?;
            Some(serde_json::from_slice::<serde_json::Value>(&body)?)
        }
    } else {
        None
    };
    Ok((out, nodes, deployment))
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
    if !s.nodes.is_empty() {
        out.push_str(&format!(
            "\n{:<10} {:<8} {:<10} {:<16} {}\n",
            "NODE", "READY", "KUBELET", "POD CIDR", "TAINTS"
        ));
        for n in &s.nodes {
            let mut taints = n.taints.join(",");
            if n.unschedulable {
                taints = format!("(cordoned) {taints}");
            }
            out.push_str(&format!(
                "{:<10} {:<8} {:<10} {:<16} {}{}\n",
                n.name,
                if n.registered { n.ready.as_str() } else { "MISSING" },
                if n.kubelet_version.is_empty() {
                    "-"
                } else {
                    &n.kubelet_version
                },
                if n.pod_cidr.is_empty() { "-" } else { &n.pod_cidr },
                if taints.is_empty() { "-" } else { &taints },
                if n.in_inventory {
                    ""
                } else {
                    "  (not in the inventory)"
                },
            ));
        }
    }
    if let Some(d) = &s.dns {
        out.push_str(&format!(
            "dns: {} at {}: {}\n",
            d.image,
            d.cluster_ip,
            if d.deployed {
                format!("{}/{} ready", d.ready_replicas, d.replicas)
            } else {
                "NOT DEPLOYED".to_string()
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::objects::{Node, NodeCondition, ObjectMeta, Taint};

    #[test]
    fn dns_row_says_what_is_missing_or_not_ready() {
        let spec = crate::inventory::DnsSpec {
            image: "registry.k8s.io/coredns/coredns:v1.8.0".into(),
            cluster_ip: "10.96.0.10".parse().unwrap(),
            domain: "cluster.local".into(),
            replicas: 2,
        };
        let (row, problem) = dns_row(&spec, None);
        assert!(!row.deployed);
        assert!(problem.unwrap().contains("coredns is missing: run `hactl up`"));
        let pulling = serde_json::json!({ "spec": { "replicas": 2 }, "status": { "replicas": 2 } });
        let (row, problem) = dns_row(&spec, Some(&pulling));
        assert_eq!((row.deployed, row.ready_replicas, row.replicas), (true, 0, 2));
        let problem = problem.unwrap();
        assert!(
            problem.contains("0 of 2 CoreDNS pods ready (image registry.k8s.io/coredns/coredns:v1.8.0)"),
            "{problem}"
        );
        let ready = serde_json::json!({ "spec": { "replicas": 2 }, "status": { "readyReplicas": 2 } });
        let (row, problem) = dns_row(&spec, Some(&ready));
        assert_eq!((row.ready_replicas, problem), (2, None));
        let table = table(&KubernetesStatus {
            dns: Some(row),
            ..KubernetesStatus::default()
        });
        assert!(
            table.contains("dns: registry.k8s.io/coredns/coredns:v1.8.0 at 10.96.0.10: 2/2 ready\n"),
            "{table}"
        );
    }

    fn node(name: &str, ready: &str) -> Node {
        let mut n = Node {
            metadata: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        n.status.conditions.push(NodeCondition {
            type_: "Ready".into(),
            status: ready.into(),
            reason: if ready == "True" {
                "KubeletReady"
            } else {
                "NodeStatusUnknown"
            }
            .into(),
            message: if ready == "True" {
                ""
            } else {
                "Kubelet stopped posting node status."
            }
            .into(),
        });
        n.status.node_info.kubelet_version = "v1.20.2".into();
        n
    }

    #[test]
    fn node_problems_say_what_to_do() {
        // (Ready status, owner) → the problem's start, or None.
        let table: [(&str, NodeOwner, Option<&str>); 6] = [
            ("True", NodeOwner::Inventory, None),
            ("True", NodeOwner::Foreign, None),
            (
                "Unknown",
                NodeOwner::Inventory,
                Some("Node n is not Ready (Ready=Unknown: NodeStatusUnknown Kubelet stopped posting node status.); if n is up, see `journalctl -u kubelet -u containerd` there"),
            ),
            (
                "False",
                NodeOwner::Inventory,
                Some("Node n is not Ready (Ready=False: NodeStatusUnknown"),
            ),
            (
                "Unknown",
                NodeOwner::Foreign,
                Some("Node n is not Ready (Ready=Unknown: NodeStatusUnknown Kubelet stopped posting node status.); n is not in the inventory: if that host is gone, delete its Node (`kubectl delete node n`)"),
            ),
            // No Ready condition at all (a Node registered a moment ago): not Ready.
            ("", NodeOwner::Inventory, Some("Node n is not Ready (Ready=Unknown);")),
        ];
        for (ready, owner, want) in table {
            let mut n = node("n", if ready.is_empty() { "True" } else { ready });
            if ready.is_empty() {
                n.status.conditions.clear();
            }
            let got = node_problem(&n, owner);
            match want {
                None => assert_eq!(got, None, "{ready} {owner:?}"),
                Some(w) => {
                    let got = got.unwrap_or_else(|| panic!("{ready} {owner:?}: no problem"));
                    assert!(got.starts_with(w), "{ready} {owner:?}: {got}");
                }
            }
        }
        // A host in maintenance: the advice is to complete it (the stage is on the Node).
        let mut m = node("cp1", "Unknown");
        m.metadata.annotations.insert(
            crate::kubernetes::api::MAINTENANCE_STAGE_ANNOTATION.into(),
            "StopControlPlane".into(),
        );
        let p = node_problem(&m, NodeOwner::Inventory).unwrap();
        assert!(
            p.ends_with("cp1 is in maintenance (stage StopControlPlane): its kubelet talks to its own apiserver, which the maintenance stopped; `hactl maintenance complete cp1` brings it back"),
            "{p}"
        );
        m.metadata.annotations.insert(
            crate::kubernetes::api::MAINTENANCE_STAGE_ANNOTATION.into(),
            "Complete".into(),
        );
        assert!(node_problem(&m, NodeOwner::Inventory)
            .unwrap()
            .contains("journalctl"));
        // An inventory host's problem names both ways out.
        let p = node_problem(&node("w1", "False"), NodeOwner::Inventory).unwrap();
        assert!(
            p.contains("`hactl up` starts node components that are stopped"),
            "{p}"
        );
        assert!(p.contains("`hactl remove w1`"), "{p}");
    }

    #[test]
    fn every_node_host_is_a_row_and_a_missing_or_unready_node_a_problem() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("inventories/example.yaml");
        let inv = crate::inventory::load(&path).unwrap();
        let mut cp1 = node("cp1", "True");
        cp1.spec.taints.push(Taint {
            key: "node-role.kubernetes.io/master".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
        cp1.spec.pod_cidr = Some("10.244.0.0/24".into());
        let nodes = [cp1, node("cp3", "Unknown"), node("extra", "True")];
        let (rows, problems) = node_rows(&inv, &nodes);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cp1", "cp2", "cp3", "extra"]);
        assert_eq!(rows[0].taints, ["node-role.kubernetes.io/master:NoSchedule"]);
        assert_eq!(
            (rows[0].ready.as_str(), rows[0].pod_cidr.as_str()),
            ("True", "10.244.0.0/24")
        );
        assert!(!rows[1].registered);
        assert!(!rows[3].in_inventory, "a Node hactl does not manage is listed");
        assert_eq!(
            problems,
            [
                "cp2 runs no registered Node: run `hactl up` to install and start its kubelet, or see its log (`journalctl -u kubelet` on cp2)",
                "Node cp3 is not Ready (Ready=Unknown: NodeStatusUnknown Kubelet stopped posting node status.); if cp3 is up, see `journalctl -u kubelet -u containerd` there, and `hactl up` starts node components that are stopped; if it is gone for good, `hactl remove cp3` (a worker) or `hactl replace` (a control-plane host)",
            ]
        );
        // A foreign Node that is not Ready degrades the cluster too.
        let (_, problems) = node_rows(&inv, &[node("cp1", "True"), node("gone", "Unknown")]);
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("Node gone is not Ready") && p.contains("`kubectl delete node gone`")),
            "{problems:?}"
        );
        let t = table(&KubernetesStatus {
            nodes: rows,
            ..KubernetesStatus::default()
        });
        assert!(t.contains("cp2        MISSING"), "{t}");
        assert!(t.contains("(not in the inventory)"), "{t}");
    }
}
