//! What the facts probe asks a host: the units, files and binaries hactl manages there, by role.
//!
//! Invariant: one builder ([`query_for`]) serves `up`, `plan`, `reset`, `check` and the day-two
//! operations, so every command reads a host the same way; [`member_query_for`] only adds what a
//! host may still run after its roles moved away.

use crate::facts::Query;
use crate::inventory::{Host, Inventory, Role};

/// Kubernetes units a control-plane host may run; stopped and started only when present.
pub const KUBE_UNITS: [&str; 3] = [
    "kube-scheduler.service",
    "kube-controller-manager.service",
    "kube-apiserver.service",
];

/// Units hactl installs on `host`, by role.
pub fn owned_units(host: &Host) -> Vec<&'static str> {
    let mut units = Vec::new();
    if host.has(Role::Etcd) {
        units.push("etcd.service");
    }
    if host.has(Role::ControlPlane) {
        units.extend([
            "kube-apiserver.service",
            "kube-controller-manager.service",
            "kube-scheduler.service",
        ]);
    }
    if host.has(Role::LoadBalancer) {
        units.extend(["haproxy.service", "keepalived.service"]);
    }
    if host.is_node() {
        units.extend(NODE_UNITS);
    }
    units
}

/// The node components' units on a control-plane or worker host (when the inventory has a
/// kubernetes section: [`query_for`] asks only then).
pub const NODE_UNITS: [&str; 4] = [
    crate::kubernetes::node::CONTAINERD_UNIT,
    crate::kubernetes::node::KUBELET_UNIT,
    crate::kubernetes::node::KUBE_PROXY_UNIT,
    crate::kubernetes::node::POD_NETWORK_UNIT,
];

/// The binaries `host`'s roles need (what `hactl check` reports as present or missing).
pub fn required_binaries(host: &Host) -> Vec<String> {
    let mut binaries = Vec::new();
    if host.has(Role::Etcd) {
        binaries.extend(["etcd", "etcdctl"].map(String::from));
    }
    if host.has(Role::LoadBalancer) {
        binaries.extend(["haproxy", "keepalived"].map(String::from));
    }
    binaries
}

/// What the facts probe asks `host`: its units, the sha256 of every file hactl manages there, and
/// the binaries its roles need.
pub fn query_for(inv: &Inventory, host: &Host) -> Query {
    let node = inv.kubernetes.as_ref().filter(|_| host.is_node());
    let mut q = Query {
        data_dir: inv.etcd.data_dir.clone(),
        units: owned_units(host)
            .into_iter()
            .filter(|u| node.is_some() || !NODE_UNITS.contains(u))
            .map(String::from)
            .collect(),
        files: vec![],
        binaries: required_binaries(host),
        node: None,
        known_versions: vec![],
        held_notes: host.has(Role::LoadBalancer).then(|| {
            (
                crate::load_balancer::HELD_DIR.into(),
                crate::load_balancer::HAPROXY_CLI.into(),
            )
        }),
    };
    if host.has(Role::Etcd) {
        q.files = super::etcd_files::managed_paths(&inv.etcd.source);
        q.files.extend(crate::backup::managed_paths());
        q.units.push(crate::backup::TIMER.into());
    } else {
        // An etcd unit hactl installed before the role moved away (see `retire_etcd`).
        q.files.push(crate::etcd::UNIT_PATH.into());
        q.units.push(crate::etcd::UNIT.into());
        q.units.push(crate::backup::TIMER.into());
    }
    // Whether etcd is fenced (`join_etcd` lifts a fence before a learner starts on an empty
    // data dir; `fence_old_members` plans nothing for a host already fenced).
    q.files.push(crate::fence::dropin_path(crate::etcd::UNIT));
    if let Some(kube) = crate::kubernetes::spec_for(inv, host) {
        q.files.extend(crate::kubernetes::managed_paths(kube));
    }
    if host.has(Role::LoadBalancer) {
        q.files.extend(super::load_balancer::managed_paths(inv));
    }
    if let Some(kube) = node {
        for path in crate::kubernetes::node::managed_paths(kube) {
            if !q.files.contains(&path) {
                q.files.push(path);
            }
        }
        let wanted = crate::kubernetes::node::NODE_PACKAGES
            .iter()
            .chain(&crate::kubernetes::node::PROXY_PACKAGES)
            .map(|(_, known_by)| *known_by)
            .filter(|b| !b.starts_with('/'));
        q.binaries.extend(wanted.map(String::from));
        q.node = Some(crate::kubernetes::node::node_query(inv, host));
    }
    // The health probes run curl on etcd, control-plane and load-balancer hosts alike; the
    // install phases add it where it is missing.
    if !host.roles.is_empty() {
        q.binaries.push("curl".into());
    }
    q
}

/// [`query_for`], plus what any host may still run from an earlier role: an etcd member, its
/// backup timer and the Kubernetes units (`replace --host` keeps the old host with `roles: []` so
/// it can be fenced; heal and maintenance read members wherever they run).
pub fn member_query_for(inv: &Inventory, host: &Host) -> Query {
    let mut q = query_for(inv, host);
    let add = |list: &mut Vec<String>, items: Vec<String>| {
        for item in items {
            if !list.contains(&item) {
                list.push(item);
            }
        }
    };
    let mut units = vec![crate::etcd::UNIT.to_string(), crate::backup::TIMER.to_string()];
    units.extend(KUBE_UNITS.map(String::from));
    add(&mut q.units, units);
    let mut files = super::etcd_files::managed_paths(&inv.etcd.source);
    files.extend(crate::backup::managed_paths());
    add(&mut q.files, files);
    add(&mut q.binaries, ["etcd", "etcdctl"].map(String::from).to_vec());
    q
}
