//! A writer through the VIP, shared by the lab tests that prove "0 failed writes": a thread runs
//! `hactl-etcdctl --endpoints=https://<VIP>:2379 --command-timeout=10s put` on one lab host in a
//! loop (each put a new process, reading the host's trust file and client certificate afresh),
//! 100 ms apart, counting writes and failures, until stopped (or dropped). A write fails when
//! etcd refuses it or it takes more than 10 s (3 s were too few on the loaded 2-core machine: a
//! put starved of CPU missed it without any outage); the slowest write is printed when the writer
//! stops, so a pause shorter than that still shows.
//!
//! `support::writer` (see `support/mod.rs`); it builds on `support::lab`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::lab::TestLab;

/// Prints what the load balancers logged in the last seconds (HAProxy logs only sessions that
/// ended in error) and the members' etcd units' recent lines, so a failed write shows its cause.
fn explain_failure(lab: &TestLab) {
    for h in lab.hosts() {
        let unit = match h.name.as_str() {
            n if n.starts_with("lb") => "haproxy.service",
            n if n.starts_with("cp") => "etcd.service",
            _ => continue,
        };
        let o = lab.exec(
            &h.name,
            &[
                "journalctl",
                "-u",
                unit,
                "--since",
                "-20s",
                "--no-pager",
                "-o",
                "short-precise",
            ],
        );
        eprintln!(
            "writer: {} {unit}, last 20 s:\n{}",
            h.name,
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

/// Between one write's end and the next one's start. Back to back, the writer's processes (an
/// nsenter and an etcdctl each, about 50 ms of CPU a write) took most of a core from the 2-core
/// machine the lab tests share; an outage shorter than this pause could slip between two writes,
/// one of 100 ms or more cannot.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// A running writer; [`VipWriter::stop`] returns (writes, failed).
pub struct VipWriter {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    slowest_ms: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
}

impl VipWriter {
    /// Starts writing keys `<prefix>/0..63` through the lab's VIP from `host` (`lab` a
    /// [`TestLab`], or anything that holds one, such as a Kubernetes lab).
    pub fn start<L: AsRef<TestLab> + Send + Sync + 'static>(
        lab: Arc<L>,
        host: &str,
        prefix: &str,
    ) -> VipWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let (writes, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let slowest_ms = Arc::new(AtomicUsize::new(0));
        let endpoint = format!("--endpoints=https://{}:2379", (*lab).as_ref().lab().vip);
        let handle = {
            let (stop, writes, failed) = (stop.clone(), writes.clone(), failed.clone());
            let slowest_ms = slowest_ms.clone();
            let (host, prefix) = (host.to_string(), prefix.to_string());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let lab: &TestLab = (*lab).as_ref();
                    let started = std::time::Instant::now();
                    let o = lab.exec(
                        &host,
                        &[
                            "/usr/local/sbin/hactl-etcdctl",
                            &endpoint,
                            "--command-timeout=10s",
                            "put",
                            &format!("{prefix}/{}", i % 64),
                            &i.to_string(),
                        ],
                    );
                    slowest_ms.fetch_max(started.elapsed().as_millis() as usize, Ordering::Relaxed);
                    writes.fetch_add(1, Ordering::Relaxed);
                    if !o.status.success() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("writer: {}", String::from_utf8_lossy(&o.stderr));
                        explain_failure(lab);
                    }
                    std::thread::sleep(PAUSE);
                }
            })
        };
        VipWriter {
            stop,
            writes,
            failed,
            slowest_ms,
            handle: Some(handle),
        }
    }

    /// Writes so far.
    pub fn writes(&self) -> usize {
        self.writes.load(Ordering::Relaxed)
    }

    /// Stops the writer and waits for its last write: (writes, failed).
    pub fn stop(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        eprintln!(
            "writer: {} writes, {} failed, the slowest took {} ms",
            self.writes.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.slowest_ms.load(Ordering::Relaxed)
        );
        (
            self.writes.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

impl Drop for VipWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
