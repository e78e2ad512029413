//! A release tarball (the real etcd 3.5 binaries of the lab's base image, served on loopback) is
//! downloaded once, verified and installed on real hosts, from which a real etcd cluster comes up.
//! The same tarball's checks without hosts are in `tests/binaries.rs`.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`.

use std::sync::atomic::Ordering;

use crate::support::lab as lab_support;
use crate::support::release::{release_tarball, serve, sha};

#[test]
fn up_from_a_release_tarball_installs_the_verified_binaries_on_every_host() {
    let Some(lab) = lab_support::TestLab::up("up_from_a_release_tarball", 3, 0, 0, "trixie") else {
        return;
    };
    // A tarball of the real etcd 3.5 binaries from the lab's own base image.
    let bin = lab.lab().base_image().unwrap().join("usr/bin");
    let files: Vec<(&str, Vec<u8>)> = ["etcd", "etcdctl", "etcdutl"]
        .iter()
        .map(|n| (*n, std::fs::read(bin.join(n)).unwrap()))
        .collect();
    let etcd_sha = sha(&files[0].1);
    let tarball = release_tarball(&files);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, hits) = rt.block_on(serve(tarball.clone()));
    let inventory = lab.inventory().with_file_name("release.yaml");
    let original = std::fs::read_to_string(lab.inventory()).unwrap();
    let edited = original.replace(
        "    source: package\n",
        &format!(
            "    source: release\n    releaseUrl: {url}\n    sha256: {}\n",
            sha(&tarball)
        ),
    );
    assert_ne!(edited, original);
    std::fs::write(&inventory, edited).unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["up", "-i", inventory.to_str().unwrap(), "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "downloaded once for all hosts");
    for h in ["cp1", "cp2", "cp3"] {
        let remote = lab.exec_ok(h, &["sha256sum", "/usr/local/bin/etcd"]);
        assert!(remote.starts_with(&etcd_sha), "{h}: {remote}");
        let unit = lab.exec_ok(h, &["cat", "/etc/systemd/system/etcd.service"]);
        assert!(unit.contains("ExecStart=/usr/local/bin/etcd "), "{h}: {unit}");
        let running = lab.main_exe(h, "etcd");
        assert_eq!(running, "/usr/local/bin/etcd", "{h}");
    }
    lab.exec_ok("cp1", &["hactl-etcdctl", "endpoint", "health", "--cluster"]);
    rt.shutdown_background();
}
