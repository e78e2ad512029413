//! Kubernetes in the lab: the server binaries built on this machine from Debian's source package
//! (`scripts/kube-binaries.sh`, embedded here so an installed hactl needs no checkout), and the
//! `kubernetes` section a lab inventory gets.
//!
//! The cache is `<HACTL_KUBE_CACHE or /var/cache/hactl/kubernetes>/<version>/`; a complete one is
//! reused at once, a missing one is built with progress on stderr (about 6 minutes on two idle
//! cores), and one left half-built is rebuilt by the script.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{LabError, Result};

/// The build script, as in the repository.
pub const BUILD_SCRIPT: &str = include_str!("../../scripts/kube-binaries.sh");

/// The only server release whose source this machine's package archive carries.
pub const DEFAULT_VERSION: &str = "1.20.2";

/// The cache root (`HACTL_KUBE_CACHE` overrides it).
pub fn cache_root() -> PathBuf {
    std::env::var_os("HACTL_KUBE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/hactl/kubernetes"))
}

/// The cache directory of `version` (`1.20.2` → `<root>/v1.20.2`).
pub fn cache_dir(version: &str) -> PathBuf {
    cache_root().join(format!("v{}", version.trim_start_matches('v')))
}

/// Builds the binaries of `version` into the cache unless it is complete there; returns the
/// directory. Progress goes to this process's stderr.
pub fn ensure_binaries(version: &str) -> Result<PathBuf> {
    run_build_script(BUILD_SCRIPT, &cache_root(), version)
}

/// Writes `script` to `<root>/kube-binaries.sh` and runs it for `version` with a clean
/// environment (`crate::local_command`: none of hactl's build variables, such as `cargo run`'s
/// `OUT_DIR`, which Kubernetes' Makefile would honour) plus `HACTL_KUBE_CACHE=<root>`; returns
/// the directory it printed last.
fn run_build_script(script: &str, root: &Path, version: &str) -> Result<PathBuf> {
    fs_err::create_dir_all(root)?;
    let path = root.join("kube-binaries.sh");
    // Written each time: the embedded copy is the one this hactl was built with.
    fs_err::write(&path, script)?;
    let version = format!("v{}", version.trim_start_matches('v'));
    let command = format!("bash {} {version}", path.display());
    let out = crate::local_command::new("bash")
        .arg(&path)
        .arg(&version)
        .env("HACTL_KUBE_CACHE", root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| LabError::Spawn {
            command: command.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(LabError::Command {
            command,
            status: out.status.to_string(),
            stderr: "see the lines above (kube-binaries: …)".into(),
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or("").trim();
    if dir.is_empty() {
        return Err(LabError::Command {
            command,
            status: out.status.to_string(),
            stderr: "it printed no cache directory".into(),
        });
    }
    Ok(PathBuf::from(dir))
}

/// The `kubernetes` section of a lab inventory (under `spec`), binaries from `bundle_dir`.
pub fn inventory_section(version: &str, bundle_dir: &Path) -> String {
    format!(
        "  kubernetes:\n    version: {}\n    source: bundle\n    bundleDir: {}\n",
        version.trim_start_matches('v'),
        bundle_dir.display()
    )
}

/// Appends the `kubernetes` section to the lab inventory at `path` (written by `lab up`, whose
/// last mapping is `spec`), unless it has one.
pub fn add_to_inventory(path: &Path, version: &str, bundle_dir: &Path) -> Result<()> {
    let mut text = fs_err::read_to_string(path)?;
    if text.lines().any(|l| l.starts_with("  kubernetes:")) {
        return Ok(());
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&inventory_section(version, bundle_dir));
    fs_err::write(path, text)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::raw::RawInventory;

    #[test]
    fn the_section_parses_with_the_inventory_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.yaml");
        let base = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: t1\nspec:\n  hosts: []\n  etcd:\n    source: package\n";
        std::fs::write(&path, base).unwrap();
        add_to_inventory(&path, "v1.20.2", Path::new("/var/cache/hactl/kubernetes/v1.20.2")).unwrap();
        add_to_inventory(&path, "v1.20.2", Path::new("/elsewhere")).unwrap();
        let yaml = std::fs::read_to_string(&path).unwrap();
        assert_eq!(yaml.matches("kubernetes:").count(), 1, "{yaml}");
        let raw: RawInventory = serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let kube = raw.spec.kubernetes.unwrap();
        assert_eq!(kube.version.as_deref(), Some("1.20.2"));
        assert_eq!(cache_dir("v1.20.2").file_name().unwrap(), "v1.20.2");
    }

    /// The build step with hostile build variables in hactl's own environment (`cargo run`'s
    /// `OUT_DIR` and `CARGO_*`, `GOFLAGS`, `MAKEFLAGS`, …): this test runs itself again as a child
    /// process with them set, and there the real spawn code runs a small script in place of the
    /// build, which writes down the environment it got. None of them may reach it.
    #[test]
    fn the_build_script_sees_none_of_hactls_build_variables() {
        const NAME: &str = "lab::kubernetes::tests::the_build_script_sees_none_of_hactls_build_variables";
        const CHILD: &str = "HACTL_TEST_BUILD_SCRIPT_CACHE";
        const HOSTILE: &[(&str, &str)] = &[
            ("OUT_DIR", "/nonexistent/target/release/build/hactl-0/out"),
            ("CARGO_TARGET_DIR", "/nonexistent/target"),
            ("CARGO_PKG_NAME", "hactl"),
            ("CARGO_MANIFEST_DIR", "/nonexistent"),
            ("GOFLAGS", "-mod=mod"),
            ("GOPATH", "/nonexistent/go"),
            ("MAKEFLAGS", "-j99 OUT_DIR=/nonexistent"),
            ("LD_LIBRARY_PATH", "/nonexistent/target/release/deps"),
            ("RUSTFLAGS", "-Ctarget-cpu=native"),
            ("CC", "/nonexistent/cc"),
        ];
        if let Some(cache) = std::env::var_os(CHILD) {
            let script = "set -eu\nenv >\"$HACTL_KUBE_CACHE/seen-env\"\nmkdir -p \"$HACTL_KUBE_CACHE/$1\"\necho \"$HACTL_KUBE_CACHE/$1\"\n";
            let cache = PathBuf::from(cache);
            assert_eq!(
                run_build_script(script, &cache, "1.20.2").unwrap(),
                cache.join("v1.20.2")
            );
            return;
        }
        let cache = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .envs(HOSTILE.iter().copied())
            .env(CHILD, cache.path())
            .output()
            .unwrap();
        let said = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{said}");
        let seen = std::fs::read_to_string(cache.path().join("seen-env"))
            .unwrap_or_else(|e| panic!("the script did not run ({e}):\n{said}"));
        for (name, _) in HOSTILE {
            assert!(
                !seen.lines().any(|l| l.starts_with(&format!("{name}="))),
                "{name} reached the script:\n{seen}"
            );
        }
        // cargo sets CARGO_* for this very test process: none of them either.
        assert!(!seen.lines().any(|l| l.starts_with("CARGO")), "{seen}");
        assert!(seen.lines().any(|l| l == "LANG=C"), "{seen}");
        let cache_line = format!("HACTL_KUBE_CACHE={}", cache.path().display());
        assert!(seen.lines().any(|l| l == cache_line), "{seen}");
        assert!(seen.lines().any(|l| l.starts_with("PATH=")), "{seen}");
    }

    #[test]
    fn the_embedded_script_is_the_repository_one() {
        let on_disk =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kube-binaries.sh"))
                .unwrap();
        assert_eq!(BUILD_SCRIPT, on_disk);
    }
}
