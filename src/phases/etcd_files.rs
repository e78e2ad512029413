//! The files an etcd host must hold, rendered from the inventory and the PKI.
//!
//! Invariant: pure and deterministic; keys are uploaded 0600 and never printed (an `Upload`
//! shows only path, mode, owner, size and sha256).

use super::{Ctx, PlanError};
use crate::etcd;
use crate::inventory::{BinarySource, Host};
use crate::pki::EtcdClient;
use crate::plan::Upload;
use crate::render;

/// Where etcd and etcdctl live on the host for the inventory's binary source.
pub fn binary_paths(source: &BinarySource) -> (&'static str, &'static str) {
    match source {
        BinarySource::Package => ("/usr/bin/etcd", "/usr/bin/etcdctl"),
        _ => ("/usr/local/bin/etcd", "/usr/local/bin/etcdctl"),
    }
}

/// Every path an etcd host holds for hactl, for the facts probe.
pub fn managed_paths(source: &BinarySource) -> Vec<String> {
    let mut paths: Vec<String> = [
        "ca.crt",
        "server.crt",
        "server.key",
        "peer.crt",
        "peer.key",
        "client.crt",
        "client.key",
    ]
    .iter()
    .map(|f| format!("{}/{f}", etcd::PKI_DIR))
    .collect();
    paths.extend(
        [
            etcd::ETCDCTL_WRAPPER,
            etcd::MEMBER_SCRIPT,
            etcd::UNIT_PATH,
            etcd::INITIAL_ENV_PATH,
        ]
        .map(String::from),
    );
    if !matches!(source, BinarySource::Package) {
        paths.extend(["etcd", "etcdctl", "etcdutl"].map(|b| format!("{}/{b}", etcd::BIN_DIR)));
    }
    paths
}

/// Certificates, keys, helper scripts and the unit (not the initial env: see [`initial_env`]).
pub fn member_files(host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Upload>, PlanError> {
    let inv = ctx.inv;
    let pki = ctx.pki;
    let dir = etcd::PKI_DIR;
    let mut files = vec![Upload::new(
        format!("{dir}/ca.crt"),
        0o644,
        "root",
        "root",
        pki.etcd_trust_pem().into_bytes(),
    )];
    if let Some(server) = pki.etcd_server(&host.name) {
        files.push(Upload::new(
            format!("{dir}/server.crt"),
            0o644,
            "root",
            "root",
            server.cert_pem.clone().into_bytes(),
        ));
        files.push(Upload::new(
            format!("{dir}/server.key"),
            0o600,
            "etcd",
            "etcd",
            server.key_pem.expose().as_bytes().to_vec(),
        ));
    }
    if let Some(peer) = pki.etcd_peer(&host.name) {
        files.push(Upload::new(
            format!("{dir}/peer.crt"),
            0o644,
            "root",
            "root",
            peer.cert_pem.clone().into_bytes(),
        ));
        files.push(Upload::new(
            format!("{dir}/peer.key"),
            0o600,
            "etcd",
            "etcd",
            peer.key_pem.expose().as_bytes().to_vec(),
        ));
    }
    let client = pki.etcd_client(EtcdClient::Hactl);
    files.push(Upload::new(
        format!("{dir}/client.crt"),
        0o644,
        "root",
        "root",
        client.cert_pem.clone().into_bytes(),
    ));
    files.push(Upload::new(
        format!("{dir}/client.key"),
        0o600,
        "root",
        "root",
        client.key_pem.expose().as_bytes().to_vec(),
    ));

    let (etcd_bin, etcdctl_bin) = binary_paths(&inv.etcd.source);
    let wrapper = render::render(
        "hactl-etcdctl",
        &render::EtcdctlWrapper {
            etcdctl: etcdctl_bin.to_string(),
            pki_dir: dir.to_string(),
            client_port: inv.etcd.client_port,
        },
    )?;
    files.push(Upload::new(
        etcd::ETCDCTL_WRAPPER,
        0o755,
        "root",
        "root",
        wrapper.into_bytes(),
    ));
    let member = render::render("hactl-etcd-member", &serde_json::json!({}))?;
    files.push(Upload::new(
        etcd::MEMBER_SCRIPT,
        0o755,
        "root",
        "root",
        member.into_bytes(),
    ));
    let unit = render::render(
        "etcd.service",
        &render::EtcdUnit {
            cluster: inv.name.clone(),
            name: host.name.clone(),
            address: host.url_host(),
            binary: etcd_bin.to_string(),
            data_dir: inv.etcd.data_dir.clone(),
            client_port: inv.etcd.client_port,
            peer_port: inv.etcd.peer_port,
            metrics_port: etcd::METRICS_PORT,
            health_on_address: !inv.with_role(crate::inventory::Role::LoadBalancer).is_empty(),
            pki_dir: dir.to_string(),
            heartbeat_interval: inv.etcd.heartbeat_interval_ms,
            election_timeout: inv.etcd.election_timeout_ms,
            quota_backend_bytes: inv.etcd.quota_backend_bytes,
            auto_compaction_retention: inv.etcd.auto_compaction_retention.clone(),
            extra_args: inv.etcd.extra_args.clone(),
        },
    )?;
    files.push(Upload::new(
        etcd::UNIT_PATH,
        0o644,
        "root",
        "root",
        unit.into_bytes(),
    ));
    Ok(files)
}

/// The initial env of a member whose data dir is empty: all inventory members for a bootstrap,
/// or the current members plus the joiners up to and including this one for a learner join.
/// `None` when the member already has data (etcd would ignore the file).
pub fn initial_env(host: &Host, ctx: &Ctx<'_>) -> Result<Option<Upload>, PlanError> {
    let inv = ctx.inv;
    if ctx.etcd.has_data.contains(&host.name) {
        return Ok(None);
    }
    let etcd_hosts = inv.with_role(crate::inventory::Role::Etcd);
    let (members, state): (Vec<(String, String)>, &str) = if ctx.etcd.is_fresh() {
        (
            etcd_hosts
                .iter()
                .map(|h| (h.name.clone(), etcd::peer_url(inv, h)))
                .collect(),
            "new",
        )
    } else {
        let mut members: Vec<(String, String)> = Vec::new();
        if let Some(list) = &ctx.etcd.members {
            for m in &list.members {
                // Unstarted members have no name yet; the inventory knows it by peer URL.
                let name = if m.is_started() {
                    m.name.clone()
                } else {
                    etcd_hosts
                        .iter()
                        .find(|h| m.peer_urls.contains(&etcd::peer_url(inv, h)))
                        .map(|h| h.name.clone())
                        .unwrap_or_default()
                };
                for url in &m.peer_urls {
                    members.push((name.clone(), url.clone()));
                }
            }
        }
        for joiner in &ctx.etcd.joiners {
            let h = inv.host(joiner).expect("joiners come from the inventory");
            let url = etcd::peer_url(inv, h);
            if !members.iter().any(|(_, u)| *u == url) {
                members.push((joiner.clone(), url));
            }
            if joiner == &host.name {
                break;
            }
        }
        (members, "existing")
    };
    let initial_cluster = members
        .iter()
        .map(|(n, u)| format!("{n}={u}"))
        .collect::<Vec<_>>()
        .join(",");
    let text = render::render(
        "etcd-initial.env",
        &render::EtcdInitialEnv {
            name: host.name.clone(),
            initial_cluster,
            state: state.to_string(),
            token: ctx.etcd.token.clone().unwrap_or_else(|| etcd::token(inv)),
        },
    )?;
    Ok(Some(Upload::new(
        etcd::INITIAL_ENV_PATH,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    )))
}
