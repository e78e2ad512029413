//! A compound failure (docs/recovery.md, "Maintenance"): on a lab of 3 members, `hactl
//! maintenance start cp1`, a reboot of cp1 (its fenced etcd stays down), then a power cut of
//! cp2. Quorum is lost but restorable, and every piece of advice leads somewhere: heal and
//! recover name `hactl maintenance complete cp1` first (never `hactl up`, which would refuse with
//! cp2 down); complete finishes on quorum and cp1's health, not every member's, and names cp2 as
//! still down; once cp2 is back with its data lost, heal replaces it on its own host.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::time::Duration;

use cli_support::{hactl_in as hactl, text};
use hactl::lab::Fault;
use lab_support::{eventually, TestLab};

fn etcd_active(lab: &TestLab, host: &str) -> bool {
    lab.exec(host, &["systemctl", "is-active", "--quiet", "etcd"])
        .status
        .success()
}

fn healthy_cluster(lab: &TestLab, from: &str) -> bool {
    lab.exec(
        from,
        &["/usr/local/sbin/hactl-etcdctl", "endpoint", "health", "--cluster"],
    )
    .status
    .success()
}

fn member_id(lab: &TestLab, from: &str, name: &str) -> Option<String> {
    let o = lab.exec(from, &["/usr/local/sbin/hactl-etcdctl", "member", "list"]);
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.split(", ").nth(2) == Some(name))
        .map(|l| l.split(", ").next().unwrap_or_default().to_string())
}

#[test]
fn maintenance_then_a_power_cut_leads_through_complete_to_heal() {
    let name = "maintenance_then_a_power_cut_leads_through_complete_to_heal";
    let Some(mut lab) = TestLab::up(name, 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let text_of = std::fs::read_to_string(&inv).unwrap();
    std::fs::write(
        &inv,
        format!("{text_of}  heal:\n    unhealthyTimeout: 2s\n    retryPeriod: 1s\n"),
    )
    .unwrap();
    let o = hactl(&inv, &["up", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));

    // The plan as data: the verdict and start's steps, each as `--dry-run` prints it.
    let o = hactl(&inv, &["maintenance", "plan", "cp1", "-o", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).expect("plan -o json is JSON");
    assert!(plan["verdict"].as_str().unwrap().starts_with("allowed"), "{plan}");
    let stop = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "stop-etcd")
        .unwrap_or_else(|| panic!("no stop-etcd step: {plan}"));
    assert_eq!(plan["apiVersion"], "hactl.io/v1alpha1", "{plan}");
    assert_eq!(plan["kind"], "MaintenancePlan", "{plan}");
    let run = stop["acts"][0]["command"].as_str().unwrap();
    assert!(run.contains("hactl-fence.conf"), "{run}");
    let dry = hactl(&inv, &["maintenance", "start", "cp1", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains(run),
        "the dry run prints another command than the plan: {}",
        text(&dry)
    );
    assert!(etcd_active(&lab, "cp1"), "the dry run stopped etcd");

    let o = hactl(&inv, &["maintenance", "start", "--yes", "cp1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The fence survives a reboot: cp1 comes back without etcd.
    lab.fault("cp1", Fault::PowerCut);
    lab.fault("cp1", Fault::Poweron);
    assert!(eventually(Duration::from_secs(60), || lab
        .exec("cp1", &["systemctl", "is-system-running", "--wait"])
        .status
        .code()
        .is_some()));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !etcd_active(&lab, "cp1"),
        "etcd started on cp1 at boot during maintenance"
    );

    // cp2 loses power: cp3 runs alone, no quorum.
    lab.fault("cp2", Fault::PowerCut);

    let o = hactl(&inv, &["heal", "--once"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("`hactl maintenance complete cp1` first"),
        "heal: {}",
        text(&o)
    );
    assert!(
        !text(&o).contains("with `hactl up`"),
        "heal advised up: {}",
        text(&o)
    );

    let o = hactl(&inv, &["recover", "--auto", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("`hactl maintenance complete cp1` first"),
        "recover: {}",
        text(&o)
    );
    assert!(
        !text(&o).contains("(`hactl up` starts"),
        "recover advised up: {}",
        text(&o)
    );

    // complete: gates on quorum and cp1's health, finishes, names cp2 and the next command.
    let o = hactl(&inv, &["maintenance", "complete", "cp1"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("still down: cp2"), "{}", text(&o));
    assert!(text(&o).contains("hactl heal --once"), "{}", text(&o));
    assert!(etcd_active(&lab, "cp1"));
    assert!(lab
        .exec("cp1", &["/usr/local/sbin/hactl-etcdctl", "endpoint", "health"])
        .status
        .success());
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(inv.parent().unwrap().join("state/maintenance/cp1.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["stage"], "Complete");

    // cp2 comes back with its data lost (its disk was replaced): heal replaces it on its host.
    lab.fault("cp2", Fault::Poweron);
    assert!(eventually(Duration::from_secs(60), || lab
        .exec("cp2", &["true"])
        .status
        .success()));
    let before = member_id(&lab, "cp1", "cp2").expect("cp2 is a member");
    lab.exec_ok(
        "cp2",
        &[
            "sh",
            "-c",
            "systemctl stop etcd; rm -rf /var/lib/etcd/member; systemctl start etcd || true",
        ],
    );
    let mut last = String::new();
    let replaced = eventually(Duration::from_secs(120), || {
        let o = hactl(&inv, &["heal", "--once"]);
        last = text(&o);
        if !(o.status.success() && last.contains("replace cp2")) {
            std::thread::sleep(Duration::from_secs(2));
            return false;
        }
        true
    });
    assert!(replaced, "heal did not replace cp2: {last}");
    assert!(
        eventually(Duration::from_secs(60), || healthy_cluster(&lab, "cp1")),
        "not every member healthy after heal"
    );
    assert_ne!(
        member_id(&lab, "cp1", "cp2").unwrap(),
        before,
        "cp2 was not re-created"
    );
    lab.down().unwrap();
}
