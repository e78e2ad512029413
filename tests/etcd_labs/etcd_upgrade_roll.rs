//! An etcd minor upgrade through `hactl up`, real and end to end: a bookworm lab (Debian's etcd
//! 3.4.23 from the package, 3 members, 2 load balancers) moves to 3.5.16 with `source: bundle`,
//! the binaries taken from trixie's `etcd-server` and `etcd-client` packages
//! (`scripts/etcd-bundle.sh`). A writer through the VIP runs the whole time and sees no failed
//! write; afterwards every member runs 3.5.16, the cluster version is 3.5, and a second `plan`
//! prints `no changes`. A binary that is not the declared version, and a downgrade, are refused
//! (exit 2) without a restart.
//! Needs root; without it the test prints `SKIPPED <name>: needs root`. Without the packages (no
//! Debian mirror reachable) it prints `SKIPPED <name>: ...`.

use crate::support::lab as lab_support;
use crate::support::writer as writer_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hactl::inventory::raw::{RawInventory, RawSourceKind};
use lab_support::{eventually, TestLab};
use writer_support::VipWriter;

const TARGET: &str = "3.5.16";

fn hactl(inv: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(args)
        .arg("-i")
        .arg(inv)
        .output()
        .expect("run hactl");
    eprintln!(
        "hactl {args:?} -> {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The bundle of etcd `TARGET` from trixie's packages, built once and cached outside the checkout.
fn bundle() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/etcd-bundle.sh");
    let out = Command::new(script)
        .args([TARGET, "trixie"])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Rewrites the inventory's etcd section.
fn set_etcd(inv: &Path, version: Option<&str>, bundle: Option<&Path>) {
    let text = std::fs::read_to_string(inv).unwrap();
    let mut raw: RawInventory = serde_saphyr::from_str(&text).unwrap();
    raw.spec.etcd.version = version.map(String::from);
    match bundle {
        Some(dir) => {
            raw.spec.etcd.source = RawSourceKind::Bundle;
            raw.spec.etcd.bundle_dir = Some(dir.to_path_buf());
        }
        None => {
            raw.spec.etcd.source = RawSourceKind::Package;
            raw.spec.etcd.bundle_dir = None;
        }
    }
    std::fs::write(inv, serde_saphyr::to_string(&raw).unwrap()).unwrap();
}

/// `endpoint status` of every member, as seen from `host`: the versions they report.
fn member_versions(lab: &TestLab, host: &str) -> Vec<String> {
    let out = lab.exec_ok(
        host,
        &[
            "/usr/local/sbin/hactl-etcdctl",
            "endpoint",
            "status",
            "--cluster",
            "-w",
            "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e["Status"]["version"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The cluster version (`etcdcluster`) `host`'s member reports at `/version`: on the client port
/// under etcd 3.4, on loopback port 2382 under 3.5 (whose client port hactl's unit leaves to gRPC
/// alone), so the port also shows which listener layout the member runs.
fn cluster_version(lab: &TestLab, host: &str, port: u16) -> String {
    let out = lab.curl_etcd(host, &format!("https://127.0.0.1:{port}/version"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v["etcdcluster"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_bookworm_cluster_upgrades_from_etcd_3_4_to_3_5_under_a_writer_through_the_vip() {
    let name = "a_bookworm_cluster_upgrades_from_etcd_3_4_to_3_5_under_a_writer_through_the_vip";
    if !lab_support::have_root(name) {
        return;
    }
    let bundle = match bundle() {
        Ok(dir) => dir,
        Err(e) => {
            println!("SKIPPED {name}: no etcd {TARGET} bundle from trixie's packages: {e}");
            return;
        }
    };
    let Some(lab) = TestLab::up(name, 3, 2, 0, "bookworm") else {
        return;
    };
    let inv = lab.inventory().to_path_buf();
    assert!(hactl(&inv, &["up", "--yes"]).status.success());
    assert_eq!(member_versions(&lab, "cp1"), ["3.4.23"; 3]);
    assert_eq!(cluster_version(&lab, "cp1", 2379), "3.4.0");

    // A bundle that is not the declared version is refused before anything changes.
    set_etcd(&inv, Some("3.5.17"), Some(&bundle));
    let o = hactl(&inv, &["up", "--yes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refused by rule U-binary"));
    assert_eq!(member_versions(&lab, "cp1"), ["3.4.23"; 3]);

    // The plan shows the roll: the binary check, then the members with the leader last.
    set_etcd(&inv, Some(TARGET), Some(&bundle));
    let o = hactl(&inv, &["plan"]);
    assert!(o.status.success());
    let plan = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        plan.contains(&format!(
            "== Roll etcd members to {TARGET}, one at a time (leader last)"
        )),
        "{plan}"
    );
    assert!(plan.contains(&format!("reports etcd {TARGET}")), "{plan}");
    assert_eq!(
        plan.matches("systemctl restart etcd.service").count(),
        3,
        "{plan}"
    );

    // A writer through VIP:2379 from lb1 would need etcdctl there; cp3's etcdctl speaks to the VIP.
    let lab = Arc::new(lab);
    let writer = VipWriter::start(lab.clone(), "cp3", "upgrade-writer");
    std::thread::sleep(Duration::from_secs(2));

    let started = Instant::now();
    let o = hactl(&inv, &["up", "--yes"]);
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let (w, f) = writer.stop();
    assert!(o.status.success(), "the upgrade failed");
    eprintln!(
        "etcd 3.4.23 -> {TARGET} on 3 members: hactl up took {:.1} s; writer through the VIP: {w} writes, {f} failed",
        took.as_secs_f64()
    );
    assert!(w > 10, "the writer barely ran: {w}");
    assert_eq!(f, 0, "writes through the VIP failed during the upgrade");

    assert_eq!(member_versions(&lab, "cp1"), [TARGET; 3]);
    assert!(
        eventually(Duration::from_secs(30), || cluster_version(&lab, "cp1", 2382)
            == "3.5.0"),
        "cluster version: {}",
        cluster_version(&lab, "cp1", 2382)
    );
    let o = hactl(&inv, &["plan"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "no changes");

    // Back to the package (3.4.23 still installed): a minor downgrade, refused, nothing restarted.
    set_etcd(&inv, None, None);
    let o = hactl(&inv, &["up", "--yes"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refused by rule U-downgrade"));
    assert_eq!(member_versions(&lab, "cp1"), [TARGET; 3]);
}
