//! `hactl etcd snapshot restore-bundle` end to end on the operator machine: a bundle written from
//! one state directory rebuilds another through the CLI (no hosts needed).

use std::process::Command;

use hactl::snapshot;
use hactl::state::StateDir;

#[test]
fn restore_bundle_rebuilds_a_lost_state_directory_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let inventory = tmp.path().join("inventory.yaml");
    let init = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["init", inventory.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));

    // The state directory that is later lost: every file a restore needs, and one it does not.
    let lost = StateDir::open(&tmp.path().join("lost")).unwrap();
    for rel in snapshot::BUNDLE_FILES {
        lost.write_secret(rel, format!("{rel}\n").as_bytes()).unwrap();
    }
    lost.write_secret("pki/etcd/server-cp1.key", b"leaf").unwrap();
    let bundle = tmp.path().join("lab-20250101T000000Z.bundle.age");
    snapshot::write_state_bundle(&bundle, &lost).unwrap();
    let kept = tmp.path().join("identity.txt");
    fs_err::copy(lost.file(snapshot::IDENTITY_FILE), &kept).unwrap();

    let fresh = tmp.path().join("fresh");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_hactl"))
            .args(["etcd", "snapshot", "restore-bundle"])
            .arg(&bundle)
            .arg("--identity")
            .arg(&kept)
            .arg("-i")
            .arg(&inventory)
            .arg("--state-dir")
            .arg(&fresh)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    for rel in snapshot::BUNDLE_FILES {
        assert_eq!(
            fs_err::read_to_string(fresh.join(rel)).unwrap(),
            format!("{rel}\n"),
            "{rel}"
        );
        assert!(
            listed.contains(&fresh.join(rel).display().to_string()),
            "{listed}"
        );
    }
    assert!(fresh.join("kubernetes/encryption-key").is_file());
    assert!(!fresh.join("pki/etcd/server-cp1.key").exists());

    // A second run finds the files there and refuses.
    let again = run();
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("already exists: restore into a fresh state directory"),
        "{err}"
    );
}
