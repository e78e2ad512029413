//! What the Kubernetes lab tests share: the real server binaries (from `HACTL_KUBE_BIN_DIR`, or
//! built into the cache on first use), a lab with a control plane brought up by `hactl up`,
//! kubectl through the VIP with the admin kubeconfig, and the Lease holders from `hactl status`.
//!
//! `support::kube` (see `support/mod.rs`); it builds on `support::lab`.
//!
//! As root these tests never skip: without `HACTL_KUBE_BIN_DIR` they build (or reuse) the cache
//! with `hactl::lab::kubernetes::ensure_binaries`, and panic if that fails. Without root the lab
//! itself cannot run and the test prints `SKIPPED <test>: needs root`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::lab::{eventually, have_root, TestLab};
use super::writer::is_leader_change_error;

/// The directory holding kube-apiserver, kube-controller-manager, kube-scheduler (and kubectl),
/// or `None` (after `SKIPPED … needs root`) without root.
pub fn bin_dir(test_name: &str) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HACTL_KUBE_BIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    if !have_root(test_name) {
        return None;
    }
    let version = hactl::lab::kubernetes::DEFAULT_VERSION;
    eprintln!("{test_name}: HACTL_KUBE_BIN_DIR not set: building or reusing the Kubernetes {version} cache");
    Some(
        hactl::lab::kubernetes::ensure_binaries(version)
            .unwrap_or_else(|e| panic!("{test_name}: no Kubernetes binaries and the build failed: {e}")),
    )
}

/// What `<dir>/kube-apiserver --version` says (`1.20.2`).
pub fn version_of(dir: &Path) -> semver::Version {
    let out = Command::new(dir.join("kube-apiserver"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{}: cannot run kube-apiserver --version: {e}", dir.display()));
    hactl::kubernetes::skew::parse_kubernetes_version(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| panic!("cannot read the version of {}", dir.display()))
}

/// Exit code (or the signal that ended it), stdout and stderr of `out`, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?} ({})\n{}{}",
        out.status.code(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A lab whose control plane runs the real binaries.
pub struct KubeLab {
    pub lab: TestLab,
    pub inv: PathBuf,
    pub state: PathBuf,
    pub bin_dir: PathBuf,
    pub version: semver::Version,
    /// How long the first `hactl up` took.
    pub up_seconds: f64,
    /// What serves a release the inventory downloads (`up_from_init`'s etcd), for every later
    /// `hactl` run of the test.
    pub release_server: Option<tokio::runtime::Runtime>,
}

impl AsRef<TestLab> for KubeLab {
    fn as_ref(&self) -> &TestLab {
        &self.lab
    }
}

impl KubeLab {
    /// A lab of `cps` control planes, `lbs` load balancers and `spares` spares (trixie), with the
    /// kubernetes section, brought up by `hactl up`; every control-plane apiserver answers
    /// `/readyz`. `None` without root.
    pub fn up(test_name: &str, cps: u8, lbs: u8, spares: u8) -> Option<KubeLab> {
        Self::up_with(test_name, |opts| {
            opts.control_planes = cps;
            opts.load_balancers = lbs;
            opts.spares = spares;
        })
    }

    /// Like [`KubeLab::up`], with the lab's shape (on trixie) set by `shape`, e.g. its workers.
    pub fn up_with(test_name: &str, shape: impl FnOnce(&mut hactl::lab::LabUpOptions)) -> Option<KubeLab> {
        let bin_dir = bin_dir(test_name)?;
        let version = version_of(&bin_dir);
        let lab = TestLab::up_with(test_name, |opts| {
            shape(opts);
            opts.suite = "trixie".to_string();
        })?;
        let inv = lab.inventory().to_path_buf();
        Some(Self::bring_up(test_name, lab, inv, bin_dir, version, None, |t| t))
    }

    /// Like [`KubeLab::up`], with `kubernetes.mode: static-pod` in the inventory before the first
    /// `up`: the control plane runs as static pods of each control-plane host's kubelet.
    pub fn up_static_pods(test_name: &str, cps: u8, lbs: u8, spares: u8) -> Option<KubeLab> {
        let bin_dir = bin_dir(test_name)?;
        let version = version_of(&bin_dir);
        let lab = TestLab::up(test_name, cps, lbs, spares, "trixie")?;
        let inv = lab.inventory().to_path_buf();
        Some(Self::bring_up(test_name, lab, inv, bin_dir, version, None, |t| {
            let moved = t.replacen("  kubernetes:\n", "  kubernetes:\n    mode: static-pod\n", 1);
            assert_ne!(moved, t, "no kubernetes section:\n{t}");
            moved
        }))
    }

    /// `hactl init`'s inventory on `suite` (3 control planes, 2 load balancers, as `init`
    /// writes it; `support::init`: its etcd release served on loopback) with the lab's
    /// `kubernetes` section in place of `init`'s (the one release built here), brought up by
    /// `hactl up`.
    pub fn up_from_init(test_name: &str, suite: &str) -> Option<KubeLab> {
        let bin_dir = bin_dir(test_name)?;
        let version = version_of(&bin_dir);
        let lab = TestLab::up(test_name, 3, 2, 0, suite)?;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (url, _) = super::init::serve_etcd_release(&rt);
        let inv = super::init::write_inventory(&lab, &url);
        Some(Self::bring_up(
            test_name,
            lab,
            inv,
            bin_dir,
            version,
            Some(rt),
            |t| t,
        ))
    }

    fn bring_up(
        test_name: &str,
        lab: TestLab,
        inv: PathBuf,
        bin_dir: PathBuf,
        version: semver::Version,
        release_server: Option<tokio::runtime::Runtime>,
        edit: impl FnOnce(String) -> String,
    ) -> KubeLab {
        hactl::lab::kubernetes::add_to_inventory(&inv, &version.to_string(), &bin_dir).unwrap();
        let state = inv.parent().unwrap().join("state");
        let k = KubeLab {
            lab,
            inv,
            state,
            bin_dir,
            version,
            up_seconds: 0.0,
            release_server,
        };
        k.set_inventory(edit);
        let started = Instant::now();
        let out = k.hactl(&["up", "--yes"]);
        assert!(out.status.success(), "hactl up failed: {}", text(&out));
        let up_seconds = started.elapsed().as_secs_f64();
        eprintln!("{test_name}: hactl up with Kubernetes took {up_seconds:.1} s");
        for host in k.control_planes() {
            assert!(
                eventually(Duration::from_secs(120), || k.readyz_on(&host)),
                "{host}: /readyz did not answer"
            );
        }
        KubeLab { up_seconds, ..k }
    }

    /// The control-plane host names, in inventory order.
    pub fn control_planes(&self) -> Vec<String> {
        let inv = hactl::inventory::load(&self.inv).unwrap();
        inv.with_role(hactl::inventory::Role::ControlPlane)
            .iter()
            .map(|h| h.name.clone())
            .collect()
    }

    /// `hactl ARGS -i INV`, logged.
    pub fn hactl(&self, args: &[&str]) -> Output {
        self.hactl_env(args, &[])
    }

    /// `hactl ARGS -i INV` with `env` set (e.g. the crash switch `HACTL_CRASH_AFTER`; the
    /// test-only variables are otherwise removed: `support::cli::hactl_command`), logged.
    pub fn hactl_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let started = Instant::now();
        let out = super::cli::hactl_command()
            .args(args)
            .arg("-i")
            .arg(&self.inv)
            .envs(env.iter().copied())
            .output()
            .expect("run hactl");
        eprintln!(
            "hactl {args:?} {env:?} ({:.1} s) -> {}",
            started.elapsed().as_secs_f64(),
            text(&out)
        );
        out
    }

    /// The `--etcd-servers=…` argument of the kube-apiserver running on `host` (read from its
    /// process, not its unit).
    pub fn running_etcd_servers(&self, host: &str) -> String {
        let cmdline = self.lab.exec_ok(
            host,
            &[
                "sh",
                "-c",
                "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value kube-apiserver)/cmdline",
            ],
        );
        cmdline
            .split_whitespace()
            .find(|a| a.starts_with("--etcd-servers="))
            .unwrap_or_else(|| panic!("{host}: no --etcd-servers in {cmdline}"))
            .to_string()
    }

    /// `hactl ARGS` that must succeed; its stdout.
    pub fn hactl_ok(&self, args: &[&str]) -> String {
        let out = self.hactl(args);
        assert!(out.status.success(), "hactl {args:?} failed: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The kubectl of the bundle (Debian's kubernetes-client, same minor), else the one on PATH.
    pub fn kubectl_path(&self) -> PathBuf {
        let p = self.bin_dir.join("kubectl");
        if p.is_file() {
            p
        } else {
            PathBuf::from("kubectl")
        }
    }

    /// `kubectl --kubeconfig <state>/admin.kubeconfig ARGS` (through the VIP), 5 s per request.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_input(args, None)
    }

    /// [`KubeLab::kubectl`] with `input` on stdin (for `apply -f -`).
    pub fn kubectl_input(&self, args: &[&str], input: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(self.kubectl_path())
            .arg("--kubeconfig")
            .arg(self.state.join("admin.kubeconfig"))
            .arg("--request-timeout=5s")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(text) = input {
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?} failed: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `/readyz` of `host`'s own apiserver, asked on the host against the cluster CA.
    pub fn readyz_on(&self, host: &str) -> bool {
        let url = format!("https://{}:6443/readyz", self.lab.ip(host));
        self.lab
            .exec(
                host,
                &[
                    "curl",
                    "-fsS",
                    "-m",
                    "5",
                    "--cacert",
                    hactl::kubernetes::files::CA_CRT,
                    &url,
                ],
            )
            .status
            .success()
    }

    /// Waits up to `timeout` until `kubectl get KIND NAME -o jsonpath=PATH` through the VIP
    /// prints exactly `want`; panics with the last answer and `what` otherwise.
    pub fn wait_jsonpath(
        &self,
        kind: &str,
        name: &str,
        path: &str,
        want: &str,
        timeout: Duration,
        what: &str,
    ) {
        let mut last = String::new();
        let seen = eventually(timeout, || {
            let o = self.kubectl(&["get", kind, name, "-o", &format!("jsonpath={path}")]);
            last = text(&o);
            o.status.success() && String::from_utf8_lossy(&o.stdout) == want
        });
        assert!(
            seen,
            "{what}: {kind} {name} {path} is not {want:?} after {timeout:?}: {last}"
        );
    }

    /// Runs `hactl up --yes` and asserts it succeeds with `no changes` (`when` names the moment).
    pub fn assert_up_no_changes(&self, when: &str) {
        let out = self.hactl(&["up", "--yes"]);
        assert!(out.status.success(), "up {when}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "no changes",
            "up {when}: {}",
            text(&out)
        );
    }

    /// Asserts that the API has no Node `node` (kubectl says NotFound).
    pub fn assert_node_gone(&self, node: &str, when: &str) {
        let out = self.kubectl(&["get", "node", node]);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"),
            "Node {node} is still there {when}: {}",
            text(&out)
        );
    }

    /// `hactl status -o json`: exit code and document.
    pub fn status(&self) -> (i32, serde_json::Value) {
        let out = self.hactl(&["status", "-o", "json"]);
        let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        (out.status.code().unwrap_or(-1), doc)
    }

    /// Waits up to `timeout` for `hactl status` to exit 0; the last document when it does not.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), serde_json::Value> {
        let mut last = serde_json::Value::Null;
        if eventually(timeout, || {
            let (code, doc) = self.status();
            last = doc;
            code == 0
        }) {
            Ok(())
        } else {
            Err(last)
        }
    }

    /// Loses quorum: etcd killed and its data dir removed on each of `lost`, then waits until
    /// `survivor`'s member no longer reports itself healthy (it noticed the lost quorum).
    pub fn lose_etcd_members(&self, lost: &[&str], survivor: &str) {
        for h in lost {
            self.lab
                .exec(h, &["systemctl", "kill", "-s", "KILL", "etcd.service"]);
            self.lab.exec(h, &["systemctl", "stop", "etcd.service"]);
            self.lab.exec_ok(h, &["rm", "-rf", "/var/lib/etcd"]);
        }
        assert!(
            eventually(Duration::from_secs(30), || {
                let out = self.lab.exec(
                    survivor,
                    &["curl", "-s", "-m", "2", "http://127.0.0.1:2381/health"],
                );
                !String::from_utf8_lossy(&out.stdout).contains("\"health\":\"true\"")
            }),
            "{survivor} did not notice the lost quorum"
        );
    }

    /// Lease name → holder host, from `hactl status` (a Lease nobody holds maps to "").
    pub fn lease_holders(&self) -> BTreeMap<String, String> {
        let (_, doc) = self.status();
        doc["kubernetes"]["leases"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|l| {
                (
                    l["name"].as_str().unwrap_or("").to_string(),
                    l["holderHost"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// Waits until both Leases are held by control-plane hosts accepted by `ok`; the holders.
    pub fn wait_leases(&self, timeout: Duration, ok: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
        let mut last = BTreeMap::new();
        let held = eventually(timeout, || {
            last = self.lease_holders();
            last.len() == 2 && last.values().all(|h| !h.is_empty() && ok(h))
        });
        assert!(
            held,
            "the Leases were not held as wanted within {timeout:?}: {last:?}"
        );
        last
    }

    /// Lease holders read straight from the API with kubectl (name → holderIdentity's host part),
    /// without `hactl status` (for timing a failover closely).
    pub fn lease_holders_via_kubectl(&self) -> Option<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for name in ["kube-controller-manager", "kube-scheduler"] {
            let o = self.kubectl(&[
                "-n",
                "kube-system",
                "get",
                "lease",
                name,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ]);
            if !o.status.success() {
                return None;
            }
            let id = String::from_utf8_lossy(&o.stdout).to_string();
            out.insert(
                format!("kube-system/{name}"),
                id.split('_').next().unwrap_or("").to_string(),
            );
        }
        Some(out)
    }
}

impl KubeLab {
    /// Journal entries of the newest run whose id starts with `prefix` (`recover-`, `replace-`).
    pub fn journal(&self, prefix: &str) -> Vec<serde_json::Value> {
        let mut runs: Vec<_> = std::fs::read_dir(self.state.join("runs"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .collect();
        runs.sort_by_key(|e| e.metadata().unwrap().modified().unwrap());
        let run = runs.last().expect("a run").path();
        std::fs::read_to_string(run.join("journal.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Position of the first entry of `step` (exact name) in `phase` in a journal.
    pub fn journal_position(j: &[serde_json::Value], step: &str, phase: &str) -> Option<usize> {
        j.iter().position(|e| e["step"] == step && e["phase"] == phase)
    }

    /// Rewrites the inventory through `f`.
    pub fn set_inventory(&self, f: impl FnOnce(String) -> String) {
        let text = std::fs::read_to_string(&self.inv).unwrap();
        std::fs::write(&self.inv, f(text)).unwrap();
    }

    /// Moves the roles of `from` (etcd, control-plane) to `to`, leaving `from` with `roles: []`
    /// (what the operator does before `replace --host`).
    pub fn move_roles(&self, from: &str, to: &str) {
        let (a, b) = (self.lab.ip(from), self.lab.ip(to));
        self.set_inventory(|t| {
            let moved = t
                .replace(
                    &format!(
                        "address: \"{a}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"
                    ),
                    &format!("address: \"{a}\"\n    prefixLength: 24\n    roles: []"),
                )
                .replace(
                    &format!("address: \"{b}\"\n    prefixLength: 24\n    roles: []"),
                    &format!(
                        "address: \"{b}\"\n    prefixLength: 24\n    roles:\n    - etcd\n    - control-plane"
                    ),
                );
            assert_ne!(moved, t, "the inventory's roles did not change:\n{t}");
            moved
        });
    }

    /// The load balancer that holds the VIP now, if one does.
    pub fn vip_holder(&self) -> Option<String> {
        let inv = hactl::inventory::load(&self.inv).unwrap();
        let vip = inv.vip.as_ref()?.address.to_string();
        inv.with_role(hactl::inventory::Role::LoadBalancer)
            .iter()
            .find(|h| {
                // A host that is down (power cut) holds nothing.
                self.lab
                    .lab()
                    .exec(&h.name, &["ip", "-o", "-4", "addr", "show"])
                    .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(&format!(" {vip}/")))
            })
            .map(|h| h.name.clone())
    }

    /// The CAs the cluster publishes under `key` (`client-ca-file`,
    /// `requestheader-client-ca-file`) of kube-system/extension-apiserver-authentication.
    pub fn published_cas(&self, key: &str) -> String {
        let json = self.kubectl_ok(&[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "extension-apiserver-authentication",
            "-o",
            "json",
        ]);
        let cm: serde_json::Value = serde_json::from_str(&json).unwrap();
        cm["data"][key].as_str().unwrap_or_default().to_string()
    }

    /// Starts polling `GET /api/v1/namespaces/kube-system` through the VIP with the admin
    /// credentials (what `kubectl get namespace kube-system` asks: an object read from etcd)
    /// until the returned poller is stopped; every attempt is recorded. Every availability check
    /// of the Kubernetes labs polls this, not `/readyz`: `/readyz` can answer `[-]etcd failed`
    /// for a moment (its etcd check meets a member going down, or an etcd leader change on a
    /// starved machine; docs/development/known-gaps.md) while the API's reads keep being
    /// answered, and the reads are what a client sees.
    ///
    /// A read answered with one of etcd's leader-change errors is sent once more, as a client
    /// of Kubernetes before 1.23 must: those apiservers pass etcd's transient errors on even for
    /// reads (their gRPC metrics interceptor replaces the etcd client's retrying one; fixed in
    /// 1.23), and every roll hands etcd's leadership over once. A second failure counts as
    /// failed, and the resends are reported (docs/development/known-gaps.md).
    pub fn poll_reads(&self) -> Poller {
        self.poll_reads_with(self.state.join("admin.kubeconfig"))
    }

    /// [`KubeLab::poll_reads`] with another kubeconfig (one kept from a state directory since
    /// lost, say).
    ///
    /// Each request is one `curl` with the kubeconfig's server, CA and client certificate: the
    /// request kubectl makes (a new TLS connection through the VIP, the same credentials), at a
    /// fifth of the CPU (14 ms a request against kubectl's 68 ms, measured on a lab). Five
    /// kubectl processes a second took a third of a core from the 2-core machine the lab tests
    /// share, and a starved machine is what made other requests slow.
    pub fn poll_reads_with(&self, kubeconfig: PathBuf) -> Poller {
        poll_curl(
            kubeconfig,
            |_, server| vec![format!("{server}/api/v1/namespaces/kube-system")],
            // Answered, and with the object asked for (not some other 200).
            |o| {
                let out = String::from_utf8_lossy(&o.stdout);
                o.status.success() && out.ends_with("\nHTTP 200") && out.contains("\"kube-system\"")
            },
            true,
        )
    }

    /// Starts sending writes (`POST`s of objects named by `n`) through the VIP with the admin
    /// credentials ([`poll_curl`]: 10 s per request), resending on etcd's transient answers as a
    /// client must: a write the apiserver answered with one of
    /// etcd's leader-change errors ([`super::writer::LEADER_CHANGE_ERRORS`]: a proposal raft dropped while its
    /// leader handed over, which no apiserver resends) is sent once more, as the etcd labs' VIP
    /// writer does, and on that second send `409 AlreadyExists` counts as written (the first was
    /// committed after all). A second failure counts as failed; the resends are reported
    /// ([`Attempt::resent`]). The test reads its objects back to prove the acknowledged writes.
    pub fn poll_api_writes(
        &self,
        args: impl Fn(u32, &str) -> Vec<String> + Send + 'static,
        ok: impl Fn(&Output) -> bool + Send + 'static,
    ) -> Poller {
        poll_curl(self.state.join("admin.kubeconfig"), args, ok, true)
    }

    /// Starts running `kubectl ARGS(n)` through the VIP with the admin kubeconfig (n = 1, 2, …,
    /// 200 ms apart) until the returned poller is stopped; `ok` judges each answer, and every
    /// attempt is recorded.
    pub fn poll_kubectl(
        &self,
        args: impl Fn(u32) -> Vec<String> + Send + 'static,
        ok: impl Fn(&Output) -> bool + Send + 'static,
    ) -> Poller {
        self.poll_kubectl_with(self.state.join("admin.kubeconfig"), args, ok)
    }

    /// [`KubeLab::poll_kubectl`] with the kubeconfig `kubeconfig`.
    pub fn poll_kubectl_with(
        &self,
        kubeconfig: PathBuf,
        args: impl Fn(u32) -> Vec<String> + Send + 'static,
        ok: impl Fn(&Output) -> bool + Send + 'static,
    ) -> Poller {
        let kubectl = self.kubectl_path();
        poll(
            move |n| {
                let mut c = Command::new(&kubectl);
                c.arg("--kubeconfig").arg(&kubeconfig).args(args(n));
                c
            },
            ok,
            false,
        )
    }
}

/// Starts running `curl ARGS(n, server)` through the VIP with the credentials of `kubeconfig`
/// (n = 1, 2, …, 200 ms apart; `server` the kubeconfig's, `https://<VIP>:6443`) until the
/// returned poller is stopped; `ok` judges each answer (stdout: the body, a newline,
/// `HTTP <code>`). Each request has 10 s, and one refused, reset or failed counts as failed. The
/// request kubectl would make at a fifth of its CPU: see [`KubeLab::poll_reads_with`].
fn poll_curl(
    kubeconfig: PathBuf,
    args: impl Fn(u32, &str) -> Vec<String> + Send + 'static,
    ok: impl Fn(&Output) -> bool + Send + 'static,
    resend_leader_changes: bool,
) -> Poller {
    let creds = std::sync::Mutex::new(CurlCredentials::new(kubeconfig));
    poll(
        move |n| {
            // Read again before each request, as kubectl reads its kubeconfig each time (hactl
            // rewrites it when the admin certificate or the CA changes).
            let mut creds = creds.lock().unwrap();
            creds.refresh();
            // 10 s, as the VIP writer's deadline per write: on the saturated 2-core machine (two
            // Kubernetes labs side by side) a request starved of CPU took over 2 s with no
            // outage. A refused, reset or failed request still counts; the slowest is printed.
            // `-w`: the HTTP code after the body, so a 500 shows its checks.
            let mut c = Command::new("curl");
            c.args(["-sS", "--max-time", "10", "-w", "\nHTTP %{http_code}"])
                .arg("--cacert")
                .arg(creds.dir.path().join("ca.crt"))
                .arg("--cert")
                .arg(creds.dir.path().join("client.crt"))
                .arg("--key")
                .arg(creds.dir.path().join("client.key"))
                .args(args(n, &creds.server));
            c
        },
        ok,
        resend_leader_changes,
    )
}

/// Whether an answer (curl's stdout: the body, then `HTTP <code>`) is the apiserver
/// passing on one of etcd's leader-change errors: a 5xx whose message names one.
fn is_leader_change_answer(o: &Output) -> bool {
    let out = String::from_utf8_lossy(&o.stdout);
    let code = out.rsplit_once("\nHTTP ").map(|(_, c)| c.trim()).unwrap_or("");
    code.starts_with('5') && is_leader_change_error(&out)
}

/// Whether an answer is `409 AlreadyExists`.
fn is_already_exists(o: &Output) -> bool {
    let out = String::from_utf8_lossy(&o.stdout);
    out.ends_with("\nHTTP 409") && out.contains("AlreadyExists")
}

/// The server and credentials of a kubeconfig as files curl reads: in a directory of the test's
/// own (0700, removed when the poller stops), never printed.
struct CurlCredentials {
    kubeconfig: PathBuf,
    /// The kubeconfig's text the files were written from.
    read: String,
    server: String,
    dir: tempfile::TempDir,
}

impl CurlCredentials {
    fn new(kubeconfig: PathBuf) -> CurlCredentials {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut creds = CurlCredentials {
            kubeconfig,
            read: String::new(),
            server: String::new(),
            dir,
        };
        creds.refresh();
        creds
    }

    /// Writes the files again when the kubeconfig changed since they were written. A kubeconfig
    /// that cannot be read (caught while being replaced, say) keeps the files of the last one
    /// that could; the first must be readable.
    fn refresh(&mut self) {
        use base64::Engine as _;
        let path = self.kubeconfig.display().to_string();
        let parsed = std::fs::read_to_string(&self.kubeconfig)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                if text == self.read {
                    return Ok(None);
                }
                let field = |name: &str| {
                    text.lines()
                        .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
                        .map(|v| v.trim().to_string())
                        .ok_or(format!("no {name}"))
                };
                let mut files = Vec::new();
                for (file, name) in [
                    ("ca.crt", "certificate-authority-data"),
                    ("client.crt", "client-certificate-data"),
                    ("client.key", "client-key-data"),
                ] {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(field(name)?)
                        .map_err(|e| format!("{name}: {e}"))?;
                    files.push((file, bytes));
                }
                Ok(Some((field("server")?, files, text.clone())))
            });
        match parsed {
            Ok(None) => {}
            Ok(Some((server, files, text))) => {
                for (file, bytes) in files {
                    std::fs::write(self.dir.path().join(file), bytes).unwrap();
                }
                self.server = server;
                self.read = text;
            }
            Err(e) if self.read.is_empty() => panic!("{path}: {e}"),
            Err(_) => {}
        }
    }
}

/// Runs the command `command(n)` builds (n = 1, 2, …, 200 ms apart) until the returned poller is
/// stopped; `ok` judges each answer, and every attempt is recorded (its stderr, and its stdout
/// when it failed, as the detail). With `resend_leader_changes`, an answer passing on etcd's
/// leader-change error is sent once more (see [`KubeLab::poll_api_writes`]).
fn poll(
    command: impl Fn(u32) -> Command + Send + 'static,
    ok: impl Fn(&Output) -> bool + Send + 'static,
    resend_leader_changes: bool,
) -> Poller {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let ok_count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let oks = ok_count.clone();
    let handle = std::thread::spawn(move || {
        let mut attempts = Vec::new();
        let mut n = 0u32;
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            n += 1;
            let start = Instant::now();
            let mut answer = command(n).output();
            let mut resent = None;
            if resend_leader_changes {
                if let Ok(first) = &answer {
                    if !ok(first) && is_leader_change_answer(first) {
                        resent = Some(String::from_utf8_lossy(&first.stdout).trim().to_string());
                        answer = command(n).output();
                    }
                }
            }
            let (ok, detail) = match answer {
                Ok(o) if ok(&o) || (resent.is_some() && is_already_exists(&o)) => (true, String::new()),
                Ok(o) => (
                    false,
                    format!(
                        "{} {}",
                        String::from_utf8_lossy(&o.stderr).trim(),
                        String::from_utf8_lossy(&o.stdout).trim()
                    )
                    .trim()
                    .to_string(),
                ),
                Err(e) => (false, e.to_string()),
            };
            if ok {
                oks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            attempts.push(Attempt {
                start,
                end: Instant::now(),
                ok,
                detail,
                resent,
            });
            std::thread::sleep(Duration::from_millis(200));
        }
        attempts
    });
    Poller {
        stop,
        handle,
        ok_count,
    }
}

/// One request of a [`Poller`] through the VIP.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub start: Instant,
    pub end: Instant,
    pub ok: bool,
    pub detail: String,
    /// The first answer, when the request was sent twice (a write meeting etcd's leader change,
    /// [`KubeLab::poll_api_writes`]).
    pub resent: Option<String>,
}

/// A running [`KubeLab::poll_kubectl`].
pub struct Poller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Attempt>>,
    ok_count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Poller {
    /// Waits (up to `timeout`) until `n` requests have been answered.
    pub fn wait_answered(&self, n: usize, timeout: Duration) -> bool {
        eventually(timeout, || {
            self.ok_count.load(std::sync::atomic::Ordering::SeqCst) >= n
        })
    }

    /// Stops polling; every attempt in order.
    pub fn stop(self) -> Vec<Attempt> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.handle.join().unwrap()
    }
}

/// Prints the requests, every resent and every failed attempt (relative to `t0`), and returns
/// how many failed. The lines go to stderr as well as stdout: a test that then fails prints its
/// panic on stderr, and a CI log that keeps only the end of a failed test's output (stdout comes
/// first) must still say what failed (a run of 2026-11-26 failed on one read of about 600 with
/// only the count to show).
pub fn report_failures(what: &str, t0: Instant, attempts: &[Attempt]) -> usize {
    let failed: Vec<&Attempt> = attempts.iter().filter(|a| !a.ok).collect();
    let slowest = attempts
        .iter()
        .map(|a| a.end.saturating_duration_since(a.start))
        .max()
        .unwrap_or_default();
    let resent: Vec<&Attempt> = attempts.iter().filter(|a| a.resent.is_some()).collect();
    let twice = match resent.len() {
        0 => String::new(),
        n => format!(", {n} sent twice after etcd's leader change"),
    };
    let mut lines = vec![format!(
        "{what}: {} requests through the VIP, {} failed{twice}, the slowest took {} ms",
        attempts.len(),
        failed.len(),
        slowest.as_millis()
    )];
    let at = |i: Instant| i.saturating_duration_since(t0).as_secs_f64();
    for a in &resent {
        lines.push(format!(
            "  sent twice: {:+.2} s, first answer: {}",
            at(a.start),
            a.resent.as_deref().unwrap_or_default()
        ));
    }
    for a in &failed {
        lines.push(format!(
            "  failed: {:+.2} s .. {:+.2} s: {}",
            at(a.start),
            at(a.end),
            a.detail
        ));
    }
    let text = lines.join("\n");
    println!("{text}");
    if !failed.is_empty() || !resent.is_empty() {
        eprintln!("{text}");
    }
    failed.len()
}

#[cfg(test)]
mod checks {
    use super::{is_already_exists, is_leader_change_answer};
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::{ExitStatus, Output};

    fn answer(body: &str, code: u16) -> Output {
        Output {
            status: ExitStatus::from_raw(0),
            stdout: format!("{body}\nHTTP {code}").into_bytes(),
            stderr: Vec::new(),
        }
    }

    #[test]
    fn only_a_5xx_naming_etcds_leader_change_is_sent_twice() {
        let dropped = r#"{"kind":"Status","status":"Failure","message":"Internal error occurred: etcdserver: leader changed","code":500}"#;
        assert!(is_leader_change_answer(&answer(dropped, 500)));
        let timeout = r#"{"message":"etcdserver: request timed out","code":504}"#;
        assert!(is_leader_change_answer(&answer(timeout, 504)));
        // Another server error, a refusal naming the same words, and a success are not.
        assert!(!is_leader_change_answer(&answer(
            r#"{"message":"etcd cluster is unavailable or misconfigured","code":500}"#,
            500
        )));
        assert!(!is_leader_change_answer(&answer(
            r#"{"message":"etcdserver: leader changed","code":422}"#,
            422
        )));
        assert!(!is_leader_change_answer(&answer(r#"{"kind":"ConfigMap"}"#, 201)));
    }

    #[test]
    fn only_a_409_already_exists_counts_as_the_first_send_committed() {
        assert!(is_already_exists(&answer(
            r#"{"reason":"AlreadyExists","code":409}"#,
            409
        )));
        assert!(!is_already_exists(&answer(
            r#"{"reason":"Conflict","code":409}"#,
            409
        )));
        assert!(!is_already_exists(&answer(r#"{"reason":"AlreadyExists"}"#, 500)));
    }
}
