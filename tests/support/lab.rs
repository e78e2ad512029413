//! A lab for one test: `TestLab::up` brings up real hosts (systemd-nspawn) named after the test,
//! and dropping it tears them down, also when the test panics.
//!
//! `support::lab` (see `support/mod.rs`).
//! Tests that need a lab need root; without it `TestLab::up` prints `SKIPPED <test>: needs root`
//! and returns `None`, and the test returns early.
#![allow(dead_code)]

use hactl::lab::{self, Fault, Lab, LabHost, LabUpOptions};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// A running lab, removed on drop.
pub struct TestLab {
    lab: Lab,
    root: PathBuf,
    removed: bool,
}

/// Whether this process runs as root; prints the skip line when not.
pub fn have_root(test_name: &str) -> bool {
    if lab::require_root().is_ok() {
        true
    } else {
        println!("SKIPPED {test_name}: needs root");
        false
    }
}

/// A short lab name for a test: `t<hash of the test name>-<pid>`, so the same test in two
/// processes (two work trees, two CI jobs) gets two labs.
fn lab_name(test_name: &str, pid: u32) -> String {
    format!("t{:04x}-{pid}", fnv(test_name) & 0xffff)
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Removes labs of this test left by processes that are gone (a run killed before its drops).
fn remove_stale(root: &Path, test_name: &str) {
    let prefix = format!("t{:04x}-", fnv(test_name) & 0xffff);
    let Ok(entries) = std::fs::read_dir(root.join("labs")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("removing stale lab {name}");
            if let Err(e) = lab::down_at(root, &name) {
                eprintln!("could not remove stale lab {name}: {e}");
            }
        }
    }
}

/// Whether the test labs keep their hosts' disks in memory (`LabUpOptions::in_memory`): yes, unless
/// `HACTL_LAB_IN_MEMORY=0`. On the 2-core machines the suite runs on, the lab hosts' writes (the
/// Kubernetes binaries copied to every host, etcd's WAL and its fsyncs) cost the kernel's
/// writeback a third of a core, and the lab stage took 1833 s in memory against more than 3,000
/// on disk (docs/development/testing.md).
pub fn in_memory() -> bool {
    std::env::var("HACTL_LAB_IN_MEMORY").map_or(true, |v| v != "0")
}

impl TestLab {
    /// Brings up `cps` control planes, `lbs` load balancers and `spares` spares on `suite`
    /// (`trixie`, `bookworm`); `None` (after printing `SKIPPED`) when not root. Panics if the lab
    /// does not come up.
    pub fn up(test_name: &str, cps: u8, lbs: u8, spares: u8, suite: &str) -> Option<TestLab> {
        Self::up_with(test_name, |opts| {
            opts.control_planes = cps;
            opts.load_balancers = lbs;
            opts.spares = spares;
            opts.suite = suite.to_string();
        })
    }

    /// Like [`TestLab::up`], with the lab's shape set by `shape` (name, root and inventory path
    /// are the test's).
    pub fn up_with(test_name: &str, shape: impl FnOnce(&mut LabUpOptions)) -> Option<TestLab> {
        if !have_root(test_name) {
            return None;
        }
        let root = lab::lab_root();
        remove_stale(&root, test_name);
        let name = lab_name(test_name, std::process::id());
        let mut opts = LabUpOptions::new(&name);
        opts.in_memory = in_memory();
        shape(&mut opts);
        opts.root = root.clone();
        opts.out = lab::lab_dir(&root, &name).join("inventory.yaml");
        let started = Instant::now();
        let mut result = lab::up(&opts);
        if let Err(e) = &result {
            // Boot trouble of the lab itself (not of what the test proves) gets one more try,
            // said out loud so a pattern shows in the logs.
            eprintln!("{test_name}: lab {name} did not come up ({e}); tearing down and trying once more");
            let _ = lab::down_at(&root, &name);
            result = lab::up(&opts);
        }
        match result {
            Ok(lab) => {
                eprintln!(
                    "{test_name}: lab {name} up in {:.1} s",
                    started.elapsed().as_secs_f64()
                );
                Some(TestLab {
                    lab,
                    root,
                    removed: false,
                })
            }
            Err(e) => {
                let _ = lab::down_at(&root, &name);
                panic!("{test_name}: lab {name} did not come up: {e}");
            }
        }
    }

    /// `hactl lab up --name <the test's lab> ARGS` (the binary, as a user runs it), which must
    /// succeed; the lab it made is torn down on drop like any other.
    pub fn up_cli(test_name: &str, args: &[&str]) -> Option<TestLab> {
        if !have_root(test_name) {
            return None;
        }
        let root = lab::lab_root();
        remove_stale(&root, test_name);
        let name = lab_name(test_name, std::process::id());
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
            .args(["lab", "up", "--name", &name])
            .args(in_memory().then_some("--in-memory"))
            .args(args)
            .env("HACTL_LAB_DIR", &root)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run hactl lab up");
        let loaded = Lab::load(&root, &name);
        let lab = TestLab {
            lab: match loaded {
                Ok(lab) => lab,
                Err(e) => {
                    let _ = lab::down_at(&root, &name);
                    panic!(
                        "{test_name}: hactl lab up {args:?} left no lab ({e}): {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            },
            root,
            removed: false,
        };
        assert!(
            out.status.success(),
            "{test_name}: hactl lab up {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "{test_name}: lab {name} up (hactl lab up {args:?}) in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Some(lab)
    }

    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    pub fn name(&self) -> &str {
        &self.lab.name
    }

    pub fn inventory(&self) -> &Path {
        &self.lab.inventory_path
    }

    pub fn hosts(&self) -> &[LabHost] {
        &self.lab.hosts
    }

    pub fn host(&self, name: &str) -> &LabHost {
        self.lab.host(name).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn ip(&self, host: &str) -> Ipv4Addr {
        self.host(host).ip
    }

    /// Runs `argv` on `host` (nsenter into its namespaces); panics if it cannot be started.
    pub fn exec(&self, host: &str, argv: &[&str]) -> Output {
        self.lab
            .exec(host, argv)
            .unwrap_or_else(|e| panic!("{host}: {argv:?}: {e}"))
    }

    /// The executable `unit`'s main process on `host` runs, as `/proc/<pid>/exe` links it.
    pub fn main_exe(&self, host: &str, unit: &str) -> String {
        let script = format!("readlink /proc/$(systemctl show -p MainPID --value {unit})/exe");
        self.exec_ok(host, &["sh", "-c", &script]).trim().to_string()
    }

    /// `curl -sS -m 5 URL` on `host` with that host's etcd CA and client certificate (what
    /// `hactl up` installs under [`hactl::etcd::PKI_DIR`]): etcd's HTTP services, as a client of
    /// the cluster asks them.
    pub fn curl_etcd(&self, host: &str, url: &str) -> Output {
        let pki = hactl::etcd::PKI_DIR;
        let (ca, cert, key) = (
            format!("{pki}/ca.crt"),
            format!("{pki}/client.crt"),
            format!("{pki}/client.key"),
        );
        self.exec(
            host,
            &[
                "curl", "-sS", "-m", "5", "--cacert", &ca, "--cert", &cert, "--key", &key, url,
            ],
        )
    }

    /// Runs `argv` on `host` and returns its stdout; panics unless it exits 0.
    pub fn exec_ok(&self, host: &str, argv: &[&str]) -> String {
        let out = self.exec(host, argv);
        assert!(
            out.status.success(),
            "{host}: {argv:?} exited with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// When `unit` on `host` last entered the active state, in microseconds after the host
    /// booted (0: never since boot); a unit restarted in between shows a later figure.
    pub fn active_since_us(&self, host: &str, unit: &str) -> u64 {
        self.active_since_us_of(host, &[unit])[0]
    }

    /// [`Self::active_since_us`] of each of `units`, in that order, read with one command.
    pub fn active_since_us_of(&self, host: &str, units: &[&str]) -> Vec<u64> {
        let mut argv = vec!["systemctl", "show"];
        argv.extend_from_slice(units);
        argv.extend_from_slice(&["-p", "ActiveEnterTimestampMonotonic", "--value"]);
        let out = self.exec_ok(host, &argv);
        // One value per unit, the units' blocks separated by an empty line.
        let values: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(values.len(), units.len(), "{host}: {units:?}: {out:?}");
        units
            .iter()
            .zip(values)
            .map(|(unit, v)| {
                v.parse()
                    .unwrap_or_else(|e| panic!("{host}: {unit}: ActiveEnterTimestampMonotonic {v:?}: {e}"))
            })
            .collect()
    }

    pub fn fault(&mut self, host: &str, fault: Fault) {
        self.lab
            .fault(host, fault)
            .unwrap_or_else(|e| panic!("{host}: {fault}: {e}"));
    }

    /// Tears the lab down now and returns what `down` said.
    pub fn down(mut self) -> Result<(), lab::LabError> {
        self.removed = true;
        lab::down_at(&self.root, &self.lab.name)
    }
}

impl AsRef<TestLab> for TestLab {
    fn as_ref(&self) -> &TestLab {
        self
    }
}

impl Drop for TestLab {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        if let Err(e) = lab::down_at(&self.root, &self.lab.name) {
            if std::thread::panicking() {
                eprintln!("lab {}: teardown failed: {e}", self.lab.name);
            } else {
                panic!("lab {}: teardown failed: {e}", self.lab.name);
            }
        }
    }
}

/// Whether `addr:22` sends an SSH banner within about two seconds.
pub fn ssh_banner(addr: Ipv4Addr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::from((addr, 22)), Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"SSH-2.0"
}

/// Polls `cond` with a growing interval until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

/// Live processes (not zombies) whose command line contains `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
            .unwrap_or(true);
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        if !zombie && cmd.contains(needle) {
            found.push(format!("{pid}: {cmd}"));
        }
    }
    found
}

/// Mount points at or under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.to_string_lossy().into_owned();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| *m == dir || m.starts_with(&format!("{dir}/")))
        .map(str::to_string)
        .collect()
}

pub fn link_exists(ifname: &str) -> bool {
    Path::new("/sys/class/net").join(ifname).exists()
}

/// After a finished CA rotation in the state directory's PKI directory `pki`: no rotation of
/// `ca_dir` (`etcd`, `kubernetes`, `front-proxy`) is in progress, and the old CA `old_ca` is kept,
/// once, as `ca-retired-<run>.crt`.
pub fn assert_rotation_closed_and_old_ca_retired(pki: &Path, ca_dir: &str, old_ca: &str) {
    let dir = pki.join(ca_dir);
    assert!(
        !dir.join("rotation").exists(),
        "a {ca_dir} rotation is still open"
    );
    let retired: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ca-retired-") && n.ends_with(".crt"))
        .collect();
    assert_eq!(retired.len(), 1, "{ca_dir}: {retired:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join(&retired[0])).unwrap(),
        old_ca,
        "{ca_dir}/{} is not the old CA",
        retired[0]
    );
}

/// Polls `read` every 500 ms until it gives `want` or `timeout` has passed; the last seen.
pub fn wait_for<T: PartialEq>(timeout: Duration, want: &T, read: impl Fn() -> T) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let seen = read();
        if &seen == want || Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The DER of every certificate in a PEM bundle, sorted: a set, so order and wrapping do not
/// count (nothing for a bundle that does not parse).
pub fn cert_set(pem: &str) -> Vec<Vec<u8>> {
    let mut ders = hactl::pki::bundle_ders(pem).unwrap_or_default();
    ders.sort();
    ders
}

/// Writes `content` to `path` on `host` of `lab` with `mode` (through base64, so any text
/// survives the shell).
pub fn put_file(lab: &TestLab, host: &str, path: &str, content: &str, mode: &str) {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(content);
    lab.exec_ok(
        host,
        &[
            "sh",
            "-c",
            &format!("echo {b64} | base64 -d > {path} && chmod {mode} {path}"),
        ],
    );
}
