//! A release tarball served on loopback, shared by `tests/binaries.rs` (which includes it alone
//! with `#[path = "support/release.rs"] mod release;`) and the etcd lab test that installs one on
//! lab hosts (`support::release`, see `support/mod.rs`).
#![allow(dead_code)]

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A `.tar.gz` laid out like an etcd release: `etcd-v3.5.16-linux-amd64/<name>`.
pub fn release_tarball(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
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
pub async fn serve(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    serve_with_sums(body, None).await
}

/// As `serve`, and `sums` (when given) at every path ending in `.sha256`.
pub async fn serve_with_sums(body: Vec<u8>, sums: Option<String>) -> (String, Arc<AtomicUsize>) {
    serve_paths(body, move |path| match &sums {
        Some(text) if path.ends_with(".sha256") => Some(Some(text.clone().into_bytes())),
        _ => None,
    })
    .await
}

/// As `serve`, laid out as etcd publishes its releases: no `<file>.sha256` (404), and `sums` at
/// `SHA256SUMS` in the same directory; the paths asked for are kept in order.
pub async fn serve_with_sha256sums(
    body: Vec<u8>,
    sums: String,
) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    let (url, _) = serve_paths(body, move |path| {
        seen.lock().unwrap().push(path.to_string());
        if path.ends_with(".sha256") {
            Some(None)
        } else if path.ends_with("/SHA256SUMS") {
            Some(Some(sums.clone().into_bytes()))
        } else {
            None
        }
    })
    .await;
    (url, asked)
}

/// Serves `body` at every path on 127.0.0.1 unless `route(path)` answers: `Some(Some(bytes))`
/// serves those, `Some(None)` is a 404; counts requests.
async fn serve_paths(
    body: Vec<u8>,
    route: impl Fn(&str) -> Option<Option<Vec<u8>>> + Send + Sync + 'static,
) -> (String, Arc<AtomicUsize>) {
    let route = Arc::new(route);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            let route = route.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or_default();
                let (status, body) = match route(path) {
                    Some(Some(bytes)) => ("200 OK", Arc::new(bytes)),
                    Some(None) => ("404 Not Found", Arc::new(Vec::new())),
                    None => ("200 OK", body),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: application/gzip\r\nconnection: close\r\n\r\n",
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

pub fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
