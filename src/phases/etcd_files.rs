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

    let (_, etcdctl_bin) = binary_paths(&inv.etcd.source);
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
    let allowed_cn = peer_cn_enforced(ctx).then_some(etcd::PEER_CN);
    let unit = unit_text(host, ctx, allowed_cn)?;
    files.push(Upload::new(
        etcd::UNIT_PATH,
        0o644,
        "root",
        "root",
        unit.into_bytes(),
    ));
    Ok(files)
}

/// `host`'s etcd unit, with `--peer-cert-allowed-cn=<allowed_cn>` when given.
fn unit_text(host: &Host, ctx: &Ctx<'_>, allowed_cn: Option<&str>) -> Result<String, PlanError> {
    let inv = ctx.inv;
    let (etcd_bin, _) = binary_paths(&inv.etcd.source);
    Ok(render::render(
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
            http_port: etcd::HTTP_PORT,
            member_script: etcd::MEMBER_SCRIPT.to_string(),
            health_on_address: !inv.with_role(crate::inventory::Role::LoadBalancer).is_empty(),
            pki_dir: etcd::PKI_DIR.to_string(),
            heartbeat_interval: inv.etcd.heartbeat_interval_ms,
            election_timeout: inv.etcd.election_timeout_ms,
            quota_backend_bytes: inv.etcd.quota_backend_bytes,
            auto_compaction_retention: inv.etcd.auto_compaction_retention.clone(),
            peer_allowed_cn: allowed_cn.map(str::to_string),
            extra_args: inv.etcd.extra_args.clone(),
        },
    )?)
}

/// Whether the members' peer ports admit only [`etcd::PEER_CN`] (`--peer-cert-allowed-cn`).
///
/// A member given the flag refuses every peer that still presents a certificate of another CN
/// (what hactl issued before peer certificates shared one), so the flag is rendered only when no
/// member host holds such a certificate. Each etcd host whose facts were read must hold either
/// nothing yet (a new host: it gets the shared-CN certificate with its first unit), the state's
/// peer certificate (always of the shared CN), or a unit that already carries the flag (a renewed
/// certificate keeps the CN, so a renewal never drops the flag). A host whose facts were not read
/// (a dead member being replaced; recover, which rewrites every member's certificate and unit)
/// does not hold it back. An existing cluster therefore takes two `up` runs: the first rolls the
/// new peer certificates, the second the flag.
pub fn peer_cn_enforced(ctx: &Ctx<'_>) -> bool {
    let peer_crt = format!("{}/peer.crt", etcd::PKI_DIR);
    ctx.inv.with_role(crate::inventory::Role::Etcd).iter().all(|h| {
        let Some(f) = ctx.facts.get(&h.name) else {
            return true;
        };
        let Some(held) = f.files.get(&peer_crt) else {
            return true;
        };
        let state_peer = ctx
            .pki
            .etcd_peer(&h.name)
            .map(|p| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(p.cert_pem.as_bytes())));
        if state_peer.as_deref() == Some(held.sha256.as_str()) {
            return true;
        }
        let enforced_unit = unit_text(h, ctx, Some(etcd::PEER_CN))
            .map(|u| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(u.as_bytes())));
        f.files
            .get(etcd::UNIT_PATH)
            .is_some_and(|u| enforced_unit.as_deref().ok() == Some(u.sha256.as_str()))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{FileState, HostFacts};
    use std::collections::BTreeMap;

    const YAML: &str = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n";

    fn setup() -> (tempfile::TempDir, crate::inventory::Inventory, crate::pki::Pki) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, YAML).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let pki = crate::pki::ensure(
            &dir.path().join("pki"),
            &inv,
            time::macros::datetime!(2026-01-01 00:00:00 UTC),
        )
        .unwrap();
        (dir, inv, pki)
    }

    /// Facts of a host holding `files` (path → content).
    fn holding(files: &[(&str, &str)]) -> HostFacts {
        let mut f = HostFacts::default();
        for (path, content) in files {
            f.files.insert(
                path.to_string(),
                FileState {
                    sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(content.as_bytes())),
                    mode: 0o644,
                    owner: "root".into(),
                    group: "root".into(),
                    mtime: 0,
                },
            );
        }
        f
    }

    fn unit_of(files: &[Upload]) -> String {
        let u = files.iter().find(|u| u.path == etcd::UNIT_PATH).unwrap();
        String::from_utf8(u.content.in_memory().unwrap().to_vec()).unwrap()
    }

    #[test]
    fn peer_certificates_share_one_cn_and_the_flag_waits_until_every_member_holds_one() {
        let (_dir, inv, pki) = setup();
        let peer_crt = format!("{}/peer.crt", etcd::PKI_DIR);
        for h in ["cp1", "cp2", "cp3"] {
            let info = crate::pki::inspect(&pki.etcd_peer(h).unwrap().cert_pem).unwrap();
            assert_eq!(info.subject_cn, etcd::PEER_CN, "{h}");
            let server = crate::pki::inspect(&pki.etcd_server(h).unwrap().cert_pem).unwrap();
            assert_eq!(server.subject_cn, h, "server certificates keep the host's CN");
        }
        let ctx_with = |facts: &BTreeMap<String, HostFacts>| -> (bool, String) {
            let ctx = Ctx::new(&inv, &pki, facts);
            let host = inv.host("cp1").unwrap();
            (
                peer_cn_enforced(&ctx),
                unit_of(&member_files(host, &ctx).unwrap()),
            )
        };
        let flag = "--peer-cert-allowed-cn=etcd-peer";

        // A new cluster (nothing on the hosts), and recover (no facts read): enforced at once.
        let fresh: BTreeMap<String, HostFacts> = ["cp1", "cp2", "cp3"]
            .map(|h| (h.to_string(), HostFacts::default()))
            .into();
        let (on, unit) = ctx_with(&fresh);
        assert!(on && unit.contains(flag), "{unit}");
        assert!(ctx_with(&BTreeMap::new()).0);

        // An older cluster: cp2 still holds a peer certificate of another CN (not the state's)
        // and a unit without the flag. The first `up` rolls the certificates, without the flag.
        let state_peer = |h: &str| pki.etcd_peer(h).unwrap().cert_pem.clone();
        let mut older = fresh.clone();
        for h in ["cp1", "cp3"] {
            older.insert(h.into(), holding(&[(&peer_crt, &state_peer(h))]));
        }
        older.insert(
            "cp2".into(),
            holding(&[
                (&peer_crt, "-----BEGIN CERTIFICATE----- CN=cp2 ..."),
                (etcd::UNIT_PATH, "old unit"),
            ]),
        );
        let (on, unit) = ctx_with(&older);
        assert!(!on && !unit.contains("peer-cert-allowed-cn"), "{unit}");

        // Every host holds the state's peer certificate: the second `up` rolls the flag.
        let mut rolled = older.clone();
        rolled.insert("cp2".into(), holding(&[(&peer_crt, &state_peer("cp2"))]));
        assert!(ctx_with(&rolled).0);

        // A renewal: cp2's certificate differs from the state's again, but its unit carries the
        // flag already (a renewed certificate keeps the CN): the flag stays.
        let cp2_unit = {
            let ctx = Ctx::new(&inv, &pki, &rolled);
            unit_text(inv.host("cp2").unwrap(), &ctx, Some(etcd::PEER_CN)).unwrap()
        };
        assert!(cp2_unit.contains(flag));
        let mut renewed = rolled.clone();
        renewed.insert(
            "cp2".into(),
            holding(&[
                (&peer_crt, "an older certificate of CN etcd-peer"),
                (etcd::UNIT_PATH, &cp2_unit),
            ]),
        );
        assert!(ctx_with(&renewed).0, "a renewal dropped the flag");
    }
}
