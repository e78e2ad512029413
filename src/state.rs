//! The state directory on the operator machine: CA keys, issued certificates, `known_hosts`, the
//! cluster lock's local half (`locks/`, see `operations::lock`).
//!
//! Invariant: nothing in it is ever readable by another user. The directory is 0700 and owned
//! by the current user (an existing one that is not is refused, never silently fixed), secrets
//! are created 0600 from their first byte and moved into place by rename, so a reader sees either
//! the old file or the whole new one.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use fs_err::os::unix::fs::OpenOptionsExt;

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Carries its path (the I/O is done with `fs_err`).
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("state directory {path} is not a directory: move it aside or set spec.stateDir")]
    NotADirectory { path: PathBuf },
    #[error(
        "state directory {path} has mode {mode:03o}, so other users can reach its keys: give \
         hactl a directory of its own (set spec.stateDir or --state-dir to a new path such as \
         {path}/hactl, which hactl creates 0700); change this directory's mode only if it holds \
         nothing but hactl's state"
    )]
    TooOpen { path: PathBuf, mode: u32 },
    #[error(
        "state directory {path} belongs to uid {owner}, not to you (uid {uid}): run hactl as its \
         owner, or set spec.stateDir to a directory of your own"
    )]
    NotOwned { path: PathBuf, owner: u32, uid: u32 },
    #[error("{rel} is not a relative path inside the state directory")]
    OutsideState { rel: PathBuf },
}

/// An opened (and checked) state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    /// Absolute when opened from an [`crate::inventory::Inventory`].
    pub path: PathBuf,
}

impl StateDir {
    /// Opens `path`, creating it (and its parents) with mode 0700 if missing. An existing
    /// directory must be owned by the current user and closed to group and others.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        if !path.exists() {
            create_private_dir(path)?;
        }
        check_dir(path)?;
        Ok(StateDir {
            path: path.to_path_buf(),
        })
    }

    /// [`StateDir::open`] of a directory that exists; `None` (nothing created) when it does not.
    pub fn open_existing(path: &Path) -> Result<Option<StateDir>, StateError> {
        if fs_err::symlink_metadata(path).is_err() {
            return Ok(None);
        }
        check_dir(path)?;
        Ok(Some(StateDir {
            path: path.to_path_buf(),
        }))
    }

    /// The state directory at `path` for a command that creates it only when it writes
    /// (`hactl adopt`, which may be refused before its first write): an existing directory is
    /// opened and checked as [`StateDir::open`] does; a missing one is not created here, but by
    /// the first write into it (0700, with its parents, as [`StateDir::open`] creates it).
    pub fn open_or_later(path: &Path) -> Result<StateDir, StateError> {
        Ok(StateDir::open_existing(path)?.unwrap_or_else(|| StateDir {
            path: path.to_path_buf(),
        }))
    }

    /// The same directory, for reading only.
    pub fn view(&self) -> StateView {
        StateView {
            path: self.path.clone(),
            exists: true,
        }
    }

    /// The path of `rel` inside the directory (nothing is created).
    pub fn file(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// `rel` as a directory, created 0700 (with its parents) if missing.
    pub fn subdir(&self, rel: impl AsRef<Path>) -> Result<PathBuf, StateError> {
        let rel = inside(rel.as_ref())?;
        let path = self.path.join(rel);
        if !path.is_dir() {
            create_private_dir(&path)?;
        }
        Ok(path)
    }

    /// Writes a secret (a private key, a token): mode 0600 from creation, then renamed over
    /// `rel`, so it is never readable by others, even for a moment, and never half-written.
    pub fn write_secret(&self, rel: impl AsRef<Path>, bytes: &[u8]) -> Result<PathBuf, StateError> {
        self.write_file(rel, bytes, 0o600)
    }

    /// Writes `rel` atomically (temporary file, then rename) with exactly `mode`. The temporary
    /// file is created with `mode & 0o600`, so nothing is readable by others before the final
    /// mode is set.
    pub fn write_file(&self, rel: impl AsRef<Path>, bytes: &[u8], mode: u32) -> Result<PathBuf, StateError> {
        let rel = inside(rel.as_ref())?;
        let path = self.path.join(rel);
        match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(parent) => {
                self.subdir(parent)?;
            }
            // A directory opened for later ([`StateDir::open_or_later`]) appears here.
            None if !self.path.is_dir() => create_private_dir(&self.path)?,
            None => {}
        }
        let name = path
            .file_name()
            .ok_or_else(|| StateError::OutsideState {
                rel: rel.to_path_buf(),
            })?
            .to_string_lossy()
            .into_owned();
        let temp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        if temp.exists() {
            // Left by a crashed run of this pid number; it was never the real file.
            fs_err::remove_file(&temp)?;
        }
        let mut file = fs_err::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode & 0o600)
            .open(&temp)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| fs_err::set_permissions(&temp, std::fs::Permissions::from_mode(mode)))
            .and_then(|()| fs_err::rename(&temp, &path));
        if let Err(err) = written {
            let _ = fs_err::remove_file(&temp);
            return Err(err.into());
        }
        Ok(path)
    }

    /// Where hactl records the SSH host keys it has seen (trust on first use).
    pub fn known_hosts_path(&self) -> PathBuf {
        self.file("known_hosts")
    }
}

/// An existing state directory must be a directory, owned by the current user and closed to
/// group and others.
fn check_dir(path: &Path) -> Result<(), StateError> {
    let meta = fs_err::metadata(path)?;
    if !meta.is_dir() {
        return Err(StateError::NotADirectory {
            path: path.to_path_buf(),
        });
    }
    let uid = current_uid()?;
    if meta.uid() != uid {
        return Err(StateError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StateError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// A state directory opened for reading only: what planning and reporting get (`plan`,
/// `status`, `check`, `certs check`, `kubeconfig`, every `--dry-run`). It has no method that
/// writes, and opening it creates nothing: a missing directory is a view of nothing (every
/// file reads as absent), so a read-only command never makes a state directory appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateView {
    pub path: PathBuf,
    exists: bool,
}

impl StateView {
    /// Opens `path` for reading. A missing directory is accepted (nothing is created); an
    /// existing one is checked as [`StateDir::open`] checks it.
    pub fn open(path: &Path) -> Result<StateView, StateError> {
        let exists = match fs_err::symlink_metadata(path) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e.into()),
        };
        if exists {
            check_dir(path)?;
        }
        Ok(StateView {
            path: path.to_path_buf(),
            exists,
        })
    }

    /// Whether the directory exists (a cluster hactl has state for on this machine).
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// The path of `rel` inside the directory.
    pub fn file(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// `rel`'s text, or `None` when it does not exist.
    pub fn read(&self, rel: impl AsRef<Path>) -> Result<Option<String>, StateError> {
        let rel = inside(rel.as_ref())?;
        match crate::bounded::read_to_string(self.path.join(rel), crate::bounded::TEXT) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The SSH host keys hactl recorded (read only: see [`StateDir::known_hosts_path`]).
    pub fn known_hosts_path(&self) -> PathBuf {
        self.file("known_hosts")
    }
}

/// `rel` must stay inside the state directory: relative, no `..`.
fn inside(rel: &Path) -> Result<&Path, StateError> {
    let ok = !rel.as_os_str().is_empty()
        && rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(rel)
    } else {
        Err(StateError::OutsideState {
            rel: rel.to_path_buf(),
        })
    }
}

/// `mkdir -p -m 0700`: every directory created is private from its creation.
fn create_private_dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("failed to create directory `{}`: {err}", path.display()),
            )
        })
}

/// The effective uid. `unsafe` is forbidden in this crate, so no `libc::geteuid`: on Linux,
/// `/proc/self` belongs to the effective uid; elsewhere, ask `id -u`.
fn current_uid() -> io::Result<u32> {
    if cfg!(target_os = "linux") {
        return Ok(fs_err::metadata("/proc/self")?.uid());
    }
    let out = crate::local_command::new("id").arg("-u").output()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| io::Error::other("`id -u` did not print a uid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs_err::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn open_creates_the_directory_and_its_parents_private() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".hactl/lab");
        let state = StateDir::open(&path).unwrap();
        assert_eq!(state.path, path);
        assert_eq!(mode(&path), 0o700);
        assert_eq!(mode(&tmp.path().join(".hactl")), 0o700);
        // Opening again is fine.
        StateDir::open(&path).unwrap();
    }

    #[test]
    fn open_refuses_a_directory_others_can_reach() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        fs_err::create_dir(&path).unwrap();
        fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
        let err = StateDir::open(&path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "state directory {p} has mode 750, so other users can reach its keys: give hactl \
                 a directory of its own (set spec.stateDir or --state-dir to a new path such as \
                 {p}/hactl, which hactl creates 0700); change this directory's mode only if it \
                 holds nothing but hactl's state",
                p = path.display()
            )
        );
        // A shared directory like /tmp (1777) is never told to become 0700.
        let tmpdir = tmp.path().join("tmp");
        fs_err::create_dir(&tmpdir).unwrap();
        fs_err::set_permissions(&tmpdir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let shared = StateDir::open(&tmpdir).unwrap_err().to_string();
        assert!(!shared.contains("chmod 700"), "{shared}");
        assert!(
            shared.contains(&format!("such as {}/hactl", tmpdir.display())),
            "{shared}"
        );
    }

    #[test]
    fn a_view_creates_nothing_and_checks_an_existing_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".hactl/lab");
        let view = StateView::open(&path).unwrap();
        assert!(!view.exists());
        assert_eq!(view.read("pki/etcd/ca.crt").unwrap(), None);
        assert!(!tmp.path().join(".hactl").exists(), "a view created a directory");
        let state = StateDir::open(&path).unwrap();
        state.write_file("hwm.json", b"{}", 0o600).unwrap();
        let view = StateView::open(&path).unwrap();
        assert!(view.exists());
        assert_eq!(view, state.view());
        assert_eq!(view.read("hwm.json").unwrap().as_deref(), Some("{}"));
        assert!(view.read("../x").is_err());
        fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(StateView::open(&path), Err(StateError::TooOpen { .. })));
    }

    #[test]
    fn a_directory_opened_for_later_is_created_private_by_its_first_write() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".hactl/lab");
        let state = StateDir::open_or_later(&path).unwrap();
        assert!(!tmp.path().join(".hactl").exists(), "opening created a directory");
        state.write_file("adopt", b"run\n", 0o600).unwrap();
        assert_eq!(mode(&path), 0o700);
        assert_eq!(mode(&tmp.path().join(".hactl")), 0o700);
        // An existing one is checked.
        fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            StateDir::open_or_later(&path),
            Err(StateError::TooOpen { .. })
        ));
    }

    #[test]
    fn open_refuses_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("state");
        fs_err::write(&path, "x").unwrap();
        assert!(matches!(
            StateDir::open(&path),
            Err(StateError::NotADirectory { .. })
        ));
    }

    #[test]
    fn open_refuses_a_directory_of_another_user() {
        let tmp = tempfile::tempdir().unwrap();
        let (path, owner) = if current_uid().unwrap() == 0 {
            // As root: a private directory handed to `nobody`.
            let path = tmp.path().join("state");
            fs_err::create_dir(&path).unwrap();
            fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            (path, 65534)
        } else {
            (PathBuf::from("/"), 0) // `/` belongs to root
        };
        match StateDir::open(&path) {
            Err(StateError::NotOwned { owner: o, .. }) => assert_eq!(o, owner),
            other => panic!("expected NotOwned, got {other:?}"),
        }
    }

    #[test]
    fn secrets_are_0600_and_replace_the_old_content() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let path = state.write_secret("pki/ca.key", b"one").unwrap();
        assert_eq!(path, state.file("pki/ca.key"));
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&state.file("pki")), 0o700);
        state.write_secret("pki/ca.key", b"two").unwrap();
        assert_eq!(fs_err::read(&path).unwrap(), b"two");
        // No temporary file left behind.
        let names: Vec<_> = fs_err::read_dir(state.file("pki"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ca.key")]);
    }

    #[test]
    fn files_get_exactly_their_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let path = state.write_file("pki/ca.crt", b"cert", 0o644).unwrap();
        assert_eq!(mode(&path), 0o644);
        assert_eq!(state.known_hosts_path(), state.path.join("known_hosts"));
    }

    #[test]
    fn paths_must_stay_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        for rel in ["../x", "/etc/passwd", "a/../../x", ""] {
            assert!(
                matches!(
                    state.write_secret(rel, b"x"),
                    Err(StateError::OutsideState { .. })
                ),
                "{rel}"
            );
        }
        assert!(state.subdir("../x").is_err());
    }
}
