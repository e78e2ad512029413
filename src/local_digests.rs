//! The sha256 of large files on the operator machine (the Kubernetes and etcd binaries of a
//! bundle, image archives) and what each binary's `--version` printed, kept in the state
//! directory so that a run that changes nothing does not read hundreds of MiB again, nor start
//! every binary once more.
//!
//! The host side keeps its own records beside the files hactl placed ([`crate::digest_cache`]);
//! this is the operator side of the same idea. A record holds the file's identity as `stat`
//! gives it: device, inode, size, modification time and change time (ctime, in nanoseconds).
//! Any write, rename over, truncation, `chmod` or `chown` sets the ctime to the current time,
//! which no program can set back, so a file changed by anyone after it was hashed is hashed
//! again (and its `--version` run again). A record is taken only when the file was the same
//! before and after it was hashed. A missing, unreadable or stale record file is no error:
//! the records only ever save work. Uploads of a file check its sha256 again while they
//! stream it ([`crate::plan::Content::File`]), so a file changed after planning is refused.
//!
//! Invariant: a read-only run (`plan`, dry runs) reads the records and never writes them
//! ([`LocalDigests::read_only`]); `save` writes only what changed, atomically.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The records' file, in the state directory's `downloads/`.
pub const FILE: &str = "digests.json";

/// One file's identity and what is known of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Record {
    /// `dev:ino:size:mtime_ns:ctime_ns`.
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    /// The first line `--version` printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
}

/// The records of one run: loaded once, shared by every reader, saved once at the end.
#[derive(Debug)]
pub struct LocalDigests {
    /// Where they are saved; `None`: never (read-only runs, tests).
    file: Option<PathBuf>,
    records: Mutex<BTreeMap<PathBuf, Record>>,
    changed: AtomicBool,
}

/// A file's size and sha256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub size: u64,
    pub sha256: String,
}

fn identity(meta: &std::fs::Metadata) -> String {
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    format!(
        "{}:{}:{}:{}:{}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec())
    )
}

fn load(file: &Path) -> BTreeMap<PathBuf, Record> {
    let Ok(text) = crate::bounded::read_to_string(file, crate::bounded::TEXT) else {
        return BTreeMap::new();
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        tracing::debug!("{}: not used ({e}); the files are hashed again", file.display());
        BTreeMap::new()
    })
}

impl LocalDigests {
    /// The records of `file` (none when it is missing or unreadable), saved back by [`Self::save`].
    pub fn open(file: impl Into<PathBuf>) -> Self {
        let file = file.into();
        LocalDigests {
            records: Mutex::new(load(&file)),
            file: Some(file),
            changed: AtomicBool::new(false),
        }
    }

    /// The records of `file`, never written.
    pub fn read_only(file: &Path) -> Self {
        LocalDigests {
            records: Mutex::new(load(file)),
            file: None,
            changed: AtomicBool::new(false),
        }
    }

    /// No records: every file is hashed (tests, one-off reads).
    pub fn none() -> Self {
        LocalDigests {
            records: Mutex::new(BTreeMap::new()),
            file: None,
            changed: AtomicBool::new(false),
        }
    }

    fn record(&self, path: &Path, key: &str) -> Option<Record> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.get(path).filter(|r| r.key == key).cloned()
    }

    fn update(&self, path: &Path, key: String, change: impl FnOnce(&mut Record)) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let record = records.entry(path.to_path_buf()).or_insert_with(|| Record {
            key: key.clone(),
            sha256: None,
            version: None,
        });
        if record.key != key {
            *record = Record {
                key,
                sha256: None,
                version: None,
            };
        }
        let before = record.clone();
        change(record);
        if *record != before {
            self.changed.store(true, Ordering::Relaxed);
        }
    }

    /// `path`'s size and sha256: from its record while the file is as it was hashed, else
    /// read and hashed (and recorded when the file did not change meanwhile).
    pub fn sha256(&self, path: &Path) -> std::io::Result<FileDigest> {
        let before = fs_err::metadata(path)?;
        let key = identity(&before);
        if let Some(sha256) = self.record(path, &key).and_then(|r| r.sha256) {
            return Ok(FileDigest {
                size: before.len(),
                sha256,
            });
        }
        let mut file = fs_err::File::open(path)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        let sha256 = hex::encode(hasher.finalize());
        if identity(&fs_err::metadata(path)?) == key && size == before.len() {
            self.update(path, key, |r| r.sha256 = Some(sha256.clone()));
        }
        Ok(FileDigest { size, sha256 })
    }

    /// `path` as a [`crate::plan::Blob`]: its content stays in the file.
    pub fn blob(&self, path: &Path) -> std::io::Result<crate::plan::Blob> {
        let d = self.sha256(path)?;
        Ok(crate::plan::Blob::file(path, d.size, d.sha256))
    }

    /// What `run(path)` gives (a binary's `--version` line): from the record while the file is
    /// unchanged, else run and recorded. A failure is not recorded.
    pub fn version(
        &self,
        path: &Path,
        run: impl FnOnce(&Path) -> Result<String, String>,
    ) -> Result<String, String> {
        let key = fs_err::metadata(path)
            .map(|m| identity(&m))
            .map_err(|e| e.to_string())?;
        if let Some(version) = self.record(path, &key).and_then(|r| r.version) {
            return Ok(version);
        }
        let version = run(path)?;
        if fs_err::metadata(path).is_ok_and(|m| identity(&m) == key) {
            self.update(path, key, |r| r.version = Some(version.clone()));
        }
        Ok(version)
    }

    /// Writes the records when anything changed and they have a file (atomically: a temporary
    /// file beside it, then a rename). The caller decides whether a failure matters; it never
    /// should: the records only save work.
    pub fn save(&self) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if !self.changed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let text = {
            let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
            serde_json::to_string_pretty(&*records).map_err(std::io::Error::other)?
        };
        if let Some(dir) = file.parent() {
            fs_err::create_dir_all(dir)?;
        }
        let tmp = file.with_extension("json.tmp");
        fs_err::write(&tmp, text)?;
        fs_err::rename(&tmp, file)?;
        self.changed.store(false, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// A record is taken while the file is as hashed, and given up when anything touches it:
    /// shown by planting a record whose digest is not the content's.
    #[test]
    fn a_record_is_used_only_while_the_file_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet");
        std::fs::write(&path, b"one").unwrap();
        let digests = LocalDigests::none();
        assert_eq!(digests.sha256(&path).unwrap().sha256, sha(b"one"));
        // Plant a wrong digest under the file's current identity: it is what comes back.
        let key = identity(&std::fs::metadata(&path).unwrap());
        digests.update(&path, key, |r| r.sha256 = Some("planted".into()));
        assert_eq!(digests.sha256(&path).unwrap().sha256, "planted");
        // A rewrite of the same size, and a chmod, both change the ctime.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"two").unwrap();
        assert_eq!(digests.sha256(&path).unwrap().sha256, sha(b"two"));
        let key = identity(&std::fs::metadata(&path).unwrap());
        digests.update(&path, key, |r| r.sha256 = Some("planted".into()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(digests.sha256(&path).unwrap().sha256, sha(b"two"));
    }

    #[test]
    fn versions_are_run_once_per_identity_and_failures_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kube-apiserver");
        std::fs::write(&path, b"binary").unwrap();
        let digests = LocalDigests::none();
        let runs = Cell::new(0);
        let run = |_: &Path| {
            runs.set(runs.get() + 1);
            Ok("Kubernetes v1.20.2".to_string())
        };
        assert_eq!(digests.version(&path, run).unwrap(), "Kubernetes v1.20.2");
        assert_eq!(digests.version(&path, run).unwrap(), "Kubernetes v1.20.2");
        assert_eq!(runs.get(), 1);
        assert!(
            digests
                .version(&dir.path().join("other"), |_| Ok("x".into()))
                .is_err(),
            "a missing file is an error, not a run"
        );
        let failing = dir.path().join("kube-proxy");
        std::fs::write(&failing, b"binary").unwrap();
        assert!(digests
            .version(&failing, |_| Err("exec format error".into()))
            .is_err());
        assert_eq!(digests.version(&failing, |_| Ok("v".into())).unwrap(), "v");
        // A changed file is run again; its sha256 is read again too.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"binary2").unwrap();
        assert_eq!(digests.version(&path, run).unwrap(), "Kubernetes v1.20.2");
        assert_eq!(runs.get(), 2);
    }

    /// Saved records are read back by the next run; a read-only run never writes; a damaged
    /// file only costs a hash.
    #[test]
    fn records_survive_a_save_and_read_only_runs_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd");
        std::fs::write(&path, b"etcd").unwrap();
        let file = dir.path().join("state/downloads").join(FILE);

        let ro = LocalDigests::read_only(&file);
        ro.sha256(&path).unwrap();
        ro.save().unwrap();
        assert!(!file.exists(), "a read-only run wrote {}", file.display());

        let rw = LocalDigests::open(&file);
        rw.save().unwrap();
        assert!(!file.exists(), "nothing changed, nothing written");
        let key = identity(&std::fs::metadata(&path).unwrap());
        rw.sha256(&path).unwrap();
        rw.update(&path, key, |r| r.sha256 = Some("planted".into()));
        rw.save().unwrap();
        assert_eq!(
            LocalDigests::read_only(&file).sha256(&path).unwrap().sha256,
            "planted"
        );

        std::fs::write(&file, "{not json").unwrap();
        assert_eq!(
            LocalDigests::open(&file).sha256(&path).unwrap().sha256,
            sha(b"etcd")
        );
    }
}
