//! A lost or wrong state directory must not re-key a cluster (issue 22, section 1), on a lab of
//! 3 etcd members brought up by `hactl up`:
//! - every read-only command (`plan`, `status`, `check`, `certs check`, `kubeconfig`, and the
//!   dry runs of `reset`, `remove`, `maintenance start`, `certs rotate-ca`, `heal`) leaves the
//!   state directory byte for byte as it was (content, mode and the set of paths), with the
//!   directory bind-mounted read-only so that even root cannot write it (only `status` may try
//!   to raise the high-water mark, and says so), and the hosts' files as they were;
//! - the state directory moved aside: `plan` and `up` are refused with exit 2, naming the host,
//!   the CA fingerprint on the host, and the ways out (a bundle, then `hactl adopt`, then `reset`:
//!   adopt itself is proven in `kube_labs::rotate_etcd_ca`); nothing is created (no state directory
//!   appears) and nothing changes on any host (no lock is left either);
//! - the state directory back: `up` says `no changes`.
//!
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cli_support::text;
use lab_support::TestLab;

const HOSTS: [&str; 3] = ["cp1", "cp2", "cp3"];

fn hactl(inv: &Path, state: &Path, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--state-dir", state.to_str().unwrap()]);
    cli_support::run(Some(inv), &all, &[], None)
}

/// Every path under `dir` (itself included) with its mode and, for a file, its content.
fn tree(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        let content = if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                todo.push(e.path());
            }
            Vec::new()
        } else {
            std::fs::read(&p).unwrap_or_default()
        };
        out.insert(p, (meta.mode(), content));
    }
    out
}

/// What hactl manages on each host: the files under /etc/hactl and hactl's units, with their
/// modes and hashes, and whether a cluster lock is held.
fn hosts(lab: &TestLab) -> Vec<String> {
    HOSTS
        .iter()
        .map(|h| {
            lab.exec_ok(
                h,
                &[
                    "sh",
                    "-c",
                    "find /etc/hactl /etc/systemd/system -type f -exec stat -c '%n %a' {} \\; -exec sha256sum {} \\; | sort; ls /var/lib/hactl/locks/cluster 2>&1; true",
                ],
            )
        })
        .collect()
}

fn sh(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", text(&o));
}

#[test]
fn read_only_commands_write_nothing_and_a_lost_state_directory_is_refused_before_any_change() {
    let Some(lab) = TestLab::up("state_identity", 3, 0, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    let state: PathBuf = inv.parent().unwrap().join("state");
    let o = hactl(&inv, &state, &["up", "--yes"]);
    assert!(o.status.success(), "{}", text(&o));

    // 1. Read-only commands against a read-only state directory.
    let (state_before, hosts_before) = (tree(&state), hosts(&lab));
    sh(&[
        "mount",
        "--bind",
        state.to_str().unwrap(),
        state.to_str().unwrap(),
    ]);
    sh(&["mount", "-o", "remount,bind,ro", state.to_str().unwrap()]);
    let read_only: Vec<(&[&str], i32)> = vec![
        (&["plan"], 0),
        (&["plan", "-o", "json"], 0),
        (&["status"], 0),
        (&["check"], 0),
        (&["certs", "check"], 0),
        (&["reset", "--dry-run"], 0),
        // Refused by R-remove on 3 members (exit 2), after reaching the hosts read-only.
        (&["remove", "cp3", "--dry-run"], 2),
        (&["maintenance", "start", "cp1", "--dry-run"], 0),
        (&["maintenance", "plan", "cp1"], 0),
        (&["certs", "rotate-ca", "etcd", "--dry-run"], 0),
        (&["heal", "--once", "--dry-run"], 0),
    ];
    let mut outputs = Vec::new();
    for (args, code) in &read_only {
        let o = hactl(&inv, &state, args);
        outputs.push((args.join(" "), o.status.code(), *code, text(&o)));
    }
    sh(&["umount", state.to_str().unwrap()]);
    for (args, got, want, text) in &outputs {
        assert_eq!(*got, Some(*want), "hactl {args}:\n{text}");
        // `status` raising the high-water mark is the one write a read-only command may try.
        let tried = text
            .lines()
            .filter(|l| l.contains("Read-only file system"))
            .filter(|l| !(args == "status" && l.contains("could not record the high-water mark")))
            .count();
        assert_eq!(tried, 0, "hactl {args} tried to write:\n{text}");
    }
    assert!(outputs[0].3.contains("no changes"), "{}", outputs[0].3);
    assert_eq!(
        tree(&state),
        state_before,
        "a read-only command changed the state directory"
    );
    assert_eq!(hosts(&lab), hosts_before, "a read-only command changed a host");

    // 2. The state directory moved aside: refused before any change.
    let aside = inv.parent().unwrap().join("state.aside");
    std::fs::rename(&state, &aside).unwrap();
    let on_host = lab.exec_ok("cp1", &["cat", "/etc/hactl/pki/etcd/ca.crt"]);
    let fingerprint = hactl::identity::certs_in(&on_host)[0].fingerprint.clone();
    for args in [&["plan"][..], &["up", "--yes"], &["certs", "check"], &["status"]] {
        let o = hactl(&inv, &state, args);
        let t = text(&o);
        if args[0] == "plan" || args[0] == "up" {
            assert_eq!(o.status.code(), Some(2), "hactl {args:?}:\n{t}");
            for want in [
                "cp1 belongs to another cluster: its etcd CA (/etc/hactl/pki/etcd/ca.crt) is ",
                fingerprint.as_str(),
                "holds none",
                "nothing was written on any host or in the state directory",
                "hactl etcd snapshot restore-bundle",
                "hactl adopt -i",
                "hactl reset -i",
            ] {
                assert!(t.contains(want), "hactl {args:?} lacks {want:?}:\n{t}");
            }
        }
        assert!(
            !state.exists(),
            "hactl {args:?} created the state directory:\n{t}"
        );
    }
    assert_eq!(hosts(&lab), hosts_before, "a refused command changed a host");

    // 3. The state directory back: nothing to do.
    std::fs::rename(&aside, &state).unwrap();
    let o = hactl(&inv, &state, &["up", "--yes"]);
    assert!(
        o.status.success() && text(&o).contains("no changes"),
        "{}",
        text(&o)
    );
    lab.down().unwrap();
}
