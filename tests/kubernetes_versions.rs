//! The version gates as rendered: the units hactl writes for `inventories/example.yaml` carry
//! `--port=0` for kube-controller-manager and kube-scheduler on the minors whose binaries still
//! have the flag (1.20 – 1.23) and never from 1.24, which removed it; the apiserver never gets it.
//! (Which minor gates what, and the upstream changelog entry behind it: `hactl::kubernetes::gates`.)

use hactl::inventory::{self, BinarySource, KubernetesMode, KubernetesSpec};
use hactl::kubernetes::{files, Component};

fn unit_flags(version: &str, component: Component) -> Vec<String> {
    let mut inv =
        inventory::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("inventories/example.yaml"))
            .unwrap();
    inv.kubernetes = Some(KubernetesSpec {
        version: semver::Version::parse(version).unwrap(),
        source: BinarySource::Bundle {
            dir: "/unused".into(),
        },
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        pod_cidr: "10.244.0.0/16".parse().unwrap(),
        mode: KubernetesMode::Systemd,
        images: inventory::ImageSource::Registry(inventory::DEFAULT_IMAGE_REGISTRY.into()),
        containerd: BinarySource::Package,
        cgroup_driver: inventory::CgroupDriver::Systemd,
        eviction_hard: Default::default(),
        dns: None,
    });
    let host = inv.host("cp1").unwrap().clone();
    let unit = files::unit(component, &host, &inv).unwrap();
    String::from_utf8(unit.content.in_memory().unwrap().to_vec())
        .unwrap()
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.trim_end_matches('\\').to_string())
        .collect()
}

#[test]
fn insecure_ports_are_closed_on_the_minors_that_have_them_and_never_rendered_after() {
    for version in ["1.20.2", "1.23.17"] {
        for c in [Component::ControllerManager, Component::Scheduler] {
            let flags = unit_flags(version, c);
            assert!(
                flags.iter().any(|f| f == "--port=0"),
                "{version} {c:?}: {flags:?}"
            );
        }
        let api = unit_flags(version, Component::ApiServer);
        assert!(!api.iter().any(|f| f.starts_with("--port")), "{version}: {api:?}");
    }
    for version in ["1.24.0", "1.31.4"] {
        for c in Component::ALL {
            let flags = unit_flags(version, c);
            assert!(
                !flags.iter().any(|f| f.starts_with("--port=")),
                "{version} {c:?} renders a removed flag: {flags:?}"
            );
        }
    }
}
