//! `hactl init`'s inventory brings up a cluster on each Debian release the lab boots (bookworm,
//! trixie), changed only where the quick start says to change it (host addresses, the SSH user and
//! key, the VIP, the interface) and where this machine cannot follow it:
//! - the etcd release is served on loopback (no internet here), laid out as etcd publishes its
//!   releases: the tarball of the same version (3.5.16, the real binaries of the trixie base
//!   image) with a `SHA256SUMS` beside it and no `<file>.sha256`, so the checksum path `init`'s
//!   inventory takes (no pinned sha256) runs for real;
//! - the `kubernetes` section is left out: the Kubernetes lab tests (`tests/kube_labs/`) bring up
//!   the control plane with the one release built here (1.20.2), on trixie.
//!
//! On bookworm this is what broke: its package etcd 3.4.23 with the Kubernetes version `init`
//! names. `init` now pins etcd 3.5.16 from the release, so every host runs the same etcd whatever
//! its distribution ships.

use crate::support::lab::TestLab;
use crate::support::release::{release_tarball, serve_with_sha256sums, sha};

fn hactl(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .output()
        .expect("run hactl")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The value of `key: value` on the first line of `yaml` that has it.
fn field<'a>(yaml: &'a str, key: &str) -> &'a str {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} in {yaml}"))
}

fn init_inventory_comes_up(suite: &str) {
    let name = format!("init_inventory_on_{suite}");
    let Some(lab) = TestLab::up(&name, 3, 2, 0, suite) else {
        return;
    };
    let lab_yaml = std::fs::read_to_string(lab.inventory()).unwrap();
    let dir = lab.inventory().parent().unwrap();
    let path = dir.join("init.yaml");
    let out = hactl(&["init", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let example = std::fs::read_to_string(&path).unwrap();

    // etcd 3.5.16 as its release tarball, from the trixie base image's real binaries.
    let bin = hactl::lab::base_image("trixie").unwrap().join("usr/bin");
    let files: Vec<(&str, Vec<u8>)> = ["etcd", "etcdctl", "etcdutl"]
        .iter()
        .map(|n| (*n, std::fs::read(bin.join(n)).unwrap()))
        .collect();
    let tarball = release_tarball(&files);
    let sums = format!("{}  etcd-v3.5.16-linux-amd64.tar.gz\n", sha(&tarball));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, asked) = rt.block_on(serve_with_sha256sums(tarball, sums));

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
    swap("address: 10.0.0.100\n", &format!("address: {}\n", vip(&lab_yaml)));
    swap("    user: debian ", "    user: root ");
    swap(
        "    agent: true\n",
        &format!("    keyFile: {}\n", field(&lab_yaml, "keyFile")),
    );
    swap("interface: eth0\n", "interface: host0\n");
    swap(
        "releaseUrl: https://github.com/etcd-io/etcd/releases/download/v3.5.16/etcd-v3.5.16-linux-amd64.tar.gz\n",
        &format!("releaseUrl: {url}\n"),
    );
    // No Kubernetes here (see the module's comment): the section's key and its indented body go.
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
    let mut edited = kept;
    edited.push_str(&format!("  stateDir: {}\n", dir.join("state").display()));
    std::fs::write(&path, &edited).unwrap();

    let inv = path.to_str().unwrap();
    let out = hactl(&["validate", "-i", inv]);
    assert!(out.status.success(), "{}\n{edited}", text(&out));
    let out = hactl(&["up", "-i", inv, "--yes"]);
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
        let running = lab.exec_ok(
            h,
            &[
                "sh",
                "-c",
                "readlink /proc/$(systemctl show -p MainPID --value etcd)/exe",
            ],
        );
        assert_eq!(running.trim(), "/usr/local/bin/etcd", "{h}");
    }
    let out = hactl(&["status", "-i", inv]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = hactl(&["plan", "-i", inv]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no changes",
        "{}",
        text(&out)
    );
    rt.shutdown_background();
}

/// The lab's VIP: the `vip:` section's address.
fn vip(lab_yaml: &str) -> String {
    let at = lab_yaml.find("vip:").expect("the lab has a VIP");
    field(&lab_yaml[at..], "address").to_string()
}

#[test]
fn init_inventory_comes_up_on_bookworm() {
    init_inventory_comes_up("bookworm");
}

#[test]
fn init_inventory_comes_up_on_trixie() {
    init_inventory_comes_up("trixie");
}
