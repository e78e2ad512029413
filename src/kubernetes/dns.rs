//! Cluster DNS: the CoreDNS objects `up` keeps in the cluster when the inventory names an image
//! (`kubernetes.dns`). hactl ships no CoreDNS image; without the section the cluster has no DNS
//! (docs/reference/kubernetes.md, "Cluster DNS").
//!
//! Six objects: the `coredns` ServiceAccount, the `system:coredns` ClusterRole and its binding,
//! the `coredns` ConfigMap (the Corefile), the `coredns` Deployment and the `kube-dns` Service
//! (the kubelets' `clusterDNS` address). Each is sent by server-side apply (field manager
//! `hactl`), which creates or updates in one request, and carries two marks: the label
//! [`MANAGED_BY`]`=hactl` and the annotation [`APPLIED`], the sha256 of the object as hactl
//! rendered it.
//!
//! Planning reads each object through the API first ([`read`], read-only) and decides in
//! [`decide`] (pure): an object that is missing, or hactl's with another digest, is applied; one
//! of the same name that hactl did not create is refused (exit 2), never overwritten; a
//! `kube-dns` Service whose address differs from `clusterIp` is refused too (a Service address
//! cannot change). When the API cannot be read (a first bring-up), every object is planned: apply
//! is idempotent, and the next run plans nothing.

use std::collections::BTreeMap;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::api::{ApiClient, ApiError};
use crate::inventory::DnsSpec;
use crate::plan::ApiRequest;

/// The label every object carries (value [`MANAGER`]).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The field manager of the applies and the label's value.
pub const MANAGER: &str = "hactl";
/// The annotation holding the sha256 of the object as hactl rendered it.
pub const APPLIED: &str = "hactl.io/applied-sha256";
/// The namespace of the namespaced objects.
pub const NAMESPACE: &str = "kube-system";
/// The Deployment `status` reads.
pub const DEPLOYMENT: &str = "coredns";
/// The Service of the cluster DNS address (its name by custom, which tools look for).
pub const SERVICE: &str = "kube-dns";

/// One object hactl keeps: where it lives and what it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct DnsObject {
    /// `Deployment kube-system/coredns`: for messages.
    pub what: String,
    /// The object's path in the API.
    pub path: String,
    /// The object as applied, its [`APPLIED`] annotation set.
    pub body: serde_json::Value,
}

impl DnsObject {
    /// The digest in the body's [`APPLIED`] annotation.
    pub fn digest(&self) -> &str {
        self.body["metadata"]["annotations"][APPLIED]
            .as_str()
            .unwrap_or("")
    }

    /// The server-side apply of the body.
    pub fn apply(&self) -> ApiRequest {
        ApiRequest {
            method: "PATCH".into(),
            path: format!("{}?fieldManager={MANAGER}&force=true", self.path),
            content_type: "application/apply-patch+yaml".into(),
            body: Some(self.body.clone()),
        }
    }
}

/// What the API holds under one object's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    Absent,
    Present {
        /// It carries [`MANAGED_BY`]`=hactl`.
        managed: bool,
        /// Its [`APPLIED`] annotation.
        applied: Option<String>,
        /// A Service's `spec.clusterIP`.
        cluster_ip: Option<String>,
    },
}

impl Existing {
    /// Reads an object's JSON as the API answered it.
    pub fn parse(json: &serde_json::Value) -> Existing {
        let meta = &json["metadata"];
        Existing::Present {
            managed: meta["labels"][MANAGED_BY] == MANAGER,
            applied: meta["annotations"][APPLIED].as_str().map(str::to_string),
            cluster_ip: json["spec"]["clusterIP"].as_str().map(str::to_string),
        }
    }
}

/// What planning knows about the objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsFacts {
    /// The API could not be asked (why).
    Unknown(String),
    /// What it holds, by object path.
    Read(BTreeMap<String, Existing>),
}

/// The six objects of `spec`, in the order they are applied (what a pod needs before it).
pub fn objects(spec: &DnsSpec) -> Vec<DnsObject> {
    let labels = || json!({ MANAGED_BY: MANAGER, "k8s-app": "kube-dns" });
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let bodies = [
        (
            "ServiceAccount",
            format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/coredns"),
            json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": { "name": "coredns", "namespace": NAMESPACE, "labels": labels() },
            }),
        ),
        (
            "ClusterRole",
            format!("{rbac}/clusterroles/system%3Acoredns"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": { "name": "system:coredns", "labels": labels() },
                "rules": [
                    { "apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"] },
                    { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"] },
                ],
            }),
        ),
        (
            "ClusterRoleBinding",
            format!("{rbac}/clusterrolebindings/system%3Acoredns"),
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": { "name": "system:coredns", "labels": labels() },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns" },
                "subjects": [{ "kind": "ServiceAccount", "name": "coredns", "namespace": NAMESPACE }],
            }),
        ),
        (
            "ConfigMap",
            format!("/api/v1/namespaces/{NAMESPACE}/configmaps/coredns"),
            json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": "coredns", "namespace": NAMESPACE, "labels": labels() },
                "data": { "Corefile": corefile(&spec.domain) },
            }),
        ),
        (
            "Deployment",
            format!("/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}"),
            deployment(spec, labels()),
        ),
        (
            "Service",
            format!("/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}"),
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": SERVICE,
                    "namespace": NAMESPACE,
                    "labels": { MANAGED_BY: MANAGER, "k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS" },
                },
                "spec": {
                    "selector": { "k8s-app": "kube-dns" },
                    "clusterIP": spec.cluster_ip.to_string(),
                    "ports": [
                        { "name": "dns", "port": 53, "protocol": "UDP" },
                        { "name": "dns-tcp", "port": 53, "protocol": "TCP" },
                        { "name": "metrics", "port": 9153, "protocol": "TCP" },
                    ],
                },
            }),
        ),
    ];
    bodies
        .into_iter()
        .map(|(kind, path, mut body)| {
            let digest = hex::encode(Sha256::digest(body.to_string().as_bytes()));
            body["metadata"]["annotations"] = json!({ APPLIED: digest });
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
            let what = match body["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            };
            DnsObject { what, path, body }
        })
        .collect()
}

/// CoreDNS's configuration: the cluster domain and the reverse zones from the API, everything
/// else forwarded to the node's resolvers.
fn corefile(domain: &str) -> String {
    format!(
        ".:53 {{
    errors
    health {{
        lameduck 5s
    }}
    ready
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    prometheus :9153
    forward . /etc/resolv.conf {{
        max_concurrent 1000
    }}
    cache 30
    loop
    reload
    loadbalance
}}
"
    )
}

/// The CoreDNS Deployment: critical priority, spread over nodes where it can be, on control-plane
/// nodes too (it tolerates their taints, so a cluster without workers has DNS), resolving through
/// the node's own resolvers (`dnsPolicy: Default`), read-only root, port 53 by capability only.
fn deployment(spec: &DnsSpec, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": DEPLOYMENT, "namespace": NAMESPACE, "labels": labels },
        "spec": {
            "replicas": spec.replicas,
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxUnavailable": 1 } },
            "selector": { "matchLabels": { "k8s-app": "kube-dns" } },
            "template": {
                "metadata": { "labels": { "k8s-app": "kube-dns" } },
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": "coredns",
                    "nodeSelector": { "kubernetes.io/os": "linux" },
                    "tolerations": [
                        { "key": "CriticalAddonsOnly", "operator": "Exists" },
                        { "key": "node-role.kubernetes.io/master", "effect": "NoSchedule" },
                        { "key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule" },
                    ],
                    "affinity": { "podAntiAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": { "matchLabels": { "k8s-app": "kube-dns" } },
                        },
                    }] } },
                    "dnsPolicy": "Default",
                    "containers": [{
                        "name": "coredns",
                        "image": spec.image,
                        "imagePullPolicy": "IfNotPresent",
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "resources": {
                            "limits": { "memory": "170Mi" },
                            "requests": { "cpu": "100m", "memory": "70Mi" },
                        },
                        "ports": [
                            { "name": "dns", "containerPort": 53, "protocol": "UDP" },
                            { "name": "dns-tcp", "containerPort": 53, "protocol": "TCP" },
                            { "name": "metrics", "containerPort": 9153, "protocol": "TCP" },
                        ],
                        "volumeMounts": [{ "name": "config", "mountPath": "/etc/coredns", "readOnly": true }],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": { "add": ["NET_BIND_SERVICE"], "drop": ["all"] },
                        },
                        "livenessProbe": {
                            "httpGet": { "path": "/health", "port": 8080 },
                            "initialDelaySeconds": 60,
                            "timeoutSeconds": 5,
                            "failureThreshold": 5,
                        },
                        "readinessProbe": { "httpGet": { "path": "/ready", "port": 8181 } },
                    }],
                    "volumes": [{
                        "name": "config",
                        "configMap": { "name": "coredns", "items": [{ "key": "Corefile", "path": "Corefile" }] },
                    }],
                },
            },
        },
    })
}

/// Why planning refuses (exit 2): an object hactl did not create, or a changed Service address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DnsRefusal(pub String);

/// The applies `up` sends for `spec` given what the API holds; a refusal names the object and
/// what to do. Unknown facts plan every object (apply is idempotent).
pub fn decide(spec: &DnsSpec, facts: &DnsFacts) -> Result<Vec<ApiRequest>, DnsRefusal> {
    let mut out = Vec::new();
    for object in objects(spec) {
        let existing = match facts {
            DnsFacts::Unknown(_) => &Existing::Absent,
            DnsFacts::Read(read) => read.get(&object.path).unwrap_or(&Existing::Absent),
        };
        match existing {
            Existing::Absent => out.push(object.apply()),
            Existing::Present { managed: false, .. } => {
                return Err(DnsRefusal(format!(
                    "{} exists and hactl did not create it (no label {MANAGED_BY}={MANAGER}): \
                     another DNS is installed; remove kubernetes.dns from the inventory to keep \
                     it, or delete it (`kubectl delete` that object) and run `hactl up` again",
                    object.what
                )))
            }
            Existing::Present {
                cluster_ip: Some(ip), ..
            } if object.body["kind"] == "Service" && *ip != spec.cluster_ip.to_string() => {
                return Err(DnsRefusal(format!(
                    "{} has the address {ip} but kubernetes.dns.clusterIp is {}: a Service's \
                     address cannot change; set clusterIp back to {ip}, or delete the Service \
                     (`kubectl -n {NAMESPACE} delete service {SERVICE}`; pods keep resolving \
                     through {ip} until they are recreated) and run `hactl up` again",
                    object.what, spec.cluster_ip
                )))
            }
            Existing::Present { applied, .. } => {
                if applied.as_deref() != Some(object.digest()) {
                    out.push(object.apply());
                }
            }
        }
    }
    Ok(out)
}

/// Reads the objects of `spec` through `api` (GETs only, all six at once over the one client).
pub async fn read(api: &ApiClient, spec: &DnsSpec) -> Result<BTreeMap<String, Existing>, ApiError> {
    let reads = objects(spec).into_iter().map(|object| async move {
        let what = format!("GET {}", object.path);
        let (code, body) = api.request(reqwest::Method::GET, &object.path, "", None).await?;
        let existing = match code {
            404 => Existing::Absent,
            200 => {
                let json: serde_json::Value =
                    serde_json::from_str(&body).map_err(|source| ApiError::Decode { what, source })?;
                Existing::parse(&json)
            }
            _ => return Err(super::api::status_error(what, code, &body)),
        };
        Ok((object.path, existing))
    });
    futures::future::try_join_all(reads)
        .await
        .map(|pairs| pairs.into_iter().collect())
}

/// The Deployment's replicas as `status` shows them: (ready, wanted).
pub fn deployment_readiness(json: &serde_json::Value) -> (u64, u64) {
    let wanted = json["spec"]["replicas"].as_u64().unwrap_or(1);
    let ready = json["status"]["readyReplicas"].as_u64().unwrap_or(0);
    (ready, wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DnsSpec {
        DnsSpec {
            image: "registry.k8s.io/coredns/coredns:v1.8.0".into(),
            cluster_ip: "10.96.0.10".parse().unwrap(),
            domain: "cluster.local".into(),
            replicas: 2,
        }
    }

    fn ours(o: &DnsObject) -> Existing {
        Existing::parse(&o.body)
    }

    #[test]
    fn objects_carry_the_marks_and_the_spec() {
        let objects = objects(&spec());
        let whats: Vec<&str> = objects.iter().map(|o| o.what.as_str()).collect();
        assert_eq!(
            whats,
            [
                "ServiceAccount kube-system/coredns",
                "ClusterRole system:coredns",
                "ClusterRoleBinding system:coredns",
                "ConfigMap kube-system/coredns",
                "Deployment kube-system/coredns",
                "Service kube-system/kube-dns",
            ]
        );
        for o in &objects {
            assert_eq!(o.body["metadata"]["labels"][MANAGED_BY], MANAGER, "{}", o.what);
            assert_eq!(o.digest().len(), 64, "{}", o.what);
            let apply = o.apply();
            assert_eq!(apply.method, "PATCH");
            assert_eq!(apply.content_type, "application/apply-patch+yaml");
            assert!(
                apply.path.starts_with(&o.path) && apply.path.ends_with("?fieldManager=hactl&force=true")
            );
        }
        let deployment = &objects[4].body;
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.k8s.io/coredns/coredns:v1.8.0"
        );
        assert_eq!(objects[5].body["spec"]["clusterIP"], "10.96.0.10");
        let corefile = objects[3].body["data"]["Corefile"].as_str().unwrap();
        assert!(
            corefile.contains("kubernetes cluster.local in-addr.arpa ip6.arpa {"),
            "{corefile}"
        );
        // Another image changes the Deployment's digest and nothing else's.
        let mut other = spec();
        other.image = "mirror.example/coredns:1.8.0".into();
        let changed: Vec<String> = objects
            .iter()
            .zip(super::objects(&other))
            .filter(|(a, b)| a.digest() != b.digest())
            .map(|(a, _)| a.what.clone())
            .collect();
        assert_eq!(changed, ["Deployment kube-system/coredns"]);
    }

    #[test]
    fn decide_applies_what_is_missing_or_changed_and_refuses_what_is_not_ours() {
        let spec = spec();
        let objects = objects(&spec);
        let all: BTreeMap<String, Existing> = objects.iter().map(|o| (o.path.clone(), ours(o))).collect();
        let paths = |r: &[ApiRequest]| -> Vec<String> { r.iter().map(|r| r.path.clone()).collect() };

        // Unknown facts and an empty cluster: all six.
        assert_eq!(decide(&spec, &DnsFacts::Unknown("down".into())).unwrap().len(), 6);
        assert_eq!(decide(&spec, &DnsFacts::Read(BTreeMap::new())).unwrap().len(), 6);
        // Everything in place: nothing.
        assert!(decide(&spec, &DnsFacts::Read(all.clone())).unwrap().is_empty());
        // The Deployment of another image: only it.
        let mut old = all.clone();
        old.insert(
            objects[4].path.clone(),
            Existing::Present {
                managed: true,
                applied: Some("0".repeat(64)),
                cluster_ip: None,
            },
        );
        assert_eq!(
            paths(&decide(&spec, &DnsFacts::Read(old)).unwrap()),
            [objects[4].apply().path]
        );
        // A ConfigMap someone else made: refused, named.
        let mut foreign = all.clone();
        foreign.insert(
            objects[3].path.clone(),
            Existing::Present {
                managed: false,
                applied: None,
                cluster_ip: None,
            },
        );
        let refusal = decide(&spec, &DnsFacts::Read(foreign)).unwrap_err().0;
        assert!(
            refusal.contains("ConfigMap kube-system/coredns exists and hactl did not create it"),
            "{refusal}"
        );
        assert!(refusal.contains("remove kubernetes.dns"), "{refusal}");
        // Our Service at another address: refused, the old address named.
        let mut moved = spec.clone();
        moved.cluster_ip = "10.96.0.53".parse().unwrap();
        let refusal = decide(&moved, &DnsFacts::Read(all)).unwrap_err().0;
        assert!(
            refusal.contains("has the address 10.96.0.10 but kubernetes.dns.clusterIp is 10.96.0.53"),
            "{refusal}"
        );
    }

    #[test]
    fn readiness_reads_the_deployment_status() {
        let d = json!({ "spec": { "replicas": 2 }, "status": { "readyReplicas": 1 } });
        assert_eq!(deployment_readiness(&d), (1, 2));
        let fresh = json!({ "spec": { "replicas": 2 }, "status": {} });
        assert_eq!(deployment_readiness(&fresh), (0, 2));
    }
}
