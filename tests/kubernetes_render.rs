//! The Kubernetes control plane as hactl renders it for `inventories/example.yaml`: snapshots of
//! units, manifests, kubeconfigs and the encryption configuration, and a check that every
//! certificate a flag or kubeconfig names is uploaded and fits what the flag implies.
//!
//! Stable inputs: a PKI generated once into `tests/fixtures/pki` (test keys, for this test only)
//! is copied to a temporary directory and `pki::ensure` runs on it at a fixed `now`, so nothing
//! is re-issued and every sha256 is the same on each run; the encryption key is a fixed test key.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use hactl::facts::{FileState, HostFacts, UnitState};
use hactl::inventory::{self, BinarySource, Inventory, KubernetesMode, Role};
use hactl::kubernetes::{files, secrets::EncryptionKey, Component, KubernetesInputs};
use hactl::phases::{self, Ctx, Phase};
use hactl::pki::{self, Pki};
use hactl::plan::Upload;
use rcgen::PublicKeyData;
use time::macros::datetime;
use time::OffsetDateTime;

const NOW: OffsetDateTime = datetime!(2025-06-01 12:00:00 UTC);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `inventories/example.yaml` as the tests render it, with `kubernetes.source` set to `package`
/// after loading (validate refuses it; the rendered files do not depend on the source).
fn example() -> Inventory {
    let path = root().join("inventories/example.yaml");
    let text = fs_err::read_to_string(&path).unwrap();
    let mut inv = inventory::load_str(&path, &text).unwrap();
    inv.kubernetes.as_mut().unwrap().source = BinarySource::Package;
    inv
}

fn fixture_dir() -> PathBuf {
    root().join("tests/fixtures/pki")
}

/// Copies `from` to `to` with the modes `pki::ensure` wants (dirs 0700, keys 0600).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
            let mode = if target.extension().is_some_and(|x| x == "key") {
                0o600
            } else {
                0o644
            };
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
}

/// The fixture PKI for the example inventory, reused as it is.
fn fixture_pki(inv: &Inventory) -> (tempfile::TempDir, Pki) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    copy_tree(&fixture_dir(), &dir);
    let pki = pki::ensure(&dir, inv, NOW).unwrap();
    let changed: Vec<String> = pki.changes().map(|c| c.to_string()).collect();
    assert!(
        changed.is_empty(),
        "the fixture PKI no longer fits inventories/example.yaml; regenerate it with \
         `cargo test --test kubernetes_render -- --ignored regenerate_fixture_pki`: {changed:?}"
    );
    (tmp, pki)
}

fn inputs() -> KubernetesInputs {
    KubernetesInputs::new(None, EncryptionKey::from_bytes([7; 32]))
}

/// Completes `tests/fixtures/pki` with what the example inventory now implies (run by hand when
/// its PKI gains a certificate: the existing ones are kept, so no snapshot's sha256 moves).
/// Delete the directory first to regenerate every certificate.
#[test]
#[ignore]
fn regenerate_fixture_pki() {
    let dir = fixture_dir();
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    copy_tree_modes(&dir);
    pki::ensure(&dir, &example(), NOW).unwrap();
}

/// The modes `pki::ensure` wants on an existing fixture directory (git keeps only 0644/0755).
fn copy_tree_modes(dir: &Path) {
    if !dir.exists() {
        return;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            copy_tree_modes(&p);
        } else if p.extension().is_some_and(|x| x == "key") {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
}

fn text(u: &Upload) -> String {
    String::from_utf8(u.content.in_memory().unwrap().to_vec()).unwrap()
}

/// Everything a control-plane host gets, by path.
fn host_uploads(inv: &Inventory, pki: &Pki, host: &str) -> BTreeMap<String, Upload> {
    let host = inv.host(host).unwrap();
    let files = files::host_files(host, inv, pki, &inputs()).unwrap();
    let mut all: BTreeMap<String, Upload> = files.iter().map(|u| (u.path.clone(), u.clone())).collect();
    for c in Component::ALL {
        let u = files::runner(c, host, inv, &files, &inputs()).unwrap();
        all.insert(u.path.clone(), u);
    }
    all
}

#[test]
fn units_kubeconfigs_and_configs_match_their_snapshots() {
    let inv = example();
    let (_tmp, pki) = fixture_pki(&inv);
    let up = host_uploads(&inv, &pki, "cp1");
    for c in Component::ALL {
        insta::assert_snapshot!(format!("cp1-{}.service", c.binary()), text(&up[&c.unit_path()]));
    }
    insta::assert_snapshot!(
        "cp1-controller-manager.kubeconfig",
        text(&up[files::CONTROLLER_MANAGER_KUBECONFIG])
    );
    insta::assert_snapshot!("cp1-scheduler.kubeconfig", text(&up[files::SCHEDULER_KUBECONFIG]));
    insta::assert_snapshot!("encryption-config.yaml", text(&up[files::ENCRYPTION_CONFIG]));
    insta::assert_snapshot!("audit-policy.yaml", text(&up[files::AUDIT_POLICY]));
    // What `hactl plan` would list for cp1: path, mode, owner, size, sha256; never content.
    let listing: Vec<String> = up.values().map(|u| u.to_string()).collect();
    insta::assert_snapshot!("cp1-uploads", listing.join("\n"));

    // The admin kubeconfig holds a private key: its data fields are shown by sha256 only.
    let admin = files::admin_kubeconfig(&inv, &pki).unwrap();
    let redacted: Vec<String> = admin
        .lines()
        .map(|l| match l.split_once("-data: ") {
            Some((k, v)) => format!(
                "{k}-data: <sha256 {}>",
                hex::encode(<sha2::Sha256 as sha2::Digest>::digest(v))
            ),
            None => l.to_string(),
        })
        .collect();
    insta::assert_snapshot!("admin.kubeconfig", redacted.join("\n"));
}

#[test]
fn static_pod_manifests_match_their_snapshots_and_carry_the_unit_flags() {
    let mut inv = example();
    let (_tmp, pki) = fixture_pki(&inv);
    let systemd = host_uploads(&inv, &pki, "cp2");
    inv.kubernetes.as_mut().unwrap().mode = KubernetesMode::StaticPod;
    let pods = host_uploads(&inv, &pki, "cp2");
    for c in Component::ALL {
        let manifest = text(&pods[&c.manifest_path()]);
        insta::assert_snapshot!(format!("cp2-{}.yaml", c.binary()), manifest);
        // The same flags in the same order: parse the manifest and the unit.
        let pod: serde_json::Value = serde_saphyr::from_str(&manifest).unwrap();
        let command: Vec<String> = pod["spec"]["containers"][0]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(command[0], c.binary());
        assert_eq!(
            command[1..],
            unit_flags(&text(&systemd[&c.unit_path()]))[..],
            "{}",
            c.binary()
        );
        assert_eq!(pod["spec"]["hostNetwork"], true);
        assert_eq!(pod["spec"]["priorityClassName"], "system-node-critical");
    }
}

/// A static-pod manifest names the image by its tag and, when hactl ships the image
/// (`kubernetes.images.dir`), carries the digest of the image's manifest: an image rebuilt under
/// the same tag changes the manifest, so `up` rolls the pods (a tag alone would leave the kubelet
/// running the old image). A registry's image carries no digest (its tag decides).
#[test]
fn a_static_pod_manifest_carries_its_shipped_images_digest_so_a_rebuilt_image_rolls() {
    let mut registry_inv = example();
    registry_inv.kubernetes.as_mut().unwrap().mode = KubernetesMode::StaticPod;
    let mut inv = registry_inv.clone();
    inv.kubernetes.as_mut().unwrap().images = inventory::ImageSource::Dir("/images".into());
    let (_tmp, pki) = fixture_pki(&inv);
    let host = inv.host("cp2").unwrap();
    let files = files::host_files(host, &inv, &pki, &inputs()).unwrap();
    let version = inv.kubernetes.as_ref().unwrap().version.to_string();
    let shipped = |digit: char| {
        let images = hactl::kubernetes::node::NodeImages {
            pause: "hactl.local/pause:3.4".into(),
            control_plane: Component::ALL
                .iter()
                .map(|c| {
                    (
                        c.binary().to_string(),
                        format!("hactl.local/{}:v{version}", c.binary()),
                    )
                })
                .collect(),
            shipped: Component::ALL
                .iter()
                .map(|c| hactl::kubernetes::node::ShippedImage {
                    reference: format!("hactl.local/{}:v{version}", c.binary()),
                    digest: format!("sha256:{}", digit.to_string().repeat(64)),
                    archive: Upload::new(
                        format!("/var/lib/hactl/images/{}.tar", c.binary()),
                        0o644,
                        "root",
                        "root",
                        vec![],
                    ),
                    control_plane: true,
                })
                .collect(),
        };
        KubernetesInputs::new(None, EncryptionKey::from_bytes([7; 32])).with_node(None, Some(images))
    };
    for c in Component::ALL {
        let a = text(&files::runner(c, host, &inv, &files, &shipped('a')).unwrap());
        let b = text(&files::runner(c, host, &inv, &files, &shipped('b')).unwrap());
        let annotation = format!("\n    hactl.io/image-digest: sha256:{}\n", "a".repeat(64));
        assert!(
            a.contains(&annotation),
            "{}: no digest annotation:\n{a}",
            c.binary()
        );
        assert!(
            a.contains(&format!("image: hactl.local/{}:v{version}", c.binary())),
            "{a}"
        );
        assert_ne!(
            a,
            b,
            "{}: a rebuilt image leaves the manifest as it was",
            c.binary()
        );
        // The manifest still parses, the annotation among the others.
        let pod: serde_json::Value = serde_saphyr::from_str(&a).unwrap();
        assert_eq!(
            pod["metadata"]["annotations"]["hactl.io/image-digest"],
            format!("sha256:{}", "a".repeat(64))
        );
        // A registry's image: no digest, and the manifest is the registry's.
        let registry = text(&files::runner(c, host, &registry_inv, &files, &inputs()).unwrap());
        assert!(!registry.contains("image-digest"), "{registry}");
    }
}

/// `--name=value` words of a unit's ExecStart, in order.
fn unit_flags(unit: &str) -> Vec<String> {
    unit.lines()
        .map(|l| l.trim().trim_end_matches('\\').trim())
        .filter(|l| l.starts_with("--"))
        .map(str::to_string)
        .collect()
}

fn flag_map(unit: &str) -> BTreeMap<String, String> {
    unit_flags(unit)
        .iter()
        .map(|f| {
            let (k, v) = f.trim_start_matches("--").split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn spki_of_cert(pem: &str) -> Vec<u8> {
    let der = pem_der(pem);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.public_key().raw.to_vec()
}

fn pem_der(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).unwrap()
}

fn spki_of_key(pem: &str) -> Vec<u8> {
    rcgen::KeyPair::from_pem(pem).unwrap().subject_public_key_info()
}

#[test]
fn every_certificate_a_flag_or_kubeconfig_names_is_uploaded_and_fits() {
    let inv = example();
    let (_tmp, pki) = fixture_pki(&inv);
    let vip = inv.vip.as_ref().unwrap().address.to_string();
    let cps = inv.with_role(Role::ControlPlane);
    for host in &cps {
        let up = host_uploads(&inv, &pki, &host.name);
        let file = |path: &str| -> String {
            text(
                up.get(path)
                    .unwrap_or_else(|| panic!("{}: {path} is referenced but not uploaded", host.name)),
            )
        };
        let cert = |path: &str| pki::inspect(&file(path)).unwrap();
        let signed = |leaf: &str, ca: &str| pki::is_signed_by(&file(leaf), &file(ca)).unwrap();
        let pair = |cert: &str, key: &str| {
            assert_eq!(
                spki_of_cert(&file(cert)),
                spki_of_key(&file(key)),
                "{}: {key} is not the key of {cert}",
                host.name
            );
            assert_eq!(up[key].mode, 0o600, "{}: {key} must be 0600", host.name);
        };
        let mut referenced = 0;
        for c in Component::ALL {
            let flags = flag_map(&file(&c.unit_path()));
            for (name, value) in &flags {
                if value.starts_with("/etc/hactl/") {
                    file(value);
                    referenced += 1;
                }
                if name.ends_with("kubeconfig") {
                    assert!(value.starts_with("/etc/hactl/"), "{name}");
                }
            }
            match c {
                Component::ApiServer => {
                    let f = |k: &str| flags[k].as_str();
                    // Serving certificate: server auth, every name a client may use, from the client CA.
                    let serving = cert(f("tls-cert-file"));
                    assert!(serving.ext_key_usages.contains(&"server_auth".to_string()));
                    let mut want: Vec<String> = vec![
                        vip.clone(),
                        "127.0.0.1".into(),
                        "10.96.0.1".into(),
                        "kubernetes.default.svc.cluster.local".into(),
                        f("advertise-address").into(),
                        f("bind-address").into(),
                    ];
                    for cp in &cps {
                        want.push(cp.address.to_string());
                        want.push(cp.name.clone());
                    }
                    for san in want {
                        assert!(
                            serving.sans.contains(&san),
                            "{}: apiserver cert lacks SAN {san}: {:?}",
                            host.name,
                            serving.sans
                        );
                    }
                    pair(f("tls-cert-file"), f("tls-private-key-file"));
                    for ca in ["client-ca-file", "requestheader-client-ca-file", "etcd-cafile"] {
                        assert!(cert(f(ca)).is_ca, "{ca}");
                    }
                    assert!(signed(f("tls-cert-file"), f("client-ca-file")));
                    // Client certificates: client auth, from the CA their server trusts.
                    for (crt, key, ca) in [
                        (
                            "kubelet-client-certificate",
                            "kubelet-client-key",
                            "client-ca-file",
                        ),
                        ("etcd-certfile", "etcd-keyfile", "etcd-cafile"),
                        (
                            "proxy-client-cert-file",
                            "proxy-client-key-file",
                            "requestheader-client-ca-file",
                        ),
                    ] {
                        assert!(
                            cert(f(crt)).ext_key_usages.contains(&"client_auth".to_string()),
                            "{crt}"
                        );
                        assert!(signed(f(crt), f(ca)), "{crt} is not signed by {ca}");
                        pair(f(crt), f(key));
                    }
                    assert_eq!(
                        cert(f("proxy-client-cert-file")).subject_cn,
                        f("requestheader-allowed-names")
                    );
                    assert_eq!(
                        cert(f("kubelet-client-certificate")).subject_organizations,
                        [hactl::kubernetes::rbac::KUBELET_CLIENT_GROUP],
                        "the kubelet client is bound by RBAC, not system:masters"
                    );
                    // Service-account keys are one pair.
                    assert_eq!(
                        pem_der(&file(f("service-account-key-file"))),
                        spki_of_key(&file(f("service-account-signing-key-file")))
                    );
                    // Every etcd member, by IP over TLS, and its server certificate names that IP.
                    let servers: Vec<&str> = f("etcd-servers").split(',').collect();
                    let etcd_hosts = inv.with_role(Role::Etcd);
                    assert_eq!(servers.len(), etcd_hosts.len());
                    for (url, eh) in servers.iter().zip(&etcd_hosts) {
                        assert_eq!(*url, format!("https://{}:2379", eh.address));
                        let server = pki::inspect(&pki.etcd_server(&eh.name).unwrap().cert_pem).unwrap();
                        assert!(server.sans.contains(&eh.address.to_string()));
                        assert!(pki::is_signed_by(
                            &pki.etcd_server(&eh.name).unwrap().cert_pem,
                            &file(f("etcd-cafile"))
                        )
                        .unwrap());
                    }
                    assert_eq!(f("bind-address"), host.address.to_string());
                    assert_eq!(f("encryption-provider-config"), files::ENCRYPTION_CONFIG);
                    assert_eq!(up[files::ENCRYPTION_CONFIG].mode, 0o600);
                }
                Component::ControllerManager => {
                    let f = |k: &str| flags[k].as_str();
                    assert!(cert(f("cluster-signing-cert-file")).is_ca);
                    pair(f("cluster-signing-cert-file"), f("cluster-signing-key-file"));
                    assert_eq!(f("root-ca-file"), f("client-ca-file"));
                    assert_eq!(f("leader-elect"), "true");
                    // It signs service-account tokens the apiserver verifies.
                    let api = flag_map(&file(&Component::ApiServer.unit_path()));
                    assert_eq!(
                        f("service-account-private-key-file"),
                        api["service-account-signing-key-file"]
                    );
                }
                Component::Scheduler => assert_eq!(flags["leader-elect"], "true"),
            }
        }
        assert!(
            referenced > 20,
            "{}: only {referenced} file references",
            host.name
        );

        // The kubeconfigs reach the local apiserver, whose certificate names that address, with a
        // client certificate signed by the CA the apiserver trusts.
        for (path, cn) in [
            (
                files::CONTROLLER_MANAGER_KUBECONFIG,
                "system:kube-controller-manager",
            ),
            (files::SCHEDULER_KUBECONFIG, "system:kube-scheduler"),
        ] {
            let kc: serde_json::Value = serde_saphyr::from_str(&file(path)).unwrap();
            let server = kc["clusters"][0]["cluster"]["server"].as_str().unwrap();
            assert_eq!(server, format!("https://{}:6443", host.address));
            let ca = kc["clusters"][0]["cluster"]["certificate-authority"]
                .as_str()
                .unwrap();
            let crt = kc["users"][0]["user"]["client-certificate"].as_str().unwrap();
            let key = kc["users"][0]["user"]["client-key"].as_str().unwrap();
            assert!(cert(ca).is_ca);
            let info = cert(crt);
            assert_eq!(info.subject_cn, cn);
            assert!(info.ext_key_usages.contains(&"client_auth".to_string()));
            assert!(signed(crt, ca));
            pair(crt, key);
            let api = flag_map(&file(&Component::ApiServer.unit_path()));
            assert_eq!(
                ca, api["client-ca-file"],
                "the apiserver trusts the kubeconfig's CA for clients"
            );
            assert!(cert(&api["tls-cert-file"])
                .sans
                .contains(&host.address.to_string()));
            assert_eq!(up[path].mode, 0o600);
        }
    }

    // The admin kubeconfig: the VIP, system:masters, inline.
    let admin: serde_json::Value =
        serde_saphyr::from_str(&files::admin_kubeconfig(&inv, &pki).unwrap()).unwrap();
    assert_eq!(
        admin["clusters"][0]["cluster"]["server"],
        format!("https://{vip}:6443")
    );
    let b64 = |v: &serde_json::Value| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    let admin_cert = b64(&admin["users"][0]["user"]["client-certificate-data"]);
    let info = pki::inspect(&admin_cert).unwrap();
    assert_eq!(info.subject_organizations, ["system:masters"]);
    assert!(pki::is_signed_by(
        &admin_cert,
        &b64(&admin["clusters"][0]["cluster"]["certificate-authority-data"])
    )
    .unwrap());
    assert_eq!(
        spki_of_cert(&admin_cert),
        spki_of_key(&b64(&admin["users"][0]["user"]["client-key-data"]))
    );
}

// ── plans ──────────────────────────────────────────────────────────────────────────────────

/// Facts of a host on which every upload is in place and every unit runs.
fn converged(uploads: &[Upload], version: &str) -> HostFacts {
    let mut f = HostFacts::default();
    for u in uploads {
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
    for c in Component::ALL {
        f.units.insert(
            c.unit(),
            UnitState {
                active: "active".into(),
                main_pid: 100,
                enabled: "enabled".into(),
                started_monotonic_us: 0,
            },
        );
        f.kube_versions
            .insert(c.binary().into(), format!("Kubernetes v{version}"));
    }
    f.etcd_version = Some("etcd Version: 3.5.16".into());
    f
}

/// The control plane's phases of `up` (the etcd and load-balancer phases come first, the node
/// phases and the cluster DNS last: `tests/node_plan.rs` has the node phases, `src/kubernetes/dns.rs` the DNS).
fn kube_phases() -> Vec<Box<dyn Phase>> {
    let phases: Vec<Box<dyn Phase>> = hactl::converge::phases()
        .into_iter()
        .filter(|p| {
            !p.title().contains("etcd")
                && !p.title().contains("load balancer")
                && !p.title().to_lowercase().contains("node")
                && !p.title().contains("DNS")
        })
        .collect();
    assert!(
        phases.iter().all(|p| p.title().to_lowercase().contains("kube")
            || p.title().contains("apiserver")
            || p.title().contains("controller")),
        "{:?}",
        phases.iter().map(|p| p.title()).collect::<Vec<_>>()
    );
    phases
}

fn plan_text(
    inv: &Inventory,
    pki: &Pki,
    facts: &BTreeMap<String, HostFacts>,
    inputs: &KubernetesInputs,
) -> Result<String, String> {
    let ctx = Ctx::new(inv, pki, facts).with_kubernetes(Some(inputs));
    phases::build(&kube_phases(), &ctx)
        .map(|p| p.to_string())
        .map_err(|e| e.to_string())
}

fn bundle_inventory() -> Inventory {
    let mut inv = example();
    inv.kubernetes.as_mut().unwrap().source = BinarySource::Bundle {
        dir: "/nonexistent/bundle".into(),
    };
    inv
}

/// Bytes standing in for binaries in *plans* only: the plan shows their size and sha256.
fn plan_inputs() -> KubernetesInputs {
    let bins = hactl::binaries::LocalBinaries {
        files: Component::ALL
            .iter()
            .map(|c| {
                (
                    c.binary().to_string(),
                    hactl::plan::Blob::bytes(format!("test bytes for {}", c.binary()).into_bytes()),
                )
            })
            .collect(),
        origin: "test".into(),
    };
    KubernetesInputs::new(Some(&bins), EncryptionKey::from_bytes([7; 32]))
}

/// Facts of every control-plane host holding exactly what `up` would upload (files and
/// binaries), running 1.31.4.
fn converged_control_plane(
    inv: &Inventory,
    pki: &Pki,
    inputs: &KubernetesInputs,
) -> BTreeMap<String, HostFacts> {
    let mut facts = BTreeMap::new();
    for h in inv.with_role(Role::ControlPlane) {
        let mut uploads: Vec<Upload> = host_uploads(inv, pki, &h.name).into_values().collect();
        uploads.extend(inputs.binaries.iter().cloned());
        facts.insert(h.name.clone(), converged(&uploads, "1.31.4"));
    }
    facts
}

#[test]
fn a_fresh_plan_installs_configures_and_starts_and_matches_its_snapshot() {
    let inv = bundle_inventory();
    let (_tmp, pki) = fixture_pki(&inv);
    let plan = plan_text(&inv, &pki, &BTreeMap::new(), &plan_inputs()).unwrap();
    insta::assert_snapshot!("fresh-plan", plan);
}

/// `up`'s plan once cp2's `path` on the host differs from what `up` would write, and the index
/// of its line `== Restart changed apiservers (one host at a time)`.
fn plan_with_cp2_changed(
    inv: &Inventory,
    pki: &Pki,
    facts: &mut BTreeMap<String, HostFacts>,
    inputs: &KubernetesInputs,
    path: &str,
) -> (String, usize) {
    facts.get_mut("cp2").unwrap().files.get_mut(path).unwrap().sha256 = "0".repeat(64);
    let plan = plan_text(inv, pki, facts, inputs).unwrap();
    let roll = plan
        .lines()
        .position(|l| l == "== Restart changed apiservers (one host at a time)")
        .unwrap_or_else(|| panic!("no apiserver roll:\n{plan}"));
    (plan, roll)
}

#[test]
fn a_converged_control_plane_plans_nothing_and_a_changed_certificate_rolls_one_host_at_a_time() {
    let inv = bundle_inventory();
    let (_tmp, pki) = fixture_pki(&inv);
    let inputs = plan_inputs();
    let mut facts = converged_control_plane(&inv, &pki, &inputs);
    assert_eq!(plan_text(&inv, &pki, &facts, &inputs).unwrap(), "no changes\n");

    // (The example logs in as `debian` and uses sudo.)
    // cp2's apiserver certificate on the host differs: only cp2's apiserver restarts, drained on
    // both load balancers first and made ready after /readyz answered.
    let (plan, roll) = plan_with_cp2_changed(&inv, &pki, &mut facts, &inputs, files::APISERVER_CRT);
    const NOTE_CP2: [&str; 2] = [
        "lb1: run sudo -n -- sh -c 'mkdir -p \"${1%/*}\" && date -u +%Y-%m-%dT%H:%M:%SZ > \"$1\"' hactl-hold /var/lib/hactl/held-by-up/kubernetes-api,cp2",
        "lb2: run sudo -n -- sh -c 'mkdir -p \"${1%/*}\" && date -u +%Y-%m-%dT%H:%M:%SZ > \"$1\"' hactl-hold /var/lib/hactl/held-by-up/kubernetes-api,cp2",
    ];
    let lines: Vec<&str> = plan.lines().collect();
    assert_eq!(
        lines[roll + 1..]
            .iter()
            .map(|l| l.split(": ").take(2).collect::<Vec<_>>().join(": "))
            .collect::<Vec<_>>(),
        [
            // The drain is noted on each load balancer first (a cut run leaves the note).
            NOTE_CP2[0],
            "lb1: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 drain",
            "lb1: run sudo -n -- /usr/local/sbin/hactl-haproxy idle kubernetes-api cp2 10",
            "lb1: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 maint",
            "lb1: wait up to 10s",
            NOTE_CP2[1],
            "lb2: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 drain",
            "lb2: run sudo -n -- /usr/local/sbin/hactl-haproxy idle kubernetes-api cp2 10",
            "lb2: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 maint",
            "lb2: wait up to 10s",
            "cp2: run sudo -n -- systemctl restart kube-apiserver.service",
            "cp2: wait up to 120s",
            // The controllers on cp2 talk to its apiserver: a leader among them may have lost
            // its Lease during the restart; the roll waits until someone leads again.
            "cp2: wait up to 90s",
            "cp2: wait up to 90s",
            "lb1: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 ready",
            "lb1: wait up to 60s",
            "lb1: run sudo -n -- rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp2",
            "lb2: run sudo -n -- /usr/local/sbin/hactl-haproxy state kubernetes-api cp2 ready",
            "lb2: wait up to 60s",
            "lb2: run sudo -n -- rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp2",
        ]
    );
    assert!(lines[..roll]
        .iter()
        .any(|l| l.starts_with("cp2: write /etc/hactl/pki/kubernetes/apiserver.crt")));
    assert!(
        !plan.contains("kube-controller-manager.service"),
        "controllers do not read the apiserver cert:\n{plan}"
    );
    // Without a controller-manager running on cp2, nothing there follows its apiserver: no
    // Lease gate (a cluster whose controllers lead nowhere must not wait for a leader).
    let mut stopped = facts.clone();
    stopped
        .get_mut("cp2")
        .unwrap()
        .units
        .get_mut("kube-controller-manager.service")
        .unwrap()
        .active = "inactive".into();
    let plan = plan_text(&inv, &pki, &stopped, &inputs).unwrap();
    assert!(
        plan.contains("cp2: run sudo -n -- systemctl restart kube-apiserver.service"),
        "{plan}"
    );
    assert!(!plan.contains("wait up to 90s"), "{plan}");
}

/// Static-pod mode: a changed apiserver manifest on cp2 replaces its pod with the old one stopped
/// first (its manifest moved aside, no process left), then the new manifest, then the new process
/// answering /readyz, then the Lease gate; drained on both load balancers around it.
#[test]
fn a_static_pod_roll_stops_the_old_pod_before_it_writes_the_new_manifest() {
    let mut inv = bundle_inventory();
    inv.kubernetes.as_mut().unwrap().mode = KubernetesMode::StaticPod;
    let (_tmp, pki) = fixture_pki(&inv);
    let inputs = plan_inputs();
    let mut facts = converged_control_plane(&inv, &pki, &inputs);
    for f in facts.values_mut() {
        f.units.clear();
    }
    let manifest = Component::ApiServer.manifest_path();
    let before = plan_text(&inv, &pki, &facts, &inputs).unwrap();
    assert!(
        !before.contains("Restart changed apiservers"),
        "nothing to roll yet:\n{before}"
    );
    let (plan, roll) = plan_with_cp2_changed(&inv, &pki, &mut facts, &inputs, &manifest);
    let lines: Vec<&str> = plan.lines().collect();
    let cp2: Vec<String> = lines[roll + 1..]
        .iter()
        .take_while(|l| !l.starts_with("=="))
        .filter(|l| l.starts_with("cp2: "))
        .map(|l| {
            l.split(": ")
                .take(2)
                .collect::<Vec<_>>()
                .join(": ")
                .split(" (")
                .next()
                .unwrap()
                .split(" mode=")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let aside = format!("cp2: run sudo -n -- sh -c 'mkdir -p \"$2\" && if [ -e \"$1\" ]; then mv -f \"$1\" \"$2/\"; fi' hactl-manifest-aside {manifest} /etc/kubernetes/manifests.hactl-previous");
    assert_eq!(
        cp2,
        [
            aside.as_str(),
            "cp2: wait up to 120s",
            &format!("cp2: write {manifest}"),
            "cp2: wait up to 300s",
            "cp2: wait up to 90s",
            "cp2: wait up to 90s",
        ],
        "{plan}"
    );
    assert!(
        plan.contains("cp2: wait up to 120s: the kubelet on cp2 stopped kube-apiserver"),
        "{plan}"
    );
}

/// `hactl certs rotate-ca front-proxy`'s rolls are `up`'s plan: once the new front-proxy CA is
/// trusted beside the old one, every control-plane host gets the two-CA trust file and its
/// apiserver (drained, /readyz) and controller-manager restart one host at a time; nothing
/// else changes. After the leaf is re-issued, front-proxy/client.crt goes out too.
#[test]
fn a_front_proxy_rotation_rolls_every_apiserver_and_controller_manager_and_nothing_else() {
    let inv = bundle_inventory();
    let (tmp, pki) = fixture_pki(&inv);
    let inputs = plan_inputs();
    let facts = converged_control_plane(&inv, &pki, &inputs);
    let dir = tmp.path().join("pki");
    let kind = pki::CaKind::FrontProxy;
    pki::rotate::start(&dir, kind, "f1").unwrap();
    pki::rotate::create_next(&dir, &inv, kind, NOW).unwrap();
    let trusting = pki::ensure(&dir, &inv, NOW).unwrap();
    let both = trusting.front_proxy_trust_pem().unwrap();
    assert_eq!(pki::bundle_ders(&both).unwrap().len(), 2);
    let cp1 = host_uploads(&inv, &trusting, "cp1");
    assert_eq!(
        text(&cp1[files::FRONT_PROXY_CA_CRT]),
        both,
        "the apiserver's trust file"
    );

    let plan = plan_text(&inv, &trusting, &facts, &inputs).unwrap();
    let cps: Vec<String> = inv
        .with_role(Role::ControlPlane)
        .iter()
        .map(|h| h.name.clone())
        .collect();
    for cp in &cps {
        assert!(
            plan.contains(&format!("{cp}: write {}", files::FRONT_PROXY_CA_CRT)),
            "{cp}:\n{plan}"
        );
    }
    let writes: Vec<&str> = plan.lines().filter(|l| l.contains(": write ")).collect();
    assert_eq!(writes.len(), cps.len(), "only the trust file changes:\n{plan}");
    let restarts = |unit: &str| {
        plan.lines()
            .filter(|l| l.ends_with(&format!("systemctl restart {unit}")))
            .count()
    };
    assert_eq!(restarts("kube-apiserver.service"), cps.len(), "{plan}");
    assert_eq!(restarts("kube-controller-manager.service"), cps.len(), "{plan}");
    assert_eq!(
        restarts("kube-scheduler.service"),
        0,
        "the scheduler does not read it:\n{plan}"
    );
    assert!(
        plan.contains("== Restart changed apiservers (one host at a time)"),
        "{plan}"
    );

    // C2: the leaf is re-issued from the new CA; the next roll writes it beside the trust file.
    pki::rotate::promote(&dir, kind).unwrap();
    let promoted = pki::ensure(&dir, &inv, NOW).unwrap();
    let plan = plan_text(&inv, &promoted, &facts, &inputs).unwrap();
    assert!(
        plan.contains(&format!("cp1: write {}", files::FRONT_PROXY_CLIENT_CRT)),
        "{plan}"
    );
    assert!(
        !plan.contains(files::APISERVER_CRT),
        "kubernetes leaves untouched:\n{plan}"
    );
}

/// `hactl certs rotate-ca kubernetes`'s rolls: once the new kubernetes CA is trusted beside the
/// old one, every control-plane host's trust file (`--client-ca-file`, `--root-ca-file`, the
/// kubeconfigs) holds both while the controller-manager's signing CA stays the old one alone,
/// and the apiserver, controller-manager and scheduler restart one host at a time; the admin
/// kubeconfig trusts both. After C2 the signing CA is the new one alone and every kubernetes
/// leaf goes out.
#[test]
fn a_kubernetes_rotation_trusts_both_signs_with_one_and_rolls_every_component() {
    let inv = bundle_inventory();
    let (tmp, pki) = fixture_pki(&inv);
    let inputs = plan_inputs();
    let facts = converged_control_plane(&inv, &pki, &inputs);
    let dir = tmp.path().join("pki");
    let kind = pki::CaKind::Kubernetes;
    let old = pki.kubernetes_ca().unwrap().cert_pem.clone();
    pki::rotate::start(&dir, kind, "k1").unwrap();
    pki::rotate::create_next(&dir, &inv, kind, NOW).unwrap();
    let trusting = pki::ensure(&dir, &inv, NOW).unwrap();
    let both = trusting.kubernetes_trust_pem().unwrap();
    assert_eq!(pki::bundle_ders(&both).unwrap().len(), 2);
    let cp1 = host_uploads(&inv, &trusting, "cp1");
    assert_eq!(text(&cp1[files::CA_CRT]), both, "the trust file");
    assert_eq!(text(&cp1[files::SIGNING_CA_CRT]), old, "the signing CA alone");
    let admin = files::admin_kubeconfig(&inv, &trusting).unwrap();
    use base64::Engine as _;
    assert!(
        admin.contains(&base64::engine::general_purpose::STANDARD.encode(&both)),
        "the admin kubeconfig trusts both:\n{admin}"
    );

    let plan = plan_text(&inv, &trusting, &facts, &inputs).unwrap();
    let cps: Vec<String> = inv
        .with_role(Role::ControlPlane)
        .iter()
        .map(|h| h.name.clone())
        .collect();
    for cp in &cps {
        assert!(
            plan.contains(&format!("{cp}: write {}", files::CA_CRT)),
            "{cp}:\n{plan}"
        );
        assert!(
            !plan.contains(&format!("{cp}: write {}", files::SIGNING_CA_CRT)),
            "the signing CA does not change before C2:\n{plan}"
        );
    }
    let restarts = |plan: &str, unit: &str| {
        plan.lines()
            .filter(|l| l.ends_with(&format!("systemctl restart {unit}")))
            .count()
    };
    for unit in [
        "kube-apiserver.service",
        "kube-controller-manager.service",
        "kube-scheduler.service",
    ] {
        assert_eq!(restarts(&plan, unit), cps.len(), "{unit}:\n{plan}");
    }
    assert_eq!(
        restarts(&plan, "etcd.service"),
        0,
        "etcd does not read it:\n{plan}"
    );

    // C2: the new CA signs alone; every kubernetes leaf goes out with it.
    pki::rotate::promote(&dir, kind).unwrap();
    let promoted = pki::ensure(&dir, &inv, NOW).unwrap();
    let new = promoted.kubernetes_ca().unwrap().cert_pem.clone();
    assert_ne!(new, old);
    let cp1 = host_uploads(&inv, &promoted, "cp1");
    assert_eq!(text(&cp1[files::SIGNING_CA_CRT]), new);
    assert!(
        text(&cp1[files::CA_CRT]).starts_with(&new),
        "the signing CA first"
    );
    let plan = plan_text(&inv, &promoted, &facts, &inputs).unwrap();
    for path in [
        files::SIGNING_CA_CRT,
        files::CA_KEY,
        files::APISERVER_CRT,
        files::KUBELET_CLIENT_CRT,
        files::CONTROLLER_MANAGER_CRT,
        files::SCHEDULER_CRT,
    ] {
        assert!(plan.contains(&format!("cp1: write {path}")), "{path}:\n{plan}");
    }
    assert!(
        !plan.contains(files::FRONT_PROXY_CLIENT_CRT) && !plan.contains(files::ETCD_CLIENT_CRT),
        "other CAs' leaves untouched:\n{plan}"
    );
}

#[test]
fn package_source_and_version_skew_are_refused_with_the_fix() {
    let mut inv = example();
    inv.kubernetes.as_mut().unwrap().source = BinarySource::Package;
    let (_tmp, pki) = fixture_pki(&inv);
    let err = plan_text(&inv, &pki, &BTreeMap::new(), &inputs()).unwrap_err();
    assert!(
        err.starts_with("kubernetes.source: package is not available")
            && err.contains("set kubernetes.source to release"),
        "{err}"
    );

    let mut inv = bundle_inventory(); // 1.31.4
                                      // No pinned etcd (as with the package): the version each host runs is the one judged.
    inv.etcd.version = None;
    let mut facts = BTreeMap::new();
    let mut old = HostFacts::default();
    old.kube_versions
        .insert("kube-apiserver".into(), "Kubernetes v1.29.7".into());
    old.etcd_version = Some("etcd Version: 3.4.23".into());
    facts.insert("cp3".to_string(), old);
    let err = plan_text(&inv, &pki, &facts, &plan_inputs()).unwrap_err();
    assert!(
        err.starts_with("the version skew rules refuse this rollout, nothing was changed:"),
        "{err}"
    );
    assert!(
        err.contains("kube-apiserver 1.29.7 on cp3 is more than one minor version from the planned 1.31.4"),
        "{err}"
    );
    assert!(
        err.contains("etcd 3.4.23 on cp3 is not supported with Kubernetes 1.31.4"),
        "{err}"
    );
}

/// CIS hardening (issue 13, point 6): the TLS floor and cipher list on every component that
/// serves TLS, the kubelet CA and anonymous auth on the apiserver, the terminated-pod threshold
/// on the controller-manager; and every unit sandboxed. The lab test
/// `kube_labs::hardening` proves the same on a real apiserver.
#[test]
fn every_component_serves_tls_12_with_aead_ciphers_and_its_unit_is_sandboxed() {
    let inv = example();
    let (_tmp, pki) = fixture_pki(&inv);
    let up = host_uploads(&inv, &pki, "cp1");
    let aead = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
                TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384";
    for c in Component::ALL {
        let unit = text(&up[&c.unit_path()]);
        let flags = flag_map(&unit);
        let name = c.binary();
        assert_eq!(
            flags.get("tls-min-version").map(String::as_str),
            Some("VersionTLS12"),
            "{name}"
        );
        assert_eq!(
            flags.get("tls-cipher-suites").map(String::as_str),
            Some(aead),
            "{name}"
        );
        for suite in aead.split(',') {
            assert!(
                suite.starts_with("TLS_ECDHE_") && suite.contains("_GCM_"),
                "{suite}"
            );
        }
        let directives: BTreeMap<&str, &str> = unit
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| !k.starts_with(' ') && !k.starts_with('#'))
            .collect();
        for (key, want) in [
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("PrivateDevices", "yes"),
            ("ProtectKernelTunables", "yes"),
            ("ProtectKernelModules", "yes"),
            ("ProtectControlGroups", "yes"),
            ("RestrictSUIDSGID", "yes"),
            ("CapabilityBoundingSet", ""),
        ] {
            assert_eq!(directives.get(key).copied(), Some(want), "{name}: {key}");
        }
        // Nothing is writable but the apiserver's audit log (LogsDirectory=).
        assert!(!unit.contains("ReadWritePaths="), "{name}");
        assert_eq!(
            unit.contains("LogsDirectory=kubernetes"),
            c == Component::ApiServer,
            "{name}"
        );
    }
    let api = flag_map(&text(&up[&Component::ApiServer.unit_path()]));
    assert_eq!(api["kubelet-certificate-authority"], files::CA_CRT);
    assert_eq!(
        api["anonymous-auth"], "true",
        "kept on for HAProxy's /readyz check (docs/reference/kubernetes.md, Hardening)"
    );
    let cm = flag_map(&text(&up[&Component::ControllerManager.unit_path()]));
    assert_eq!(cm["terminated-pod-gc-threshold"], "1000");
}
