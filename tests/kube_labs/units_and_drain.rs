//! The Kubernetes control plane on real lab hosts.
//!
//! - `rendered_units_pass_systemd_analyze_verify_on_a_lab_host` needs root (a lab host with real
//!   systemd). The Kubernetes binaries are not put on the host (this test checks the units alone;
//!   `kube_labs::up` runs them), so systemd-analyze reports that each unit's ExecStart
//!   binary is missing; exactly that
//!   complaint, and nothing else, is accepted (the test says so when it filters it). A unit
//!   broken on purpose proves that verify reports syntax problems here.
//! - `maintenance_cordons_drains_and_uncordons_with_a_real_apiserver` runs the real binaries of
//!   `HACTL_KUBE_BIN_DIR`, or (as root, without it) of the cache `scripts/kube-binaries.sh` builds;
//!   it never skips as root. PodDisruptionBudgets go to the group/version the apiserver's minor
//!   serves (`policy/v1beta1` on 1.20: `hactl::kubernetes::gates`). The bring-up itself is proven
//!   in `kube_labs::up`.

use crate::support::kube as kube_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use hactl::inventory::{self, BinarySource, KubernetesMode, KubernetesSpec};
use hactl::kubernetes::{files, Component};
use lab_support::{eventually, TestLab};

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
            std::str::from_utf8(&unit.content).unwrap(),
        );
        paths.push(unit.path.clone());
    }

    // Control: a unit with a misspelt key and a bad value is reported by this systemd.
    let broken = String::from_utf8(
        files::unit(Component::Scheduler, &host, &inv)
            .unwrap()
            .content
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

fn hactl(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .output()
        .unwrap()
}

/// One API call through the library's client; panics with the answer when `ok` does not hold.
fn call(
    rt: &tokio::runtime::Runtime,
    api: &hactl::kubernetes::api::ApiClient,
    method: &str,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let content_type = if method == reqwest::Method::PATCH {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let body = (!body.is_null()).then_some(body);
    let (code, text) = rt
        .block_on(api.request(method.clone(), path, content_type, body.as_ref()))
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// Cordon, the ordered drain through the Eviction API (a PodDisruptionBudget blocking it until
/// --drain-timeout, then a cancel, then a drain that succeeds) and uncordon, against real
/// apiservers. hactl runs no kubelet, so the test registers the Node `cp1` and binds pods to it
/// through the API; the pods carry `terminationGracePeriodSeconds: 0`, so an accepted eviction
/// deletes them at once (the apiserver's own rule for a zero grace period), and the guarded pod
/// gets a Running/Ready status written through the status subresource, as its kubelet would,
/// since the Eviction API ignores budgets for Pending pods.
#[test]
fn maintenance_cordons_drains_and_uncordons_with_a_real_apiserver() {
    let name = "maintenance_cordons_drains_and_uncordons_with_a_real_apiserver";
    let Some(dir) = kube_support::bin_dir(name) else {
        return;
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let version = kube_support::version_of(&dir);
    let pdb_version = hactl::kubernetes::gates::pdb_api_version(version.minor);
    let pdbs = hactl::kubernetes::gates::pdb_path(version.minor, "drain-test");
    let Some(lab) = TestLab::up(name, 3, 2, 0, "trixie") else {
        return;
    };
    let path = lab.inventory().to_path_buf();
    let mut yaml = std::fs::read_to_string(&path).unwrap();
    yaml.push_str(&format!(
        "  kubernetes:\n    version: {version}\n    source: bundle\n    bundleDir: {}\n",
        dir.display()
    ));
    std::fs::write(&path, yaml).unwrap();
    let inv_arg = path.to_string_lossy().to_string();
    let run = |args: &[&str]| {
        let mut argv = args.to_vec();
        argv.extend(["-i", &inv_arg]);
        let out = hactl(&argv);
        eprintln!(
            "hactl {args:?} -> {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    assert!(run(&["up", "--yes"]).status.success());
    let state = path.parent().unwrap().join("state");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = hactl::kubernetes::api::ApiClient::new(
        &format!("https://{}:6443", lab.ip("cp2")),
        &state.join("pki"),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(120), || call(
            &rt,
            &api,
            "GET",
            "/readyz",
            serde_json::Value::Null
        )
        .0 == 200),
        "cp2's apiserver is not ready"
    );
    let post = |path: &str, body: serde_json::Value| {
        let (code, answer) = call(&rt, &api, "POST", path, body);
        assert!(code == 201 || code == 200, "POST {path}: {code} {answer}");
        answer
    };
    post(
        "/api/v1/nodes",
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cp1"}}),
    );
    post(
        "/api/v1/namespaces",
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "drain-test"}}),
    );
    // The ServiceAccount admission plugin wants each namespace's `default` account, which the
    // controller-manager creates, and (in 1.20) its token Secret, which the token controller adds
    // a moment later: a pod posted in between gets a 500 "No API token found".
    for ns in ["drain-test", "kube-system"] {
        assert!(
            eventually(Duration::from_secs(60), || {
                let (code, account) = call(
                    &rt,
                    &api,
                    "GET",
                    &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"),
                    serde_json::Value::Null,
                );
                code == 200
                    && account["secrets"]
                        .as_array()
                        .is_some_and(|secrets| !secrets.is_empty())
            }),
            "no default ServiceAccount with a token Secret in {ns}"
        );
    }
    let pod = |ns: &str, name: &str, class: Option<&str>, labels: serde_json::Value| {
        let mut spec = serde_json::json!({
            "nodeName": "cp1",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        });
        if let Some(c) = class {
            spec["priorityClassName"] = c.into();
        }
        post(
            &format!("/api/v1/namespaces/{ns}/pods"),
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": spec}),
        )
    };
    pod("drain-test", "plain", None, serde_json::json!({"app": "plain"}));
    pod(
        "drain-test",
        "guarded",
        None,
        serde_json::json!({"app": "guarded"}),
    );
    pod(
        "kube-system",
        "hactl-drain-critical",
        Some("system-cluster-critical"),
        serde_json::json!({"app": "critical"}),
    );
    // The guarded pod runs and is ready, as its kubelet would report.
    let (code, answer) = call(
        &rt,
        &api,
        "PATCH",
        "/api/v1/namespaces/drain-test/pods/guarded/status",
        serde_json::json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(code, 200, "{answer}");
    post(
        &pdbs,
        serde_json::json!({"apiVersion": pdb_version, "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": "drain-test"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}}),
    );
    assert!(
        eventually(Duration::from_secs(60), || {
            let (_, b) = call(
                &rt,
                &api,
                "GET",
                &format!("{pdbs}/guard"),
                serde_json::Value::Null,
            );
            b["status"]["expectedPods"] == 1 && b["status"]["disruptionsAllowed"] == 0
        }),
        "the disruption controller did not compute the budget"
    );
    let node =
        |rt: &tokio::runtime::Runtime| call(rt, &api, "GET", "/api/v1/nodes/cp1", serde_json::Value::Null).1;
    let exists = |ns: &str, pod: &str| {
        call(
            &rt,
            &api,
            "GET",
            &format!("/api/v1/namespaces/{ns}/pods/{pod}"),
            serde_json::Value::Null,
        )
        .0 == 200
    };

    // The plan names the blocker.
    let out = run(&["maintenance", "plan", "cp1"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("blocker: drain-test/guarded is covered by PodDisruptionBudget drain-test/guard"),
        "{text}"
    );

    // The budget holds the drain until --drain-timeout; the stage fails naming pod and budget.
    let out = run(&["maintenance", "start", "--yes", "cp1", "--drain-timeout", "15s"]);
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("refused by PodDisruptionBudget drain-test/guard"),
        "{err}"
    );
    assert!(
        err.contains("pod drain-test/guarded from cp1 was answered 429"),
        "{err}"
    );
    assert_eq!(node(&rt)["spec"]["unschedulable"], true, "not cordoned");
    assert_eq!(
        node(&rt)["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "Drain"
    );
    // Lower priority first: the plain pod is gone, the critical one (a later wave) is not.
    assert!(!exists("drain-test", "plain"));
    assert!(exists("kube-system", "hactl-drain-critical"));

    // C6 with Kubernetes: complete during Drain uncordons and stops nothing.
    assert!(run(&["maintenance", "complete", "cp1"]).status.success());
    let n = node(&rt);
    assert!(
        n["spec"]["unschedulable"].is_null() || n["spec"]["unschedulable"] == false,
        "{n}"
    );
    assert_eq!(
        n["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "Complete"
    );

    // Without the budget the drain finishes: every wave gone, then the control plane stops.
    let (code, _) = call(
        &rt,
        &api,
        "DELETE",
        &format!("{pdbs}/guard"),
        serde_json::Value::Null,
    );
    assert_eq!(code, 200);
    assert!(run(&["maintenance", "start", "--yes", "cp1"]).status.success());
    assert!(!exists("drain-test", "guarded"));
    assert!(!exists("kube-system", "hactl-drain-critical"));
    let n = node(&rt);
    assert_eq!(n["spec"]["unschedulable"], true);
    assert_eq!(
        n["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "StopControlPlane"
    );
    assert!(run(&["maintenance", "complete", "cp1"]).status.success());
    let n = node(&rt);
    assert!(
        n["spec"]["unschedulable"].is_null() || n["spec"]["unschedulable"] == false,
        "{n}"
    );
    assert_eq!(
        n["metadata"]["annotations"]["hactl.io/maintenance-stage"],
        "Complete"
    );
    lab.down().unwrap();
}
