//! Backups that leave the cluster (`spec.backup.remote`) against real hosts: a lab of three etcd
//! hosts and a spare that is the destination. The leader's timer pushes each snapshot with its
//! checksum there; `check` and `status` see it; with every member's data and every host's local
//! backups gone, `recover --auto` finds the remote copy and restores from it.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::path::Path;
use std::time::Duration;

use cli_support::{hactl_in, status_json, text};
use lab_support::{eventually, TestLab};

const HOSTS: [&str; 3] = ["cp1", "cp2", "cp3"];
const REMOTE_DIR: &str = "/srv/hactl-backups";

/// Adds `spec.backup.remote` (the spare, the lab's key from `spec.ssh`) to the lab's inventory.
fn set_remote(inventory: &Path, address: &str) {
    let text = std::fs::read_to_string(inventory).unwrap();
    let after = text.split_once("\nspec:\n").expect("a spec section").1;
    let i: String = after.chars().take_while(|c| *c == ' ').collect();
    let block = format!(
        "\nspec:\n{i}backup:\n{i}{i}retention: 5\n{i}{i}remote:\n{i}{i}{i}address: \"{address}\"\n{i}{i}{i}path: {REMOTE_DIR}\n{i}{i}{i}retention: 2\n"
    );
    std::fs::write(inventory, text.replacen("\nspec:\n", &block, 1)).unwrap();
}

/// Runs the backup service on every etcd host, as the timer would (only the leader saves and
/// pushes). A start right after the unit's previous run may fail on the lab's cgroup v1 with
/// "unavailable resources": retried, as in `etcd_labs::backups_scheduled`.
fn run_backups(lab: &TestLab) {
    for h in HOSTS {
        let argv = ["systemctl", "start", "hactl-etcd-backup.service"];
        let mut ok = false;
        for _ in 0..5 {
            let out = lab.exec(h, &argv);
            if out.status.success() {
                ok = true;
                break;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("unavailable resources"),
                "{h}: {err}\n{}",
                lab.exec_ok(
                    h,
                    &[
                        "journalctl",
                        "-u",
                        "hactl-etcd-backup.service",
                        "-n",
                        "30",
                        "--no-pager"
                    ]
                )
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        assert!(ok, "{h}: the backup service did not start");
    }
}

fn remote_files(lab: &TestLab) -> Vec<String> {
    let out = lab.exec(
        "spare1",
        &["sh", "-c", &format!("ls -1 {REMOTE_DIR} 2>/dev/null || true")],
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn ctl(lab: &TestLab, host: &str, args: &[&str]) -> String {
    let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
    argv.extend_from_slice(args);
    lab.exec_ok(host, &argv)
}

#[test]
fn the_leader_pushes_to_the_remote_and_recover_auto_restores_from_it() {
    let name = "the_leader_pushes_to_the_remote_and_recover_auto_restores_from_it";
    let Some(lab) = TestLab::up(name, 3, 0, 1, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    set_remote(&inv, &lab.ip("spare1").to_string());
    let o = hactl_in(&inv, &["up", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    // The push key is on every etcd host, root only.
    for h in HOSTS {
        let m = lab.exec_ok(h, &["stat", "-c", "%a %U", "/etc/hactl/backup-remote/id_ed25519"]);
        assert_eq!(m.trim(), "600 root", "{h}");
    }
    let o = hactl_in(&inv, &["check"]);
    assert!(text(&o).contains("reachable and writable"), "{}", text(&o));

    ctl(&lab, "cp1", &["put", "/registry/before-backup", "v1"]);
    run_backups(&lab);
    let files = remote_files(&lab);
    let db: Vec<&String> = files.iter().filter(|f| f.ends_with(".db")).collect();
    assert_eq!(db.len(), 1, "{files:?}");
    assert!(files.contains(&format!("{}.sha256", db[0])), "{files:?}");
    // The pushed checksum is the file's.
    let sum = lab.exec_ok(
        "spare1",
        &[
            "sh",
            "-c",
            &format!("cd {REMOTE_DIR} && sha256sum -c {}.sha256", db[0]),
        ],
    );
    assert!(sum.contains(": OK"), "{sum}");
    // status shows the newest remote copy and its age.
    let (_, s) = status_json(&inv);
    assert_eq!(
        s["backupRemote"]["newest"]["path"],
        format!("{REMOTE_DIR}/{}", db[0]),
        "{s}"
    );
    assert!(
        s["backupRemote"]["newest"]["ageSeconds"].as_i64().is_some(),
        "{s}"
    );
    // Remote retention 2: a third push prunes the oldest.
    std::thread::sleep(Duration::from_secs(2));
    run_backups(&lab);
    std::thread::sleep(Duration::from_secs(2));
    run_backups(&lab);
    let n = remote_files(&lab).iter().filter(|f| f.ends_with(".db")).count();
    assert_eq!(n, 2, "{:?}", remote_files(&lab));
    ctl(&lab, "cp1", &["put", "/registry/after-backup", "v2"]);

    // Every member's data and every host's local backups are gone.
    for h in HOSTS {
        lab.exec(h, &["systemctl", "kill", "-s", "KILL", "etcd.service"]);
        lab.exec(h, &["systemctl", "stop", "etcd.service"]);
        lab.exec_ok(h, &["sh", "-c", "rm -rf /var/lib/etcd /var/lib/etcd-backups/*"]);
    }
    let o = hactl_in(&inv, &["recover", "--auto", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("--auto: chose remote backup"), "{}", text(&o));
    assert!(eventually(Duration::from_secs(60), || lab
        .exec(
            "cp2",
            &["/usr/local/sbin/hactl-etcdctl", "endpoint", "health", "--cluster"]
        )
        .status
        .success()));
    assert!(ctl(&lab, "cp3", &["get", "/registry/before-backup"]).contains("v1"));
    assert!(!ctl(&lab, "cp3", &["get", "/registry/after-backup"]).contains("v2"));

    // A remote that cannot be written fails check, naming the host and the path.
    lab.exec_ok(
        "spare1",
        &["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", REMOTE_DIR],
    );
    let o = hactl_in(&inv, &["check"]);
    lab.exec("spare1", &["umount", REMOTE_DIR]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("{}:{REMOTE_DIR} is not writable", lab.ip("spare1"))),
        "{}",
        text(&o)
    );
}
