//! The inventory a lab hands to hactl: every host with its roles, the lab key, the VIP, and a
//! state directory inside the lab.
//!
//! Invariant: the YAML written here is read by `inventory::raw::RawInventory` (deny_unknown_fields);
//! a unit test parses it back with that type, so a schema change that breaks it fails the tests.

use super::{HostKind, Lab, LabError, Result};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata,
    spec: Spec,
}

#[derive(Serialize)]
struct Metadata {
    name: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    ssh: Ssh,
    hosts: Vec<Host>,
    /// Only with load balancers to hold it (the inventory refuses a VIP without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    vip: Option<Vip>,
    etcd: Etcd,
    state_dir: PathBuf,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    allow_single_member: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Ssh {
    user: &'static str,
    key_file: PathBuf,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Host {
    name: String,
    address: String,
    prefix_length: u8,
    roles: Vec<&'static str>,
    interface: &'static str,
}

#[derive(Serialize)]
struct Vip {
    address: String,
}

#[derive(Serialize)]
struct Etcd {
    source: &'static str,
}

/// The inventory document for `lab`, as YAML.
pub fn render(lab: &Lab) -> Result<String> {
    let doc = Doc {
        api_version: crate::inventory::API_VERSION,
        kind: crate::inventory::KIND,
        metadata: Metadata {
            name: lab.name.clone(),
        },
        spec: Spec {
            ssh: Ssh {
                user: "root",
                key_file: lab.key_path.clone(),
            },
            hosts: lab
                .hosts
                .iter()
                .map(|h| Host {
                    name: h.name.clone(),
                    address: h.ip.to_string(),
                    prefix_length: 24,
                    roles: match h.kind {
                        HostKind::ControlPlane => vec!["etcd", "control-plane"],
                        HostKind::LoadBalancer => vec!["load-balancer"],
                        HostKind::Spare => vec![],
                        HostKind::Worker => vec!["worker"],
                    },
                    interface: "host0",
                })
                .collect(),
            vip: lab
                .hosts
                .iter()
                .any(|h| matches!(h.kind, HostKind::LoadBalancer))
                .then(|| Vip {
                    address: lab.vip.to_string(),
                }),
            etcd: Etcd { source: "package" },
            state_dir: lab.state_dir.clone(),
            allow_single_member: lab
                .hosts
                .iter()
                .filter(|h| matches!(h.kind, HostKind::ControlPlane))
                .count()
                == 1,
        },
    };
    let body = serde_saphyr::to_string(&doc).map_err(|e| LabError::Inventory {
        path: lab.inventory_path.clone(),
        message: e.to_string(),
    })?;
    Ok(format!(
        "# Written by `hactl lab up --name {}`; removed by `hactl lab down --name {}`.\n{body}",
        lab.name, lab.name
    ))
}

/// Writes the inventory to `lab.inventory_path`.
pub fn write(lab: &Lab) -> Result<()> {
    let text = render(lab)?;
    if let Some(parent) = lab.inventory_path.parent() {
        fs_err::create_dir_all(parent)?;
    }
    fs_err::write(&lab.inventory_path, text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::raw::{RawInventory, RawSourceKind};
    use crate::lab::{plan_hosts, LabUpOptions};
    use std::net::Ipv4Addr;
    use std::path::Path;

    #[test]
    fn inventory_parses_with_the_raw_schema() {
        let mut opts = LabUpOptions::new("t1");
        opts.spares = 1;
        opts.workers = 1;
        let dir = Path::new("/var/lib/hactl-lab/labs/t1");
        let lab = Lab {
            name: "t1".into(),
            suite: "trixie".into(),
            root: "/var/lib/hactl-lab".into(),
            base: "/var/lib/hactl-lab/base/trixie-0123456789ab".into(),
            dir: dir.into(),
            bridge: "hlab-t1".into(),
            subnet: "10.213.7.0/24".into(),
            operator_address: Ipv4Addr::new(10, 213, 7, 1),
            vip: Ipv4Addr::new(10, 213, 7, 100),
            hosts: plan_hosts(&opts, dir, Ipv4Addr::new(10, 213, 7, 0)),
            key_path: dir.join("id_ed25519"),
            known_hosts: dir.join("known_hosts"),
            inventory_path: dir.join("inventory.yaml"),
            state_dir: dir.join("state"),
        };
        let yaml = render(&lab).unwrap();
        let raw: RawInventory = serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(raw.api_version, "hactl.io/v1alpha1");
        assert_eq!(raw.kind, "Cluster");
        assert_eq!(raw.metadata.name, "t1");
        assert_eq!(raw.spec.ssh.user.as_deref(), Some("root"));
        assert_eq!(raw.spec.ssh.key_file, Some(dir.join("id_ed25519")));
        assert_eq!(raw.spec.hosts.len(), 7);
        assert_eq!(raw.spec.hosts[0].roles, ["etcd", "control-plane"]);
        assert_eq!(raw.spec.hosts[3].roles, ["load-balancer"]);
        assert!(raw.spec.hosts[5].roles.is_empty());
        assert_eq!(raw.spec.hosts[6].name, "w1");
        assert_eq!(raw.spec.hosts[6].roles, ["worker"]);
        assert_eq!(raw.spec.hosts[6].address, "10.213.7.41");
        assert_eq!(raw.spec.hosts[4].address, "10.213.7.22");
        assert_eq!(raw.spec.hosts[4].prefix_length, Some(24));
        assert_eq!(raw.spec.hosts[4].interface.as_deref(), Some("host0"));
        assert_eq!(raw.spec.vip.unwrap().address, "10.213.7.100");
        assert_eq!(raw.spec.etcd.source, RawSourceKind::Package);
        assert_eq!(raw.spec.state_dir, Some(dir.join("state")));
    }
}
