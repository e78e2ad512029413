//! The one writer through the VIP the lab tests share: `hactl-etcdctl put` through VIP:2379 from
//! a lab host (with that host's client certificate), one write after the other, each with a 3 s
//! deadline, counting the writes and the failed ones until it is stopped.
//!
//! Use it from a test file with `#[path = "support/vip_writer.rs"] mod vip_writer;` beside
//! `support/lab.rs` (as `lab_support`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::lab_support::TestLab;

/// A running writer; stops (and is joined) by [`VipWriter::stop`] or on drop.
pub struct VipWriter {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl VipWriter {
    /// Starts writing `vip-writer/<n mod 64>` through `https://VIP:2379` from `host`.
    pub fn start(lab: Arc<TestLab>, host: &str) -> VipWriter {
        let vip = lab.lab().vip.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, writes, failed, host) =
                (stop.clone(), writes.clone(), failed.clone(), host.to_string());
            std::thread::spawn(move || {
                let endpoint = format!("--endpoints=https://{vip}:2379");
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let o = lab.exec(
                        &host,
                        &[
                            "/usr/local/sbin/hactl-etcdctl",
                            &endpoint,
                            "--command-timeout=3s",
                            "put",
                            &format!("vip-writer/{}", i % 64),
                            &i.to_string(),
                        ],
                    );
                    writes.fetch_add(1, Ordering::Relaxed);
                    if !o.status.success() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("vip writer: {}", String::from_utf8_lossy(&o.stderr));
                    }
                }
            })
        };
        VipWriter {
            stop,
            writes,
            failed,
            thread: Some(thread),
        }
    }

    /// (writes, failed writes) so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.writes.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Stops the writer, waits for its last write, returns (writes, failed writes).
    pub fn stop(mut self) -> (usize, usize) {
        self.halt();
        self.counts()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for VipWriter {
    fn drop(&mut self) {
        self.halt();
    }
}
