//! The node phases of `up` planned from recorded facts, without hosts, for three control-plane
//! hosts and two workers: a fresh cluster (round 1: install, configure and start, then wait for
//! each Node's registration), the same hosts once the Nodes registered (round 2: the pod network
//! from the pod CIDRs they got, the control-plane labels through the API), and a converged
//! cluster (nothing). Snapshots of the plans, with the hashes of the PKI (generated afresh each
//! run) and of the stand-in binaries masked.

use std::collections::BTreeMap;
use std::path::Path;

use hactl::facts::{ConntrackMax, FileState, HostFacts, NodeApi, NodeFacts, RegisteredNode, UnitState};
use hactl::inventory::{self, Inventory};
use hactl::kubernetes::{node, secrets::EncryptionKey, KubernetesInputs};
use hactl::phases::{self, Ctx, Phase};
use hactl::plan::{Plan, Step};

fn inventory(dir: &Path) -> Inventory {
    let yaml = [
        "apiVersion: hactl.io/v1alpha1",
        "kind: Cluster",
        "metadata:",
        "  name: nodes",
        "spec:",
        "  ssh:",
        "    agent: true",
        "  hosts:",
        "  - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }",
        "  - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }",
        "  - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }",
        "  - { name: lb1, address: 10.0.0.21, roles: [load-balancer] }",
        "  - { name: w1, address: 10.0.0.41, roles: [worker] }",
        "  - { name: w2, address: 10.0.0.42, roles: [worker] }",
        "  vip:",
        "    address: 10.0.0.100",
        "  kubernetes:",
        "    version: 1.20.2",
        "    source: bundle",
        &format!("    bundleDir: {}", dir.display()),
        "    cgroupDriver: cgroupfs",
        &format!("  stateDir: {}", dir.join("state").display()),
    ]
    .join("\n");
    inventory::load_str(&dir.join("nodes.yaml"), &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// Stand-ins for the kubelet and kube-proxy (a plan shows their size and sha256 only), and the
/// lab's image set: the pause image's archive.
fn inputs() -> KubernetesInputs {
    let bins = hactl::binaries::LocalBinaries {
        files: ["kubelet", "kube-proxy"]
            .iter()
            .map(|b| {
                (
                    b.to_string(),
                    hactl::plan::Blob::bytes(format!("test bytes for {b}").into_bytes()),
                )
            })
            .collect(),
        origin: "test".into(),
    };
    let images = node::NodeImages {
        pause: "hactl.local/pause:3.4".into(),
        control_plane: BTreeMap::new(),
        shipped: vec![node::ShippedImage {
            reference: "hactl.local/pause:3.4".into(),
            digest: format!("sha256:{}", "0e".repeat(32)),
            archive: hactl::plan::Upload::new(
                "/var/lib/hactl/images/pause.tar",
                0o644,
                "root",
                "root",
                b"pause archive".to_vec(),
            ),
            control_plane: false,
        }],
    };
    KubernetesInputs::new(Some(&bins), EncryptionKey::from_bytes([7; 32])).with_node(None, Some(images))
}

/// `up`'s node phases.
fn node_phases() -> Vec<Box<dyn Phase>> {
    hactl::converge::phases()
        .into_iter()
        .filter(|p| p.title().to_lowercase().contains("node"))
        .collect()
}

fn plan(
    inv: &Inventory,
    pki: &hactl::pki::Pki,
    facts: &BTreeMap<String, HostFacts>,
    inputs: &KubernetesInputs,
) -> Plan {
    let mut inv = inv.clone();
    // The images come from the stand-in set, whatever the inventory names.
    inv.kubernetes.as_mut().unwrap().images = inventory::ImageSource::Dir("/images".into());
    let ctx = Ctx::new(&inv, pki, facts).with_kubernetes(Some(inputs));
    phases::build(&node_phases(), &ctx).unwrap_or_else(|e| panic!("{e}"))
}

/// The plan's text with every 64-digit hash masked, and the size of every certificate written
/// (an ECDSA signature is 70 to 72 bytes in DER, so a fresh certificate's PEM varies by a few).
fn masked(plan: &Plan) -> String {
    plan.to_string()
        .split('\n')
        .map(|line| {
            let cert = line.split(' ').any(|w| w.ends_with(".crt"));
            line.split(' ')
                .map(|w| match w.strip_prefix("sha256=") {
                    Some(h) if h.len() == 64 => "sha256=<masked>".to_string(),
                    _ if cert && w.starts_with("size=") => "size=<masked>".to_string(),
                    _ => w.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Fresh node hosts: the lab's (overlay root, conntrack read-only), curl and apt there, the
/// control-plane ones with the control plane's trust file already (its own phase, which comes
/// first, writes it).
fn fresh(inv: &Inventory, pki: &hactl::pki::Pki) -> BTreeMap<String, HostFacts> {
    let trust = hactl::plan::Upload::new(
        hactl::kubernetes::files::CA_CRT,
        0o644,
        "root",
        "root",
        pki.kubernetes_trust_pem().unwrap().into_bytes(),
    );
    inv.hosts
        .iter()
        .map(|h| {
            let mut f = HostFacts {
                apt: true,
                node: Some(NodeFacts {
                    snapshot_fs: "overlayfs".into(),
                    conntrack_max: ConntrackMax::ReadOnly,
                    ..NodeFacts::default()
                }),
                ..HostFacts::default()
            };
            f.binaries.insert("curl".into(), "/usr/bin/curl".into());
            if h.has(inventory::Role::ControlPlane) {
                f.files.insert(
                    trust.path.clone(),
                    FileState {
                        sha256: trust.sha256.clone(),
                        mode: trust.mode,
                        owner: "root".into(),
                        group: "root".into(),
                        mtime: 0,
                    },
                );
            }
            (h.name.clone(), f)
        })
        .collect()
}

/// What the hosts report after `plan` ran: its uploads in place, the node units active and
/// enabled, the images imported; `cidrs` the Nodes registered with.
fn after(
    plan: &Plan,
    mut facts: BTreeMap<String, HostFacts>,
    cidrs: &[(&str, &str)],
) -> BTreeMap<String, HostFacts> {
    for phase in &plan.phases {
        for hs in &phase.hosts {
            let f = facts.get_mut(&hs.host).unwrap();
            for step in &hs.steps {
                match step {
                    Step::Upload(u) => {
                        f.files.insert(
                            u.path.clone(),
                            FileState {
                                sha256: u.sha256.clone(),
                                mode: u.mode,
                                owner: u.owner.clone(),
                                group: u.group.clone(),
                                mtime: 0,
                            },
                        );
                    }
                    Step::Run(c)
                        if c.argv[0] == "sh" && c.argv.get(3).is_some_and(|a| a == "hactl-apt-install") =>
                    {
                        for b in ["containerd", "runc", "iptables", "conntrack"] {
                            f.binaries.insert(b.into(), format!("/usr/bin/{b}"));
                        }
                        f.files.insert("/usr/lib/cni/bridge".into(), FileState::default());
                    }
                    Step::Run(c) if c.argv.get(3).is_some_and(|a| a == "hactl-import-image") => {
                        f.node
                            .as_mut()
                            .unwrap()
                            .images
                            .insert(c.argv[6].clone(), c.argv[7].clone());
                    }
                    Step::Api(r) => {
                        let labels = r.body.as_ref().unwrap()["metadata"]["labels"]
                            .as_object()
                            .unwrap()
                            .clone();
                        if let NodeApi::Registered(n) = &mut f.node.as_mut().unwrap().api {
                            for (k, _) in labels {
                                n.labels.insert(k, String::new());
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    for (name, f) in facts.iter_mut() {
        let Some(n) = f.node.as_mut() else { continue };
        let Some((_, cidr)) = cidrs.iter().find(|(h, _)| h == name) else {
            continue;
        };
        if !matches!(n.api, NodeApi::Registered(_)) {
            n.api = NodeApi::Registered(RegisteredNode {
                pod_cidr: Some(cidr.to_string()),
                ..RegisteredNode::default()
            });
        }
        for unit in [node::CONTAINERD_UNIT, node::KUBELET_UNIT, node::KUBE_PROXY_UNIT] {
            f.units.insert(
                unit.into(),
                UnitState {
                    active: "active".into(),
                    enabled: "enabled".into(),
                    ..UnitState::default()
                },
            );
        }
        if f.files.contains_key(node::POD_NETWORK_CONF) {
            f.units.insert(
                node::POD_NETWORK_UNIT.into(),
                UnitState {
                    active: "active".into(),
                    enabled: "enabled".into(),
                    ..UnitState::default()
                },
            );
        }
    }
    // The routes each pod network unit set, from what the others registered.
    let routes: BTreeMap<String, Vec<(String, String)>> = facts
        .iter()
        .filter(|(_, f)| f.files.contains_key(node::POD_NETWORK_CONF))
        .map(|(name, _)| {
            let others = cidrs
                .iter()
                .filter(|(h, _)| h != name)
                .map(|(h, c)| {
                    let address = match *h {
                        "cp1" => "10.0.0.11",
                        "cp2" => "10.0.0.12",
                        "cp3" => "10.0.0.13",
                        "w1" => "10.0.0.41",
                        _ => "10.0.0.42",
                    };
                    (c.to_string(), address.to_string())
                })
                .collect();
            (name.clone(), others)
        })
        .collect();
    for (name, r) in routes {
        facts.get_mut(&name).unwrap().node.as_mut().unwrap().pod_routes = r.into_iter().collect();
    }
    facts
}

const CIDRS: [(&str, &str); 5] = [
    ("cp1", "10.244.0.0/24"),
    ("cp2", "10.244.1.0/24"),
    ("cp3", "10.244.2.0/24"),
    ("w1", "10.244.3.0/24"),
    ("w2", "10.244.4.0/24"),
];

#[test]
fn nodes_come_up_in_two_rounds_and_a_converged_cluster_plans_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(dir.path());
    let pki = hactl::pki::ensure(&dir.path().join("pki"), &inv, time::OffsetDateTime::now_utc()).unwrap();
    let inputs = inputs();

    // Round 1: install, configure, start; no pod network yet, every Node awaited.
    let facts = fresh(&inv, &pki);
    let round1 = plan(&inv, &pki, &facts, &inputs);
    let text = masked(&round1);
    let hosts: Vec<&str> = round1.phases[0].hosts.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(
        hosts,
        ["cp1", "cp2", "cp3", "w1", "w2"],
        "a load balancer is no node"
    );
    assert!(!text.contains(node::CNI_CONFLIST), "no pod CIDR yet:\n{text}");
    assert!(!text.contains(" api PATCH "), "no Node to label yet:\n{text}");
    assert_eq!(
        text.matches("registered Node").count(),
        5,
        "every Node awaited:\n{text}"
    );
    insta::assert_snapshot!("round-1", text);

    // Round 2: the Nodes registered with their pod CIDRs.
    let facts = after(&round1, facts, &CIDRS);
    let round2 = plan(&inv, &pki, &facts, &inputs);
    let text = masked(&round2);
    assert_eq!(
        text.matches(&format!("write {}", node::CNI_CONFLIST)).count(),
        5,
        "{text}"
    );
    assert_eq!(
        text.matches("api PATCH /api/v1/nodes/cp").count(),
        3,
        "the control-plane Nodes labelled:\n{text}"
    );
    assert!(!text.contains("registered Node"), "{text}");
    assert!(
        !text.contains("restart kube"),
        "nothing restarts in round 2:\n{text}"
    );
    insta::assert_snapshot!("round-2", text);

    // Converged: nothing; a second `up` says `no changes`.
    let facts = after(&round2, facts, &CIDRS);
    let round3 = plan(&inv, &pki, &facts, &inputs);
    assert!(round3.is_empty(), "{round3}");

    // A route removed by hand is put back (the unit reloads), and only there.
    let mut broken = facts.clone();
    broken
        .get_mut("w2")
        .unwrap()
        .node
        .as_mut()
        .unwrap()
        .pod_routes
        .remove("10.244.3.0/24");
    let fix = plan(&inv, &pki, &broken, &inputs);
    assert_eq!(
        fix.to_string().trim(),
        "== Start the node components\nw2: run systemctl reload-or-restart hactl-pod-network.service"
    );

    // A third worker: installed on its own; every other node gets a route to it in round 2.
    let mut grown = fresh(&inv, &pki);
    for (name, f) in &facts {
        grown.insert(name.clone(), f.clone());
    }
    let mut inv3 = inv.clone();
    let mut w3 = inv3.host("w2").unwrap().clone();
    w3.name = "w3".into();
    w3.address = "10.0.0.43".parse().unwrap();
    inv3.hosts.push(w3);
    let pki3 = hactl::pki::ensure(&dir.path().join("pki"), &inv3, time::OffsetDateTime::now_utc()).unwrap();
    grown.insert("w3".into(), fresh(&inv, &pki)["w1"].clone());
    let add = plan(&inv3, &pki3, &grown, &inputs);
    let touched: std::collections::BTreeSet<&str> = add
        .phases
        .iter()
        .flat_map(|p| p.hosts.iter().map(|h| h.host.as_str()))
        .collect();
    assert_eq!(touched.into_iter().collect::<Vec<_>>(), ["w3"], "{add}");
    let mut cidrs = CIDRS.to_vec();
    cidrs.push(("w3", "10.244.5.0/24"));
    let grown = after(&add, grown, &cidrs);
    let add2 = masked(&plan(&inv3, &pki3, &grown, &inputs));
    for h in ["cp1", "cp2", "cp3", "w1", "w2"] {
        assert!(
            add2.contains(&format!("{h}: write {} ", node::POD_NETWORK_CONF)),
            "{h} gets the new route:\n{add2}"
        );
    }
}
