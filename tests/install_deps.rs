//! `scripts/install-deps.sh` as a user who is not root (`nobody`, through runuser): it installs
//! nothing by itself and says exactly what to install. A package is made to look missing with a
//! `dpkg-query` placed first on PATH (the machine's packages are never changed); sudo is left out
//! by giving the script a PATH of links to the few tools it uses.
//!
//! Needs root (runuser) and runs nothing else as root.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install-deps.sh");

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn which(tool: &str) -> Option<PathBuf> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A directory `nobody` can read, holding links to `tools` and, when `missing` is set, a
/// `dpkg-query` that reports that package as not installed.
fn bin_dir(root: &Path, name: &str, tools: &[&str], missing: Option<&str>) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir(&dir).unwrap();
    for tool in tools {
        std::os::unix::fs::symlink(which(tool).unwrap(), dir.join(tool)).unwrap();
    }
    if let Some(pkg) = missing {
        let real = which("dpkg-query").unwrap();
        let shim = dir.join("dpkg-query");
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\nfor a; do last=$a; done\n[ \"$last\" = {pkg} ] && exit 1\nexec {} \"$@\"\n",
                real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs the script as `nobody` with `path` as its PATH (and bash from it), stdin closed.
fn as_nobody(path: &str) -> Output {
    Command::new("runuser")
        .args([
            "-u",
            "nobody",
            "--",
            "env",
            &format!("PATH={path}"),
            "bash",
            SCRIPT,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runuser")
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn install_deps_as_a_user_without_root_says_exactly_what_to_install() {
    if !is_root() {
        println!(
            "SKIPPED install_deps_as_a_user_without_root_says_exactly_what_to_install: needs root (runuser)"
        );
        return;
    }
    for tool in ["runuser", "dpkg-query", "apt-get"] {
        if which(tool).is_none() {
            println!("SKIPPED install_deps_as_a_user_without_root_says_exactly_what_to_install: this machine cannot run it: no {tool} (not Debian)");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let system = "/usr/sbin:/usr/bin:/sbin:/bin";

    // Everything present (CI installs it as root first): nothing to do, no sudo needed.
    let out = as_nobody(system);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "install-deps: all present\n"
    );

    // A package missing and no sudo: the exact command for root, nothing run.
    let tools = ["bash", "env", "id", "grep", "apt-get"];
    let no_sudo = bin_dir(tmp.path(), "no-sudo", &tools, Some("libprotobuf-dev"));
    let out = as_nobody(no_sudo.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "install-deps: missing libprotobuf-dev\n\
         install-deps: not root and no sudo; as root run: apt-get update && apt-get install -y libprotobuf-dev\n"
    );

    // A package missing, sudo there but refusing this user (no password on a closed stdin):
    // sudo's own words, then the same exact command.
    if which("sudo").is_some() {
        let shim = bin_dir(tmp.path(), "shim", &[], Some("libprotobuf-dev"));
        let out = as_nobody(&format!("{}:{system}", shim.display()));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("sudo: "), "{}", text(&out));
        assert!(
            stderr.ends_with(
                "install-deps: installing failed (sudo -E: see above); as root run: apt-get update && apt-get install -y libprotobuf-dev\n"
            ),
            "{}",
            text(&out)
        );
    } else {
        println!(
            "SKIPPED install_deps_as_a_user_without_root_says_exactly_what_to_install (sudo part): no sudo"
        );
    }

    // Not Debian (no dpkg-query, no apt-get): the packages to find equivalents of.
    let not_debian = bin_dir(tmp.path(), "not-debian", &["bash", "env", "id", "grep"], None);
    let out = as_nobody(not_debian.to_str().unwrap());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("install-deps: this is not a Debian-based machine (no dpkg/apt-get).\n"),
        "{}",
        text(&out)
    );
    assert!(
        stderr.contains("protobuf-compiler libprotobuf-dev gcc"),
        "{}",
        text(&out)
    );
}
