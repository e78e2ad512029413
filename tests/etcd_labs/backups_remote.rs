//! Backups that leave the cluster (`spec.backup.remote`) against real hosts: a lab of three etcd
//! hosts and a spare that is the destination. The leader's timer pushes each snapshot with its
//! checksum there; `check` and `status` see it; with every member's data and every host's local
//! backups gone, `recover --auto` finds the remote copy and restores from it. The push key opens
//! no shell on the remote, only SFTP in the directory, with hactl's own authorized_keys line and
//! under the chroot docs/how-to/backups.md sets up by hand; `reset` revokes it there, removes it
//! on the hosts and moves their snapshots aside.
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

/// The ssh options of the leader's pushes (templates/hactl-etcd-backup.tera): the push key, the
/// remote's pinned host key.
const PUSH_OPTIONS: &str = "-i /etc/hactl/backup-remote/id_ed25519 -o IdentitiesOnly=yes -o BatchMode=yes \
     -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/hactl/backup-remote/known_hosts \
     -o GlobalKnownHostsFile=/dev/null -o ConnectTimeout=10";

/// With the push key, from cp1: a shell command is refused (it never runs: the marker it would
/// write on the remote is not there), and SFTP works, starting in `start` (the directory as the
/// session sees it) where the pushed snapshots are.
fn the_push_key_gets_sftp_in_the_directory_only(lab: &TestLab, start: &str) {
    let remote = format!("root@{}", lab.ip("spare1"));
    let marker = "/root/push-key-ran-a-command";
    let shell = lab.exec(
        "cp1",
        &[
            "sh",
            "-c",
            &format!("ssh {PUSH_OPTIONS} {remote} 'touch {marker}; id' </dev/null"),
        ],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&shell.stdout),
        String::from_utf8_lossy(&shell.stderr)
    );
    assert!(!said.contains("uid="), "the push key ran a command: {said}");
    let ran = lab.exec("spare1", &["test", "-e", marker]).status.success();
    assert!(!ran, "the push key ran a command on the remote: {said}");
    let sftp = lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            &format!("printf 'pwd\\nls -1\\n' | sftp -q -b - {PUSH_OPTIONS} {remote}"),
        ],
    );
    assert!(
        sftp.contains(&format!("Remote working directory: {start}")),
        "{sftp}"
    );
    assert!(sftp.lines().any(|l| l.ends_with(".db")), "{sftp}");
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
    // The push key is authorized for the sftp server in the directory, and nothing else.
    let keys = lab.exec_ok("spare1", &["cat", "/root/.ssh/authorized_keys"]);
    let line = keys
        .lines()
        .find(|l| l.contains("hactl backup push"))
        .unwrap_or_else(|| panic!("no push key line: {keys}"));
    assert!(
        line.starts_with(&format!(
            "restrict,command=\"/usr/lib/openssh/sftp-server -d {REMOTE_DIR}\" ssh-ed25519 "
        )),
        "{line}"
    );
    the_push_key_gets_sftp_in_the_directory_only(&lab, REMOTE_DIR);
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

    // The chroot an operator sets up by hand (docs/how-to/backups.md), for the etcd hosts'
    // addresses only: the pushes land in the directory, the key still runs nothing, and hactl's
    // own session (from this machine) keeps its shell.
    let addresses: Vec<String> = HOSTS.iter().map(|h| lab.ip(h).to_string()).collect();
    let block = format!(
        "\nMatch User root Address {}\n    ChrootDirectory /srv\n    ForceCommand internal-sftp -d /hactl-backups\n    AllowTcpForwarding no\n    X11Forwarding no\n    PermitTTY no\n",
        addresses.join(",")
    );
    lab.exec_ok(
        "spare1",
        &[
            "sh",
            "-c",
            &format!("printf '%s' '{block}' >> /etc/ssh/sshd_config && sshd -t && systemctl reload ssh"),
        ],
    );
    let before = remote_files(&lab);
    std::thread::sleep(Duration::from_secs(2));
    run_backups(&lab);
    let after = remote_files(&lab);
    let new: Vec<&String> = after
        .iter()
        .filter(|f| f.ends_with(".db") && !before.contains(f))
        .collect();
    assert_eq!(new.len(), 1, "no push under the chroot: {before:?} -> {after:?}");
    the_push_key_gets_sftp_in_the_directory_only(&lab, "/hactl-backups");
    let (_, s) = status_json(&inv);
    assert_eq!(
        s["backupRemote"]["newest"]["path"],
        format!("{REMOTE_DIR}/{}", new[0]),
        "{s}"
    );

    // reset: the push key's line leaves the remote (the copies stay), the key leaves the hosts,
    // and the snapshots on the hosts (the scheduled backup, recover's staged snapshot) are moved
    // aside, never deleted.
    let o = hactl_in(&inv, &["reset", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    for want in [
        "reset: the backup push key removed on cp1, cp2, cp3 (key material is removed, not moved)",
        &format!(
            "reset: the push key's line removed from the authorized_keys of root@{}:{REMOTE_DIR}",
            lab.ip("spare1")
        ),
        "reset: snapshots moved aside on",
    ] {
        assert!(out.contains(want), "lacks {want:?}: {}", text(&o));
    }
    let keys = lab.exec_ok("spare1", &["cat", "/root/.ssh/authorized_keys"]);
    assert!(!keys.contains("hactl backup push"), "{keys}");
    assert!(!keys.is_empty(), "the lab's own key went too");
    assert!(remote_files(&lab).iter().any(|f| f.ends_with(".db")));
    // Per directory, the snapshots found moved aside on any host.
    let mut snapshots = std::collections::BTreeMap::<&str, Vec<String>>::new();
    for h in HOSTS {
        let key = lab.exec(h, &["test", "-e", "/etc/hactl/backup-remote/id_ed25519"]);
        assert!(!key.status.success(), "{h}: the push key stayed");
        for dir in ["/var/lib/etcd-backups", "/var/lib/etcd.hactl"] {
            let left = lab.exec_ok(
                h,
                &[
                    "sh",
                    "-c",
                    &format!("ls -A {dir} 2>/dev/null; ls -d {dir}.hactl-reset-* 2>/dev/null || true"),
                ],
            );
            let aside: Vec<&str> = left
                .lines()
                .filter(|l| l.starts_with(&format!("{dir}.hactl-reset-")))
                .collect();
            assert!(
                left.lines()
                    .all(|l| l.starts_with(&format!("{dir}.hactl-reset-"))),
                "{h}: {dir} still holds something: {left}"
            );
            for a in aside {
                let inside = lab.exec_ok(h, &["sh", "-c", &format!("find {a} -name '*.db'")]);
                snapshots
                    .entry(dir)
                    .or_default()
                    .extend(inside.lines().map(|l| format!("{h}:{l}")));
            }
        }
    }
    // The leader's scheduled backup, and the snapshot recover staged on its seed (the other
    // members' work dirs hold only its markers): kept, aside.
    for dir in ["/var/lib/etcd-backups", "/var/lib/etcd.hactl"] {
        assert!(
            snapshots.get(dir).is_some_and(|s| !s.is_empty()),
            "no snapshot of {dir} moved aside: {snapshots:?}\n{}",
            text(&o)
        );
    }
    let again = hactl_in(&inv, &["reset", "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("no changes"),
        "{}",
        text(&again)
    );
}
