//! A writer through the VIP, shared by the lab tests that prove "no write lost or failed": a
//! thread runs `hactl-etcdctl --endpoints=https://<VIP>:2379 --command-timeout=10s put` on one lab
//! host in a loop (each put a new process, reading the host's trust file and client certificate
//! afresh), 100 ms apart, until stopped (or dropped). Keys are `<prefix>/0..63`, the value is the
//! write's number. [`VipWriter::start_local`] writes to the host's own member instead, for a lab
//! without load balancers.
//!
//! What counts as failed, when [`VipWriter::stop`] adds it up:
//! - a put that etcd refused, or that took more than 10 s (3 s were too few on the loaded 2-core
//!   machine: a put starved of CPU missed it without any outage);
//! - a put that failed with one of etcd's leader-change errors ([`LEADER_CHANGE_ERRORS`]) and
//!   failed again when sent once more. etcd itself drops a proposal that reaches the leader
//!   while it hands leadership over (`move-leader`, which hactl runs before it restarts a
//!   leader), and the member that forwarded it answers `request timed out` 7 s later. That is
//!   the transient error at a leadership move that docs/recovery.md allows; a client that sends
//!   the same put again succeeds. Such a put counts as *retried*, and retried puts beyond the
//!   number of leader changes the members logged while the writer ran count as failed;
//! - an acknowledged write that is gone: once stopped, the writer reads its keys back, and each
//!   must hold the last value acknowledged for it (or a later one whose put failed, since a put
//!   that timed out may still have been committed).
//!
//! The slowest write is printed when the writer stops, so a pause shorter than 10 s still shows.
//!
//! `support::writer` (see `support/mod.rs`); it builds on `support::lab`.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::lab::TestLab;

/// Keys the writer cycles through: `<prefix>/0` .. `<prefix>/63`.
const SLOTS: u64 = 64;

/// etcd's answers to a proposal lost to a change of leader (etcd's `etcdserver` errors and raft's
/// dropped proposal). A put that failed with one of these is sent once more.
pub const LEADER_CHANGE_ERRORS: [&str; 4] = [
    "etcdserver: request timed out",
    "etcdserver: leader changed",
    "etcdserver: no leader",
    "raft proposal dropped",
];

/// Whether `stderr` of a failed put names a leader-change error.
pub fn is_leader_change_error(stderr: &str) -> bool {
    LEADER_CHANGE_ERRORS.iter().any(|e| stderr.contains(e))
}

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
const PAUSE: Duration = Duration::from_millis(100);

/// What the writer's thread keeps: counts, the last acknowledged value of each key, and the
/// values whose put failed (they may have been committed all the same).
#[derive(Default)]
struct Tally {
    writes: usize,
    failed: usize,
    retried: usize,
    slowest_ms: u128,
    last_acked: Vec<Option<u64>>,
    unacknowledged: BTreeSet<u64>,
}

/// Run once the writer stopped: reads the keys back and counts the leader changes; returns the
/// problems found.
type Check = Box<dyn FnOnce(&Tally) -> Vec<String> + Send>;

/// A running writer; [`VipWriter::stop`] returns (writes, failed).
pub struct VipWriter {
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    handle: Option<JoinHandle<()>>,
    check: Option<Check>,
}

impl VipWriter {
    /// Starts writing keys `<prefix>/0..63` through the lab's VIP from `host` (`lab` a
    /// [`TestLab`], or anything that holds one, such as a Kubernetes lab).
    pub fn start<L: AsRef<TestLab> + Send + Sync + 'static>(
        lab: Arc<L>,
        host: &str,
        prefix: &str,
    ) -> VipWriter {
        let vip = format!("--endpoints=https://{}:2379", (*lab).as_ref().lab().vip);
        Self::start_at(lab, host, prefix, Some(vip))
    }

    /// [`VipWriter::start`], writing to `host`'s own etcd member instead of the VIP (a lab
    /// without load balancers): the same counting, retry rule and read-back.
    pub fn start_local<L: AsRef<TestLab> + Send + Sync + 'static>(
        lab: Arc<L>,
        host: &str,
        prefix: &str,
    ) -> VipWriter {
        Self::start_at(lab, host, prefix, None)
    }

    /// `endpoint`: etcdctl's `--endpoints=…` argument, or none for `hactl-etcdctl`'s default
    /// (the host's own member).
    fn start_at<L: AsRef<TestLab> + Send + Sync + 'static>(
        lab: Arc<L>,
        host: &str,
        prefix: &str,
        endpoint: Option<String>,
    ) -> VipWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally {
            last_acked: vec![None; SLOTS as usize],
            ..Tally::default()
        }));
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            .saturating_sub(1);
        let handle = {
            let (stop, tally, lab) = (stop.clone(), tally.clone(), lab.clone());
            let (host, prefix, endpoint) = (host.to_string(), prefix.to_string(), endpoint.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let lab: &TestLab = (*lab).as_ref();
                    let put = || {
                        let started = Instant::now();
                        let (key, value) = (format!("{prefix}/{}", i % SLOTS), i.to_string());
                        let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
                        argv.extend(endpoint.as_deref());
                        argv.extend(["--command-timeout=10s", "put", &key, &value]);
                        let o = lab.exec(&host, &argv);
                        (o, started.elapsed().as_millis())
                    };
                    let (mut o, took) = put();
                    let mut retried = false;
                    let mut slowest = took;
                    if !o.status.success() && is_leader_change_error(&String::from_utf8_lossy(&o.stderr)) {
                        eprintln!(
                            "writer: put {i} lost to a leader change, sending it once more: {}",
                            String::from_utf8_lossy(&o.stderr).trim()
                        );
                        let (again, took) = put();
                        (o, retried) = (again, true);
                        slowest = slowest.max(took);
                    }
                    {
                        let mut t = tally.lock().unwrap();
                        t.writes += 1;
                        t.slowest_ms = t.slowest_ms.max(slowest);
                        if o.status.success() {
                            t.last_acked[(i % SLOTS) as usize] = Some(i);
                            t.retried += usize::from(retried);
                        } else {
                            t.failed += 1;
                            t.unacknowledged.insert(i);
                        }
                    }
                    if !o.status.success() {
                        eprintln!("writer: put {i}: {}", String::from_utf8_lossy(&o.stderr));
                        explain_failure(lab);
                    }
                    std::thread::sleep(PAUSE);
                }
            })
        };
        let check = {
            let (host, prefix) = (host.to_string(), prefix.to_string());
            Box::new(move |t: &Tally| {
                let lab: &TestLab = (*lab).as_ref();
                let mut problems = lost_writes(lab, &host, endpoint.as_deref(), &prefix, t);
                let changes = leader_changes_since(lab, since);
                eprintln!("writer: the members logged {changes} leader changes while it ran");
                if t.retried > changes {
                    problems.push(format!(
                        "{} puts were lost to a leader change, but the members logged only \
                         {changes} leader changes while the writer ran",
                        t.retried
                    ));
                }
                problems
            }) as Check
        };
        VipWriter {
            stop,
            tally,
            handle: Some(handle),
            check: Some(check),
        }
    }

    /// Writes so far.
    pub fn writes(&self) -> usize {
        self.tally.lock().unwrap().writes
    }

    /// Stops the writer, waits for its last write and reads its keys back: (writes, failed), where
    /// failed also counts each lost acknowledged write and each retry no leader change explains
    /// (see the module's comment).
    pub fn stop(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
        let t = self.tally.lock().unwrap();
        let problems = (self.check.take().unwrap())(&t);
        for p in &problems {
            eprintln!("writer: {p}");
        }
        eprintln!(
            "writer: {} writes, {} failed, {} sent twice after a leader change, the slowest took {} ms",
            t.writes, t.failed, t.retried, t.slowest_ms
        );
        (t.writes, t.failed + problems.len())
    }
}

impl Drop for VipWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads `<prefix>/` back through the writer's endpoint (three tries: the read itself may meet a leader
/// change) and names each key that lost its last acknowledged value.
fn lost_writes(lab: &TestLab, host: &str, endpoint: Option<&str>, prefix: &str, t: &Tally) -> Vec<String> {
    let key_prefix = format!("{prefix}/");
    let mut argv = vec!["/usr/local/sbin/hactl-etcdctl"];
    argv.extend(endpoint);
    argv.extend(["--command-timeout=10s", "get", "--prefix", &key_prefix]);
    let mut read = None;
    for _ in 0..3 {
        let o = lab.exec(host, &argv);
        if o.status.success() {
            read = Some(String::from_utf8_lossy(&o.stdout).into_owned());
            break;
        }
        eprintln!(
            "writer: reading the keys back: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let Some(read) = read else {
        return vec![format!("could not read {key_prefix} back")];
    };
    let held = parse_key_values(&read);
    check_slots(prefix, &held, t)
}

/// `etcdctl get`'s output (key and value on alternate lines) as (key, value) pairs.
fn parse_key_values(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// For each key that was acknowledged at least once: the value it holds must be the last one
/// acknowledged for it, or a later one whose put failed.
fn check_slots(prefix: &str, held: &[(String, String)], t: &Tally) -> Vec<String> {
    let mut problems = Vec::new();
    for (slot, acked) in t.last_acked.iter().enumerate() {
        let Some(acked) = acked else { continue };
        let key = format!("{prefix}/{slot}");
        let value = held
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse::<u64>().ok());
        match value {
            Some(v) if v == *acked => {}
            Some(v) if v > *acked && t.unacknowledged.contains(&v) => {}
            Some(v) => problems.push(format!(
                "{key} holds {v}, but put {acked} was acknowledged last: an acknowledged write is lost"
            )),
            None => problems.push(format!(
                "{key} is missing, but put {acked} was acknowledged: an acknowledged write is lost"
            )),
        }
    }
    problems
}

/// Leader changes the etcd members logged since `since` (seconds since the epoch): each new
/// leader logs `became leader at term` once, whether elected or handed leadership.
fn leader_changes_since(lab: &TestLab, since: u64) -> usize {
    let since = format!("@{since}");
    lab.hosts()
        .iter()
        .filter(|h| h.name.starts_with("cp"))
        .map(|h| {
            let o = lab.exec(
                &h.name,
                &[
                    "journalctl",
                    "-u",
                    "etcd.service",
                    "--since",
                    &since,
                    "--no-pager",
                    "-o",
                    "cat",
                ],
            );
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("became leader at term"))
                .count()
        })
        .sum()
}

#[cfg(test)]
mod checks {
    use super::*;

    fn tally(acked: &[(u64, u64)], unacknowledged: &[u64]) -> Tally {
        let mut t = Tally {
            last_acked: vec![None; SLOTS as usize],
            ..Tally::default()
        };
        for (slot, v) in acked {
            t.last_acked[*slot as usize] = Some(*v);
        }
        t.unacknowledged = unacknowledged.iter().copied().collect();
        t
    }

    #[test]
    fn writer_read_back_finds_lost_and_accepts_later_unacknowledged_values() {
        let held = parse_key_values("w/1\n65\nw/2\n2\nw/3\n131\n");
        assert_eq!(held.len(), 3);
        // Each key holds its last acknowledged value, or a later one whose put failed.
        let t = tally(&[(1, 65), (2, 2), (3, 67)], &[131]);
        assert!(check_slots("w", &held, &t).is_empty());
        // An older value than the last acknowledged, a later value never attempted and a missing
        // key are each a lost write.
        let t = tally(&[(1, 129), (2, 2), (3, 67), (4, 4)], &[]);
        let problems = check_slots("w", &held, &t);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("w/1 holds 65, but put 129"));
        assert!(problems[1].contains("w/3 holds 131, but put 67"));
        assert!(problems[2].contains("w/4 is missing"));
    }

    #[test]
    fn only_etcds_leader_change_errors_are_sent_twice() {
        assert!(is_leader_change_error(
            "{\"level\":\"warn\"} Error: etcdserver: request timed out"
        ));
        assert!(is_leader_change_error("Error: etcdserver: leader changed"));
        assert!(!is_leader_change_error("Error: context deadline exceeded"));
        assert!(!is_leader_change_error(
            "Error: etcdserver: mvcc: database space exceeded"
        ));
    }
}
