//! The node files as rendered (snapshots of what carries no key material), the pod routes from
//! the Nodes' pod CIDRs, the images a node imports, and the labels hactl sets.

use super::*;
use crate::facts::{NodeApi, NodeFacts, RegisteredNode};
use crate::inventory::KubernetesMode;

/// Three stacked control-plane hosts and two workers, as the lab writes them (bundle, image
/// directory, cgroupfs); `extra` is appended to the kubernetes section.
fn inventory(extra: &str) -> Inventory {
    let dir = std::env::temp_dir();
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
    ]
    .join("\n")
        + "\n"
        + extra;
    crate::inventory::load_str(&dir.join("nodes.yaml"), &yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn host<'a>(inv: &'a Inventory, name: &str) -> &'a Host {
    inv.host(name).unwrap()
}

fn kube(inv: &Inventory) -> &KubernetesSpec {
    inv.kubernetes.as_ref().unwrap()
}

/// The images of the lab's image directory (the archives' bytes stand in).
fn lab_images() -> NodeImages {
    NodeImages {
        pause: "hactl.local/pause:3.4".into(),
        control_plane: BTreeMap::new(),
        shipped: vec![ShippedImage {
            reference: "hactl.local/pause:3.4".into(),
            digest: format!("sha256:{}", "0e".repeat(32)),
            archive: Upload::new(
                format!("{IMAGE_DIR}/pause.tar"),
                0o644,
                "root",
                "root",
                b"pause".to_vec(),
            ),
            control_plane: false,
        }],
    }
}

/// A node host's facts: on overlayfs (the lab) or not, its Node registered with `cidr`.
fn node_facts(overlay: bool, conntrack: ConntrackMax, cidr: Option<&str>) -> HostFacts {
    HostFacts {
        node: Some(NodeFacts {
            snapshot_fs: if overlay { "overlayfs" } else { "ext2/ext3" }.into(),
            conntrack_max: conntrack,
            api: match cidr {
                Some(c) => NodeApi::Registered(RegisteredNode {
                    pod_cidr: Some(c.into()),
                    ..RegisteredNode::default()
                }),
                None => NodeApi::Absent,
            },
            ..NodeFacts::default()
        }),
        ..HostFacts::default()
    }
}

fn text(content: &str) -> String {
    content.to_string()
}

#[test]
fn the_kubelet_and_kube_proxy_render_with_their_hosts_flags() {
    let inv = inventory("");
    let cp1 = kubelet_flags(host(&inv, "cp1"), &inv, "hactl.local/pause:3.4");
    assert!(cp1.contains(&"--node-ip=10.0.0.11".to_string()), "{cp1:?}");
    assert!(
        cp1.contains(&"--register-with-taints=node-role.kubernetes.io/master:NoSchedule".to_string()),
        "{cp1:?}"
    );
    assert!(cp1.contains(&"--container-runtime=remote".to_string()), "{cp1:?}");
    assert!(cp1.contains(&"--pod-infra-container-image=hactl.local/pause:3.4".to_string()));
    let w1 = kubelet_flags(host(&inv, "w1"), &inv, "hactl.local/pause:3.4");
    assert!(
        !w1.iter().any(|f| f.starts_with("--register-with-taints")),
        "{w1:?}"
    );
    // A control-plane host's kubelet talks to its own apiserver, a worker's to the VIP.
    assert_eq!(
        node_apiserver_url(&inv, host(&inv, "cp2")),
        "https://10.0.0.12:6443"
    );
    assert_eq!(
        node_apiserver_url(&inv, host(&inv, "w1")),
        "https://10.0.0.100:6443"
    );

    let lab = node_facts(true, ConntrackMax::ReadOnly, None);
    let proxy = kube_proxy_flags(host(&inv, "w1"), &inv, &lab);
    assert!(
        proxy.contains(&"--conntrack-max-per-core=0".to_string()),
        "{proxy:?}"
    );
    assert!(
        proxy.contains(&"--cluster-cidr=10.244.0.0/16".to_string()),
        "{proxy:?}"
    );
    assert!(proxy.contains(&"--proxy-mode=iptables".to_string()), "{proxy:?}");
    for writable in [ConntrackMax::Writable, ConntrackMax::Absent] {
        let real = node_facts(false, writable, None);
        let proxy = kube_proxy_flags(host(&inv, "w1"), &inv, &real);
        assert!(
            !proxy.iter().any(|f| f.starts_with("--conntrack-max")),
            "{proxy:?}"
        );
    }

    insta::assert_snapshot!(
        "kubelet-config.yaml",
        kubelet_config(host(&inv, "w1"), kube(&inv)).unwrap()
    );
    let unit = render::render(
        "kubelet.service",
        &NodeUnitContext {
            cluster: inv.name.clone(),
            binary: KUBELET_BIN.into(),
            flags: cp1.clone(),
        },
    )
    .unwrap();
    insta::assert_snapshot!("cp1-kubelet.service", unit);
    let plain = kubelet_config(host(&inv, "w1"), kube(&inv)).unwrap();
    assert!(!plain.contains("clusterDNS"), "{plain}");
    let with_dns = inventory(
        "    dns:\n      image: registry.k8s.io/coredns/coredns:v1.8.0\n      domain: corp.example\n",
    );
    let config = kubelet_config(host(&with_dns, "w1"), kube(&with_dns)).unwrap();
    assert!(config.contains("\nclusterDomain: corp.example\n"), "{config}");
    assert!(config.contains("\nclusterDNS:\n  - 10.96.0.10\n"), "{config}");
    let with_eviction =
        inventory("    evictionHard:\n      imagefs.available: 2%\n      memory.available: 100Mi\n");
    let config = kubelet_config(host(&with_eviction, "w1"), kube(&with_eviction)).unwrap();
    assert!(
        config.ends_with("evictionHard:\n  imagefs.available: \"2%\"\n  memory.available: \"100Mi\"\n"),
        "{config}"
    );
    for line in [
        "readOnlyPort: 0",
        "    enabled: false",
        "  mode: Webhook",
        "cgroupDriver: cgroupfs",
        "staticPodPath: /etc/kubernetes/manifests",
        "tlsCertFile: /etc/hactl/pki/kubelet/serving.crt",
        "serverTLSBootstrap: false",
    ] {
        assert!(config.lines().any(|l| l == line), "{line:?} missing:\n{config}");
    }
}

#[test]
fn containerd_follows_the_cgroup_driver_the_images_and_the_hosts_filesystem() {
    let inv = inventory("");
    let lab = containerd_config(
        kube(&inv),
        &lab_images(),
        &node_facts(true, ConntrackMax::ReadOnly, None),
    )
    .unwrap();
    insta::assert_snapshot!("containerd-config.toml", lab);

    let mut real_inv = inventory("");
    let k = real_inv.kubernetes.as_mut().unwrap();
    k.cgroup_driver = CgroupDriver::Systemd;
    k.containerd = BinarySource::Bundle { dir: "/b".into() };
    let registry = NodeImages::from_registry("mirror.example.com/k8s", kube(&real_inv));
    let real = containerd_config(
        kube(&real_inv),
        &registry,
        &node_facts(false, ConntrackMax::Writable, None),
    )
    .unwrap();
    for line in [
        "  sandbox_image = \"mirror.example.com/k8s/pause:3.2\"",
        "  snapshotter = \"overlayfs\"",
        "  SystemdCgroup = true",
        "  BinaryName = \"/usr/local/sbin/runc\"",
        "  bin_dir = \"/opt/cni/bin\"",
    ] {
        assert!(real.lines().any(|l| l == line), "{line:?} missing:\n{real}");
    }
    assert!(lab.lines().any(|l| l == "  snapshotter = \"native\""), "{lab}");
    assert!(
        !lab.contains("BinaryName"),
        "a package's runc is found on PATH:\n{lab}"
    );
    assert_eq!(
        registry.control_plane["kube-apiserver"],
        "mirror.example.com/k8s/kube-apiserver:v1.20.2"
    );
}

#[test]
fn the_pod_routes_are_every_other_nodes_cidr_through_its_address() {
    let inv = inventory("");
    let cidrs: BTreeMap<String, IpNet> = [
        ("cp1", "10.244.0.0/24"),
        ("cp2", "10.244.1.0/24"),
        ("w1", "10.244.3.0/24"),
        ("w2", "10.244.4.0/24"),
    ]
    .into_iter()
    .map(|(h, c)| (h.to_string(), c.parse().unwrap()))
    .collect();
    // (host, routes as "cidr via gateway"); cp3 has no pod CIDR yet: no route to it, and none
    // from it is asked; lb1 is no node.
    let table: [(&str, &[&str]); 3] = [
        (
            "w1",
            &[
                "10.244.0.0/24 via 10.0.0.11",
                "10.244.1.0/24 via 10.0.0.12",
                "10.244.4.0/24 via 10.0.0.42",
            ],
        ),
        (
            "cp1",
            &[
                "10.244.1.0/24 via 10.0.0.12",
                "10.244.3.0/24 via 10.0.0.41",
                "10.244.4.0/24 via 10.0.0.42",
            ],
        ),
        (
            "cp3",
            &[
                "10.244.0.0/24 via 10.0.0.11",
                "10.244.1.0/24 via 10.0.0.12",
                "10.244.3.0/24 via 10.0.0.41",
                "10.244.4.0/24 via 10.0.0.42",
            ],
        ),
    ];
    for (h, want) in table {
        let got: Vec<String> = pod_routes(&inv, host(&inv, h), &cidrs)
            .iter()
            .map(|r| format!("{} via {}", r.destination, r.gateway))
            .collect();
        assert_eq!(got, want, "{h}");
    }
    let routes = pod_routes(&inv, host(&inv, "w1"), &cidrs);
    let conf = pod_network_conf(kube(&inv), &"10.244.3.0/24".parse().unwrap(), &routes).unwrap();
    insta::assert_snapshot!("w1-pod-network.conf", conf);

    // What the facts read back: equal only when exactly these routes are in place.
    let mut f = node_facts(true, ConntrackMax::ReadOnly, Some("10.244.3.0/24"));
    assert!(!routes_match(&f, &routes));
    let in_place = &mut f.node.as_mut().unwrap().pod_routes;
    for r in &routes {
        in_place.insert(r.destination.to_string(), r.gateway.to_string());
    }
    assert!(routes_match(&f, &routes));
    f.node
        .as_mut()
        .unwrap()
        .pod_routes
        .insert("10.244.9.0/24".into(), "10.0.0.49".into());
    assert!(
        !routes_match(&f, &routes),
        "a route of a removed node is a difference"
    );
}

#[test]
fn the_network_files_wait_for_the_nodes_pod_cidr_and_follow_the_others() {
    let inv = inventory("");
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::pki::ensure(dir.path(), &inv, time::OffsetDateTime::now_utc()).unwrap();
    let mut all: BTreeMap<String, HostFacts> = BTreeMap::new();
    all.insert("w1".into(), node_facts(true, ConntrackMax::ReadOnly, None));
    let files = node_files(host(&inv, "w1"), &inv, &pki, &lab_images(), &all).unwrap();
    assert!(files.network.is_empty(), "no pod CIDR yet: no network files");
    let paths: Vec<&str> = files.all().map(|u| u.path.as_str()).collect();
    for p in [
        CA_CRT,
        KUBELET_CLIENT_KEY,
        KUBELET_SERVING_CRT,
        KUBE_PROXY_KEY,
        KUBELET_KUBECONFIG,
        KUBELET_CONFIG,
        CONTAINERD_CONFIG,
        KUBELET_UNIT_PATH,
        POD_NETWORK_SCRIPT,
        NODE_SYSCTL,
    ] {
        assert!(paths.contains(&p), "{p} missing: {paths:?}");
    }
    assert!(
        !paths.contains(&CONTAINERD_UNIT_PATH),
        "a package brings its own unit"
    );
    for key in files
        .all()
        .filter(|u| u.path.ends_with(".key") || u.path.ends_with(".kubeconfig"))
    {
        assert_eq!(key.mode, 0o600, "{}", key.path);
    }

    all.insert(
        "w1".into(),
        node_facts(true, ConntrackMax::ReadOnly, Some("10.244.3.0/24")),
    );
    all.insert(
        "w2".into(),
        node_facts(true, ConntrackMax::ReadOnly, Some("10.244.4.0/24")),
    );
    let files = node_files(host(&inv, "w1"), &inv, &pki, &lab_images(), &all).unwrap();
    let network: BTreeMap<&str, String> = files
        .network
        .iter()
        .map(|u| {
            (
                u.path.as_str(),
                String::from_utf8(u.content.in_memory().unwrap().to_vec()).unwrap(),
            )
        })
        .collect();
    insta::assert_snapshot!("w1-10-hactl.conflist", text(&network[CNI_CONFLIST]));
    assert!(
        network[POD_NETWORK_CONF].contains("\nroute 10.244.4.0/24 10.0.0.42 w2\n"),
        "{}",
        network[POD_NETWORK_CONF]
    );
    let conflist: serde_json::Value = serde_json::from_str(&network[CNI_CONFLIST]).unwrap();
    assert_eq!(conflist["plugins"][0]["ipMasq"], false);

    // The kubelet's kubeconfig names the host's own identity.
    let kubeconfig = files
        .config
        .iter()
        .find(|u| u.path == KUBELET_KUBECONFIG)
        .map(|u| String::from_utf8(u.content.in_memory().unwrap().to_vec()).unwrap())
        .unwrap();
    assert!(kubeconfig.contains("system:node:w1"), "{kubeconfig}");
    assert!(
        kubeconfig.contains("server: https://10.0.0.100:6443"),
        "{kubeconfig}"
    );
    let client = crate::pki::inspect(&pki.kubelet_client("w1").unwrap().cert_pem).unwrap();
    assert_eq!(client.subject_cn, "system:node:w1");
    assert_eq!(client.subject_organizations, ["system:nodes"]);
    let serving = crate::pki::inspect(&pki.kubelet_serving("w1").unwrap().cert_pem).unwrap();
    assert_eq!(serving.sans, ["10.0.0.41", "w1"]);
    assert_eq!(serving.ext_key_usages, ["server_auth"]);
    let proxy = crate::pki::inspect(&pki.kube_proxy().unwrap().cert_pem).unwrap();
    assert_eq!(proxy.subject_cn, "system:kube-proxy");
    assert!(pki.kubelet_client("lb1").is_none(), "a load balancer is no node");
}

#[test]
fn the_images_of_a_directory_are_the_pause_image_the_workloads_and_in_static_pod_mode_the_control_plane() {
    let d = |n: u8| format!("sha256:{}", format!("{n:02x}").repeat(32));
    let manifest = format!(
        "{{\"format\": 1, \"kubernetesVersion\": \"v1.20.2\", \"images\": [\n{}\n]}}",
        ["pause:3.4", "busybox:1.35.0", "kube-apiserver:v1.20.2", "kube-controller-manager:v1.20.2", "kube-scheduler:v1.20.2"]
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (name, tag) = r.split_once(':').unwrap();
                format!(
                    "{{\"name\": \"hactl.local/{name}\", \"tag\": \"{tag}\", \"reference\": \"hactl.local/{r}\", \"digest\": \"{}\", \"archive\": \"{name}.tar\", \"archiveSha256\": \"{}\", \"archiveSize\": 1}}",
                    d(i as u8),
                    "ab".repeat(32)
                )
            })
            .collect::<Vec<_>>()
            .join(",\n")
    );
    let set = crate::images::ImageSet::parse(std::path::Path::new("/cache"), &manifest).unwrap();
    let inv = inventory("");
    let read = |i: &crate::images::Image| Ok(crate::plan::Blob::bytes(i.archive.clone().into_bytes()));
    let systemd = NodeImages::from_set(&set, kube(&inv), read).unwrap();
    assert_eq!(systemd.pause, "hactl.local/pause:3.4");
    let shipped: Vec<&str> = systemd.shipped.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(
        shipped,
        ["hactl.local/pause:3.4", "hactl.local/busybox:1.35.0"],
        "the pause image and the workload image, no control-plane image"
    );
    assert_eq!(systemd.shipped[0].archive.path, "/var/lib/hactl/images/pause.tar");
    assert!(systemd.shipped.iter().all(|i| !i.control_plane));
    assert_eq!(
        systemd.control_plane["kube-scheduler"],
        "hactl.local/kube-scheduler:v1.20.2"
    );

    let mut sp = inventory("");
    sp.kubernetes.as_mut().unwrap().mode = KubernetesMode::StaticPod;
    let static_pod = NodeImages::from_set(&set, kube(&sp), read).unwrap();
    assert_eq!(static_pod.shipped.len(), 5);
    let on = |h: &str| static_pod.for_host(host(&sp, h)).count();
    assert_eq!(
        (on("cp1"), on("w1")),
        (5, 2),
        "control-plane images only on control-plane hosts"
    );
    let mut newer = sp.clone();
    newer.kubernetes.as_mut().unwrap().version = semver::Version::new(1, 21, 0);
    let err = NodeImages::from_set(&set, kube(&newer), read).unwrap_err();
    assert!(err.contains("no kube-apiserver image tagged v1.21.0"), "{err}");

    // Present with its digest: nothing to import; another digest is imported again.
    let image = &systemd.shipped[0];
    let mut f = node_facts(true, ConntrackMax::ReadOnly, None);
    assert!(!image_present(&f, image));
    f.node
        .as_mut()
        .unwrap()
        .images
        .insert(image.reference.clone(), image.digest.clone());
    assert!(image_present(&f, image));
    f.node
        .as_mut()
        .unwrap()
        .images
        .insert(image.reference.clone(), d(9));
    assert!(!image_present(&f, image));
    let import = import_image(image, "native").line(false);
    assert!(import.contains("images import --snapshotter"), "{import}");
    assert!(
        import.ends_with(&format!(
            "native /var/lib/hactl/images/pause.tar hactl.local/pause:3.4 {}",
            d(0)
        )),
        "{import}"
    );
}

#[test]
fn control_plane_nodes_get_the_labels_they_lack_through_a_merge_patch() {
    let inv = inventory("");
    let mut f = node_facts(true, ConntrackMax::ReadOnly, Some("10.244.0.0/24"));
    assert_eq!(
        missing_labels(host(&inv, "cp1"), kube(&inv), &f),
        [
            crate::kubernetes::gates::MASTER_ROLE,
            crate::kubernetes::gates::CONTROL_PLANE_ROLE
        ]
    );
    assert!(missing_labels(host(&inv, "w1"), kube(&inv), &f).is_empty());
    if let NodeApi::Registered(n) = &mut f.node.as_mut().unwrap().api {
        n.labels
            .insert(crate::kubernetes::gates::MASTER_ROLE.into(), String::new());
    }
    let missing = missing_labels(host(&inv, "cp1"), kube(&inv), &f);
    assert_eq!(missing, [crate::kubernetes::gates::CONTROL_PLANE_ROLE]);
    assert_eq!(
        labels_patch(&missing).to_string(),
        r#"{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}"#
    );
    // Not registered (or the API did not answer): nothing to label yet.
    let absent = node_facts(true, ConntrackMax::ReadOnly, None);
    assert!(missing_labels(host(&inv, "cp1"), kube(&inv), &absent).is_empty());
    assert_eq!(registered(&absent), Some(false));
    assert_eq!(registered(&f), Some(true));
    assert_eq!(registered(&HostFacts::default()), None);
}

#[test]
fn a_node_the_api_did_not_answer_for_keeps_the_routes_to_it() {
    let inv = inventory("");
    let mut all: BTreeMap<String, HostFacts> = BTreeMap::new();
    let mut w1 = node_facts(true, ConntrackMax::ReadOnly, Some("10.244.3.0/24"));
    w1.node
        .as_mut()
        .unwrap()
        .pod_routes
        .insert("10.244.4.0/24".into(), "10.0.0.42".into());
    all.insert("w1".into(), w1);
    let mut w2 = node_facts(true, ConntrackMax::ReadOnly, None);
    w2.node.as_mut().unwrap().api = NodeApi::Unknown("curl: (28) Operation timed out".into());
    all.insert("w2".into(), w2);
    let mut cp1 = node_facts(true, ConntrackMax::ReadOnly, Some("10.244.0.0/24"));
    all.insert("cp1".into(), cp1.clone());

    let cidrs = pod_cidrs(&inv, &all);
    assert_eq!(
        cidrs.get("w2").map(|c| c.to_string()).as_deref(),
        Some("10.244.4.0/24"),
        "w2's CIDR from the route w1 has to its address: {cidrs:?}"
    );
    let routes: Vec<String> = pod_routes(&inv, host(&inv, "cp1"), &cidrs)
        .iter()
        .map(|r| format!("{} via {}", r.destination, r.gateway))
        .collect();
    assert_eq!(
        routes,
        ["10.244.3.0/24 via 10.0.0.41", "10.244.4.0/24 via 10.0.0.42"]
    );

    // A Node that is gone (the API said 404) loses its routes.
    all.get_mut("w2").unwrap().node.as_mut().unwrap().api = NodeApi::Absent;
    assert!(!pod_cidrs(&inv, &all).contains_key("w2"));

    // Unknown, and no host routes to it yet: nothing is made up.
    all.get_mut("w2").unwrap().node.as_mut().unwrap().api = NodeApi::Unknown("timeout".into());
    cp1.node.as_mut().unwrap().pod_routes.clear();
    all.insert("cp1".into(), cp1);
    all.get_mut("w1")
        .unwrap()
        .node
        .as_mut()
        .unwrap()
        .pod_routes
        .clear();
    assert!(!pod_cidrs(&inv, &all).contains_key("w2"));
}
