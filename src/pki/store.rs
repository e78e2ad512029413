//! The PKI directory on the local disk.
//!
//! Invariants: every directory is 0700; a private key is never readable by anyone but its owner,
//! not even for a moment (the file is created with mode 0600, never chmod-ed down afterwards);
//! a file is replaced atomically (write a sibling, fsync, rename), so a crash leaves either the old
//! or the new content; a file whose content would not change is not touched at all.

use std::fs::{DirBuilder, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use fs_err::os::unix::fs::OpenOptionsExt;

/// Mode of every directory under the PKI directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of private key files.
pub const KEY_MODE: u32 = 0o600;
/// Mode of certificates and public keys.
pub const CERT_MODE: u32 = 0o644;

/// Creates `dir` (and its parents) with mode 0700, and tightens it to 0700 if it already existed
/// with looser permissions. Returns the old mode when it had to be tightened.
pub fn ensure_dir(dir: &Path) -> io::Result<Option<u32>> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| with_path(e, "failed to create directory", dir))?;
    tighten(dir, DIR_MODE)
}

/// Sets `path` to `mode` if its permissions allow more than `mode` does; returns the old mode then.
pub fn tighten(path: &Path, mode: u32) -> io::Result<Option<u32>> {
    let old = fs_err::metadata(path)?.permissions().mode() & 0o7777;
    if old & !mode == 0 {
        return Ok(None);
    }
    fs_err::set_permissions(path, Permissions::from_mode(mode))?;
    Ok(Some(old))
}

/// The file's content, or `None` when it does not exist.
pub fn read_if_exists(path: &Path) -> io::Result<Option<String>> {
    match crate::bounded::read_to_string(path, crate::bounded::TEXT) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `path` with `contents` atomically; the file is created with `mode` from the start.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    // A leftover from an interrupted run: its mode may be anything, so never reuse it.
    match fs_err::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs_err::rename(&tmp, path)?;
    Ok(())
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} `{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs_err::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn write_atomic_creates_the_file_with_the_given_mode_and_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.key");
        write_atomic(&path, b"one", KEY_MODE).unwrap();
        assert_eq!(mode(&path), 0o600);
        write_atomic(&path, b"two", KEY_MODE).unwrap();
        assert_eq!(fs_err::read_to_string(&path).unwrap(), "two");
        assert!(!dir.path().join("a.key.tmp").exists());
    }

    #[test]
    fn ensure_dir_tightens_a_loose_directory() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("pki");
        fs_err::create_dir(&sub).unwrap();
        fs_err::set_permissions(&sub, Permissions::from_mode(0o755)).unwrap();
        assert_eq!(ensure_dir(&sub).unwrap(), Some(0o755));
        assert_eq!(mode(&sub), 0o700);
        assert_eq!(ensure_dir(&sub).unwrap(), None);
    }
}
