//! The CAs as the cluster publishes them: every apiserver writes the CAs of its
//! `--client-ca-file` (key `client-ca-file`) and of its `--requestheader-client-ca-file` (key
//! `requestheader-client-ca-file`) into the ConfigMap kube-system/extension-apiserver-authentication,
//! where aggregated API servers and webhooks read which client certificates to trust, and which
//! may assert a user in request headers.
//!
//! The apiservers only ever **add** to those keys: each merges the CAs already there with its
//! own and drops only expired ones. So after a rotation of the kubernetes or the front-proxy CA
//! the old CA stays published until it expires, unless someone writes the key to the new CA
//! alone; once every apiserver trusts only the new CA, that write is stable (the merge finds
//! nothing to add).
//!
//! Invariant: the only write is a merge patch of one key; nothing else in the ConfigMap (the
//! other key, the header names) is touched.

use super::api::{status_error, ApiClient, ApiError};

/// The ConfigMap's namespace and name.
pub const NAMESPACE: &str = "kube-system";
pub const CONFIGMAP: &str = "extension-apiserver-authentication";
/// The key that carries the front-proxy CAs.
pub const REQUESTHEADER_KEY: &str = "requestheader-client-ca-file";
/// The key that carries the kubernetes (client) CAs.
pub const CLIENT_CA_KEY: &str = "client-ca-file";

/// The key that publishes `kind`'s CAs; `None` for the etcd CA, which is not published.
pub fn key_of(kind: crate::pki::CaKind) -> Option<&'static str> {
    match kind {
        crate::pki::CaKind::Kubernetes => Some(CLIENT_CA_KEY),
        crate::pki::CaKind::FrontProxy => Some(REQUESTHEADER_KEY),
        crate::pki::CaKind::Etcd => None,
    }
}

fn path() -> String {
    format!("/api/v1/namespaces/{NAMESPACE}/configmaps/{CONFIGMAP}")
}

/// Whether two PEM bundles hold the same certificates (as sets of DER: order, text wrapping and
/// duplicates do not count). An unreadable bundle holds nothing.
pub fn same_certificates(a: &str, b: &str) -> bool {
    let set = |pem: &str| -> std::collections::BTreeSet<Vec<u8>> {
        crate::pki::bundle_ders(pem)
            .unwrap_or_default()
            .into_iter()
            .collect()
    };
    let (a, b) = (set(a), set(b));
    !a.is_empty() && a == b
}

/// The merge patch that makes `key` hold `trust` alone.
pub fn patch(key: &str, trust: &str) -> serde_json::Value {
    serde_json::json!({ "data": { key: trust } })
}

/// `key`'s PEM bundle as published; `None` when the ConfigMap or the key is missing.
pub async fn published(api: &ApiClient, key: &str) -> Result<Option<String>, ApiError> {
    let path = path();
    let (code, body) = api.request(reqwest::Method::GET, &path, "", None).await?;
    match code {
        404 => Ok(None),
        200 => {
            let cm: serde_json::Value = serde_json::from_str(&body).map_err(|source| ApiError::Decode {
                what: format!("GET {path}"),
                source,
            })?;
            Ok(cm["data"][key].as_str().map(str::to_string))
        }
        _ => Err(status_error(format!("GET {path}"), code, &body)),
    }
}

/// Writes `key` to `trust` alone (a merge patch of that key only).
pub async fn publish(api: &ApiClient, key: &str, trust: &str) -> Result<(), ApiError> {
    let path = path();
    let (code, body) = api
        .request(
            reqwest::Method::PATCH,
            &path,
            "application/merge-patch+json",
            Some(&patch(key, trust)),
        )
        .await?;
    match code {
        200 => Ok(()),
        _ => Err(status_error(format!("PATCH {path}"), code, &body)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_cas() -> (String, String) {
        let tmp = tempfile::tempdir().unwrap();
        let inv = crate::inventory::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/inventories/example.yaml"
        )))
        .unwrap();
        let now = time::OffsetDateTime::now_utc();
        let a = crate::pki::ensure(&tmp.path().join("a"), &inv, now).unwrap();
        let b = crate::pki::ensure(&tmp.path().join("b"), &inv, now).unwrap();
        (
            a.front_proxy_ca().unwrap().cert_pem.clone(),
            b.front_proxy_ca().unwrap().cert_pem.clone(),
        )
    }

    #[test]
    fn bundles_compare_as_sets_of_certificates() {
        let (old, new) = two_cas();
        assert!(same_certificates(&new, &new));
        assert!(same_certificates(
            &format!("{old}{new}"),
            &format!("{new}\n{old}{new}")
        ));
        assert!(
            !same_certificates(&format!("{old}{new}"), &new),
            "the old CA is still published"
        );
        assert!(!same_certificates("", ""), "nothing published is not a match");
        assert!(!same_certificates("garbage", &new));
        for key in [REQUESTHEADER_KEY, CLIENT_CA_KEY] {
            assert_eq!(patch(key, &new)["data"][key], new.as_str());
            assert_eq!(
                patch(key, &new)["data"].as_object().unwrap().len(),
                1,
                "one key only"
            );
        }
        assert_eq!(key_of(crate::pki::CaKind::Kubernetes), Some(CLIENT_CA_KEY));
        assert_eq!(key_of(crate::pki::CaKind::FrontProxy), Some(REQUESTHEADER_KEY));
        assert_eq!(key_of(crate::pki::CaKind::Etcd), None);
    }
}
