//! The Kubernetes control plane on real lab hosts.
//!
//! - `rendered_units_pass_systemd_analyze_verify_on_a_lab_host` needs root (a lab host with real
//!   systemd). The Kubernetes binaries are not put on the host (this test checks the units alone;
//!   `kube_labs::up` runs them), so systemd-analyze reports that each unit's ExecStart
//!   binary is missing; exactly that
//!   complaint, and nothing else, is accepted (the test says so when it filters it). A unit
//!   broken on purpose proves that verify reports syntax problems here.
//!
//! The maintenance drain, once proven here on Node objects and pods the test wrote through the
//! API (no host ran a kubelet then), is proven on real Nodes and running pods in
//! `kube_labs::maintenance_leases`; the bring-up itself in `kube_labs::up`.

use crate::support::lab as lab_support;

use hactl::inventory::{self, BinarySource, KubernetesMode, KubernetesSpec};
use hactl::kubernetes::{files, Component};
use lab_support::TestLab;

fn kubernetes_spec(version: &str, source: BinarySource) -> KubernetesSpec {
    KubernetesSpec {
        version: semver::Version::parse(version).unwrap(),
        source,
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        pod_cidr: "10.244.0.0/16".parse().unwrap(),
        mode: KubernetesMode::Systemd,
        images: inventory::ImageSource::Registry(inventory::DEFAULT_IMAGE_REGISTRY.into()),
        containerd: BinarySource::Package,
        cgroup_driver: inventory::CgroupDriver::Systemd,
        eviction_hard: Default::default(),
        dns: None,
    }
}

/// Writes `content` to `path` on `host` through argv (no shell quoting of the content).
fn write_file(lab: &TestLab, host: &str, path: &str, content: &str) {
    lab.exec_ok(
        host,
        &["sh", "-c", "printf '%s' \"$1\" > \"$2\"", "sh", content, path],
    );
}

#[test]
fn rendered_units_pass_systemd_analyze_verify_on_a_lab_host() {
    let name = "rendered_units_pass_systemd_analyze_verify_on_a_lab_host";
    let Some(lab) = TestLab::up(name, 1, 0, 0, "trixie") else {
        return;
    };
    // The example inventory (3 control planes), with cp1 at the lab host's address: a 1-host lab
    // inventory would not validate (one etcd member, a VIP without load balancers).
    // (Its kubernetes section is replaced just below.)
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("inventories/example.yaml");
    let text = fs_err::read_to_string(&path).unwrap();
    let mut inv = inventory::load_str(&path, &text).unwrap();
    inv.kubernetes = Some(kubernetes_spec(
        "1.31.4",
        BinarySource::Bundle {
            dir: "/unused".into(),
        },
    ));
    inv.hosts[0].address = lab.ip("cp1").into();
    let host = inv.host("cp1").unwrap().clone();

    let mut paths = Vec::new();
    for c in Component::ALL {
        let unit = files::unit(c, &host, &inv).unwrap();
        write_file(
            &lab,
            "cp1",
            &unit.path,
            std::str::from_utf8(unit.content.in_memory().unwrap()).unwrap(),
        );
        paths.push(unit.path.clone());
    }

    // Control: a unit with a misspelt key and a bad value is reported by this systemd.
    let broken = String::from_utf8(
        files::unit(Component::Scheduler, &host, &inv)
            .unwrap()
            .content
            .in_memory()
            .unwrap()
            .to_vec(),
    )
    .unwrap()
    .replace("Restart=always", "Restartt=always\nRestartSec=soon");
    write_file(&lab, "cp1", "/etc/systemd/system/hactl-broken.service", &broken);
    let out = lab.exec(
        "cp1",
        &[
            "systemd-analyze",
            "verify",
            "/etc/systemd/system/hactl-broken.service",
        ],
    );
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Restartt"),
        "verify did not report the misspelt key:\n{text}"
    );
    assert!(
        text.contains("RestartSec"),
        "verify did not report the bad value:\n{text}"
    );
    lab.exec_ok("cp1", &["rm", "-f", "/etc/systemd/system/hactl-broken.service"]);

    let mut argv = vec!["systemd-analyze", "verify"];
    argv.extend(paths.iter().map(String::as_str));
    let out = lab.exec("cp1", &argv);
    let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    // Accepted, and only these: the ExecStart binary of each unit is not installed (this test
    // puts none there), and the "fatal error" systemd derives from it.
    let mut missing = Vec::new();
    let unexplained: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            for c in Component::ALL {
                let bin = c.binary_path();
                if l.contains(&format!("Command {bin} is not executable")) {
                    missing.push(c.binary());
                    return false;
                }
                if l.starts_with(&format!("{}: Unit configuration has fatal error", c.unit())) {
                    return false;
                }
            }
            true
        })
        .collect();
    assert!(unexplained.is_empty(), "systemd-analyze verify reported:\n{text}");
    missing.sort();
    missing.dedup();
    assert_eq!(
        missing,
        ["kube-apiserver", "kube-controller-manager", "kube-scheduler"],
        "expected exactly the missing-binary complaint for each unit:\n{text}"
    );
    println!("{name}: units verified; the only complaints were the missing binaries:\n{text}");
}
