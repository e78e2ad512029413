//! Release tarballs and bundles: the tarball is served on loopback, checked against its sha256
//! before anything is kept or installed, downloaded once, and (in the lab test) installed on
//! real hosts from which a real etcd cluster comes up.

#[path = "support/lab.rs"]
mod lab_support;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hactl::binaries::{self, BinariesError};
use hactl::inventory::BinarySource;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A `.tar.gz` laid out like an etcd release: `etcd-v3.5.16-linux-amd64/<name>`.
fn release_tarball(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        tar.append_data(
            &mut header,
            format!("etcd-v3.5.16-linux-amd64/{name}"),
            content.as_slice(),
        )
        .unwrap();
    }
    let mut readme = tar::Header::new_gnu();
    readme.set_size(5);
    readme.set_mode(0o644);
    readme.set_cksum();
    tar.append_data(&mut readme, "etcd-v3.5.16-linux-amd64/README.md", &b"hello"[..])
        .unwrap();
    let mut gz = tar.into_inner().unwrap();
    gz.flush().unwrap();
    gz.finish().unwrap()
}

/// Serves `body` at every path on 127.0.0.1; counts requests.
async fn serve(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    serve_with_sums(body, None).await
}

/// As `serve`, and `sums` (when given) at every path ending in `.sha256`.
async fn serve_with_sums(body: Vec<u8>, sums: Option<String>) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            let sums = sums.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or_default();
                let body = match &sums {
                    Some(text) if path.ends_with(".sha256") => Arc::new(text.clone().into_bytes()),
                    _ => body,
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\ncontent-type: application/gzip\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (
        format!("http://127.0.0.1:{port}/etcd-v3.5.16-linux-amd64.tar.gz"),
        hits,
    )
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
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
    let got = binaries::ensure(&source, cache.path(), &["etcd", "etcdctl"], &["etcdutl"])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got.files,
        vec![
            ("etcd".to_string(), b"etcd-binary".to_vec()),
            ("etcdctl".to_string(), b"etcdctl-binary".to_vec())
        ]
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // The verified copy is reused: no second download.
    binaries::ensure(&source, cache.path(), &["etcd", "etcdctl"], &[])
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
    let err = binaries::ensure(
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
    let err = binaries::ensure(
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
    let err = binaries::ensure(&source, Path::new("/nonexistent"), &["etcd", "etcdctl"], &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("holds no etcdctl"), "{err}");
    std::fs::write(dir.path().join("etcdctl"), b"c").unwrap();
    let got = binaries::ensure(
        &source,
        Path::new("/nonexistent"),
        &["etcd", "etcdctl"],
        &["etcdutl"],
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(got.files.len(), 2);
}

#[test]
fn up_from_a_release_tarball_installs_the_verified_binaries_on_every_host() {
    let Some(lab) = lab_support::TestLab::up("up_from_a_release_tarball", 3, 0, 0, "trixie") else {
        return;
    };
    // A tarball of the real etcd 3.5 binaries from the lab's own base image.
    let bin = lab.lab().base_image().unwrap().join("usr/bin");
    let files: Vec<(&str, Vec<u8>)> = ["etcd", "etcdctl", "etcdutl"]
        .iter()
        .map(|n| (*n, std::fs::read(bin.join(n)).unwrap()))
        .collect();
    let etcd_sha = sha(&files[0].1);
    let tarball = release_tarball(&files);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, hits) = rt.block_on(serve(tarball.clone()));
    let inventory = lab.inventory().with_file_name("release.yaml");
    let original = std::fs::read_to_string(lab.inventory()).unwrap();
    let edited = original.replace(
        "    source: package\n",
        &format!(
            "    source: release\n    releaseUrl: {url}\n    sha256: {}\n",
            sha(&tarball)
        ),
    );
    assert_ne!(edited, original);
    std::fs::write(&inventory, edited).unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["up", "-i", inventory.to_str().unwrap(), "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "downloaded once for all hosts");
    for h in ["cp1", "cp2", "cp3"] {
        let remote = lab.exec_ok(h, &["sha256sum", "/usr/local/bin/etcd"]);
        assert!(remote.starts_with(&etcd_sha), "{h}: {remote}");
        let unit = lab.exec_ok(h, &["cat", "/etc/systemd/system/etcd.service"]);
        assert!(unit.contains("ExecStart=/usr/local/bin/etcd "), "{h}: {unit}");
        let running = lab.exec_ok(
            h,
            &[
                "sh",
                "-c",
                "readlink /proc/$(systemctl show -p MainPID --value etcd)/exe",
            ],
        );
        assert_eq!(running.trim(), "/usr/local/bin/etcd", "{h}");
    }
    lab.exec_ok("cp1", &["hactl-etcdctl", "endpoint", "health", "--cluster"]);
    rt.shutdown_background();
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
    let got = binaries::ensure(&source, cache.path(), &["etcd", "etcdctl"], &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.files.len(), 2);
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the .sha256, then the tarball");
    assert!(cache.path().join(format!("{}.tar.gz", sha(&tarball))).is_file());

    let (url, _) = serve_with_sums(tarball.clone(), Some(format!("{}\n", "1".repeat(64)))).await;
    let cache = tempfile::tempdir().unwrap();
    let err = binaries::ensure(
        &BinarySource::Release { url, sha256: None },
        cache.path(),
        &["etcd"],
        &[],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BinariesError::Sha256Mismatch { .. }), "{err}");
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "a bad download was kept"
    );

    let (url, _) = serve_with_sums(tarball, Some("<html>not found</html>".into())).await;
    let err = binaries::ensure(
        &BinarySource::Release { url, sha256: None },
        cache.path(),
        &["etcd"],
        &[],
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains(".sha256 is not a published sha256"),
        "{err}"
    );
}
