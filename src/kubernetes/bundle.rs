//! Checks of a `kubernetes.source: bundle` directory on the operator machine, before anything is
//! planned or uploaded: every binary is there, executable, and says the inventory's version; and
//! the directory is not one an interrupted `scripts/kube-binaries.sh` left half-built.
//!
//! Invariant: read-only (it runs each binary's `--version`, once per change of the file:
//! [`crate::local_digests`]); every refusal names the file, what was found and what to do.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use semver::Version;

use super::skew;
#[cfg(test)]
use super::WANTED_BINARIES;

/// The marker `scripts/kube-binaries.sh` keeps in its cache directory while it builds.
pub const BUILDING_MARKER: &str = ".building";

/// The command that builds (or rebuilds) the binaries into the cache.
pub const BUILD_COMMAND: &str = "hactl lab kube-binaries (or scripts/kube-binaries.sh)";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    #[error("bundle directory {} was left half-built by an interrupted build ({} is present): nothing was changed; rebuild it with `{BUILD_COMMAND}`, or point kubernetes.bundleDir at a complete directory", dir.display(), dir.join(BUILDING_MARKER).display())]
    HalfBuilt { dir: PathBuf },
    #[error("bundle directory {} holds no {name} ({} does not exist): nothing was changed; put the {name} binary there (`{BUILD_COMMAND}` builds them all)", dir.display(), dir.join(name).display())]
    Missing { dir: PathBuf, name: String },
    #[error("{} is not executable (mode {mode:o}): nothing was changed; run `chmod 0755 {}`", path.display(), path.display())]
    NotExecutable { path: PathBuf, mode: u32 },
    #[error("{} --version printed {found:?}, but kubernetes.version is {want}: nothing was changed; set kubernetes.version to the binaries' version, or put {want} binaries in {}", path.display(), dir.display())]
    WrongVersion {
        path: PathBuf,
        dir: PathBuf,
        found: String,
        want: Version,
    },
    #[error("cannot run {} --version: {message}: nothing was changed; is it a Linux binary for this machine?", path.display())]
    Unrunnable { path: PathBuf, message: String },
}

/// Every problem of the bundle in `dir` for Kubernetes `want` (empty: usable). A half-built
/// directory is reported alone: its files say nothing.
/// Each binary's `--version` line comes from `digests` while the file is unchanged.
pub fn check(
    dir: &Path,
    want: &Version,
    mode: crate::inventory::KubernetesMode,
    digests: &crate::local_digests::LocalDigests,
) -> Vec<BundleError> {
    if dir.join(BUILDING_MARKER).exists() {
        return vec![BundleError::HalfBuilt {
            dir: dir.to_path_buf(),
        }];
    }
    let mut problems = Vec::new();
    for name in super::wanted_binaries(mode) {
        let path = dir.join(name);
        let Ok(meta) = std::fs::metadata(&path) else {
            problems.push(BundleError::Missing {
                dir: dir.to_path_buf(),
                name: name.to_string(),
            });
            continue;
        };
        let mode = meta.permissions().mode() & 0o7777;
        if !meta.is_file() || mode & 0o111 == 0 {
            problems.push(BundleError::NotExecutable { path, mode });
            continue;
        }
        match digests.version(&path, version_of) {
            Ok(found) => {
                if skew::parse_kubernetes_version(&found).as_ref() != Some(want) {
                    problems.push(BundleError::WrongVersion {
                        path,
                        dir: dir.to_path_buf(),
                        found,
                        want: want.clone(),
                    });
                }
            }
            Err(message) => problems.push(BundleError::Unrunnable { path, message }),
        }
    }
    problems
}

/// What `path --version` prints (first line, trimmed), within 20 s.
pub fn version_of(path: &Path) -> Result<String, String> {
    let mut child = crate::local_command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(_) => break,
            None if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("it did not exit within 20 s".into());
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEMD: crate::inventory::KubernetesMode = crate::inventory::KubernetesMode::Systemd;

    /// A directory with the three names as shell scripts printing `line` (they are not Kubernetes:
    /// only the checks' reading of files and `--version` is under test here; the lab tests use the
    /// real binaries).
    fn bundle(line: &str, mode: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in WANTED_BINARIES.iter().chain(&super::super::NODE_BINARIES) {
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\necho '{line}'\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    }

    #[test]
    fn a_complete_bundle_of_the_right_version_passes() {
        let dir = bundle("Kubernetes v1.20.2", 0o755);
        assert_eq!(
            check(
                dir.path(),
                &Version::new(1, 20, 2),
                SYSTEMD,
                &crate::local_digests::LocalDigests::none()
            ),
            []
        );
    }

    #[test]
    fn each_bad_input_is_named() {
        let want = Version::new(1, 20, 2);
        let dir = bundle("Kubernetes v1.20.1", 0o755);
        let got = check(
            dir.path(),
            &want,
            SYSTEMD,
            &crate::local_digests::LocalDigests::none(),
        );
        assert_eq!(got.len(), 5);
        let text = got.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
        assert!(
            text.contains(
                "kube-apiserver --version printed \"Kubernetes v1.20.1\", but kubernetes.version is 1.20.2"
            ),
            "{text}"
        );

        let dir = bundle("Kubernetes v1.20.2", 0o644);
        let got = check(
            dir.path(),
            &want,
            SYSTEMD,
            &crate::local_digests::LocalDigests::none(),
        );
        assert!(
            matches!(&got[0], BundleError::NotExecutable { mode: 0o644, .. }),
            "{got:?}"
        );
        assert!(got[0].to_string().contains("chmod 0755"), "{}", got[0]);

        let dir = bundle("Kubernetes v1.20.2", 0o755);
        std::fs::remove_file(dir.path().join("kube-scheduler")).unwrap();
        let got = check(
            dir.path(),
            &want,
            SYSTEMD,
            &crate::local_digests::LocalDigests::none(),
        );
        assert_eq!(
            got,
            [BundleError::Missing {
                dir: dir.path().to_path_buf(),
                name: "kube-scheduler".into()
            }]
        );

        std::fs::write(dir.path().join(BUILDING_MARKER), "").unwrap();
        let got = check(
            dir.path(),
            &want,
            SYSTEMD,
            &crate::local_digests::LocalDigests::none(),
        );
        assert_eq!(got.len(), 1, "half-built is reported alone: {got:?}");
        assert!(
            got[0]
                .to_string()
                .contains("left half-built by an interrupted build"),
            "{}",
            got[0]
        );
    }
}
