//! Kubernetes in the lab: the server binaries built on this machine from Debian's source package
//! (`scripts/kube-binaries.sh`, embedded here so an installed hactl needs no checkout), and the
//! `kubernetes` section a lab inventory gets.
//!
//! The cache is `<HACTL_KUBE_CACHE or /var/cache/hactl/kubernetes>/<version>/`; a complete one is
//! reused at once, a missing one is built with progress on stderr (about 6 minutes on two idle
//! cores), and one left half-built is rebuilt by the script.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
    let root = cache_root();
    fs_err::create_dir_all(&root)?;
    let script = root.join("kube-binaries.sh");
    // Written each time: the embedded copy is the one this hactl was built with.
    fs_err::write(&script, BUILD_SCRIPT)?;
    let command = format!("bash {} v{}", script.display(), version.trim_start_matches('v'));
    let out = Command::new("bash")
        .arg(&script)
        .arg(format!("v{}", version.trim_start_matches('v')))
        .env("HACTL_KUBE_CACHE", &root)
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

    #[test]
    fn the_embedded_script_is_the_repository_one() {
        let on_disk =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kube-binaries.sh"))
                .unwrap();
        assert_eq!(BUILD_SCRIPT, on_disk);
    }
}
