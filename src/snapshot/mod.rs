//! etcd snapshots on the operator machine, in one place: taking one from the leader through an
//! SSH tunnel and checking one on a host (`stream.rs`), reading a snapshot's bbolt file
//! ([`bolt`]), checking a file (size rule, the sha256 etcd appends), its sidecar JSON, and the
//! encrypted bundle of key material a restore onto fresh hosts needs (here).
//!
//! Invariants: a snapshot file appears under its final name only whole and fsynced (`.part`,
//! then rename); `snapshot status` runs on a copy on a host, never on the file itself (old tools
//! altered it); key material goes into the bundle only encrypted (age, X25519) and is never
//! written in the clear or logged.

pub mod bolt;
mod stream;

pub use stream::{
    preview, record_hwm_on_hosts, refuse_bad_hash, sidecar_path, take, upload_helper, verify_on, Preview,
    Saved, Verified, CANARY_KEY,
};

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::plan::{RemoteCommand, Upload};
use crate::state::StateDir;

/// The helper script on hosts (rendered from `templates/hactl-etcd-snapshot.tera`).
pub const HELPER: &str = "/usr/local/sbin/hactl-etcd-snapshot";
/// Scratch space on hosts for checks and trial restores (fixed paths, one per run or file).
pub const HOST_SCRATCH: &str = "/var/lib/hactl/scratch";
/// The age identity that opens bundles, in the state directory.
pub const IDENTITY_FILE: &str = "backup-identity.txt";

/// What a snapshot file's own bytes say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCheck {
    pub size: u64,
    /// sha256 of the whole file, hex.
    pub sha256: String,
    pub hash: HashState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HashState {
    /// `size % 512 == 32` and the last 32 bytes are the sha256 of the rest.
    Ok,
    /// `size % 512 == 32` but the appended sha256 does not match: corrupt.
    Mismatch,
    /// No appended hash: a raw copy of `member/snap/db` (restorable only with --skip-hash-check).
    Missing,
}

/// Hashes `path` and checks etcd's integrity rule (`hasChecksum`: size % 512 == 32).
pub fn check_file(path: &Path) -> std::io::Result<FileCheck> {
    let mut f = fs_err::File::open(path)?;
    let size = f.metadata()?.len();
    let with_hash = size >= 32 && size % 512 == 32;
    let body_len = if with_hash { size - 32 } else { size };
    let mut whole = Sha256::new();
    let mut body = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut read = 0u64;
    let mut tail = Vec::with_capacity(32);
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        whole.update(chunk);
        let start = read;
        read += n as u64;
        if start < body_len {
            let end = (body_len - start).min(n as u64) as usize;
            body.update(&chunk[..end]);
            tail.extend_from_slice(&chunk[end..]);
        } else {
            tail.extend_from_slice(chunk);
        }
    }
    let hash = if !with_hash {
        HashState::Missing
    } else if body.finalize().as_slice() == tail.as_slice() {
        HashState::Ok
    } else {
        HashState::Mismatch
    };
    Ok(FileCheck {
        size,
        sha256: hex::encode(whole.finalize()),
        hash,
    })
}

/// `snapshot status -w json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// crc32 over the buckets (not the appended sha256).
    pub hash: u64,
    pub revision: i64,
    pub total_key: u64,
    pub total_size: u64,
}

/// One member as the sidecar records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SidecarMember {
    pub name: String,
    /// Hex.
    pub id: String,
    pub peer_urls: Vec<String>,
}

/// `<snapshot>.json`: what a restore needs to know about a snapshot without opening it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    pub file: String,
    pub sha256: String,
    pub size: u64,
    pub cluster: String,
    /// Hex.
    pub cluster_id: String,
    /// The member it was taken from (the leader).
    pub taken_from: String,
    pub members: Vec<SidecarMember>,
    pub etcd_version: String,
    /// Revision from `snapshot status`.
    pub revision: i64,
    pub total_key: u64,
    /// The cluster's revision read just before the save (the snapshot's is at least this).
    pub revision_before: i64,
    /// The high-water mark when it was taken.
    pub hwm: Option<crate::hwm::Hwm>,
    /// RFC 3339, UTC.
    pub time: String,
    /// The encrypted bundle beside it, if one was written.
    #[serde(default)]
    pub bundle: Option<String>,
}

/// `<cluster>-<UTC timestamp>` (the `.db` file's stem).
pub fn file_stem(cluster: &str, now: time::OffsetDateTime) -> String {
    let stamp = now
        .format(time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_default();
    format!("{cluster}-{stamp}")
}

/// Writes `bytes` to `path` through `<path>.part`, fsynced, then renamed (0600).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let part = part_path(path);
    let mut f = create_private(&part)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs_err::rename(&part, path)?;
    sync_parent(path);
    Ok(())
}

/// `<path>.part`.
pub fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".part");
    PathBuf::from(s)
}

/// Creates a new 0600 file exclusively (`O_CREAT|O_EXCL`): a symlink planted at `path` (to make
/// hactl write a snapshot through it, or truncate what it points to) is refused, never followed,
/// and nothing that exists is truncated. With `O_CREAT|O_EXCL` a symlink in the last component
/// counts as existing, dangling or not (POSIX `open`), so `O_NOFOLLOW` would add nothing (and
/// needs the `libc` crate for its value). A leftover regular file (the `.part` of
/// a crashed run) is removed first; removing a name never follows a link either.
pub fn create_private(path: &Path) -> std::io::Result<fs_err::File> {
    use fs_err::os::unix::fs::OpenOptionsExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_file() {
            fs_err::remove_file(path)?;
        }
    }
    fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// fsyncs the directory holding `path`, so the rename survives a power cut.
pub fn sync_parent(path: &Path) {
    if let Some(dir) = path.parent() {
        if let Ok(d) = fs_err::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// The helper script as an upload.
pub fn helper_upload() -> Result<Upload, crate::render::RenderError> {
    let text = crate::render::render("hactl-etcd-snapshot", &serde_json::json!({}))?;
    Ok(Upload::new(HELPER, 0o755, "root", "root", text.into_bytes()))
}

/// Read-only: `{"tool":..,"bump":..,"version":..}` of a host.
pub fn tool_command() -> RemoteCommand {
    RemoteCommand::read_only([HELPER, "tool"])
}

/// Read-only: the size rule and appended hash of a file on a host.
pub fn check_command(path: &str) -> RemoteCommand {
    RemoteCommand::read_only([HELPER, "check", path])
}

/// `snapshot status` on a copy of a file on a host.
pub fn status_command(path: &str) -> RemoteCommand {
    RemoteCommand::new([HELPER, "status", path])
}

/// Everything a restore is given. Every field is always passed: no restore ever falls back to
/// etcd's defaults (member `default` at `http://localhost:2380`, the cluster ID of field reports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreArgs {
    pub snapshot: String,
    pub name: String,
    pub peer_url: String,
    /// `name=peer_url,…`
    pub initial_cluster: String,
    pub token: String,
    /// Absolute; must not exist.
    pub data_dir: String,
    /// 0 = no bump (a tool without `--bump-revision`).
    pub bump: u64,
    pub skip_hash_check: bool,
}

/// The restore command; prints `{"cluster_id":"<hex>"}` parsed from the restore log.
pub fn restore_command(a: &RestoreArgs) -> RemoteCommand {
    RemoteCommand::new([
        HELPER.to_string(),
        "restore".into(),
        a.snapshot.clone(),
        a.name.clone(),
        a.peer_url.clone(),
        a.initial_cluster.clone(),
        a.token.clone(),
        a.data_dir.clone(),
        a.bump.to_string(),
        if a.skip_hash_check { "yes" } else { "no" }.into(),
    ])
    .with_timeout(std::time::Duration::from_secs(600))
}

// ---- the encrypted bundle ---------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("{path} is not an age identity")]
    BadIdentity { path: PathBuf },
    #[error("failed to encrypt the bundle")]
    Encrypt(#[source] age::EncryptError),
    #[error("failed to decrypt {path}: it was not encrypted to this state directory's identity")]
    Decrypt {
        path: PathBuf,
        #[source]
        source: age::DecryptError,
    },
}

/// The state directory's age identity (X25519), created 0600 on first use. Returns it with its
/// public recipient string.
///
/// Why an identity and not a passphrase: scheduled and scripted backups must run without anyone
/// typing; the identity never appears on a command line or in the environment; and the bundle
/// can travel with the snapshot to off-site storage while the identity is kept apart (copy it
/// somewhere safe: without it the bundle cannot be opened).
pub fn identity(state: &StateDir) -> Result<(age::x25519::Identity, String), BundleError> {
    use age::secrecy::ExposeSecret;
    let path = state.file(IDENTITY_FILE);
    let id = if path.exists() {
        let text = crate::bounded::read_to_string(&path, crate::bounded::TEXT)?;
        text.lines()
            .find(|l| l.starts_with("AGE-SECRET-KEY-"))
            .and_then(|l| l.trim().parse::<age::x25519::Identity>().ok())
            .ok_or(BundleError::BadIdentity { path: path.clone() })?
    } else {
        let id = age::x25519::Identity::generate();
        let text = format!(
            "# hactl backup identity: opens this cluster's encrypted backup bundles.\n# public key: {}\n{}\n",
            id.to_public(),
            id.to_string().expose_secret()
        );
        state.write_secret(IDENTITY_FILE, text.as_bytes())?;
        id
    };
    let public = id.to_public().to_string();
    Ok((id, public))
}

/// What a restore onto new hosts needs, relative to the state directory: the CAs (certificate and
/// key; every leaf is re-issued from them), the service-account key pair (tokens stay valid), the
/// encryption-at-rest key (without it no Secret in any snapshot can be read), the VRRP password
/// of clusters set up before keepalived spoke VRRPv3 (which has no password; listed so that
/// their bundles still restore), the etcd lineage token a recover wrote and the
/// revision high-water mark. Not the age identity: it is what opens the bundle.
pub const BUNDLE_FILES: &[&str] = &[
    "pki/etcd/ca.crt",
    "pki/etcd/ca.key",
    "pki/kubernetes/ca.crt",
    "pki/kubernetes/ca.key",
    "pki/front-proxy/ca.crt",
    "pki/front-proxy/ca.key",
    "pki/sa.key",
    "pki/sa.pub",
    crate::kubernetes::secrets::ENCRYPTION_KEY,
    "vrrp-password",
    crate::etcd::TOKEN_FILE,
    crate::hwm::FILE,
];

/// The files of [`BUNDLE_FILES`] that exist in the state directory at `state_dir`.
pub fn bundle_files(state_dir: &Path) -> Vec<PathBuf> {
    BUNDLE_FILES
        .iter()
        .map(|rel| state_dir.join(rel))
        .filter(|p| p.is_file())
        .collect()
}

/// Writes the bundle of `state` (every [`BUNDLE_FILES`] entry it holds) to `path`, encrypted to
/// the state directory's own identity; returns the names it holds.
pub fn write_state_bundle(path: &Path, state: &StateDir) -> Result<Vec<String>, BundleError> {
    let (id, _) = identity(state)?;
    let files = bundle_files(&state.path);
    write_bundle(path, &state.path, &files, &[id.to_public()])?;
    Ok(files
        .iter()
        .map(|f| {
            f.strip_prefix(&state.path)
                .unwrap_or(f)
                .to_string_lossy()
                .into_owned()
        })
        .collect())
}

/// Why a bundle cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreBundleError {
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error("the bundle holds {name:?}, which is not a file hactl puts in a bundle: refusing to write it")]
    UnknownEntry { name: String },
    #[error(
        "{path} already exists: restore into a fresh state directory (set spec.stateDir to a new \
         path, or move the old directory aside)"
    )]
    Exists { path: PathBuf },
    #[error("the bundle holds no CA: it is not a hactl backup bundle")]
    NoCa,
}

/// Where a bundle entry goes in the state directory. Bundles written before the state-wide
/// layout named PKI files relative to `pki/` (`etcd/ca.key`); those are mapped there.
fn restore_name(name: &str) -> Option<&'static str> {
    BUNDLE_FILES
        .iter()
        .copied()
        .find(|rel| *rel == name || rel.strip_prefix("pki/").is_some_and(|r| r == name))
}

/// Restores a state directory from a bundle and the age identity that opens it: every file of
/// the bundle, and the identity itself (so later bundles are encrypted to the same key). Writes
/// nothing unless every entry is one hactl bundles and none of them exists yet in `state`.
/// Returns the state-relative names written, the identity last.
pub fn restore_bundle(
    bundle: &Path,
    identity_file: &Path,
    state: &StateDir,
) -> Result<Vec<String>, RestoreBundleError> {
    let text =
        crate::bounded::read_to_string(identity_file, crate::bounded::TEXT).map_err(BundleError::Io)?;
    let id = text
        .lines()
        .find(|l| l.starts_with("AGE-SECRET-KEY-"))
        .and_then(|l| l.trim().parse::<age::x25519::Identity>().ok())
        .ok_or_else(|| BundleError::BadIdentity {
            path: identity_file.to_path_buf(),
        })?;
    let entries = open_bundle(bundle, &id)?;
    let mut plan = Vec::new();
    for (name, data) in entries {
        let rel = restore_name(&name).ok_or(RestoreBundleError::UnknownEntry { name: name.clone() })?;
        plan.push((rel, data));
    }
    if !plan.iter().any(|(rel, _)| rel.ends_with("ca.key")) {
        return Err(RestoreBundleError::NoCa);
    }
    for rel in plan.iter().map(|(rel, _)| *rel).chain([IDENTITY_FILE]) {
        let path = state.file(rel);
        if path.exists() {
            return Err(RestoreBundleError::Exists { path });
        }
    }
    let mut written = Vec::new();
    for (rel, data) in &plan {
        // Certificates and public keys as pki::ensure writes them; everything else is a secret.
        let mode = if rel.ends_with(".crt") || rel.ends_with(".pub") {
            0o644
        } else {
            0o600
        };
        state.write_file(rel, data, mode).map_err(BundleError::State)?;
        written.push(rel.to_string());
    }
    state
        .write_secret(IDENTITY_FILE, text.as_bytes())
        .map_err(BundleError::State)?;
    written.push(IDENTITY_FILE.to_string());
    Ok(written)
}

/// Writes `<path>` as an age file encrypted to `recipients`, holding a tar of `files` (named
/// relative to `base`). The tar exists only in memory.
pub fn write_bundle(
    path: &Path,
    base: &Path,
    files: &[PathBuf],
    recipients: &[age::x25519::Recipient],
) -> Result<(), BundleError> {
    let mut tar = tar::Builder::new(Vec::new());
    for f in files {
        let rel = f.strip_prefix(base).unwrap_or(f);
        let data = crate::bounded::read(f, crate::bounded::TEXT)?;
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, rel, data.as_slice())?;
    }
    let plain = tar.into_inner()?;
    let encryptor = age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
        .map_err(BundleError::Encrypt)?;
    let mut sealed = Vec::new();
    let mut w = encryptor.wrap_output(&mut sealed)?;
    w.write_all(&plain)?;
    w.finish()?;
    write_atomically(path, &sealed)?;
    Ok(())
}

/// Opens a bundle: its file names and contents (in memory only).
pub fn open_bundle(path: &Path, id: &age::x25519::Identity) -> Result<Vec<(String, Vec<u8>)>, BundleError> {
    let sealed = crate::bounded::read(path, crate::bounded::TEXT)?;
    let decryptor = age::Decryptor::new(sealed.as_slice()).map_err(|source| BundleError::Decrypt {
        path: path.to_path_buf(),
        source,
    })?;
    let mut reader = decryptor
        .decrypt(std::iter::once(id as &dyn age::Identity))
        .map_err(|source| BundleError::Decrypt {
            path: path.to_path_buf(),
            source,
        })?;
    let what = format!("the decrypted content of `{}`", path.display());
    let plain = crate::bounded::read_to_end(&mut reader, crate::bounded::TEXT, &what)?;
    let mut archive = tar::Archive::new(plain.as_slice());
    let mut out = Vec::new();
    for entry in archive.entries()? {
        let e = entry?;
        let name = e.path()?.to_string_lossy().into_owned();
        let what = format!("{name} in `{}`", path.display());
        let data = crate::bounded::read_to_end(e, crate::bounded::TEXT, &what)?;
        out.push((name, data));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hash(body: &[u8]) -> Vec<u8> {
        let mut v = body.to_vec();
        v.extend_from_slice(&Sha256::digest(body));
        v
    }

    #[test]
    fn the_size_rule_and_the_appended_hash_are_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("s.db");
        let body: Vec<u8> = (0..4096u32 * 3).map(|i| (i % 251) as u8).collect();
        fs_err::write(&p, with_hash(&body)).unwrap();
        let c = check_file(&p).unwrap();
        assert_eq!((c.size, c.hash), (4096 * 3 + 32, HashState::Ok));
        assert_eq!(c.sha256, hex::encode(Sha256::digest(with_hash(&body))));
        // One flipped byte (A9 flips offset 9000).
        let mut bad = with_hash(&body);
        bad[9000] ^= 1;
        fs_err::write(&p, &bad).unwrap();
        assert_eq!(check_file(&p).unwrap().hash, HashState::Mismatch);
        // A raw db (no hash).
        fs_err::write(&p, &body).unwrap();
        assert_eq!(check_file(&p).unwrap().hash, HashState::Missing);
    }

    #[test]
    fn the_helper_script_agrees_with_the_local_check() {
        let tmp = tempfile::tempdir().unwrap();
        let helper = tmp.path().join("helper");
        fs_err::write(&helper, helper_upload().unwrap().content.in_memory().unwrap()).unwrap();
        let p = tmp.path().join("s.db");
        let body: Vec<u8> = (0..1024u32 * 7).map(|i| (i % 13) as u8).collect();
        for (bytes, want) in [
            (with_hash(&body), "ok"),
            (
                {
                    let mut b = with_hash(&body);
                    b[100] ^= 0xff;
                    b
                },
                "mismatch",
            ),
            (body.clone(), "missing"),
        ] {
            fs_err::write(&p, &bytes).unwrap();
            let out = std::process::Command::new("sh")
                .arg(&helper)
                .arg("check")
                .arg(&p)
                .output()
                .unwrap();
            assert!(out.status.success());
            let c: FileCheck = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(c, check_file(&p).unwrap());
            assert_eq!(serde_json::to_value(c.hash).unwrap(), want);
        }
    }

    #[test]
    fn restore_commands_always_carry_every_identity_flag() {
        // A14: never a restore that falls back to etcd's defaults.
        let a = RestoreArgs {
            snapshot: "/var/lib/etcd.hactl/r/snapshot.db".into(),
            name: "cp1".into(),
            peer_url: "https://10.0.0.11:2380".into(),
            initial_cluster: "cp1=https://10.0.0.11:2380".into(),
            token: "hactl-c-r".into(),
            data_dir: "/var/lib/etcd.hactl/r/staging".into(),
            bump: 1_000_000_000,
            skip_hash_check: false,
        };
        let line = restore_command(&a).line(false);
        assert_eq!(
            line,
            "/usr/local/sbin/hactl-etcd-snapshot restore /var/lib/etcd.hactl/r/snapshot.db cp1 https://10.0.0.11:2380 cp1=https://10.0.0.11:2380 hactl-c-r /var/lib/etcd.hactl/r/staging 1000000000 no"
        );
        // The helper maps them onto the tool's flags, all of them, every time.
        let script =
            String::from_utf8(helper_upload().unwrap().content.in_memory().unwrap().to_vec()).unwrap();
        for flag in [
            "--name \"$name\"",
            "--initial-cluster \"$ic\"",
            "--initial-cluster-token \"$tok\"",
            "--initial-advertise-peer-urls \"$url\"",
            "--data-dir \"$dd\"",
            "--bump-revision \"$bump\" --mark-compacted",
        ] {
            assert!(script.contains(flag), "{flag}");
        }
    }

    #[test]
    fn a_bundle_is_encrypted_and_opens_with_the_state_identity_only() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let pki = state.subdir("pki/etcd").unwrap();
        let secret = b"-----BEGIN PRIVATE KEY-----\nsecret-key-material\n";
        fs_err::write(pki.join("ca.key"), secret).unwrap();
        fs_err::write(pki.join("ca.crt"), b"cert").unwrap();
        let files = bundle_files(&state.path);
        assert_eq!(files.len(), 2);
        let (id, public) = identity(&state).unwrap();
        assert!(public.starts_with("age1"));
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            fs_err::metadata(state.file(IDENTITY_FILE)).unwrap().mode() & 0o777,
            0o600
        );
        // The same identity is read back.
        assert_eq!(identity(&state).unwrap().1, public);
        let out = tmp.path().join("b.age");
        write_state_bundle(&out, &state).unwrap();
        let sealed = fs_err::read(&out).unwrap();
        assert!(
            !sealed.windows(secret.len()).any(|w| w == secret),
            "key in the clear"
        );
        let opened = open_bundle(&out, &id).unwrap();
        let names: Vec<&str> = opened.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["pki/etcd/ca.crt", "pki/etcd/ca.key"]);
        assert_eq!(opened[1].1, secret);
        assert!(open_bundle(&out, &age::x25519::Identity::generate()).is_err());
    }

    /// A state directory as `up` leaves it for a cluster with Kubernetes and load balancers,
    /// plus what a restore does not need (leaves, known_hosts, locks, journals, snapshots).
    fn full_state(dir: &Path) -> StateDir {
        let state = StateDir::open(dir).unwrap();
        for rel in BUNDLE_FILES {
            state
                .write_secret(rel, format!("content of {rel}\n").as_bytes())
                .unwrap();
        }
        for rel in [
            "pki/etcd/server-cp1.key",
            "pki/kubernetes/admin.key",
            "known_hosts",
            "runs/r1.jsonl",
            "backups/lab-20250101T000000Z.db",
        ] {
            state.write_secret(rel, b"not needed").unwrap();
        }
        state
    }

    #[test]
    fn a_bundle_holds_everything_a_restore_onto_new_hosts_needs_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let state = full_state(&tmp.path().join("s"));
        let (id, _) = identity(&state).unwrap();
        let out = tmp.path().join("b.age");
        let listed = write_state_bundle(&out, &state).unwrap();
        let opened = open_bundle(&out, &id).unwrap();
        let names: Vec<&str> = opened.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, BUNDLE_FILES);
        assert_eq!(listed, BUNDLE_FILES);
        for must in [
            "kubernetes/encryption-key",
            "vrrp-password",
            "pki/sa.key",
            "pki/sa.pub",
            "pki/etcd/ca.key",
            "pki/kubernetes/ca.key",
            "pki/front-proxy/ca.key",
        ] {
            assert!(names.contains(&must), "{must} missing from {names:?}");
        }
        assert!(
            !names.contains(&IDENTITY_FILE),
            "the identity must not travel in the bundle"
        );
        for (name, data) in &opened {
            assert_eq!(data, format!("content of {name}\n").as_bytes());
        }
    }

    #[test]
    fn restore_bundle_rebuilds_a_fresh_state_directory_that_bundles_the_same() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let old = full_state(&tmp.path().join("old"));
        let out = tmp.path().join("b.age");
        write_state_bundle(&out, &old).unwrap();
        // The operator kept a copy of the identity apart from the state directory.
        let kept = tmp.path().join("identity.txt");
        fs_err::copy(old.file(IDENTITY_FILE), &kept).unwrap();

        let fresh = StateDir::open(&tmp.path().join("new")).unwrap();
        let written = restore_bundle(&out, &kept, &fresh).unwrap();
        assert_eq!(written.len(), BUNDLE_FILES.len() + 1);
        for rel in BUNDLE_FILES {
            assert_eq!(
                fs_err::read(fresh.file(rel)).unwrap(),
                fs_err::read(old.file(rel)).unwrap(),
                "{rel}"
            );
        }
        assert_eq!(
            fs_err::metadata(fresh.file("kubernetes/encryption-key"))
                .unwrap()
                .mode()
                & 0o777,
            0o600
        );
        assert_eq!(
            fs_err::metadata(fresh.file("pki/etcd/ca.crt")).unwrap().mode() & 0o777,
            0o644
        );
        assert!(!fresh.file("known_hosts").exists() && !fresh.file("pki/etcd/server-cp1.key").exists());
        // The same identity: the next bundle opens with the kept copy.
        assert_eq!(identity(&fresh).unwrap().1, identity(&old).unwrap().1);

        // Restoring again over it is refused, and writes nothing.
        let before = fs_err::read(fresh.file("vrrp-password")).unwrap();
        let err = restore_bundle(&out, &kept, &fresh).unwrap_err().to_string();
        assert!(
            err.contains("already exists: restore into a fresh state directory"),
            "{err}"
        );
        assert_eq!(fs_err::read(fresh.file("vrrp-password")).unwrap(), before);

        // Another identity does not open it.
        let other = tmp.path().join("other.txt");
        {
            use age::secrecy::ExposeSecret;
            fs_err::write(
                &other,
                age::x25519::Identity::generate().to_string().expose_secret(),
            )
            .unwrap();
        }
        let empty = StateDir::open(&tmp.path().join("empty")).unwrap();
        assert!(restore_bundle(&out, &other, &empty).is_err());
        assert!(!empty.file("pki").exists());
    }

    #[test]
    fn restore_bundle_refuses_entries_it_did_not_put_there() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let (id, _) = identity(&state).unwrap();
        let evil = tmp.path().join("evil");
        fs_err::write(&evil, b"x").unwrap();
        let out = tmp.path().join("b.age");
        // Anyone with the public key can make a bundle: names are checked against the list.
        write_bundle(&out, tmp.path(), &[evil], &[id.to_public()]).unwrap();
        let fresh = StateDir::open(&tmp.path().join("new")).unwrap();
        let err = restore_bundle(&out, &state.file(IDENTITY_FILE), &fresh)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the bundle holds \"evil\", which is not a file hactl puts in a bundle: refusing to write it"
        );
    }

    #[test]
    fn a_part_file_is_created_exclusively_and_never_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("victim");
        fs_err::write(&target, b"precious").unwrap();
        let part = part_path(&tmp.path().join("lab-20250101T000000Z.db"));
        std::os::unix::fs::symlink(&target, &part).unwrap();
        let err = create_private(&part).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(fs_err::read(&target).unwrap(), b"precious");
        // A dangling link is not followed either (it would create the file it names).
        let dangling = part_path(&tmp.path().join("other.db"));
        std::os::unix::fs::symlink(tmp.path().join("created-through-link"), &dangling).unwrap();
        assert!(create_private(&dangling).is_err());
        assert!(!tmp.path().join("created-through-link").exists());
        // A regular leftover of a crashed run is replaced by a new, empty 0600 file.
        let stale = part_path(&tmp.path().join("stale.db"));
        fs_err::write(&stale, b"half a snapshot").unwrap();
        drop(create_private(&stale).unwrap());
        use std::os::unix::fs::MetadataExt;
        let meta = fs_err::metadata(&stale).unwrap();
        assert_eq!((meta.len(), meta.mode() & 0o777), (0, 0o600));
    }

    #[test]
    fn bundles_from_before_the_state_wide_layout_still_restore() {
        assert_eq!(restore_name("etcd/ca.key"), Some("pki/etcd/ca.key"));
        assert_eq!(restore_name("sa.key"), Some("pki/sa.key"));
        assert_eq!(restore_name("pki/sa.key"), Some("pki/sa.key"));
        assert_eq!(restore_name("../etc/passwd"), None);
        assert_eq!(restore_name("backup-identity.txt"), None);
    }
}
