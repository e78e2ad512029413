//! The RBAC objects hactl keeps in the cluster: one ClusterRoleBinding that lets the apiserver's
//! kubelet client (`kube-apiserver-kubelet-client`, group [`KUBELET_CLIENT_GROUP`]) reach the
//! kubelets' API (logs, exec, port-forward, metrics) through the built-in ClusterRole
//! `system:kubelet-api-admin`, instead of the unrestricted `system:masters` group it carried.
//!
//! Invariant: the object is built purely ([`kubelet_client_binding`]); [`ensure_kubelet_client_binding`]
//! only creates it when missing and never changes or deletes one that differs (it reports it).

use std::path::Path;

use super::api::{ApiClient, ApiError};
use crate::exec::Transports;
use crate::inventory::{Inventory, Role};

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("no apiserver answered /readyz for the kubelet client's ClusterRoleBinding: {0}")]
    NoApiserver(String),
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// The group (`O=`) of the apiserver's kubelet client certificate, which the PKI issues.
pub use crate::pki::KUBELET_CLIENT_GROUP;
/// The ClusterRoleBinding that binds [`KUBELET_CLIENT_GROUP`] to [`KUBELET_API_ROLE`].
pub const KUBELET_CLIENT_BINDING: &str = "hactl:apiserver-kubelet-client";
/// The built-in ClusterRole for the kubelet API (every apiserver bootstraps it).
pub const KUBELET_API_ROLE: &str = "system:kubelet-api-admin";

const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

/// The ClusterRoleBinding of the kubelet client group.
pub fn kubelet_client_binding() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": KUBELET_CLIENT_BINDING,
            "labels": { "app.kubernetes.io/managed-by": "hactl" },
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": KUBELET_API_ROLE,
        },
        "subjects": [{
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Group",
            "name": KUBELET_CLIENT_GROUP,
        }],
    })
}

/// What [`ensure_kubelet_client_binding`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// The binding was there with the expected role and subject.
    Present,
    /// hactl created it.
    Created,
}

/// Whether an existing binding (the API's JSON) grants [`KUBELET_API_ROLE`] to the group.
pub fn binding_fits(existing: &serde_json::Value) -> bool {
    let role = &existing["roleRef"];
    role["kind"] == "ClusterRole"
        && role["name"] == KUBELET_API_ROLE
        && existing["subjects"].as_array().is_some_and(|subjects| {
            subjects
                .iter()
                .any(|s| s["kind"] == "Group" && s["name"] == KUBELET_CLIENT_GROUP)
        })
}

/// Creates the kubelet client's ClusterRoleBinding when it is missing (idempotent). A binding of
/// that name that grants something else is an error naming it, never overwritten.
pub async fn ensure_kubelet_client_binding(api: &ApiClient) -> Result<Ensured, ApiError> {
    let path = format!("{BINDINGS}/{}", KUBELET_CLIENT_BINDING.replace(':', "%3A"));
    let (code, body) = api.request(reqwest::Method::GET, &path, "", None).await?;
    match code {
        200 => {
            let existing: serde_json::Value =
                serde_json::from_str(&body).map_err(|source| ApiError::Decode {
                    what: format!("GET {path}"),
                    source,
                })?;
            if binding_fits(&existing) {
                Ok(Ensured::Present)
            } else {
                Err(ApiError::Status {
                    what: format!("ClusterRoleBinding {KUBELET_CLIENT_BINDING}"),
                    code,
                    message: format!(
                        "it exists but does not bind group {KUBELET_CLIENT_GROUP} to ClusterRole \
                         {KUBELET_API_ROLE}; fix or delete it (`kubectl delete clusterrolebinding \
                         {KUBELET_CLIENT_BINDING}`) and run `hactl up` again"
                    ),
                })
            }
        }
        404 => {
            let (code, body) = api
                .request(
                    reqwest::Method::POST,
                    BINDINGS,
                    "application/json",
                    Some(&kubelet_client_binding()),
                )
                .await?;
            match code {
                200 | 201 => Ok(Ensured::Created),
                // Another run created it in between.
                409 => Ok(Ensured::Present),
                _ => Err(super::api::status_error(format!("POST {BINDINGS}"), code, &body)),
            }
        }
        _ => Err(super::api::status_error(format!("GET {path}"), code, &body)),
    }
}

/// [`ensure_kubelet_client_binding`] through the first control-plane apiserver (in inventory
/// order, over an SSH port forward on `transports`) that answers `/readyz`; the host it used.
pub async fn ensure_through_first_ready(
    inv: &Inventory,
    transports: &Transports,
    pki_dir: &Path,
) -> Result<(String, Ensured), RbacError> {
    let (host, api) = first_ready(inv, transports, pki_dir)
        .await
        .map_err(RbacError::NoApiserver)?;
    Ok((host, ensure_kubelet_client_binding(&api).await?))
}

/// A client of the first control-plane apiserver (in inventory order, over an SSH port forward
/// on `transports`) that answers `/readyz`, and its host; else every host's reason, joined.
pub async fn first_ready(
    inv: &Inventory,
    transports: &Transports,
    pki_dir: &Path,
) -> Result<(String, ApiClient), String> {
    let mut errors = Vec::new();
    for h in inv.with_role(Role::ControlPlane) {
        let Some(t) = transports.get(&h.name) else {
            continue;
        };
        let api = match ApiClient::through(t.as_ref(), &h.name, &h.address.to_string(), pki_dir).await {
            Ok(api) => api,
            Err(e) => {
                errors.push(format!("{}: {}", h.name, chain(&e)));
                continue;
            }
        };
        match api.request(reqwest::Method::GET, "/readyz", "", None).await {
            Ok((200, _)) => return Ok((h.name.clone(), api)),
            Ok((code, _)) => errors.push(format!("{}: /readyz answered {code}", h.name)),
            Err(e) => errors.push(format!("{}: {}", h.name, chain(&e))),
        }
    }
    Err(if errors.is_empty() {
        "no control-plane host".into()
    } else {
        errors.join("; ")
    })
}

/// `error: cause: cause …`, for the one-line summary of every host tried.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binding_grants_the_kubelet_api_role_to_the_group_only() {
        let b = kubelet_client_binding();
        assert!(binding_fits(&b));
        assert_eq!(b["metadata"]["name"], KUBELET_CLIENT_BINDING);
        assert_eq!(b["subjects"].as_array().unwrap().len(), 1);

        let mut other_role = b.clone();
        other_role["roleRef"]["name"] = "cluster-admin".into();
        assert!(!binding_fits(&other_role));
        let mut other_group = b.clone();
        other_group["subjects"][0]["name"] = "system:masters".into();
        assert!(!binding_fits(&other_group));
        let mut user = b;
        user["subjects"][0]["kind"] = "User".into();
        assert!(!binding_fits(&user));
    }
}
