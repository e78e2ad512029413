//! Binaries from a release tarball or a bundle directory, read on the operator machine and
//! uploaded to hosts, so hosts need no internet.
//!
//! Invariant: a downloaded tarball is checked against the inventory's sha256 (or, when the
//! inventory names an https:// release without one, the sha256 published beside it: `<url>.sha256`
//! as Kubernetes publishes it, else the tarball's line of `SHA256SUMS` in the same directory as
//! etcd publishes it) **before** it is kept or anything in it is used; the cache is named by that
//! sha256, so a verified file is downloaded once.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::inventory::BinarySource;
use crate::local_digests::LocalDigests;
use crate::plan::{Blob, Content};

/// Binaries to upload: file name → content and sha256, in a fixed order. A bundle's stay in
/// their files (hashed once per change, [`crate::local_digests`]); a release's are taken out of
/// its tarball into memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalBinaries {
    pub files: Vec<(String, Blob)>,
    /// Where they came from, for messages.
    pub origin: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    #[error("failed to download {url}")]
    Download {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("download of {url} failed with HTTP {status}")]
    HttpStatus { url: String, status: u16 },
    #[error("{url} has sha256 {actual}, but the sha256 expected (the inventory's, or the one published with the release) is {expected}: nothing was installed; check the URL and the sha256 published with the release")]
    Sha256Mismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("{archive} holds no {name} binary (looked for a file named {name} in the archive)")]
    MissingInArchive { archive: String, name: String },
    #[error("failed to read the archive {archive}")]
    Archive {
        archive: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url} is not a published sha256 (expected 64 hex digits first): set the release's sha256 in the inventory")]
    PublishedSha256 { url: String },
    #[error("{sums} has no line for {file}: set the release's sha256 in the inventory")]
    NotInSums { sums: String, file: String },
    #[error("bundle directory {dir} holds no {name}: put the {name} binary there")]
    MissingInBundle { dir: String, name: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads (and downloads once, when needed) the binaries named in `wanted` for `source`.
/// `optional` names are taken when present. Returns `None` for distribution packages.
/// A bundle's files are hashed through `digests`.
pub async fn ensure(
    source: &BinarySource,
    cache_dir: &Path,
    wanted: &[&str],
    optional: &[&str],
    digests: &LocalDigests,
) -> Result<Option<LocalBinaries>, BinariesError> {
    obtain(source, cache_dir, wanted, optional, true, digests).await
}

/// [`ensure`] for a read-only command (`hactl plan`): a verified copy in `cache_dir` is used,
/// and a release that is not cached yet is downloaded into a temporary directory outside it
/// (removed afterwards), so `cache_dir` is never created or written.
pub async fn ensure_read_only(
    source: &BinarySource,
    cache_dir: &Path,
    wanted: &[&str],
    optional: &[&str],
    digests: &LocalDigests,
) -> Result<Option<LocalBinaries>, BinariesError> {
    obtain(source, cache_dir, wanted, optional, false, digests).await
}

async fn obtain(
    source: &BinarySource,
    cache_dir: &Path,
    wanted: &[&str],
    optional: &[&str],
    write_cache: bool,
    digests: &LocalDigests,
) -> Result<Option<LocalBinaries>, BinariesError> {
    match source {
        BinarySource::Package => Ok(None),
        BinarySource::Bundle { dir } => {
            let mut files = Vec::new();
            for name in wanted.iter().chain(optional) {
                let path = dir.join(name);
                match digests.blob(&path) {
                    Ok(blob) => files.push((name.to_string(), blob)),
                    Err(_) if optional.contains(name) => {}
                    Err(_) => {
                        return Err(BinariesError::MissingInBundle {
                            dir: dir.display().to_string(),
                            name: name.to_string(),
                        })
                    }
                }
            }
            Ok(Some(LocalBinaries {
                files,
                origin: format!("bundle {}", dir.display()),
            }))
        }
        BinarySource::Release { url, sha256 } => {
            let sha256 = match sha256 {
                Some(s) => s.clone(),
                None => published_sha256(url).await?,
            };
            let cached = cache_dir.join(format!("{}.tar.gz", sha256.to_ascii_lowercase()));
            let scratch;
            let dir = if write_cache || verified(&cached, &sha256) {
                cache_dir
            } else {
                scratch = tempfile::tempdir()?;
                scratch.path()
            };
            let archive = download_verified(url, &sha256, dir).await?;
            let files = extract(&archive, wanted, optional)?;
            Ok(Some(LocalBinaries {
                files: files.into_iter().map(|(n, c)| (n, Blob::bytes(c))).collect(),
                origin: format!("release {url}"),
            }))
        }
    }
}

/// The sha256 published beside a release tarball: `<url>.sha256` (`<64 hex digits>` and
/// optionally a file name, as Kubernetes and `sha256sum` write it), or, when there is none (HTTP
/// 404), the tarball's line in `SHA256SUMS` of the same directory (`sha256sum *` output, as etcd
/// publishes its releases). Logged, so it can be pinned.
pub async fn published_sha256(url: &str) -> Result<String, BinariesError> {
    let beside = format!("{url}.sha256");
    let (sums, text) = match fetch_text(&beside).await {
        Err(BinariesError::HttpStatus { status: 404, .. }) => {
            let (dir, file) = url.rsplit_once('/').unwrap_or(("", url));
            let sums = format!("{dir}/SHA256SUMS");
            let text = fetch_text(&sums).await?;
            let line = sums_line(&text, file).ok_or_else(|| BinariesError::NotInSums {
                sums: sums.clone(),
                file: file.to_string(),
            })?;
            (sums, line)
        }
        other => (beside, other?),
    };
    let word = text.split_whitespace().next().unwrap_or_default();
    if word.len() != 64 || !word.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(BinariesError::PublishedSha256 { url: sums });
    }
    let sha256 = word.to_ascii_lowercase();
    tracing::info!("{sums}: {sha256} (set `sha256: {sha256}` in the inventory to pin it)");
    Ok(sha256)
}

/// A small text file over HTTP(S), bounded.
async fn fetch_text(url: &str) -> Result<String, BinariesError> {
    let fail = |source| BinariesError::Download {
        url: url.to_string(),
        source,
    };
    let response = reqwest::get(url).await.map_err(fail)?;
    if !response.status().is_success() {
        return Err(BinariesError::HttpStatus {
            url: url.to_string(),
            status: response.status().as_u16(),
        });
    }
    match crate::bounded::http_body(response, crate::bounded::TEXT, url).await {
        Ok(body) => Ok(String::from_utf8_lossy(&body).into_owned()),
        Err(crate::bounded::BodyError::Read(e)) => Err(fail(e)),
        Err(crate::bounded::BodyError::TooLarge(e)) => Err(e.into()),
    }
}

/// The line of `sha256sum` output (`<hex>  <name>`, or `<hex> *<name>` in binary mode) naming
/// `file`. Pure.
pub fn sums_line(text: &str, file: &str) -> Option<String> {
    text.lines()
        .find(|l| {
            let mut words = l.split_whitespace();
            words.next().is_some() && words.next().map(|n| n.trim_start_matches('*')) == Some(file)
        })
        .map(str::to_string)
}

/// Whether `path` exists with this sha256.
fn verified(path: &Path, sha256: &str) -> bool {
    crate::bounded::read(path, crate::bounded::BINARY)
        .is_ok_and(|bytes| hex::encode(Sha256::digest(&bytes)) == sha256.to_ascii_lowercase())
}

/// Downloads `url` into `cache_dir/<sha256>.tar.gz` unless a verified copy is there.
pub async fn download_verified(url: &str, sha256: &str, cache_dir: &Path) -> Result<PathBuf, BinariesError> {
    let expected = sha256.to_ascii_lowercase();
    let target = cache_dir.join(format!("{expected}.tar.gz"));
    if let Ok(bytes) = crate::bounded::read(&target, crate::bounded::BINARY) {
        if hex::encode(Sha256::digest(&bytes)) == expected {
            return Ok(target);
        }
    }
    let mut response = reqwest::get(url)
        .await
        .map_err(|source| BinariesError::Download {
            url: url.to_string(),
            source,
        })?;
    if !response.status().is_success() {
        return Err(BinariesError::HttpStatus {
            url: url.to_string(),
            status: response.status().as_u16(),
        });
    }
    // Streamed: bytes and rate on a terminal, a line at the start and the end otherwise.
    let mut progress = crate::output::Transfer::new(format!("downloading {url}"), response.content_length());
    let mut bytes = Vec::with_capacity(response.content_length().unwrap_or(0).min(1 << 30) as usize);
    while let Some(chunk) = response.chunk().await.map_err(|source| BinariesError::Download {
        url: url.to_string(),
        source,
    })? {
        progress.inc(chunk.len() as u64);
        if bytes.len() as u64 + chunk.len() as u64 > crate::bounded::BINARY {
            return Err(crate::bounded::too_large(url, crate::bounded::BINARY).into());
        }
        bytes.extend_from_slice(&chunk);
    }
    progress.finish();
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != expected {
        return Err(BinariesError::Sha256Mismatch {
            url: url.to_string(),
            expected,
            actual,
        });
    }
    fs_err::create_dir_all(cache_dir)?;
    let tmp = cache_dir.join(format!("{expected}.tar.gz.part"));
    fs_err::write(&tmp, &bytes)?;
    fs_err::rename(&tmp, &target)?;
    Ok(target)
}

/// Takes the files named `wanted` (and `optional` when present) out of a `.tar.gz`, wherever
/// they sit in its tree (release tarballs nest them in `etcd-vX.Y.Z-linux-amd64/`).
pub fn extract(
    archive: &Path,
    wanted: &[&str],
    optional: &[&str],
) -> Result<Vec<(String, Vec<u8>)>, BinariesError> {
    let name = archive.display().to_string();
    let err = |source| BinariesError::Archive {
        archive: name.clone(),
        source,
    };
    let file = fs_err::File::open(archive)?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut found: Vec<(String, Vec<u8>)> = Vec::new();
    for entry in tar.entries().map_err(err)? {
        let mut entry = entry.map_err(err)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(err)?.into_owned();
        let Some(base) = path.file_name().and_then(|b| b.to_str()) else {
            continue;
        };
        if wanted.iter().chain(optional).any(|w| *w == base) && !found.iter().any(|(n, _)| n == base) {
            let what = format!("{base} in `{}`", archive.display());
            let content =
                crate::bounded::read_to_end(&mut entry, crate::bounded::BINARY, &what).map_err(err)?;
            found.push((base.to_string(), content));
        }
    }
    for w in wanted {
        if !found.iter().any(|(n, _)| n == w) {
            return Err(BinariesError::MissingInArchive {
                archive: name,
                name: w.to_string(),
            });
        }
    }
    let order: Vec<&str> = wanted.iter().chain(optional).copied().collect();
    found.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
    Ok(found)
}

/// The first line `NAME --version` prints, run on the operator machine: a bundle's executable
/// file where it is (its line kept in `digests`), else a copy in `scratch_dir` (named by its
/// sha256, so it is written once). `None` when the binaries hold no NAME or it does not run
/// here (another architecture): callers then check the version on the hosts instead.
pub fn reported_version(
    bins: &LocalBinaries,
    name: &str,
    scratch_dir: &Path,
    digests: &LocalDigests,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let (_, blob) = bins.files.iter().find(|(n, _)| n == name)?;
    if let Content::File { local, .. } = &blob.content {
        let executable = fs_err::metadata(local.as_path()).is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
        if executable {
            return digests.version(local, first_version_line).ok();
        }
    }
    let path = scratch_dir.join(format!("{name}-{}", &blob.sha256[..16]));
    let content = match &blob.content {
        Content::Bytes(bytes) => bytes.to_vec(),
        Content::File { local, .. } => {
            let bytes = crate::bounded::read(local.as_path(), crate::bounded::BINARY).ok()?;
            (hex::encode(Sha256::digest(&bytes)) == blob.sha256).then_some(bytes)?
        }
    };
    if crate::bounded::read(&path, crate::bounded::BINARY)
        .map(|c| c != content)
        .unwrap_or(true)
    {
        fs_err::create_dir_all(scratch_dir).ok()?;
        let tmp = path.with_extension("part");
        fs_err::write(&tmp, &content).ok()?;
        fs_err::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).ok()?;
        fs_err::rename(&tmp, &path).ok()?;
    }
    first_version_line(&path).ok()
}

/// The first line `path --version` prints, when it exits 0.
fn first_version_line(path: &Path) -> Result<String, String> {
    let out = crate::local_command::new(path)
        .arg("--version")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{} --version exited with {}", path.display(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
        .unwrap_or_default())
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn the_reported_version_is_what_the_binary_prints() {
        let dir = tempfile::tempdir().unwrap();
        let script = b"#!/bin/sh\necho 'etcd Version: 3.5.16'\necho 'Git SHA: x'\n".to_vec();
        let bins = LocalBinaries {
            files: vec![
                ("etcd".into(), Blob::bytes(script.clone())),
                ("etcdctl".into(), Blob::bytes(b"\x7fELF-not-runnable".to_vec())),
            ],
            origin: "test".into(),
        };
        let none = LocalDigests::none();
        assert_eq!(
            reported_version(&bins, "etcd", dir.path(), &none).as_deref(),
            Some("etcd Version: 3.5.16")
        );
        assert_eq!(reported_version(&bins, "etcdctl", dir.path(), &none), None);
        assert_eq!(reported_version(&bins, "etcdutl", dir.path(), &none), None);
        // A bundle's executable file is run where it is.
        use std::os::unix::fs::PermissionsExt;
        let bundle = tempfile::tempdir().unwrap();
        let etcd = bundle.path().join("etcd");
        std::fs::write(&etcd, &script).unwrap();
        std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bins = LocalBinaries {
            files: vec![("etcd".into(), none.blob(&etcd).unwrap())],
            origin: "test".into(),
        };
        let scratch = dir.path().join("scratch");
        assert_eq!(
            reported_version(&bins, "etcd", &scratch, &none).as_deref(),
            Some("etcd Version: 3.5.16")
        );
        assert!(
            !scratch.exists(),
            "copied a bundle's executable to {}",
            scratch.display()
        );
    }
}
