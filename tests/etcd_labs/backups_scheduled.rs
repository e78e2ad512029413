//! Scheduled backups on the etcd hosts, against real etcd in lab hosts (systemd-nspawn). They
//! need root; without it each prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::path::Path;

use cli_support::{hactl, status_json, text, up_ok};
use lab_support::TestLab;

const DIR: &str = "/var/lib/etcd-backups";
const HOSTS: [&str; 3] = ["cp1", "cp2", "cp3"];

/// Adds `spec.backup` to the lab's inventory, indented like the other keys of `spec`.
fn set_backup(inventory: &Path, interval: &str, retention: u32) {
    let text = std::fs::read_to_string(inventory).unwrap();
    let after = text.split_once("\nspec:\n").expect("a spec section").1;
    let indent: String = after.chars().take_while(|c| *c == ' ').collect();
    let block = format!(
        "\nspec:\n{indent}backup:\n{indent}{indent}interval: {interval}\n{indent}{indent}retention: {retention}\n"
    );
    std::fs::write(inventory, text.replacen("\nspec:\n", &block, 1)).unwrap();
}

/// The snapshot files (names) in the backup dir of `host`, sorted.
fn snapshots(lab: &TestLab, host: &str) -> Vec<String> {
    let out = lab.exec(
        host,
        &[
            "sh",
            "-c",
            &format!("ls -1 {DIR} 2>/dev/null | grep '\\.db$' || true"),
        ],
    );
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// Runs the backup service once, as its timer would. In the lab's hosts (systemd 257 on the
/// cgroup v1 hierarchy nspawn gives a machine without systemd) a start within a few seconds of the
/// unit's previous run can fail with "Failed to spawn executor: No such file or directory" (result
/// `resources`): the unit's old cgroup is still being removed. The timer simply runs again at the
/// next interval; the test retries the same way, a few times, and fails on any other error.
fn run_backup(lab: &TestLab, host: &str) {
    let argv = ["systemctl", "start", "hactl-etcd-backup.service"];
    for _ in 0..5 {
        let out = lab.exec(host, &argv);
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("unavailable resources"), "{host}: {argv:?}: {err}");
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    lab.exec_ok(host, &argv);
}

#[test]
fn scheduled_backups_write_verified_snapshots_on_the_leader_and_status_reports_their_age() {
    let Some(lab) = TestLab::up("backup_sched", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory();
    set_backup(inv, "10s", 2);
    up_ok(inv);
    for h in HOSTS {
        let state = lab.exec_ok(h, &["systemctl", "is-enabled", "hactl-etcd-backup.timer"]);
        assert_eq!(state.trim(), "enabled", "{h}");
        let active = lab.exec_ok(h, &["systemctl", "is-active", "hactl-etcd-backup.timer"]);
        assert_eq!(active.trim(), "active", "{h}");
    }
    // A converged cluster: nothing to upload, nothing to enable.
    assert_eq!(up_ok(inv).trim(), "no changes");

    // From here the test drives the runs itself. Stopping the timer does not stop a run it has
    // already started (on a loaded machine one outlived the `rm` below and left a second
    // snapshot), so the service is stopped too, ending such a run before the `rm`.
    for h in HOSTS {
        lab.exec_ok(
            h,
            &[
                "systemctl",
                "stop",
                "hactl-etcd-backup.timer",
                "hactl-etcd-backup.service",
            ],
        );
        lab.exec_ok(h, &["sh", "-c", &format!("rm -rf {DIR}")]);
    }
    let (code, s) = status_json(inv);
    assert_eq!(code, 0, "{s:#}");
    let leader = s["leader"].as_str().unwrap().to_string();
    assert!(HOSTS.contains(&leader.as_str()), "{s:#}");
    lab.exec_ok(
        &leader,
        &["/usr/local/sbin/hactl-etcdctl", "put", "/backup/k", "v"],
    );

    for h in HOSTS {
        run_backup(&lab, h);
    }
    for h in HOSTS {
        let files = snapshots(&lab, h);
        if h == leader {
            assert_eq!(files.len(), 1, "{h}: {files:?}");
        } else {
            assert!(files.is_empty(), "follower {h} saved {files:?}");
            let log = lab.exec_ok(
                h,
                &["journalctl", "-u", "hactl-etcd-backup.service", "--no-pager"],
            );
            assert!(log.contains("not the leader"), "{h}: {log}");
        }
    }
    let file = format!("{DIR}/{}", snapshots(&lab, &leader)[0]);
    assert!(file.starts_with(&format!("{DIR}/{}-", lab.name())), "{file}");
    let check = lab.exec_ok(&leader, &["/usr/local/sbin/hactl-etcd-snapshot", "check", &file]);
    let check: serde_json::Value = serde_json::from_str(check.trim()).unwrap();
    assert_eq!(check["hash"], "ok", "{check}");
    assert_eq!(check["size"].as_u64().unwrap() % 512, 32);
    let latest: serde_json::Value =
        serde_json::from_str(&lab.exec_ok(&leader, &["cat", &format!("{DIR}/latest.json")])).unwrap();
    assert_eq!(latest["file"], file.as_str(), "{latest}");
    assert_eq!(latest["ok"], true);
    assert_eq!(latest["sha256"], check["sha256"], "{latest}");
    assert!(latest["revision"].as_i64().unwrap() > 1, "{latest}");
    let now: i64 = lab.exec_ok(&leader, &["date", "+%s"]).trim().parse().unwrap();
    assert!((now - latest["time"].as_i64().unwrap()).abs() < 60, "{latest}");

    // Retention 2: after retention + 2 runs, the newest two remain, and latest.json names the newest.
    for _ in 0..3 {
        run_backup(&lab, &leader);
    }
    let files = snapshots(&lab, &leader);
    assert_eq!(files.len(), 2, "{files:?}");
    let latest: serde_json::Value =
        serde_json::from_str(&lab.exec_ok(&leader, &["cat", &format!("{DIR}/latest.json")])).unwrap();
    assert_eq!(latest["file"], format!("{DIR}/{}", files[1]).as_str(), "{latest}");
    let leftovers = lab.exec(&leader, &["sh", "-c", &format!("ls {DIR} | grep -c part")]);
    assert_eq!(String::from_utf8_lossy(&leftovers.stdout).trim(), "0");

    // status: the age per host, healthy.
    let (code, s) = status_json(inv);
    assert_eq!(code, 0, "{s:#}");
    let rows = s["backups"].as_array().unwrap_or_else(|| panic!("{s:#}"));
    assert_eq!(rows.len(), 3, "{s:#}");
    for r in rows {
        if r["host"] == leader.as_str() {
            assert_eq!(r["ok"], true, "{r}");
            assert!(r["ageSeconds"].as_i64().unwrap() <= 20, "{r}");
            assert_eq!(r["file"], latest["file"], "{r}");
        } else {
            assert!(r["ageSeconds"].is_null(), "{r}");
        }
    }

    // Stale: the newest good backup older than 2 × interval → a problem and exit 5.
    lab.exec_ok(
        &leader,
        &[
            "sh",
            "-c",
            &format!(
                "t=$(($(date +%s) - 100)); sed -i \"s/\\\"time\\\":[0-9]*/\\\"time\\\":$t/\" {DIR}/latest.json"
            ),
        ],
    );
    let (code, s) = status_json(inv);
    assert_eq!(code, 5, "{s:#}");
    let problems: Vec<&str> = s["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("newest good backup is 1 min old (interval 10s): stale")),
        "{problems:?}"
    );

    // `up` starts the stopped timers again; then a converged cluster plans nothing.
    up_ok(inv);
    assert_eq!(up_ok(inv).trim(), "no changes");
}

/// `hactl etcd snapshot save` reads `snapshot status` from the file itself (no copy to a host):
/// what it records must be what the host's `etcdutl snapshot status -w json` says of the very
/// same file, and `snapshot verify` (which runs both) must agree too.
#[test]
fn snapshot_save_reads_the_status_etcdutl_reports_for_the_same_file() {
    let Some(lab) = TestLab::up("backup_status", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory();
    up_ok(inv);
    // Small and large values (overflow pages), deletes (tombstones), several leaf pages.
    lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            "for i in $(seq 1 400); do /usr/local/sbin/hactl-etcdctl put /registry/k$i \"v$i-$(head -c 300 /dev/urandom | base64 -w0)\" >/dev/null || exit 1; done; \
             for i in $(seq 1 50); do /usr/local/sbin/hactl-etcdctl del /registry/k$i >/dev/null || exit 1; done; \
             /usr/local/sbin/hactl-etcdctl put /registry/big \"$(head -c 60000 /dev/urandom | base64 -w0)\" >/dev/null",
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = cli_support::hactl(&[
        "etcd",
        "snapshot",
        "save",
        "-i",
        inv.to_str().unwrap(),
        "--out",
        tmp.path().to_str().unwrap(),
        "--no-bundle",
    ]);
    assert!(out.status.success(), "{}", cli_support::text(&out));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let sidecar: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{path}.json")).unwrap()).unwrap();
    let ours = hactl::snapshot::bolt::status(Path::new(&path)).unwrap();
    assert_eq!(sidecar["revision"].as_i64(), Some(ours.revision));
    assert_eq!(sidecar["totalKey"].as_u64(), Some(ours.total_key));
    // The same file on a host, read by etcd's own tool.
    let bytes = std::fs::read(&path).unwrap();
    let mut cmd = lab
        .lab()
        .command(
            "cp2",
            &["sh".into(), "-c".into(), "cat > /var/tmp/cross-check.db".into()],
        )
        .unwrap();
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &bytes).unwrap();
    assert!(child.wait().unwrap().success());
    let theirs: hactl::snapshot::Status = serde_json::from_str(
        lab.exec_ok(
            "cp2",
            &[
                "etcdutl",
                "snapshot",
                "status",
                "/var/tmp/cross-check.db",
                "-w",
                "json",
            ],
        )
        .trim(),
    )
    .unwrap();
    assert_eq!(ours, theirs);
    assert!(ours.total_key > 400 && ours.revision > 450, "{ours:?}");
    // `verify` runs the host's status on its own copy and compares it with hactl's reading.
    let out = cli_support::hactl(&["etcd", "snapshot", "verify", &path, "-i", inv.to_str().unwrap()]);
    assert!(out.status.success(), "{}", cli_support::text(&out));
    assert!(
        cli_support::text(&out).contains(&format!("revision {}", ours.revision)),
        "{}",
        cli_support::text(&out)
    );
}

/// Sets `spec.etcd.dataDir` in the lab's inventory (which has an `etcd` section already).
fn set_data_dir(inventory: &Path, dir: &str) {
    let text = std::fs::read_to_string(inventory).unwrap();
    let after = text.split_once("\nspec:\n").expect("a spec section").1;
    let indent: String = after.chars().take_while(|c| *c == ' ').collect();
    let section = format!("\n{indent}etcd:\n");
    assert!(text.contains(&section), "no etcd section in:\n{text}");
    let block = format!("{section}{indent}{indent}dataDir: {dir}\n");
    std::fs::write(inventory, text.replacen(&section, &block, 1)).unwrap();
}

/// `stat -c '%a %U'` of `path` on `host`.
fn mode_owner(lab: &TestLab, host: &str, path: &str) -> String {
    lab.exec_ok(host, &["stat", "-c", "%a %U", path])
        .trim()
        .to_string()
}

#[test]
fn directories_that_hold_the_hosts_own_files_are_refused_and_left_as_they_were() {
    let Some(lab) = TestLab::up("dirs_refused", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory();
    // cp2's data dir already holds a file that is not etcd's; cp1 and cp3 have none yet.
    lab.exec_ok(
        "cp2",
        &[
            "sh",
            "-c",
            "mkdir -p -m 755 /srv/etcd && echo keep > /srv/etcd/precious",
        ],
    );
    set_data_dir(inv, "/srv/etcd");
    let out = hactl(&["up", "-i", inv.to_str().unwrap(), "--yes"]);
    assert!(
        !out.status.success(),
        "up took a directory holding the host's files:\n{}",
        text(&out)
    );
    assert!(
        text(&out).contains(
            "refusing to take /srv/etcd as etcd's data dir: it holds files but no etcd member/ (precious)"
        ),
        "{}",
        text(&out)
    );
    assert_eq!(
        mode_owner(&lab, "cp2", "/srv/etcd"),
        "755 root",
        "the refused dir was changed"
    );
    assert_eq!(lab.exec_ok("cp2", &["cat", "/srv/etcd/precious"]).trim(), "keep");

    // Emptied, the same directory is taken, and a second `up` (now holding member/) is fine.
    lab.exec_ok("cp2", &["mv", "/srv/etcd/precious", "/root/precious"]);
    up_ok(inv);
    assert_eq!(mode_owner(&lab, "cp2", "/srv/etcd"), "700 etcd");
    assert_eq!(lab.exec_ok("cp2", &["test", "-d", "/srv/etcd/member"]), "");

    // The backup timer refuses a backup dir holding the host's own files, and leaves it alone.
    let (_, s) = status_json(inv);
    let leader = s["leader"].as_str().unwrap().to_string();
    lab.exec_ok(
        &leader,
        &[
            "sh",
            "-c",
            &format!("mkdir -p -m 755 {DIR} && echo keep > {DIR}/notes.txt"),
        ],
    );
    let run = lab.exec(&leader, &["systemctl", "start", "hactl-etcd-backup.service"]);
    assert!(
        !run.status.success(),
        "{leader}: the backup ran into a foreign directory"
    );
    let log = lab.exec_ok(
        &leader,
        &["journalctl", "-u", "hactl-etcd-backup.service", "--no-pager"],
    );
    assert!(
        log.contains(&format!(
            "refusing {DIR}: it holds files that are not snapshots (notes.txt)"
        )),
        "{leader}: {log}"
    );
    assert_eq!(mode_owner(&lab, &leader, DIR), "755 root");
    assert!(snapshots(&lab, &leader).is_empty());
}
