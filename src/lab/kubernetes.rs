//! Kubernetes in the lab: the binaries built on this machine from Debian's source package
//! (`scripts/kube-binaries.sh`), the node images packed from them (`scripts/node-images.sh`),
//! both embedded here so an installed hactl needs no checkout, and the `kubernetes` section a lab
//! inventory gets.
//!
//! The binaries' cache is `<HACTL_KUBE_CACHE or /var/cache/hactl/kubernetes>/<version>/`, the
//! images' `<HACTL_IMAGE_CACHE or /var/cache/hactl/images>/<version>/`; a complete one is reused at
//! once, a missing one is built with progress on stderr (the binaries take about 8 minutes on two
//! idle cores, the images about a minute), and one left half-built is rebuilt by its script.
//!
//! Invariant: the scripts run with an environment made here (`PATH` and the `HACTL_*` settings
//! they read), nothing else inherited: a `CARGO_*`, `OUT_DIR` or `GOFLAGS` of the caller never
//! reaches them.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{LabError, Result};

/// The binaries' build script, as in the repository.
pub const BUILD_SCRIPT: &str = include_str!("../../scripts/kube-binaries.sh");

/// The images' build script, as in the repository.
pub const IMAGES_SCRIPT: &str = include_str!("../../scripts/node-images.sh");

/// The Debian mirror lookup the build script sources (`lib/debian-mirror.sh` beside it), as in
/// the repository; the base image asks it too (`image.rs`).
pub const DEBIAN_MIRROR_LIB: &str = include_str!("../../scripts/lib/debian-mirror.sh");

/// The only server release whose source this machine's package archive carries.
pub const DEFAULT_VERSION: &str = "1.20.2";

/// The binaries' cache root (`HACTL_KUBE_CACHE` overrides it).
pub fn cache_root() -> PathBuf {
    std::env::var_os("HACTL_KUBE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/hactl/kubernetes"))
}

/// The binaries' cache directory of `version` (`1.20.2` → `<root>/v1.20.2`).
pub fn cache_dir(version: &str) -> PathBuf {
    cache_root().join(format!("v{}", version.trim_start_matches('v')))
}

/// The images' cache root (`HACTL_IMAGE_CACHE` overrides it).
pub fn image_cache_root() -> PathBuf {
    std::env::var_os("HACTL_IMAGE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/hactl/images"))
}

/// Builds the binaries of `version` into the cache unless it is complete there; returns the
/// directory. Progress goes to this process's stderr.
pub fn ensure_binaries(version: &str) -> Result<PathBuf> {
    let root = cache_root();
    let root_text = root.to_string_lossy().into_owned();
    run_script(
        &root,
        "kube-binaries.sh",
        BUILD_SCRIPT,
        version,
        &[("HACTL_KUBE_CACHE", root_text.as_str())],
    )
}

/// Packs the node images of `version` (pause, busybox, the control plane) from the binaries in
/// `bin_dir` unless the image cache holds them already; returns the image directory, whose
/// `images.json` [`crate::images::ImageSet::load`] reads.
pub fn ensure_images(version: &str, bin_dir: &Path) -> Result<PathBuf> {
    let bin_dir = bin_dir.to_string_lossy();
    let root = image_cache_root();
    let root_text = root.to_string_lossy().into_owned();
    run_script(
        &root,
        "node-images.sh",
        IMAGES_SCRIPT,
        version,
        &[
            ("HACTL_KUBE_BIN_DIR", bin_dir.as_ref()),
            ("HACTL_IMAGE_CACHE", root_text.as_str()),
        ],
    )
}

/// Writes `script` to `<root>/<name>`, with the library it sources at `<root>/lib/` (the layout of
/// `scripts/`: an installed hactl has no checkout), and runs it for `version` with a clean
/// environment (`crate::local_command`: none of hactl's build variables, such as `cargo run`'s
/// `OUT_DIR`, which Kubernetes' Makefile would honour) plus `env`; returns the directory it prints
/// last.
fn run_script(root: &Path, name: &str, script: &str, version: &str, env: &[(&str, &str)]) -> Result<PathBuf> {
    fs_err::create_dir_all(root.join("lib"))?;
    write_fresh(&root.join("lib/debian-mirror.sh"), DEBIAN_MIRROR_LIB)?;
    let path = root.join(name);
    write_fresh(&path, script)?;
    let version = format!("v{}", version.trim_start_matches('v'));
    let command = format!("bash {} {version}", path.display());
    let mut cmd = crate::local_command::new("bash");
    cmd.arg(&path)
        .arg(&version)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = cmd.output().map_err(|source| LabError::Spawn {
        command: command.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(LabError::Command {
            command,
            status: out.status.to_string(),
            stderr: format!("see the lines above ({}: …)", name.trim_end_matches(".sh")),
        });
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or("").trim();
    if dir.is_empty() {
        return Err(LabError::Command {
            command,
            status: out.status.to_string(),
            stderr: "it printed no directory".into(),
        });
    }
    Ok(PathBuf::from(dir))
}

/// Writes `text` to `path` each time (the embedded copy is the one this hactl was built with),
/// through a new file renamed over the old: a bash still reading the old one keeps reading it.
fn write_fresh(path: &Path, text: &str) -> Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    fs_err::write(&tmp, text)?;
    fs_err::rename(&tmp, path)?;
    Ok(())
}

/// The `kubernetes` section of a lab inventory (under `spec`): binaries from `bundle_dir`, the
/// nodes' images from `images_dir` (no registry is reachable from a lab), and the cgroupfs
/// driver (the hosts' systemd cannot manage cgroup v1 controllers inside systemd-nspawn).
pub fn inventory_section(version: &str, bundle_dir: &Path, images_dir: &Path) -> String {
    format!(
        "  kubernetes:\n    version: {}\n    source: bundle\n    bundleDir: {}\n    images:\n      dir: {}\n    cgroupDriver: cgroupfs\n{}",
        version.trim_start_matches('v'),
        bundle_dir.display(),
        images_dir.display(),
        LAB_EVICTION_HARD
    )
}

/// The lab's kubelets evict only when the machine's disk is nearly full: the hosts share the
/// machine's filesystem, which other work fills, and the kubelet's defaults (10% free for the
/// node, 15% for images) would taint every lab Node with disk pressure on a busy machine.
const LAB_EVICTION_HARD: &str = "    evictionHard:\n      memory.available: 100Mi\n      nodefs.available: 2%\n      nodefs.inodesFree: 2%\n      imagefs.available: 2%\n";

/// Appends the `kubernetes` section to the lab inventory at `path` (written by `lab up`, whose
/// last mapping is `spec`), unless it has one; the node images are packed from `bundle_dir`
/// first when the image cache lacks them ([`ensure_images`]).
pub fn add_to_inventory(path: &Path, version: &str, bundle_dir: &Path) -> Result<()> {
    let mut text = fs_err::read_to_string(path)?;
    if text.lines().any(|l| l.starts_with("  kubernetes:")) {
        return Ok(());
    }
    let images = ensure_images(version, bundle_dir)?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&inventory_section(version, bundle_dir, &images));
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
        let mut yaml = base.to_string();
        yaml.push_str(&inventory_section(
            "v1.20.2",
            Path::new("/var/cache/hactl/kubernetes/v1.20.2"),
            Path::new("/var/cache/hactl/images/v1.20.2"),
        ));
        std::fs::write(&path, &yaml).unwrap();
        // A second call finds the section and changes nothing (it would build nothing either).
        add_to_inventory(&path, "v1.20.2", Path::new("/elsewhere")).unwrap();
        let yaml = std::fs::read_to_string(&path).unwrap();
        assert_eq!(yaml.matches("kubernetes:").count(), 1, "{yaml}");
        let raw: RawInventory = serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let kube = raw.spec.kubernetes.unwrap();
        assert_eq!(kube.version.as_deref(), Some("1.20.2"));
        assert_eq!(
            kube.images.unwrap().dir.as_deref(),
            Some(Path::new("/var/cache/hactl/images/v1.20.2"))
        );
        assert_eq!(kube.cgroup_driver.as_deref(), Some("cgroupfs"));
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
                run_script(
                    &cache,
                    "kube-binaries.sh",
                    script,
                    "1.20.2",
                    &[("HACTL_KUBE_CACHE", cache.to_str().unwrap())]
                )
                .unwrap(),
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
    fn the_embedded_scripts_are_the_repository_ones() {
        for (file, embedded) in [
            ("kube-binaries.sh", BUILD_SCRIPT),
            ("node-images.sh", IMAGES_SCRIPT),
            ("lib/debian-mirror.sh", DEBIAN_MIRROR_LIB),
        ] {
            let on_disk =
                std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(file))
                    .unwrap();
            assert_eq!(embedded, on_disk, "{file}");
        }
    }

    #[test]
    fn a_script_runs_with_a_clean_environment_and_its_last_line_is_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let script =
            "echo \"progress\" >&2\nenv | sort >\"$HACTL_KUBE_BIN_DIR/env\"\necho \"$1\"\necho /the/dir\n";
        let bin_dir = dir.path().to_string_lossy().into_owned();
        let got = run_script(
            dir.path(),
            "t.sh",
            script,
            "1.20.2",
            &[("HACTL_KUBE_BIN_DIR", &bin_dir)],
        )
        .unwrap();
        assert_eq!(got, Path::new("/the/dir"));
        let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
        // Cargo sets CARGO_* (and the build OUT_DIR) for tests; none reaches the script.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(!env.contains("CARGO"), "{env}");
        assert!(!env.contains("OUT_DIR"), "{env}");
        assert!(
            env.lines().any(|l| l == format!("HACTL_KUBE_BIN_DIR={bin_dir}")),
            "{env}"
        );
        let failing = run_script(dir.path(), "f.sh", "exit 3\n", "1.20.2", &[]).unwrap_err();
        assert!(failing.to_string().contains("exit status: 3"), "{failing}");
    }

    /// The build script sources `lib/debian-mirror.sh` beside itself, as in the repository: the
    /// embedded copy finds it there too.
    #[test]
    fn the_mirror_library_is_written_beside_the_script() {
        let dir = tempfile::tempdir().unwrap();
        let script = ". \"$(dirname \"${BASH_SOURCE[0]}\")/lib/debian-mirror.sh\"\n\
                      debian_mirror >\"$(dirname \"${BASH_SOURCE[0]}\")/mirror\"\necho /done\n";
        let got = run_script(
            dir.path(),
            "m.sh",
            script,
            "1.20.2",
            &[("HACTL_DEBIAN_MIRROR", "http://mirror.invalid/debian")],
        )
        .unwrap();
        assert_eq!(got, Path::new("/done"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("mirror")).unwrap(),
            "http://mirror.invalid/debian\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("lib/debian-mirror.sh")).unwrap(),
            DEBIAN_MIRROR_LIB
        );
    }
}
