//! Every `-o json` document hactl prints, pinned by a snapshot (`tests/snapshots/json_documents__*`):
//! each is built by the same library function the command prints through, from fixed input, so
//! a renamed field, a lost `apiVersion`/`kind` or an unknown value printed as `""` or `0` instead
//! of `null` changes a snapshot and fails here. Review a change with `cargo insta review`.
//!
//! Also: every kind appears in docs/reference/json.md, and each document starts with
//! `apiVersion` and `kind`.

use hactl::converge::check::{self, CheckRow, Verdict};
use hactl::converge::status::{self, AlarmRow, CertRow, ClusterStatus, MemberRow};
use hactl::output::{document, API_VERSION};

/// The document as the command prints it: pretty JSON of `apiVersion`, `kind`, then the body.
fn printed<T: serde::Serialize>(kind: &str, body: &T) -> String {
    let text = serde_json::to_string_pretty(&document(kind, body)).unwrap();
    let head: Vec<&str> = text.lines().take(3).collect();
    assert_eq!(
        head,
        [
            "{",
            &format!("  \"apiVersion\": \"{API_VERSION}\","),
            &format!("  \"kind\": \"{kind}\",")
        ],
        "{text}"
    );
    text
}

fn inventory(dir: &std::path::Path, hosts: &str) -> hactl::inventory::Inventory {
    let yaml = format!(
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: docs\nspec:\n  ssh:\n    agent: true\n  hosts:\n{hosts}  stateDir: {}\n",
        dir.display()
    );
    hactl::inventory::load_str(&dir.join("inventory.yaml"), &yaml).unwrap()
}

const THREE: &str = "    - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }\n    - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }\n    - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }\n";

#[test]
fn validate() {
    let dir = tempfile::tempdir().unwrap();
    let good = inventory(dir.path(), THREE);
    insta::assert_snapshot!(
        "validate_valid",
        printed(
            hactl::commands::VALIDATION_KIND,
            &hactl::commands::validation_report("inventory.yaml", &Ok(good))
        )
    );
    let bad = hactl::inventory::load_str(
        &dir.path().join("bad.yaml"),
        "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: docs\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n    - { name: cp1, address: 10.0.0.12, roles: [etcd] }\n",
    );
    assert!(bad.is_err());
    insta::assert_snapshot!(
        "validate_invalid",
        printed(
            hactl::commands::VALIDATION_KIND,
            &hactl::commands::validation_report("bad.yaml", &bad)
        )
    );
}

#[test]
fn check() {
    let row = |host: &str, check: &'static str, verdict, detail: &str| CheckRow {
        host: host.into(),
        check,
        verdict,
        detail: detail.into(),
    };
    let rows = vec![
        row("cp1", "ssh", Verdict::Pass, "connected as root"),
        row("cp1", "clock", Verdict::Warn, "skew at least 0.6 s"),
        row("cp2", "ssh", Verdict::Fail, "connection refused"),
        row("cp2", "sudo", Verdict::Skip, "no connection"),
    ];
    insta::assert_snapshot!(printed(check::JSON_KIND, &check::json(&rows)));
}

/// A healthy cluster with every section the inventory can configure.
fn healthy_status() -> ClusterStatus {
    use hactl::backup::BackupRow;
    use hactl::backup_remote::{RemoteSnapshot, RemoteStatus};
    use hactl::kubernetes::lease::LeaseRow;
    use hactl::kubernetes::status::{ComponentRow, DnsRow, KubernetesStatus, NodeRow};
    use hactl::kubernetes::Component;
    use hactl::load_balancer::status::{BackendRow, BalancerRow, LoadBalancerStatus};
    use hactl::load_balancer::ServerStat;
    let member = |name: &str, n: u8| MemberRow {
        name: name.into(),
        id: format!("{n:016x}"),
        peer_urls: vec![format!("https://10.0.0.1{n}:2380")],
        client_urls: vec![format!("https://10.0.0.1{n}:2379")],
        is_learner: false,
        started: true,
        in_inventory: true,
        healthy: true,
        latency_ms: 1.5,
        db_size_bytes: 20480,
        version: "3.5.16".into(),
        raft_index: 120,
        raft_applied_index: 120,
        errors: vec![],
        healthy_from_peers: None,
    };
    ClusterStatus {
        cluster: "docs".into(),
        cluster_id: "5e1b0b5e1b0b5e1b".into(),
        leader: "cp1".into(),
        raft_term: 3,
        revision: 42,
        members: vec![member("cp1", 1), member("cp2", 2)],
        alarms: vec![AlarmRow {
            member_id: format!("{:016x}", 2),
            alarm: "NOSPACE".into(),
        }],
        certificates: vec![CertRow {
            name: "etcd/server-cp1".into(),
            not_after: "2027-11-25T00:00:00Z".into(),
            days_left: 365,
        }],
        problems: vec!["alarm NOSPACE on member 0000000000000002".into()],
        load_balancers: Some(LoadBalancerStatus {
            vip: "10.0.0.100".into(),
            vip_holders: vec!["lb1".into()],
            hosts: vec![BalancerRow {
                name: "lb1".into(),
                reachable: true,
                holds_vip: true,
                haproxy: "active".into(),
                keepalived: "active".into(),
                errors: vec![],
            }],
            servers: vec![BackendRow {
                balancer: "lb1".into(),
                stat: ServerStat {
                    backend: "kubernetes-api".into(),
                    server: "cp1".into(),
                    status: "UP".into(),
                    check_status: "L7OK".into(),
                    last_change_secs: 600,
                    sessions: 2,
                },
                held_by_up_since: None,
            }],
            readyz: "ok".into(),
            problems: vec![],
        }),
        kubernetes: Some(KubernetesStatus {
            components: vec![ComponentRow {
                host: "cp1".into(),
                component: Component::ApiServer,
                unit: "active".into(),
                healthy: true,
                detail: "/readyz ok".into(),
            }],
            leases: vec![LeaseRow {
                name: "kube-system/kube-scheduler".into(),
                holder: "cp1_5b0c".into(),
                holder_host: "cp1".into(),
                renew_time: "2026-11-25T10:00:00.000000Z".into(),
                age_seconds: 1.25,
                lease_duration_seconds: 15,
                transitions: 1,
                problems: vec![],
            }],
            nodes: vec![NodeRow {
                name: "cp1".into(),
                in_inventory: true,
                registered: true,
                ready: "True".into(),
                kubelet_version: "v1.20.2".into(),
                taints: vec!["node-role.kubernetes.io/master=:NoSchedule".into()],
                pod_cidr: "10.244.0.0/24".into(),
                unschedulable: false,
            }],
            dns: Some(DnsRow {
                image: "registry.k8s.io/coredns/coredns:v1.8.0".into(),
                cluster_ip: "10.96.0.10".into(),
                deployed: true,
                ready_replicas: 2,
                replicas: 2,
            }),
            problems: vec![],
        }),
        backups: vec![BackupRow {
            host: "cp1".into(),
            file: "/var/backups/hactl/etcd-20261125T100000Z.db".into(),
            age_seconds: Some(300),
            ok: true,
            timer_active_seconds: Some(3600),
            errors: vec![],
        }],
        backup_remote: Some(RemoteStatus {
            remote: "backup@10.0.0.50:/srv/etcd".into(),
            newest: Some(RemoteSnapshot {
                path: "/srv/etcd/docs/etcd-20261125T100000Z.db".into(),
                size: 20480,
                age_seconds: 290,
                sha256: Some("ab".repeat(32)),
                revision: Some(40),
            }),
            copies: 3,
            error: None,
        }),
        old_members: vec![],
    }
}

#[test]
fn status_healthy_with_every_section() {
    let s = healthy_status();
    insta::assert_snapshot!(printed(status::JSON_KIND, &s));
}

/// No member answered: what nobody told is `null`, never `""` or `0`; sections the inventory
/// does not configure are `null`, never absent.
#[test]
fn status_when_nothing_answered() {
    use hactl::backup::BackupRow;
    use hactl::kubernetes::lease::LeaseRow;
    use hactl::kubernetes::status::{KubernetesStatus, NodeRow};
    let s = ClusterStatus {
        cluster: "docs".into(),
        members: vec![MemberRow {
            name: "cp1".into(),
            id: format!("{:016x}", 1),
            peer_urls: vec!["https://10.0.0.11:2380".into()],
            client_urls: vec!["https://10.0.0.11:2379".into()],
            in_inventory: true,
            errors: vec!["ssh: connection refused".into()],
            healthy_from_peers: Some(false),
            ..MemberRow::default()
        }],
        problems: vec!["no leader: the cluster has lost quorum or no member answered".into()],
        kubernetes: Some(KubernetesStatus {
            leases: vec![LeaseRow {
                name: "kube-system/kube-controller-manager".into(),
                holder: String::new(),
                holder_host: String::new(),
                renew_time: String::new(),
                age_seconds: 0.0,
                lease_duration_seconds: 0,
                transitions: 0,
                problems: vec!["nobody holds it".into()],
            }],
            nodes: vec![NodeRow {
                name: "w1".into(),
                in_inventory: true,
                ..NodeRow::default()
            }],
            ..KubernetesStatus::default()
        }),
        backups: vec![BackupRow {
            host: "cp1".into(),
            file: String::new(),
            age_seconds: None,
            ok: false,
            timer_active_seconds: None,
            errors: vec!["ssh: connection refused".into()],
        }],
        ..ClusterStatus::default()
    };
    let text = printed(status::JSON_KIND, &s);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for unknown in [
        "clusterId",
        "leader",
        "raftTerm",
        "revision",
        "loadBalancers",
        "backupRemote",
    ] {
        assert!(v[unknown].is_null(), "{unknown}: {text}");
    }
    for unknown in [
        "latencyMs",
        "dbSizeBytes",
        "version",
        "raftIndex",
        "raftAppliedIndex",
    ] {
        assert!(v["members"][0][unknown].is_null(), "{unknown}: {text}");
    }
    insta::assert_snapshot!(text);
}

#[test]
fn certs_check() {
    use hactl::certs::CertRow;
    let ok = CertRow {
        location: "state".into(),
        file: "etcd/server-cp1".into(),
        subject: "cp1".into(),
        issuer: "hactl etcd CA".into(),
        serial: "0a1b".into(),
        sans: vec!["cp1".into(), "10.0.0.11".into()],
        not_after: "2027-11-25T00:00:00Z".into(),
        days_left: 365,
        matches: None,
        error: None,
    };
    let on_host = CertRow {
        location: "cp1".into(),
        file: "/etc/etcd/pki/server.crt".into(),
        matches: Some("etcd/server-cp1".into()),
        ..ok.clone()
    };
    let unreadable = CertRow {
        location: "cp2".into(),
        file: "/etc/etcd/pki/server.crt".into(),
        subject: String::new(),
        issuer: String::new(),
        serial: String::new(),
        sans: vec![],
        not_after: String::new(),
        days_left: 0,
        matches: None,
        error: Some("not a PEM certificate".into()),
    };
    insta::assert_snapshot!(printed(
        hactl::certs::JSON_KIND,
        &hactl::certs::json(
            &[ok, on_host, unreadable],
            &["cp2: /etc/etcd/pki/server.crt: not a PEM certificate".into()]
        )
    ));
}

#[test]
fn plan() {
    use hactl::plan::{HostSteps, Parallelism, Plan, PlannedPhase, RemoteCommand, Step, Upload};
    let plan = Plan {
        phases: vec![PlannedPhase {
            title: "etcd: configuration".into(),
            parallelism: Parallelism::OneAtATime,
            disruptive: true,
            hosts: vec![HostSteps {
                host: "cp1".into(),
                sudo: true,
                steps: vec![
                    Step::Upload(Upload::new(
                        "/etc/etcd/etcd.conf.yml",
                        0o640,
                        "root",
                        "etcd",
                        b"name: cp1\n".to_vec(),
                    )),
                    Step::Run(RemoteCommand::new(["systemctl", "restart", "etcd"])),
                ],
            }],
        }],
    };
    let mut body = plan.to_json();
    body["pendingNodes"] = serde_json::json!(["w1"]);
    insta::assert_snapshot!(printed(hactl::plan::JSON_KIND, &body));
}

#[test]
fn maintenance_plan() {
    use hactl::etcd::safety::Counts;
    use hactl::operations::maintenance::{plan_json, steps, PlanReport, PLAN_KIND};
    let counts = Counts::healthy(3);
    let step = steps::stop_fenced("cp1", "kube-scheduler").to_json(true);
    let body = plan_json(&PlanReport {
        host: "cp1",
        counts: &counts,
        max_unavailable: 1,
        blockers: &[],
        order: &["1. Cordon: Node cp1 spec.unschedulable=true".into()],
        verdict: "allowed",
        code: 0,
        steps: vec![step],
    });
    insta::assert_snapshot!(printed(PLAN_KIND, &body));
}

/// What every day-two operation's `--dry-run -o json` prints (the operation manager's plan).
#[test]
fn operation_plan() {
    use hactl::operations::maintenance::steps;
    use hactl::operations::manager::{plan_json, Confirmation, Planned, RunId};
    let dir = tempfile::tempdir().unwrap();
    let inv = inventory(dir.path(), THREE);
    let planned = Planned {
        summary: "maintenance start cp1: stop its control plane\n".into(),
        decisions: serde_json::json!({ "host": "cp1" }),
        steps: vec![steps::stop_fenced("cp1", "kube-scheduler")],
        confirmation: Confirmation::Ask("take cp1 out of service".into()),
        resume: "hactl maintenance start cp1 --resume maint-1".into(),
        mirror_hosts: vec![],
        decided: vec![],
    };
    let run = RunId {
        id: "maint-1".into(),
        resumed: false,
    };
    let body = plan_json("maintenance-start", &run, &planned, &inv);
    insta::assert_snapshot!(printed(hactl::operations::manager::PLAN_KIND, &body));
}

/// docs/reference/json.md names every kind, with the `apiVersion` they carry.
#[test]
fn the_reference_names_every_kind() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/json.md")).unwrap();
    assert!(
        doc.contains(API_VERSION),
        "docs/reference/json.md does not name {API_VERSION}"
    );
    for kind in [
        hactl::commands::VALIDATION_KIND,
        check::JSON_KIND,
        hactl::plan::JSON_KIND,
        status::JSON_KIND,
        hactl::certs::JSON_KIND,
        hactl::operations::maintenance::PLAN_KIND,
        hactl::operations::manager::PLAN_KIND,
    ] {
        assert!(
            doc.contains(&format!("\"kind\": \"{kind}\"")),
            "docs/reference/json.md does not show a document of kind {kind}"
        );
    }
}
