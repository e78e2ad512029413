//! Bad Kubernetes bundles are refused before any host is contacted (exit 2), each with a message
//! naming the file and what was found: a missing binary, a file that is not executable, a binary
//! whose `--version` is not `kubernetes.version`, a directory left half-built by an interrupted
//! build. The inventory is `inventories/example.yaml`, whose hosts (10.0.0.0/24) this machine
//! cannot reach: a check that ran after connecting would fail with a connection error instead.
//!
//! The binaries are the real ones (`HACTL_KUBE_BIN_DIR`, or the cache built on first use as root).

#[path = "support/mod.rs"]
mod support;

use support::kube as kube_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const BINARIES: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];

/// `hactl up` on the example inventory with `version` and `bundleDir: dir`: (exit code, stderr).
fn up_with_bundle(work: &Path, version: &str, dir: &Path) -> (Option<i32>, String) {
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("inventories/example.yaml"))
            .unwrap();
    let yaml = example
        .replace("    version: 1.31.4 ", &format!("    version: {version} "))
        .replace(
            "    source: release\n",
            &format!("    source: bundle\n    bundleDir: {}\n", dir.display()),
        )
        .lines()
        .filter(|l| !l.starts_with("    releaseUrl:"))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    assert!(yaml.contains("    source: bundle\n"), "{yaml}");
    assert!(yaml.contains(&format!("    version: {version} ")), "{yaml}");
    let inv = work.join("inventory.yaml");
    std::fs::write(&inv, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["up", "--yes", "-i"])
        .arg(&inv)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!(
        "hactl up with bundle {} ({version}) -> {:?}\n{err}",
        dir.display(),
        out.status.code()
    );
    (out.status.code(), err)
}

/// A bundle directory of links to the real binaries.
fn linked(work: &Path, real: &Path, name: &str) -> std::path::PathBuf {
    let dir = work.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for b in BINARIES {
        std::os::unix::fs::symlink(real.join(b), dir.join(b)).unwrap();
    }
    dir
}

#[test]
fn bad_kubernetes_bundles_are_refused_before_any_host_is_contacted() {
    let name = "bad_kubernetes_bundles_are_refused_before_any_host_is_contacted";
    let Some(real) = kube_support::bin_dir(name) else {
        return;
    };
    let version = kube_support::version_of(&real).to_string();
    let work = tempfile::tempdir().unwrap();

    // A binary whose --version differs from kubernetes.version.
    let dir = linked(work.path(), &real, "other-version");
    let (code, err) = up_with_bundle(work.path(), "1.20.1", &dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} --version printed \"Kubernetes v{version}\", but kubernetes.version is 1.20.1",
            dir.join("kube-apiserver").display()
        )),
        "{err}"
    );

    // A bundle that lacks a binary.
    let dir = linked(work.path(), &real, "missing");
    std::fs::remove_file(dir.join("kube-scheduler")).unwrap();
    let (code, err) = up_with_bundle(work.path(), &version, &dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} does not exist",
            dir.join("kube-scheduler").display()
        )),
        "{err}"
    );

    // A file that is not executable.
    std::fs::write(dir.join("kube-scheduler"), "not a program\n").unwrap();
    std::fs::set_permissions(dir.join("kube-scheduler"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = up_with_bundle(work.path(), &version, &dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} is not executable (mode 644)",
            dir.join("kube-scheduler").display()
        )),
        "{err}"
    );

    // A cache directory an interrupted build left half-built.
    let dir = linked(work.path(), &real, "half-built");
    std::fs::write(dir.join(".building"), "").unwrap();
    let (code, err) = up_with_bundle(work.path(), &version, &dir);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("was left half-built by an interrupted build"),
        "{err}"
    );
    assert!(err.contains("hactl lab kube-binaries"), "{err}");

    // Control: the real directory passes the checks, and the run goes on to the hosts (which
    // cannot be reached from here).
    let (code, err) = up_with_bundle(work.path(), &version, &real);
    assert_ne!(code, Some(2), "the complete bundle was refused: {err}");
    assert!(!err.contains("bundle directory"), "{err}");
}
