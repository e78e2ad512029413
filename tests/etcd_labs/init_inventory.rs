//! `hactl init`'s inventory brings up a cluster on each Debian release the lab boots (bookworm,
//! trixie), changed only where the quick start says to change it and where this machine cannot
//! follow it (`support::init`): the etcd release it names, 3.5.16, is served on loopback as etcd
//! publishes its releases (`SHA256SUMS` beside the tarball, no `<file>.sha256`), so the checksum
//! path `init`'s inventory takes (no pinned sha256) runs for real; its `kubernetes` section is
//! left out here (`kube_labs::up` brings it up on bookworm with the lab's Kubernetes section).
//!
//! On bookworm this is what broke: its package etcd 3.4.23 with the Kubernetes version `init`
//! names. `init` now pins etcd 3.5.16 from the release, so every host runs the same etcd whatever
//! its distribution ships.

use crate::support::cli::{hactl_in, text};
use crate::support::init;
use crate::support::lab::TestLab;

fn init_inventory_comes_up(suite: &str) {
    let name = format!("init_inventory_on_{suite}");
    let Some(lab) = TestLab::up(&name, 3, 2, 0, suite) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, asked) = init::serve_etcd_release(&rt);
    let path = init::write_inventory(&lab, &url);
    let inv = path.as_path();
    let out = hactl_in(inv, &["validate"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = hactl_in(inv, &["up", "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "/etcd-v3.5.16-linux-amd64.tar.gz.sha256",
            "/SHA256SUMS",
            "/etcd-v3.5.16-linux-amd64.tar.gz"
        ],
        "the checksum from SHA256SUMS, then the tarball, once for every host"
    );
    for h in ["cp1", "cp2", "cp3"] {
        let v = lab.exec_ok(h, &["/usr/local/bin/etcd", "--version"]);
        assert!(v.starts_with("etcd Version: 3.5.16"), "{h}: {v}");
        assert_eq!(lab.main_exe(h, "etcd"), "/usr/local/bin/etcd", "{h}");
    }
    let out = hactl_in(inv, &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = hactl_in(inv, &["plan"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no changes",
        "{}",
        text(&out)
    );
    rt.shutdown_background();
}

#[test]
fn init_inventory_comes_up_on_bookworm() {
    init_inventory_comes_up("bookworm");
}

#[test]
fn init_inventory_comes_up_on_trixie() {
    init_inventory_comes_up("trixie");
}
