//! `hactl init`'s inventory, made to fit a lab: changed only where the quick start says to change
//! it (host addresses, the SSH user and key, the VIP, the interface) and where this machine
//! cannot follow it (the etcd release, served on loopback: no internet here), with the
//! `kubernetes` section left out (a Kubernetes test appends the lab's, the one release built
//! here). Used by `etcd_labs::init_inventory` and `KubeLab::up_from_init`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::lab::TestLab;
use super::release::{release_tarball, serve_with_sha256sums, sha};

/// The etcd release `init` names, 3.5.16, served on loopback as etcd publishes its releases: the
/// tarball (the trixie base image's real etcd 3.5.16 binaries) with `SHA256SUMS` beside it and
/// no `<file>.sha256`. The URL, and the paths asked for, in order.
pub fn serve_etcd_release(rt: &tokio::runtime::Runtime) -> (String, Arc<Mutex<Vec<String>>>) {
    let bin = hactl::lab::base_image("trixie").unwrap().join("usr/bin");
    let files: Vec<(&str, Vec<u8>)> = ["etcd", "etcdctl", "etcdutl"]
        .iter()
        .map(|n| (*n, std::fs::read(bin.join(n)).unwrap()))
        .collect();
    let version = std::process::Command::new(bin.join("etcd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("etcd Version: 3.5.16"),
        "the trixie base image's etcd is not the 3.5.16 init names: {}",
        String::from_utf8_lossy(&version.stdout)
    );
    let tarball = release_tarball(&files);
    let sums = format!("{}  etcd-v3.5.16-linux-amd64.tar.gz\n", sha(&tarball));
    rt.block_on(serve_with_sha256sums(tarball, sums))
}

/// The value of `key: value` on the first line of `yaml` that has it.
fn field<'a>(yaml: &'a str, key: &str) -> &'a str {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {yaml}"))
}

/// Writes `init`'s inventory for `lab` (3 control planes, 2 load balancers) to `init.yaml` beside
/// the lab's own, its etcd release at `etcd_url`, its state directory the lab's; returns the path.
pub fn write_inventory(lab: &TestLab, etcd_url: &str) -> PathBuf {
    let lab_yaml = std::fs::read_to_string(lab.inventory()).unwrap();
    let dir: &Path = lab.inventory().parent().unwrap();
    let path = dir.join("init.yaml");
    let out = super::cli::hactl(&["init", path.to_str().unwrap(), "--force"]);
    assert!(out.status.success(), "{}", super::cli::text(&out));
    let example = std::fs::read_to_string(&path).unwrap();
    let vip = {
        let at = lab_yaml.find("vip:").expect("the lab has a VIP");
        field(&lab_yaml[at..], "address").to_string()
    };
    let mut edited = example.clone();
    let mut swap = |from: &str, to: &str| {
        assert!(
            edited.contains(from),
            "init's inventory has no {from:?}:\n{example}"
        );
        edited = edited.replacen(from, to, 1);
    };
    for (i, h) in ["cp1", "cp2", "cp3"].iter().enumerate() {
        swap(
            &format!("address: 10.0.0.1{}\n", i + 1),
            &format!("address: {}\n", lab.ip(h)),
        );
    }
    for (i, h) in ["lb1", "lb2"].iter().enumerate() {
        swap(
            &format!("address: 10.0.0.2{}\n", i + 1),
            &format!("address: {}\n", lab.ip(h)),
        );
    }
    swap("address: 10.0.0.100\n", &format!("address: {vip}\n"));
    swap("    user: debian ", "    user: root ");
    swap(
        "    agent: true\n",
        &format!("    keyFile: {}\n", field(&lab_yaml, "keyFile")),
    );
    swap("interface: eth0\n", "interface: host0\n");
    swap(
        "releaseUrl: https://github.com/etcd-io/etcd/releases/download/v3.5.16/etcd-v3.5.16-linux-amd64.tar.gz\n",
        &format!("releaseUrl: {etcd_url}\n"),
    );
    // The `kubernetes` section's key and its indented body go (see the module's comment).
    assert!(
        edited.contains("\n  kubernetes:\n"),
        "init writes a kubernetes section"
    );
    let mut in_kubernetes = false;
    let mut kept = String::new();
    for line in edited.lines() {
        if line == "  kubernetes:" {
            in_kubernetes = true;
            continue;
        }
        if in_kubernetes && line.starts_with("    ") {
            continue;
        }
        in_kubernetes = false;
        kept.push_str(line);
        kept.push('\n');
    }
    kept.push_str(&format!("  stateDir: {}\n", dir.join("state").display()));
    std::fs::write(&path, &kept).unwrap();
    path
}
