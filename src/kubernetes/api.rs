//! A small client of the Kubernetes API for maintenance and heal: Nodes (cordon, uncordon,
//! annotations), the pods of a node, PodDisruptionBudgets and Evictions (policy/v1, or
//! policy/v1beta1 on the minors that lack v1: the apiserver's `/version` picks, see [`super::gates`]).
//!
//! It authenticates with the admin client certificate hactl generated (`pki/kubernetes/admin.*`
//! in the state directory, `system:masters`) and verifies the apiserver against the Kubernetes
//! CA. It reaches an apiserver through an SSH port forward from a control-plane host to the
//! address that host's apiserver binds (the serving certificate carries 127.0.0.1), or directly
//! at a URL ([`ApiClient::new`]).
//!
//! Invariant: the only writes are the ones named here (Node merge patches and Evictions); key
//! material is read into memory and never printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::drain::{eviction_outcome, Eviction, PodRef};
use super::objects::{List, Node, Pod, PodDisruptionBudget, Status};
use super::API_PORT;
use crate::exec::Transport;

/// The Node annotation that carries the maintenance stage (docs/recovery.md, "Maintenance").
pub const MAINTENANCE_STAGE_ANNOTATION: &str = "hactl.io/maintenance-stage";
/// The Node annotation that carries heal's retry record (docs/recovery.md, "Replace and heal (P0–P10)").
pub const REMEDIATION_ANNOTATION: &str = "hactl.io/remediation-for";

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot read the admin credentials {path}")]
    Credentials {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the admin credentials in {dir} are not usable")]
    Tls {
        dir: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot forward a port to the apiserver")]
    Forward(#[from] crate::ssh::Error),
    #[error("{what} failed")]
    Request {
        what: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: the apiserver answered {code}: {message}")]
    Status {
        what: String,
        code: u16,
        message: String,
    },
    #[error(transparent)]
    TooLarge(std::io::Error),
    #[error("{what}: the answer is not the expected JSON")]
    Decode {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

/// One apiserver, reached with the admin certificate.
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    /// Where the requests go, for messages (`cp2 (10.0.0.12:6443)`).
    pub through: String,
    _forward: Option<crate::ssh::ForwardGuard>,
    /// The apiserver's minor version, asked once (`GET /version`).
    minor: tokio::sync::OnceCell<u64>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .field("through", &self.through)
            .finish_non_exhaustive()
    }
}

/// The CAs a client of the apiservers trusts, from the state directory's PKI directory: the
/// signing kubernetes CA and, during a rotation, the other one (the apiservers present a serving
/// certificate of either until the rotation's last roll).
pub fn trusted_cas(pki_dir: &Path) -> Result<Vec<reqwest::Certificate>, ApiError> {
    let path = pki_dir.join("kubernetes/ca.crt");
    std::fs::metadata(&path).map_err(|source| ApiError::Credentials {
        path: path.clone(),
        source,
    })?;
    let trust = crate::pki::rotate::trust_bundle(pki_dir, crate::pki::CaKind::Kubernetes).map_err(|e| {
        ApiError::Credentials {
            path,
            source: std::io::Error::other(e.to_string()),
        }
    })?;
    reqwest::Certificate::from_pem_bundle(trust.as_bytes()).map_err(|source| ApiError::Tls {
        dir: pki_dir.to_path_buf(),
        source,
    })
}

fn http_client(pki_dir: &Path) -> Result<reqwest::Client, ApiError> {
    let read = |rel: &str| {
        let path = pki_dir.join(rel);
        crate::bounded::read(&path, crate::bounded::TEXT)
            .map_err(|source| ApiError::Credentials { path, source })
    };
    let tls = |source| ApiError::Tls {
        dir: pki_dir.to_path_buf(),
        source,
    };
    let cas = trusted_cas(pki_dir)?;
    let mut identity_pem = read("kubernetes/admin.key")?;
    identity_pem.extend(read("kubernetes/admin.crt")?);
    let identity = reqwest::Identity::from_pem(&identity_pem).map_err(tls)?;
    reqwest::Client::builder()
        .tls_certs_only(cas)
        .identity(identity)
        .timeout(TIMEOUT)
        .build()
        .map_err(tls)
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The merge patch of `spec.unschedulable` (`null` removes it, as kubectl's
/// uncordon leaves it).
pub fn cordon_patch(unschedulable: bool) -> serde_json::Value {
    serde_json::json!({ "spec": { "unschedulable": if unschedulable { serde_json::Value::Bool(true) } else { serde_json::Value::Null } } })
}

/// A merge patch that sets (or, with `None`, removes) one annotation.
pub fn annotation_patch(key: &str, value: Option<&str>) -> serde_json::Value {
    serde_json::json!({ "metadata": { "annotations": { key: value } } })
}

/// The body of an Eviction of `pod` in `api_version` (`policy/v1`, or `policy/v1beta1` before
/// 1.22: [`super::gates::eviction_api_version`]).
pub fn eviction_body(pod: &PodRef, api_version: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": { "name": pod.name, "namespace": pod.namespace },
    })
}

impl ApiClient {
    /// A client of the apiserver at `base` (`https://10.0.0.11:6443`).
    pub fn new(base: &str, pki_dir: &Path) -> Result<ApiClient, ApiError> {
        Ok(ApiClient {
            http: http_client(pki_dir)?,
            base: base.trim_end_matches('/').to_string(),
            through: base.to_string(),
            _forward: None,
            minor: tokio::sync::OnceCell::new(),
        })
    }

    /// A client of the apiserver of the host behind `t`, which binds `address`:6443, through an
    /// SSH port forward that lives as long as the client.
    pub async fn through(
        t: &dyn Transport,
        host: &str,
        address: &str,
        pki_dir: &Path,
    ) -> Result<ApiClient, ApiError> {
        let http = http_client(pki_dir)?;
        let (local, guard) = t.forward(address, API_PORT).await?;
        Ok(ApiClient {
            http,
            base: format!("https://127.0.0.1:{local}"),
            through: format!("{host} ({address}:{API_PORT})"),
            _forward: Some(guard),
            minor: tokio::sync::OnceCell::new(),
        })
    }

    /// Sends one request; returns the status code and the body. Public for tests that create
    /// objects on a real apiserver.
    pub async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, String), ApiError> {
        let what = format!("{method} {path} through {}", self.through);
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("Accept", "application/json");
        if let Some(b) = body {
            req = req.header("Content-Type", content_type).body(b.to_string());
        }
        let resp = req.send().await.map_err(|source| ApiError::Request {
            what: what.clone(),
            source,
        })?;
        let code = resp.status().as_u16();
        let body = match crate::bounded::http_body(
            resp,
            crate::bounded::COMMAND_OUTPUT,
            &format!("the answer to {what}"),
        )
        .await
        {
            Ok(body) => body,
            Err(crate::bounded::BodyError::Read(source)) => return Err(ApiError::Request { what, source }),
            Err(crate::bounded::BodyError::TooLarge(e)) => return Err(ApiError::TooLarge(e)),
        };
        Ok((code, String::from_utf8_lossy(&body).into_owned()))
    }

    /// The apiserver's minor version from `GET /version`, asked once. When it cannot be read the
    /// newest APIs are used (and the request that needs them reports the failure).
    pub async fn minor(&self) -> u64 {
        *self
            .minor
            .get_or_init(|| async {
                match self.request(reqwest::Method::GET, "/version", "", None).await {
                    Ok((200, body)) => parse_version_minor(&body).unwrap_or(u64::MAX),
                    _ => u64::MAX,
                }
            })
            .await
    }

    /// GET that decodes `T`; `None` on 404.
    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>, ApiError> {
        let (code, body) = self.request(reqwest::Method::GET, path, "", None).await?;
        match code {
            404 => Ok(None),
            200 => serde_json::from_str(&body)
                .map(Some)
                .map_err(|source| ApiError::Decode {
                    what: format!("GET {path}"),
                    source,
                }),
            _ => Err(status_error(format!("GET {path}"), code, &body)),
        }
    }

    async fn patch_node(&self, name: &str, patch: &serde_json::Value) -> Result<Node, ApiError> {
        let path = format!("/api/v1/nodes/{}", encode(name));
        let (code, body) = self
            .request(
                reqwest::Method::PATCH,
                &path,
                "application/merge-patch+json",
                Some(patch),
            )
            .await?;
        if code != 200 {
            return Err(status_error(format!("PATCH {path}"), code, &body));
        }
        serde_json::from_str(&body).map_err(|source| ApiError::Decode {
            what: format!("PATCH {path}"),
            source,
        })
    }

    /// The Node `name`, or `None` when no kubelet registered one.
    pub async fn node(&self, name: &str) -> Result<Option<Node>, ApiError> {
        self.get(&format!("/api/v1/nodes/{}", encode(name))).await
    }

    /// Cordon (`true`) or uncordon (`false`) a Node.
    pub async fn set_unschedulable(&self, name: &str, unschedulable: bool) -> Result<Node, ApiError> {
        self.patch_node(name, &cordon_patch(unschedulable)).await
    }

    /// Sets (or removes, with `None`) one annotation on a Node.
    pub async fn annotate_node(&self, name: &str, key: &str, value: Option<&str>) -> Result<Node, ApiError> {
        self.patch_node(name, &annotation_patch(key, value)).await
    }

    /// Every pod bound to `node`, in every namespace.
    pub async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ApiError> {
        let path = format!(
            "/api/v1/pods?fieldSelector={}",
            encode(&format!("spec.nodeName={node}"))
        );
        Ok(self
            .get::<List<Pod>>(&path)
            .await?
            .map(|l| l.items)
            .unwrap_or_default())
    }

    /// Every PodDisruptionBudget of the cluster.
    /// The group/version follows the apiserver's minor; when that path is not served (a build
    /// whose `/version` says no minor) the other one is asked, so budgets are never silently missed.
    pub async fn pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ApiError> {
        let minor = self.minor().await;
        let (first, second) = if minor < 21 { (20, 21) } else { (21, 20) };
        for m in [first, second] {
            if let Some(list) = self
                .get::<List<PodDisruptionBudget>>(&super::gates::pdb_list_path(m))
                .await?
            {
                return Ok(list.items);
            }
        }
        Ok(Vec::new())
    }

    /// Asks the Eviction API to evict `pod` (PodDisruptionBudgets honoured by the apiserver).
    pub async fn evict(&self, pod: &PodRef) -> Result<Eviction, ApiError> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction",
            encode(&pod.namespace),
            encode(&pod.name)
        );
        let (code, body) = self
            .request(
                reqwest::Method::POST,
                &path,
                "application/json",
                Some(&eviction_body(
                    pod,
                    super::gates::eviction_api_version(self.minor().await),
                )),
            )
            .await?;
        Ok(eviction_outcome(code, &body))
    }
}

/// The minor of a `/version` answer (`{"major":"1","minor":"20",…}`; some builds say `"20+"`).
/// A build that left `minor` empty is read by its `gitVersion`; `v0.0.0-master…` (an unstamped
/// build) says nothing.
pub fn parse_version_minor(body: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let minor = v["minor"].as_str().unwrap_or("");
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    if let Ok(m) = digits.parse() {
        return Some(m);
    }
    let git = super::skew::parse_kubernetes_version(v["gitVersion"].as_str()?)?;
    (git.major == 1).then_some(git.minor)
}

pub fn status_error(what: String, code: u16, body: &str) -> ApiError {
    let message = serde_json::from_str::<Status>(body)
        .ok()
        .map(|s| s.message)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| body.trim().chars().take(300).collect());
    ApiError::Status { what, code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_and_bodies_are_what_the_api_expects() {
        assert_eq!(
            cordon_patch(true).to_string(),
            r#"{"spec":{"unschedulable":true}}"#
        );
        assert_eq!(
            cordon_patch(false).to_string(),
            r#"{"spec":{"unschedulable":null}}"#
        );
        assert_eq!(
            annotation_patch(MAINTENANCE_STAGE_ANNOTATION, Some("Drain")).to_string(),
            r#"{"metadata":{"annotations":{"hactl.io/maintenance-stage":"Drain"}}}"#
        );
        assert_eq!(
            annotation_patch(REMEDIATION_ANNOTATION, None).to_string(),
            r#"{"metadata":{"annotations":{"hactl.io/remediation-for":null}}}"#
        );
        let pod = PodRef {
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "u".into(),
        };
        assert_eq!(
            eviction_body(&pod, "policy/v1").to_string(),
            r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"default"}}"#
        );
        assert_eq!(
            eviction_body(&pod, super::super::gates::eviction_api_version(20))["apiVersion"],
            "policy/v1beta1"
        );
        assert_eq!(encode("spec.nodeName=cp1"), "spec.nodeName%3Dcp1");
    }

    #[test]
    fn the_minor_is_read_from_the_version_answer() {
        let v120 = r#"{"major":"1","minor":"20","gitVersion":"v1.20.2","gitCommit":"","gitTreeState":"clean","buildDate":"2026-11-22T13:50:00Z","goVersion":"go1.15.15","compiler":"gc","platform":"linux/amd64"}"#;
        assert_eq!(parse_version_minor(v120), Some(20));
        assert_eq!(parse_version_minor(r#"{"major":"1","minor":"31+"}"#), Some(31));
        assert_eq!(parse_version_minor("not json"), None);
        assert_eq!(
            parse_version_minor(r#"{"major":"","minor":"","gitVersion":"v1.20.2"}"#),
            Some(20)
        );
        // What an unstamped build answers: no minor to be had.
        assert_eq!(
            parse_version_minor(r#"{"major":"","minor":"","gitVersion":"v0.0.0-master+faecb196815e2"}"#),
            None
        );
    }

    #[test]
    fn errors_carry_the_status_message() {
        let e = status_error(
            "PATCH /api/v1/nodes/cp1".into(),
            403,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"cp1\" is forbidden: User \"system:anonymous\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope","reason":"Forbidden","details":{"name":"cp1","kind":"nodes"},"code":403}"#,
        );
        assert_eq!(
            e.to_string(),
            "PATCH /api/v1/nodes/cp1: the apiserver answered 403: nodes \"cp1\" is forbidden: User \"system:anonymous\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
    }
}
