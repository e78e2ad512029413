//! Release tarballs and bundles: the tarball is served on loopback, checked against its sha256
//! before anything is kept or installed, and downloaded once. The lab test that installs one on
//! real hosts, from which a real etcd cluster comes up, is `etcd_labs::binaries`.

#[path = "support/release.rs"]
mod release;

use std::path::Path;
use std::sync::atomic::Ordering;

use hactl::binaries::{BinariesError, LocalBinaries};
use hactl::inventory::BinarySource;
use hactl::local_digests::LocalDigests;
use hactl::plan::{Blob, Content};
use release::{release_tarball, serve, serve_with_sha256sums, serve_with_sums, sha};

/// `binaries::ensure` with no digest records.
async fn ensure(
    source: &BinarySource,
    cache: &Path,
    wanted: &[&str],
    optional: &[&str],
) -> Result<Option<LocalBinaries>, BinariesError> {
    hactl::binaries::ensure(source, cache, wanted, optional, &LocalDigests::none()).await
}

/// The error of `ensure` for the release at `url` with no sha256 pinned (only `etcd` wanted).
async fn unpinned_err(url: String, cache: &Path) -> BinariesError {
    ensure(
        &BinarySource::Release { url, sha256: None },
        cache,
        &["etcd"],
        &[],
    )
    .await
    .unwrap_err()
}

#[tokio::test]
async fn a_release_tarball_is_verified_then_downloaded_once() {
    let tarball = release_tarball(&[
        ("etcd", b"etcd-binary".to_vec()),
        ("etcdctl", b"etcdctl-binary".to_vec()),
    ]);
    let (url, hits) = serve(tarball.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let source = BinarySource::Release {
        url: url.clone(),
        sha256: Some(sha(&tarball)),
    };
    let got = ensure(&source, cache.path(), &["etcd", "etcdctl"], &["etcdutl"])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.files,
        vec![
            ("etcd".to_string(), Blob::bytes(b"etcd-binary".to_vec())),
            ("etcdctl".to_string(), Blob::bytes(b"etcdctl-binary".to_vec()))
        ]
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // The verified copy is reused: no second download.
    ensure(&source, cache.path(), &["etcd", "etcdctl"], &[])
        .await
        .unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_tarball_with_the_wrong_sha256_is_refused_and_not_kept() {
    let tarball = release_tarball(&[("etcd", b"x".to_vec()), ("etcdctl", b"y".to_vec())]);
    let (url, _) = serve(tarball.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let wrong = "0".repeat(64);
    let err = ensure(
        &BinarySource::Release {
            url: url.clone(),
            sha256: Some(wrong.clone()),
        },
        cache.path(),
        &["etcd"],
        &[],
    )
    .await
    .unwrap_err();
    match &err {
        BinariesError::Sha256Mismatch { expected, actual, .. } => {
            assert_eq!(expected, &wrong);
            assert_eq!(actual, &sha(&tarball));
        }
        other => panic!("expected a sha256 mismatch, got {other}"),
    }
    assert!(err.to_string().contains("nothing was installed"), "{err}");
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "a bad download was kept"
    );
}

#[tokio::test]
async fn a_tarball_without_etcd_names_what_is_missing() {
    let tarball = release_tarball(&[("etcdctl", b"y".to_vec())]);
    let (url, _) = serve(tarball.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let err = ensure(
        &BinarySource::Release {
            url,
            sha256: Some(sha(&tarball)),
        },
        cache.path(),
        &["etcd", "etcdctl"],
        &[],
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("holds no etcd binary"), "{err}");
}

#[tokio::test]
async fn a_bundle_directory_must_hold_every_binary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("etcd"), b"e").unwrap();
    let source = BinarySource::Bundle {
        dir: dir.path().to_path_buf(),
    };
    let err = ensure(&source, Path::new("/nonexistent"), &["etcd", "etcdctl"], &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("holds no etcdctl"), "{err}");
    std::fs::write(dir.path().join("etcdctl"), b"c").unwrap();
    let got = ensure(
        &source,
        Path::new("/nonexistent"),
        &["etcd", "etcdctl"],
        &["etcdutl"],
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got.files.len(), 2);
    // A bundle's binaries stay in their files, with the sha256 of what they hold.
    let (name, blob) = &got.files[1];
    assert_eq!(name, "etcdctl");
    assert_eq!(blob.sha256, sha(b"c"));
    assert!(
        matches!(&blob.content, Content::File { local, size: 1 } if **local == dir.path().join("etcdctl")),
        "{blob:?}"
    );
}

/// An https:// release without a sha256 in the inventory: the checksum published beside it
/// (`<url>.sha256`) is fetched first and the tarball checked against it; a wrong published
/// checksum refuses the tarball, and a checksum file that is not one is named.
#[tokio::test]
async fn a_release_without_a_pinned_sha256_is_checked_against_the_published_one() {
    let tarball = release_tarball(&[("etcd", b"e".to_vec()), ("etcdctl", b"c".to_vec())]);
    let published = format!("{}  etcd-v3.5.16-linux-amd64.tar.gz\n", sha(&tarball));
    let (url, hits) = serve_with_sums(tarball.clone(), Some(published)).await;
    let cache = tempfile::tempdir().unwrap();
    let source = BinarySource::Release {
        url: url.clone(),
        sha256: None,
    };
    let got = ensure(&source, cache.path(), &["etcd", "etcdctl"], &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.files.len(), 2);
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the .sha256, then the tarball");
    assert!(cache.path().join(format!("{}.tar.gz", sha(&tarball))).is_file());

    let (url, _) = serve_with_sums(tarball.clone(), Some(format!("{}\n", "1".repeat(64)))).await;
    let cache = tempfile::tempdir().unwrap();
    let err = unpinned_err(url, cache.path()).await;
    assert!(matches!(err, BinariesError::Sha256Mismatch { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "a bad download was kept"
    );

    let (url, _) = serve_with_sums(tarball, Some("<html>not found</html>".into())).await;
    let err = unpinned_err(url, cache.path()).await;
    assert!(
        err.to_string().contains(".sha256 is not a published sha256"),
        "{err}"
    );
}

/// As etcd publishes its releases: no `<url>.sha256` (404), so the tarball's line of
/// `SHA256SUMS` beside it (`sha256sum` output, text or binary mode) is the checksum; a
/// `SHA256SUMS` without the tarball's line is named.
#[tokio::test]
async fn a_release_without_a_sha256_file_is_checked_against_its_line_in_sha256sums() {
    let tarball = release_tarball(&[("etcd", b"e".to_vec()), ("etcdctl", b"c".to_vec())]);
    let sums = format!(
        "{}  etcd-v3.5.16-darwin-amd64.zip\n{} *etcd-v3.5.16-linux-amd64.tar.gz\n",
        "2".repeat(64),
        sha(&tarball)
    );
    let (url, asked) = serve_with_sha256sums(tarball.clone(), sums).await;
    let cache = tempfile::tempdir().unwrap();
    let source = BinarySource::Release {
        url: url.clone(),
        sha256: None,
    };
    let got = ensure(&source, cache.path(), &["etcd", "etcdctl"], &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.files.len(), 2);
    assert_eq!(
        *asked.lock().unwrap(),
        [
            "/etcd-v3.5.16-linux-amd64.tar.gz.sha256",
            "/SHA256SUMS",
            "/etcd-v3.5.16-linux-amd64.tar.gz"
        ]
    );

    // A wrong line refuses the tarball; no line for it is named.
    let (url, _) = serve_with_sha256sums(
        tarball.clone(),
        format!("{}  etcd-v3.5.16-linux-amd64.tar.gz\n", "1".repeat(64)),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let err = unpinned_err(url, cache.path()).await;
    assert!(matches!(err, BinariesError::Sha256Mismatch { .. }), "{err}");
    let (url, _) = serve_with_sha256sums(tarball, format!("{}  other.tar.gz\n", "1".repeat(64))).await;
    let err = unpinned_err(url, cache.path()).await;
    assert!(
        err.to_string()
            .contains("SHA256SUMS has no line for etcd-v3.5.16-linux-amd64.tar.gz"),
        "{err}"
    );
}
