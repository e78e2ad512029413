//! `hactl recover` against real etcd in lab hosts (docs/recovery.md, "Acceptance tests"). They need root; without it each
//! prints `SKIPPED <name>: needs root`.
//!
//! Each test brings its own 3-host lab (no load balancers), runs the real `hactl` binary, and
//! checks the hosts with etcdctl inside them.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use cli_support::text;
use lab_support::{eventually, TestLab};

const DATA_DIR: &str = "/var/lib/etcd";

fn hactl(lab: &TestLab, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    cli_support::run(Some(lab.inventory()), args, env, stdin)
}

fn ok(lab: &TestLab, args: &[&str]) -> String {
    let out = hactl(lab, args, &[], None);
    assert!(out.status.success(), "hactl {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn state_dir(lab: &TestLab) -> PathBuf {
    lab.inventory().parent().unwrap().join("state")
}

fn ctl(lab: &TestLab, host: &str, args: &[&str]) -> Output {
    let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
    argv.extend_from_slice(args);
    lab.exec(host, &argv)
}

fn ctl_ok(lab: &TestLab, host: &str, args: &[&str]) -> String {
    let out = ctl(lab, host, args);
    assert!(
        out.status.success(),
        "{host}: etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `key`, or None.
fn get(lab: &TestLab, host: &str, key: &str) -> Option<String> {
    let out = ctl_ok(lab, host, &["get", key, "--print-value-only"]);
    let v = out.trim_end();
    (!v.is_empty()).then(|| v.to_string())
}

fn status_json(lab: &TestLab) -> serde_json::Value {
    let out = hactl(lab, &["status", "-o", "json"], &[], None);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// Every member healthy, one leader, exactly `members`, no learners, equal hashkv.
fn assert_cluster(lab: &TestLab, members: &[&str]) -> (String, i64) {
    let ok = eventually(Duration::from_secs(30), || {
        let s = status_json(lab);
        s["problems"].as_array().is_some_and(|p| p.is_empty())
    });
    let s = status_json(lab);
    assert!(ok, "cluster not healthy: {s:#}");
    let names: Vec<&str> = s["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, members);
    assert!(s["members"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| !m["isLearner"].as_bool().unwrap()));
    let hk = ctl_ok(
        lab,
        members[0],
        &["endpoint", "hashkv", "--cluster", "-w", "json"],
    );
    let hashes: std::collections::BTreeSet<&str> = hk
        .split("\"hash\":")
        .skip(1)
        .map(|h| h.split(|c: char| !c.is_ascii_digit()).next().unwrap())
        .collect();
    assert_eq!(hashes.len(), 1, "hashkv differs: {hk}");
    (
        s["clusterId"].as_str().unwrap().to_string(),
        s["revision"].as_i64().unwrap(),
    )
}

/// `endpoint hashkv --cluster --rev REV`: every member's hash (asserted equal) and the
/// compaction revision it reports.
fn hashkv_at(lab: &TestLab, rev: i64) -> (u64, i64) {
    let hk = ctl_ok(
        lab,
        "cp1",
        &[
            "endpoint",
            "hashkv",
            "--cluster",
            "--rev",
            &rev.to_string(),
            "-w",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&hk).unwrap_or_else(|e| panic!("{e}: {hk}"));
    let pairs: std::collections::BTreeSet<(u64, i64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["HashKV"]["hash"].as_u64().unwrap(),
                e["HashKV"]["compact_revision"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(v.as_array().unwrap().len(), 3, "{hk}");
    assert_eq!(
        pairs.len(),
        1,
        "hashkv at revision {rev} differs between members: {hk}"
    );
    pairs.into_iter().next().unwrap()
}

/// The member IDs, sorted (hex).
fn member_ids(lab: &TestLab) -> Vec<String> {
    let mut ids: Vec<String> = ctl_ok(lab, "cp1", &["member", "list"])
        .lines()
        .filter_map(|l| l.split(',').next().map(|s| s.trim().to_string()))
        .collect();
    ids.sort();
    ids
}

/// kill -9 etcd on `hosts` and delete their data dirs (the disaster of A1).
fn lose(lab: &TestLab, hosts: &[&str]) {
    for h in hosts {
        lab.exec(h, &["systemctl", "kill", "-s", "KILL", "etcd.service"]);
        lab.exec(h, &["systemctl", "stop", "etcd.service"]);
        lab.exec_ok(h, &["rm", "-rf", DATA_DIR]);
    }
}

/// Waits until `host`'s member no longer reports itself healthy (it noticed the lost quorum).
fn wait_leaderless(lab: &TestLab, host: &str) {
    assert!(
        eventually(Duration::from_secs(20), || {
            let out = lab.exec(host, &["curl", "-s", "-m", "2", "http://127.0.0.1:2381/health"]);
            !String::from_utf8_lossy(&out.stdout).contains("\"health\":\"true\"")
        }),
        "{host} still reports health"
    );
}

fn is_active(lab: &TestLab, host: &str) -> bool {
    let out = lab.exec(host, &["systemctl", "is-active", "etcd.service"]);
    String::from_utf8_lossy(&out.stdout).trim() == "active"
}

fn newest_run(lab: &TestLab) -> String {
    let mut runs: Vec<String> = std::fs::read_dir(state_dir(lab).join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    runs.pop().unwrap()
}

fn journal(lab: &TestLab, run: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(state_dir(lab).join("runs").join(run).join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What a directory holds (names, sorted; none when it does not exist).
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Saves a snapshot with `hactl etcd snapshot save`; returns its path and revision. Its
/// `--dry-run` first: it names the leader and the files, and writes none of them, nor the
/// high-water mark or the canary key.
fn snapshot(lab: &TestLab, out: &Path) -> (PathBuf, i64) {
    // The canary's value, read through the first member that answers (a host powered off or
    // a member stopped is passed over).
    let canary = |lab: &TestLab| {
        let argv = [
            "/usr/local/sbin/hactl-etcdctl",
            "get",
            hactl::snapshot::CANARY_KEY,
            "--print-value-only",
        ];
        lab.hosts()
            .iter()
            .filter(|h| h.name.starts_with("cp"))
            .filter_map(|h| lab.lab().exec(&h.name, &argv).ok())
            .find(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .expect("no member answered a read of the canary key")
    };
    let (files, hwm, canary_before) = (
        listing(out),
        std::fs::read(state_dir(lab).join("hwm.json")).ok(),
        canary(lab),
    );
    let said = ok(
        lab,
        &[
            "etcd",
            "snapshot",
            "save",
            "--dry-run",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(
        said.contains("nothing written") && said.contains("from the leader"),
        "{said}"
    );
    assert!(said.contains(&format!("{}/", out.display())), "{said}");
    assert_eq!(
        listing(out),
        files,
        "snapshot save --dry-run wrote into {}",
        out.display()
    );
    assert_eq!(
        std::fs::read(state_dir(lab).join("hwm.json")).ok(),
        hwm,
        "--dry-run wrote hwm.json"
    );
    assert_eq!(canary(lab), canary_before, "--dry-run wrote the canary key");
    let path = PathBuf::from(ok(lab, &["etcd", "snapshot", "save", "--out", out.to_str().unwrap()]).trim());
    let sidecar: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{}.json", path.display())).unwrap()).unwrap();
    (path, sidecar["revision"].as_i64().unwrap())
}

fn up(lab: &TestLab) {
    ok(lab, &["up", "--yes"]);
}

fn put_many(lab: &TestLab, host: &str, n: usize) {
    let script = format!(
        "for i in $(seq 1 {n}); do /usr/local/sbin/hactl-etcdctl put /registry/bulk/$i v$i >/dev/null || exit 1; done"
    );
    lab.exec_ok(host, &["sh", "-c", &script]);
}

#[test]
fn recover_restores_quorum_after_losing_two_of_three() {
    let Some(lab) = TestLab::up(
        "recover_restores_quorum_after_losing_two_of_three",
        3,
        0,
        0,
        "trixie",
    ) else {
        return;
    };
    up(&lab);
    let (old_id, _) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    ctl_ok(&lab, "cp1", &["put", "/registry/pre", "k1"]);
    let tmp = tempfile::tempdir().unwrap();
    let (snap, snap_rev) = snapshot(&lab, tmp.path());
    put_many(&lab, "cp1", 100);
    ctl_ok(&lab, "cp1", &["put", "/registry/post", "p"]);
    // `hactl status` records the high-water mark.
    let hwm = status_json(&lab)["revision"].as_i64().unwrap();
    let mark: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state_dir(&lab).join("hwm.json")).unwrap()).unwrap();
    assert_eq!(mark["revision"].as_i64().unwrap(), hwm);
    assert!(hwm > snap_rev + 100);

    lose(&lab, &["cp2", "cp3"]);
    wait_leaderless(&lab, "cp1");

    // A9: one flipped byte at offset 9000 → exit 2 before any fencing.
    let mut bytes = std::fs::read(&snap).unwrap();
    bytes[9000] ^= 0x01;
    let corrupt = tmp.path().join("corrupt.db");
    std::fs::write(&corrupt, &bytes).unwrap();
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", corrupt.to_str().unwrap(), "--yes"],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("expected sha256"), "{}", text(&out));
    assert!(is_active(&lab, "cp1"), "A9: etcd on cp1 was stopped");
    assert!(lab
        .exec("cp1", &["test", "-d", "/var/lib/etcd/member"])
        .status
        .success());

    // A10: a raw member/snap/db has no hash → exit 2 without --skip-hash-check.
    let raw = lab.exec_ok(
        "cp1",
        &["sh", "-c", "cat /var/lib/etcd/member/snap/db | base64 -w0"],
    );
    let raw_path = tmp.path().join("raw.db");
    use base64::Engine as _;
    std::fs::write(
        &raw_path,
        base64::engine::general_purpose::STANDARD
            .decode(raw.trim())
            .unwrap(),
    )
    .unwrap();
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", raw_path.to_str().unwrap(), "--yes"],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--skip-hash-check"), "{}", text(&out));
    assert!(is_active(&lab, "cp1"));

    // A1.
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", snap.to_str().unwrap(), "--yes"],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = newest_run(&lab);
    let (new_id, _) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert_ne!(new_id, old_id, "a recover makes a new cluster ID");
    assert_eq!(get(&lab, "cp2", "/registry/pre").as_deref(), Some("k1"));
    assert_eq!(get(&lab, "cp3", "/registry/post"), None);
    let st = ctl_ok(&lab, "cp1", &["endpoint", "status", "-w", "json"]);
    let rev: i64 = st
        .split("\"revision\":")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rev >= snap_rev + 1_000_000_000 && rev > hwm, "revision {rev}");
    let old = ctl(
        &lab,
        "cp1",
        &["get", "--rev", &snap_rev.to_string(), "/registry/pre"],
    );
    assert!(String::from_utf8_lossy(&old.stderr).contains("required revision has been compacted"));
    let watch = lab.exec(
        "cp1",
        &[
            "timeout",
            "10",
            "/usr/local/sbin/hactl-etcdctl",
            "watch",
            "--rev",
            &(hwm - 1).to_string(),
            "/registry",
            "--prefix",
        ],
    );
    let w = format!(
        "{}{}",
        String::from_utf8_lossy(&watch.stdout),
        String::from_utf8_lossy(&watch.stderr)
    );
    assert!(
        w.contains("compacted"),
        "watch from HWM-1 was not cancelled as compacted: {w}"
    );
    lab.exec_ok(
        "cp1",
        &["test", "-d", &format!("{DATA_DIR}.hactl-pre-{run}/member/wal")],
    );
    for h in ["cp1", "cp2", "cp3"] {
        let left = lab.exec(
            h,
            &[
                "sh",
                "-c",
                &format!("ls -d /var/lib/etcd.hactl/{run}/staging* 2>/dev/null"),
            ],
        );
        assert!(left.stdout.is_empty(), "{h}: staging left behind");
    }
    let steps: Vec<String> = journal(&lab, &run)
        .iter()
        .filter(|e| e["phase"] == "done")
        .map(|e| e["step"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "R0.1", "R0.4@cp1", "R1.3@cp1", "R1.4@cp1", "R2.4@cp1", "R2.7@cp1", "R3.4@cp3", "R4.2", "R6",
    ] {
        assert!(
            steps.iter().any(|s| s == want),
            "journal lacks {want} done: {steps:?}"
        );
    }
    // The hosts hold a copy of the journal; the lock is released.
    let mirrored = lab.exec_ok(
        "cp2",
        &["cat", &format!("/var/lib/hactl/runs/{run}/journal.jsonl")],
    );
    assert!(mirrored.contains("\"step\":\"R6\""));
    assert!(!lab
        .exec("cp1", &["test", "-e", "/var/lib/hactl/locks/cluster"])
        .status
        .success());
    // A second `hactl up` changes nothing; a resume of the finished run does nothing.
    let out = ok(&lab, &["up", "--yes"]);
    assert!(out.contains("no changes"), "{out}");
    let out = ok(&lab, &["recover", "--resume", &run, "--yes"]);
    assert!(out.contains("0 steps done"), "{out}");
}

/// Runs a recover crashing after every step in turn (each crash resumed by the next call), then
/// checks the result and that no step acted twice.
fn crash_at_every_step(lab: &TestLab, snap: &Path, mode: &str) -> String {
    let dry = hactl(
        lab,
        &[
            "recover",
            "--from-snapshot",
            snap.to_str().unwrap(),
            "--mode",
            mode,
            "--dry-run",
        ],
        &[],
        None,
    );
    assert!(dry.status.success(), "{}", text(&dry));
    let ids: Vec<String> = String::from_utf8_lossy(&dry.stdout)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("[R")
                .and_then(|l| l.split(']').next())
                .map(|id| format!("R{id}"))
        })
        .collect();
    assert!(ids.len() > 10, "{ids:?}");
    let first = hactl(
        lab,
        &[
            "recover",
            "--from-snapshot",
            snap.to_str().unwrap(),
            "--mode",
            mode,
            "--yes",
        ],
        &[("HACTL_CRASH_AFTER", &ids[0])],
        None,
    );
    assert_eq!(first.status.code(), Some(137), "{}", text(&first));
    let run = newest_run(lab);
    for id in &ids[1..] {
        let out = hactl(
            lab,
            &["recover", "--resume", &run, "--yes"],
            &[("HACTL_CRASH_AFTER", id)],
            None,
        );
        assert_eq!(out.status.code(), Some(137), "crash after {id}: {}", text(&out));
    }
    let out = hactl(lab, &["recover", "--resume", &run, "--yes"], &[], None);
    assert!(out.status.success(), "{}", text(&out));
    // Every step was done exactly once; every other visit was a skip.
    let entries = journal(lab, &run);
    let mut done: BTreeMap<String, usize> = BTreeMap::new();
    for e in entries.iter().filter(|e| e["phase"] == "done") {
        *done.entry(e["step"].as_str().unwrap().to_string()).or_default() += 1;
    }
    for id in &ids {
        let n = done.get(id).copied().unwrap_or(0);
        let skipped_first = entries
            .iter()
            .any(|e| e["step"] == id.as_str() && e["phase"] == "skipped");
        assert!(
            n == 1 || (n == 0 && skipped_first),
            "{mode}: step {id} done {n} times"
        );
    }
    assert!(
        entries.iter().all(|e| e["phase"] != "failed"),
        "{mode}: a step failed"
    );
    for h in ["cp1", "cp2", "cp3"] {
        let left = lab.exec(
            h,
            &[
                "sh",
                "-c",
                &format!(
                    "ls -d /var/lib/etcd.hactl/{run}/staging* /var/lib/etcd.hactl/{run}/trial 2>/dev/null"
                ),
            ],
        );
        assert!(left.stdout.is_empty(), "{h}: staging left behind");
    }
    run
}

#[test]
fn recover_crashed_after_every_step_resumes_to_the_same_cluster() {
    let Some(lab) = TestLab::up(
        "recover_crashed_after_every_step_resumes_to_the_same_cluster",
        3,
        0,
        0,
        "trixie",
    ) else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/pre", "k1"]);
    let tmp = tempfile::tempdir().unwrap();
    let (snap, snap_rev) = snapshot(&lab, tmp.path());
    ctl_ok(&lab, "cp1", &["put", "/registry/post", "p"]);
    let mark_before = std::fs::read(state_dir(&lab).join("hwm.json")).unwrap();

    // Seed mode.
    lose(&lab, &["cp2", "cp3"]);
    wait_leaderless(&lab, "cp1");
    crash_at_every_step(&lab, &snap, "seed");
    let (seed_id, seed_rev) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert_eq!(get(&lab, "cp3", "/registry/pre").as_deref(), Some("k1"));
    assert_eq!(get(&lab, "cp3", "/registry/post"), None);
    assert!(seed_rev >= snap_rev + 1_000_000_000);
    // The restored revision (snapshot + bump, compacted there by --mark-compacted): R4.2's
    // baseline backup writes its canary (a timestamp) right after, so hashes are compared here.
    let restored = snap_rev + 1_000_000_000;
    let seed_hash = hashkv_at(&lab, restored);
    assert_eq!(
        seed_hash.1, restored,
        "seed mode: compacted at {} (bump not 10^9?)",
        seed_hash.1
    );
    let seed_members = member_ids(&lab);

    // A13: the same disaster recovered with --mode all from the same snapshot gives the same
    // revision and the same hashkv at that revision (member IDs may differ). The seed-mode run
    // raised the high-water mark to its own revision, which would size a larger bump; put the
    // marks back to what the first run saw (as on a second, identical lab) and stop cp1, so
    // no running survivor reports the recovered revision either.
    for h in ["cp1", "cp2", "cp3"] {
        lab.exec(h, &["rm", "-f", "/var/lib/hactl/hwm.json"]);
    }
    std::fs::write(state_dir(&lab).join("hwm.json"), &mark_before).unwrap();
    lose(&lab, &["cp2", "cp3"]);
    lab.exec_ok("cp1", &["systemctl", "stop", "etcd.service"]);
    crash_at_every_step(&lab, &snap, "all");
    let (all_id, all_rev) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert_ne!(all_id, seed_id);
    assert_eq!(get(&lab, "cp2", "/registry/pre").as_deref(), Some("k1"));
    assert_eq!(get(&lab, "cp2", "/registry/post"), None);
    assert_eq!(
        all_rev, seed_rev,
        "A13: seed and all modes reached different revisions"
    );
    assert_eq!(
        hashkv_at(&lab, restored),
        seed_hash,
        "A13: hashkv at revision {restored} differs between the seed-mode and the all-mode cluster"
    );
    assert_ne!(member_ids(&lab), seed_members, "a new lineage has new member IDs");
    let out = ok(&lab, &["up", "--yes"]);
    assert!(out.contains("no changes"), "{out}");
}

#[test]
fn recover_refuses_when_quorum_is_restorable() {
    let Some(lab) = TestLab::up("recover_refuses_when_quorum_is_restorable", 3, 0, 0, "trixie") else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/last", "l"]);
    let wal_sha = |dir: &str| {
        lab.exec_ok(
            "cp1",
            &["sh", "-c", &format!("cat {dir}/member/wal/*.wal | sha256sum")],
        )
    };
    for h in ["cp2", "cp3"] {
        lab.exec_ok(h, &["systemctl", "stop", "etcd.service"]);
    }
    wait_leaderless(&lab, "cp1");
    // A4: two members stopped with intact data: start them, do not recover.
    let out = hactl(&lab, &["recover", "--auto", "--yes"], &[], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("quorum restorable"), "{}", text(&out));
    for h in ["cp1", "cp2", "cp3"] {
        lab.exec_ok(h, &["test", "-d", "/var/lib/etcd/member/wal"]);
        assert!(!lab
            .exec(
                h,
                &["sh", "-c", "ls -d /var/lib/etcd.hactl-* 2>/dev/null | grep -q ."]
            )
            .status
            .success());
    }
    assert!(is_active(&lab, "cp1"));
    // A wrong typed name changes nothing: declined at the prompt (exit 6), not a safety refusal.
    let out = hactl(
        &lab,
        &["recover", "--auto", "--force-destructive", "--yes"],
        &[],
        Some("nope\n"),
    );
    assert_eq!(out.status.code(), Some(6), "declined, exit 6: {}", text(&out));
    assert!(is_active(&lab, "cp1"));
    // With the typed cluster name it proceeds: --auto takes survivor cp1 (A2: from its data).
    lab.exec_ok("cp1", &["systemctl", "stop", "etcd.service"]);
    let before = wal_sha(DATA_DIR);
    let name = lab.name().to_string();
    let out = hactl(
        &lab,
        &["recover", "--auto", "--force-destructive", "--yes"],
        &[],
        Some(&format!("{name}\n")),
    );
    assert!(out.status.success(), "{}", text(&out));
    let run = newest_run(&lab);
    assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert_eq!(get(&lab, "cp2", "/registry/last").as_deref(), Some("l"));
    // The survivor's own files were never opened by a writer: its WAL is byte-identical, aside.
    assert_eq!(wal_sha(&format!("{DATA_DIR}.hactl-pre-{run}")), before);
}

#[test]
fn recover_needs_attestation_for_an_unreachable_host() {
    let Some(mut lab) = TestLab::up(
        "recover_needs_attestation_for_an_unreachable_host",
        3,
        0,
        0,
        "trixie",
    ) else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/last", "l"]);
    lose(&lab, &["cp2", "cp3"]);
    lab.fault("cp3", hactl::lab::Fault::Isolate);
    wait_leaderless(&lab, "cp1");
    // A5: exit 3 before anything is stopped.
    let out = hactl(
        &lab,
        &[
            "recover",
            "--from-member",
            "cp1",
            "--yes",
            "--connect-timeout",
            "10",
        ],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("--confirm-dead cp3"), "{}", text(&out));
    assert!(
        is_active(&lab, "cp1"),
        "a service was stopped before the attestation gate"
    );
    // Issue 13, point 3: a local user takes 127.0.0.1:23790 (where the scratch etcd of R0.4b
    // listened) first, with an etcd of its own holding a different value. It must not seed the
    // recovered cluster: the scratch etcd listens only on unix sockets in a 0700 dir.
    lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            "install -d -o nobody /tmp/squat && cp /usr/bin/etcd /tmp/squat/listener \
             && systemd-run --unit hactl-test-squatter -p User=nobody -p WorkingDirectory=/tmp/squat \
             /tmp/squat/listener --name squat --data-dir /tmp/squat/data \
             --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
             --listen-peer-urls http://127.0.0.1:23850 --initial-advertise-peer-urls http://127.0.0.1:23850 \
             --initial-cluster squat=http://127.0.0.1:23850",
        ],
    );
    assert!(
        eventually(Duration::from_secs(30), || lab
            .exec(
                "cp1",
                &[
                    "etcdctl",
                    "--endpoints=http://127.0.0.1:23790",
                    "put",
                    "/registry/last",
                    "squatter"
                ]
            )
            .status
            .success()),
        "the squatter etcd did not start"
    );
    // Attested: recovered without it (A2 from the survivor's data).
    let out = hactl(
        &lab,
        &[
            "recover",
            "--from-member",
            "cp1",
            "--confirm-dead",
            "cp3",
            "--yes",
            "--connect-timeout",
            "10",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("even number of members"), "{}", text(&out));
    for h in ["cp1", "cp2"] {
        assert_eq!(get(&lab, h, "/registry/last").as_deref(), Some("l"));
    }
    let list = ctl_ok(&lab, "cp1", &["member", "list"]);
    assert_eq!(list.lines().count(), 2, "{list}");
    // The squatter still holds its port and its own value; nothing of it reached the cluster.
    let squatted = lab.exec_ok(
        "cp1",
        &[
            "etcdctl",
            "--endpoints=http://127.0.0.1:23790",
            "get",
            "/registry/last",
            "--print-value-only",
        ],
    );
    assert_eq!(squatted.trim(), "squatter");
    lab.exec("cp1", &["systemctl", "stop", "hactl-test-squatter"]);
    lab.fault("cp3", hactl::lab::Fault::Rejoin);
}

#[test]
fn recover_on_etcd_3_4_emulates_the_bump_or_refuses() {
    let Some(lab) = TestLab::up(
        "recover_on_etcd_3_4_emulates_the_bump_or_refuses",
        3,
        0,
        0,
        "bookworm",
    ) else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/pre", "k1"]);
    let tmp = tempfile::tempdir().unwrap();
    let (snap, snap_rev) = snapshot(&lab, tmp.path());
    put_many(&lab, "cp1", 50);
    let hwm = status_json(&lab)["revision"].as_i64().unwrap();
    lose(&lab, &["cp2", "cp3"]);
    lab.exec_ok("cp1", &["systemctl", "stop", "etcd.service"]);
    // No high-water mark anywhere (and no running member to read one from): refused.
    let mark = std::fs::read(state_dir(&lab).join("hwm.json")).unwrap();
    std::fs::remove_file(state_dir(&lab).join("hwm.json")).unwrap();
    for h in ["cp1", "cp2", "cp3"] {
        lab.exec(h, &["rm", "-f", "/var/lib/hactl/hwm.json"]);
    }
    std::fs::remove_file(format!("{}.json", snap.display())).unwrap();
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", snap.to_str().unwrap(), "--yes"],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--accept-revision-rewind"), "{}", text(&out));
    lab.exec_ok("cp1", &["test", "-d", "/var/lib/etcd/member"]);
    // With the mark known, the bump is emulated: writes, then a compaction past the mark.
    std::fs::write(state_dir(&lab).join("hwm.json"), mark).unwrap();
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", snap.to_str().unwrap(), "--yes"],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert_eq!(get(&lab, "cp3", "/registry/pre").as_deref(), Some("k1"));
    let st = ctl_ok(&lab, "cp1", &["endpoint", "status", "-w", "json"]);
    let rev: i64 = st
        .split("\"revision\":")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rev > hwm, "revision {rev} not above the mark {hwm}");
    let old = ctl(
        &lab,
        "cp1",
        &["get", "--rev", &(hwm - 1).to_string(), "/registry/pre"],
    );
    assert!(
        String::from_utf8_lossy(&old.stderr).contains("compacted"),
        "{}",
        String::from_utf8_lossy(&old.stderr)
    );
    let _ = snap_rev;
}

#[test]
fn recover_refuses_a_source_older_than_the_accepted_data_loss_window() {
    let Some(lab) = TestLab::up("recover_refuses_an_old_source", 3, 0, 0, "trixie") else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/pre", "k1"]);
    let tmp = tempfile::tempdir().unwrap();
    let (snap, _) = snapshot(&lab, tmp.path());
    // Make the snapshot 30 h old by its sidecar (what hactl reads the source's time from).
    let sidecar_path = format!("{}.json", snap.display());
    let mut sidecar: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sidecar_path).unwrap()).unwrap();
    let old = time::OffsetDateTime::now_utc() - time::Duration::hours(30);
    sidecar["time"] = old
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap()
        .into();
    std::fs::write(&sidecar_path, sidecar.to_string()).unwrap();
    status_json(&lab); // records the high-water mark
    lose(&lab, &["cp2", "cp3"]);
    wait_leaderless(&lab, "cp1");

    let snap = snap.to_str().unwrap();
    // R0.4c: older than the default 24 h → exit 3, naming the loss and the flag that accepts it.
    let out = hactl(
        &lab,
        &["recover", "--from-snapshot", snap, "--dry-run"],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("R0.4c") && t.contains("up to 30 h 0 min of writes"),
        "{t}"
    );
    assert!(t.contains("--accept-data-loss-window 31h"), "{t}");
    // A window shorter than the source's age still refuses.
    let out = hactl(
        &lab,
        &[
            "recover",
            "--from-snapshot",
            snap,
            "--dry-run",
            "--accept-data-loss-window",
            "2h",
        ],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    // One that covers it lets the (dry) run through; nothing was stopped either way.
    let out = hactl(
        &lab,
        &[
            "recover",
            "--from-snapshot",
            snap,
            "--dry-run",
            "--accept-data-loss-window",
            "2d",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(is_active(&lab, "cp1"));
    // `-o json`: the same plan as data. Two runs differ only in their run ID (and the token and
    // cluster ID made from it), so with those replaced the JSON's steps are the text's.
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let args = [
        "recover",
        "--from-snapshot",
        snap,
        "--dry-run",
        "--accept-data-loss-window",
        "2d",
    ];
    let out = hactl(&lab, &[&args[..], &["-o", "json"]].concat(), &[], None);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("recover -o json");
    let d = &json["decisions"];
    let run_of = |t: &str| t.split_whitespace().nth(2).unwrap().to_string();
    let table_run = run_of(table.lines().next().unwrap());
    let cid_of = |t: &str| {
        t.split("cluster ID ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    // Files that carry the token (etcd-initial.env) hash differently in each run: sha256s too.
    // The cluster ID is printed in hex and, in the health probes, in decimal.
    let decimal = |hex: &str| u64::from_str_radix(hex, 16).unwrap().to_string();
    let table_cid = cid_of(&table);
    let table = unhash(
        &table
            .replace(&table_cid, "CID")
            .replace(&decimal(&table_cid), "CID")
            .replace(&table_run, "RUN"),
    );
    let json_cid = d["expectedClusterId"].as_str().unwrap();
    let norm = |v: &serde_json::Value| {
        unhash(
            &v.as_str()
                .unwrap()
                .replace(json_cid, "CID")
                .replace(&decimal(json_cid), "CID")
                .replace(d["run"].as_str().unwrap(), "RUN"),
        )
    };
    assert_eq!(norm(&d["run"]), "RUN");
    assert!(table.contains(&format!("seed {}", norm(&d["seed"]))), "{table}");
    assert!(table.contains(&format!("token {}", norm(&d["token"]))), "{table}");
    assert!(
        table.contains(&format!("moved aside to {}", norm(&d["asideDataDir"]))),
        "{table}"
    );
    let steps = json["steps"].as_array().unwrap();
    let ids: Vec<String> = table
        .lines()
        .filter_map(|l| l.strip_prefix("[R").and_then(|l| l.split(']').next()))
        .map(|id| format!("R{id}"))
        .collect();
    let json_ids: Vec<String> = steps
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids.len() > 10, "{table}");
    assert_eq!(json_ids, ids);
    let mut commands = 0;
    for step in steps {
        let mut parts: Vec<&serde_json::Value> =
            vec![&step["skipWhen"], &step["checkFirst"], &step["verify"]];
        parts.extend(step["acts"].as_array().unwrap());
        for p in parts {
            for key in ["command", "description", "path"] {
                if p[key].is_string() {
                    commands += 1;
                    let want = norm(&p[key]);
                    assert!(
                        table.contains(&want),
                        "{want:?} is not in the text plan:\n{table}"
                    );
                }
            }
        }
    }
    assert!(commands > 30, "{commands} commands in {json}");
    assert!(is_active(&lab, "cp1"));
}

/// `s` with every run of 64 hex digits (a sha256) replaced by `SHA`.
fn unhash(s: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in s.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        out.push_str(if run.len() == 64 { "SHA" } else { &run });
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// The address of `host` in the lab's inventory.
fn address(lab: &TestLab, host: &str) -> String {
    let inv = hactl::inventory::load(lab.inventory()).unwrap();
    inv.host(host).unwrap().address.to_string()
}

#[test]
fn recover_auto_takes_the_newest_scheduled_backup_and_checks_members_bump_and_a8() {
    let Some(lab) = TestLab::up(
        "recover_auto_takes_the_newest_scheduled_backup",
        3,
        0,
        0,
        "trixie",
    ) else {
        return;
    };
    up(&lab);
    ctl_ok(&lab, "cp1", &["put", "/registry/pre", "k1"]);
    // A snapshot in the state directory (a candidate), then cp3 stops (a stale survivor).
    let (_, local_rev) = snapshot(&lab, &state_dir(&lab).join("backups"));
    lab.exec_ok("cp3", &["systemctl", "stop", "etcd.service"]);
    put_many(&lab, "cp1", 20);
    // The scheduled backup runs on every host; only the leader saves.
    for h in ["cp1", "cp2"] {
        lab.exec_ok(h, &["systemctl", "start", "hactl-etcd-backup.service"]);
    }
    let (backup_host, backup_rev, backup_file) = ["cp1", "cp2"]
        .iter()
        .find_map(|h| {
            let out = lab.exec(h, &["cat", "/var/lib/etcd-backups/latest.json"]);
            out.status.success().then(|| {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                (
                    h.to_string(),
                    v["revision"].as_i64().unwrap(),
                    v["file"].as_str().unwrap().to_string(),
                )
            })
        })
        .expect("the leader saved a scheduled backup");
    assert!(backup_rev > local_rev + 10, "{backup_rev} vs {local_rev}");
    // Writes after the backup are the loss; a snapshot outside the state dir records the mark.
    ctl_ok(&lab, "cp1", &["put", "/registry/post", "p"]);
    put_many(&lab, "cp2", 5);
    let tmp = tempfile::tempdir().unwrap();
    let (_, hwm) = snapshot(&lab, tmp.path());
    lose(&lab, &["cp1", "cp2"]);

    let m = format!(
        "cp1={},cp2={},cp3={}",
        address(&lab, "cp1"),
        address(&lab, "cp2"),
        address(&lab, "cp3")
    );
    // --members and --bump-revision: input errors name the entry and the fix; nothing changes.
    let bad = format!("cp1={},cp2=10.255.0.2", address(&lab, "cp1"));
    let out = hactl(
        &lab,
        &["recover", "--auto", "--dry-run", "--members", &bad],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "the inventory gives cp2 the address {}",
            address(&lab, "cp2")
        )),
        "{}",
        text(&out)
    );
    let out = hactl(
        &lab,
        &[
            "recover",
            "--auto",
            "--dry-run",
            "--members",
            &m,
            "--bump-revision",
            "5",
        ],
        &[],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not above the high-water mark"),
        "{}",
        text(&out)
    );

    // --auto: the scheduled backup is ahead of the stale survivor and the local snapshot.
    let out = hactl(
        &lab,
        &[
            "recover",
            "--auto",
            "--dry-run",
            "--members",
            &m,
            "--bump-revision",
            "3000000000",
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let t = text(&out);
    assert!(t.contains("survivor cp3: revision"), "{t}");
    assert!(
        t.contains(&format!("snapshot {}", state_dir(&lab).join("backups").display())),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "--auto: chose scheduled backup {backup_host}:{backup_file}: revision {backup_rev}"
        )),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "estimated data loss: {} revisions behind the high-water mark {hwm}",
            hwm - backup_rev
        )),
        "{t}"
    );
    assert!(t.contains("--bump-revision 3000000000 --mark-compacted"), "{t}");

    let out = hactl(&lab, &["recover", "--auto", "--yes"], &[], None);
    assert!(out.status.success(), "{}", text(&out));
    let (_, rev) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    assert!(rev >= backup_rev + 1_000_000_000 && rev > hwm, "revision {rev}");
    assert_eq!(get(&lab, "cp3", "/registry/pre").as_deref(), Some("k1"));
    assert_eq!(get(&lab, "cp3", "/registry/bulk/20").as_deref(), Some("v20"));
    assert_eq!(get(&lab, "cp2", "/registry/post"), None);
    let name = std::path::Path::new(&backup_file).file_name().unwrap();
    assert!(state_dir(&lab)
        .join("backups/fetched")
        .join(&backup_host)
        .join(name)
        .exists());

    // A8 (same lab): --mode all with cp3's staging filesystem full. No member starts, cp3's
    // partial staging is removed; after the fix, --resume starts all three in one cluster.
    let (snap, _) = snapshot(&lab, tmp.path());
    lose(&lab, &["cp2", "cp3"]);
    wait_leaderless(&lab, "cp1");
    let size_k = (std::fs::metadata(&snap).unwrap().len() * 2 / 1024 + 256).max(1024);
    lab.exec_ok("cp3", &["mkdir", "-p", "/var/lib/etcd.hactl"]);
    lab.exec_ok(
        "cp3",
        &[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size_k}k"),
            "tmpfs",
            "/var/lib/etcd.hactl",
        ],
    );
    let out = hactl(
        &lab,
        &[
            "recover",
            "--from-snapshot",
            snap.to_str().unwrap(),
            "--mode",
            "all",
            "--yes",
        ],
        &[],
        None,
    );
    let a8_run = newest_run(&lab);
    lab.exec("cp3", &["umount", "/var/lib/etcd.hactl"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let entries = journal(&lab, &a8_run);
    let failed: Vec<&str> = entries
        .iter()
        .filter(|e| e["phase"] == "failed")
        .map(|e| e["step"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["R2.4@cp3"], "{}", text(&out));
    assert!(
        entries
            .iter()
            .all(|e| !e["step"].as_str().unwrap().starts_with("R2.7")),
        "a member was started after a failed restore"
    );
    for h in ["cp1", "cp2", "cp3"] {
        assert!(
            !is_active(&lab, h),
            "{h}: etcd runs after a failed all-mode restore"
        );
    }
    assert!(
        text(&out).contains("partial staging dir was removed"),
        "{}",
        text(&out)
    );
    // The fix (the filesystem has room again), then resume.
    let out = hactl(&lab, &["recover", "--resume", &a8_run, "--yes"], &[], None);
    assert!(out.status.success(), "{}", text(&out));
    let (id, _) = assert_cluster(&lab, &["cp1", "cp2", "cp3"]);
    let plan: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(state_dir(&lab).join("runs").join(&a8_run).join("recover.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        id.trim_start_matches('0'),
        plan["expectedClusterId"]
            .as_str()
            .unwrap()
            .trim_start_matches('0')
    );
    for h in ["cp1", "cp2", "cp3"] {
        let left = lab.exec(
            h,
            &[
                "sh",
                "-c",
                &format!("ls -d /var/lib/etcd.hactl/{a8_run}/staging* 2>/dev/null"),
            ],
        );
        assert!(left.stdout.is_empty(), "{h}: staging left behind");
    }

    // --members (same lab): a two-member cluster from survivor cp1; cp3 is left out, stays fenced.
    lose(&lab, &["cp2", "cp3"]);
    wait_leaderless(&lab, "cp1");
    let two = format!("cp2={},cp1={}", address(&lab, "cp2"), address(&lab, "cp1"));
    let out = hactl(
        &lab,
        &["recover", "--from-member", "cp1", "--members", &two, "--yes"],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("left out by --members: cp3"),
        "{}",
        text(&out)
    );
    let list = ctl_ok(&lab, "cp1", &["member", "list"]);
    let mut names: Vec<&str> = list.lines().filter_map(|l| l.split(", ").nth(2)).collect();
    names.sort();
    assert_eq!(names, ["cp1", "cp2"], "{list}");
    ctl_ok(&lab, "cp2", &["endpoint", "health"]);
    assert!(!is_active(&lab, "cp3"), "cp3 was left out but runs etcd");
    assert_eq!(get(&lab, "cp2", "/registry/pre").as_deref(), Some("k1"));
}
