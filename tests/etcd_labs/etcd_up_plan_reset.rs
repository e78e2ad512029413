//! `hactl up` / `plan` / `status` / `reset` against real etcd in lab hosts (systemd-nspawn, real
//! systemd and sshd). They need root; without it each prints `SKIPPED <name>: needs root`.

use crate::support::cli as cli_support;
use crate::support::lab as lab_support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use cli_support::{hactl, status_json, text, up_ok};
use hactl::exec::{Output as RemoteOutput, Transport, UploadOutcome};
use hactl::plan::{RemoteCommand, Upload};
use lab_support::TestLab;

fn etcd_main_pid(lab: &TestLab, host: &str) -> String {
    lab.exec_ok(
        host,
        &["systemctl", "show", "-p", "MainPID", "--value", "etcd.service"],
    )
    .trim()
    .to_string()
}

/// Asserts `hactl status` sees `n` healthy voters and one leader.
fn assert_healthy_voters(inventory: &Path, n: usize) {
    let (code, s) = status_json(inventory);
    let members = s["members"].as_array().unwrap();
    assert_eq!(members.len(), n, "{s:#}");
    for m in members {
        assert_eq!(m["healthy"], true, "{s:#}");
        assert_eq!(m["isLearner"], false, "{s:#}");
        assert!(
            m["peerUrls"][0].as_str().unwrap().starts_with("https://"),
            "{s:#}"
        );
        assert!(
            m["clientUrls"][0].as_str().unwrap().starts_with("https://"),
            "{s:#}"
        );
    }
    assert!(s["leader"].as_str().is_some_and(|l| !l.is_empty()), "{s:#}");
    assert_eq!(code, 0, "status must exit 0 on a healthy cluster: {s:#}");
}

fn up_twice_then_plan_says_no_changes(lab: &TestLab, n: usize) {
    let inv = lab.inventory();
    // `plan -o json` on fresh hosts: the plan as data on stdout, nothing else there.
    let plan = hactl(&["plan", "-i", inv.to_str().unwrap(), "-o", "json"]);
    assert!(plan.status.success(), "{}", text(&plan));
    let json: serde_json::Value =
        serde_json::from_slice(&plan.stdout).unwrap_or_else(|e| panic!("plan JSON: {e}\n{}", text(&plan)));
    assert_eq!(json["changes"], true);
    let phases = json["phases"].as_array().unwrap();
    assert!(phases.iter().any(|p| p["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["host"] == "cp1" && h["steps"].as_array().is_some_and(|s| !s.is_empty()))));
    up_ok(inv);
    assert_healthy_voters(inv, n);

    // etcd refuses clients without TLS, and TLS clients without a certificate.
    let ip = lab.ip("cp1").to_string();
    let plain = lab.exec(
        "cp2",
        &["curl", "-sS", "-m", "5", &format!("http://{ip}:2379/health")],
    );
    assert!(!plain.status.success() || !String::from_utf8_lossy(&plain.stdout).contains("true"));
    let no_cert = lab.exec(
        "cp2",
        &[
            "curl",
            "-sS",
            "-m",
            "5",
            "--cacert",
            "/etc/hactl/pki/etcd/ca.crt",
            &format!("https://{ip}:2379/health"),
        ],
    );
    assert!(!no_cert.status.success(), "a client without a certificate got in");
    // With a certificate, gRPC: the client port serves nothing else (etcd 3.5).
    let with_cert = lab.exec(
        "cp2",
        &[
            "hactl-etcdctl",
            &format!("--endpoints=https://{ip}:2379"),
            "endpoint",
            "health",
        ],
    );
    let said =
        String::from_utf8_lossy(&with_cert.stderr).into_owned() + &String::from_utf8_lossy(&with_cert.stdout);
    assert!(
        with_cert.status.success() && said.contains("is healthy"),
        "{said}"
    );
    let http_on_client_port = lab.curl_etcd("cp2", &format!("https://{ip}:2379/health"));
    assert!(
        !String::from_utf8_lossy(&http_on_client_port.stdout).contains("\"health\":\"true\""),
        "the client port still serves HTTP"
    );
    // HTTP (/health, /version, the gateway) on loopback, with a certificate.
    let http = lab.curl_etcd("cp1", "https://127.0.0.1:2382/health");
    let http = String::from_utf8_lossy(&http.stdout);
    assert!(http.contains("\"health\":\"true\""), "{http}");

    let hosts: Vec<String> = (1..=n).map(|i| format!("cp{i}")).collect();
    let pids: Vec<String> = hosts.iter().map(|h| etcd_main_pid(lab, h)).collect();
    let second = up_ok(inv);
    assert_eq!(second.trim(), "no changes");
    let after: Vec<String> = hosts.iter().map(|h| etcd_main_pid(lab, h)).collect();
    assert_eq!(pids, after, "a second up restarted etcd");
    // `up` raises the high-water mark from the members' own answers (etcd 3.5 leaves the
    // revision out of a member list, which once left the mark unrecorded after any number of ups).
    let mark = std::fs::read_to_string(inv.parent().unwrap().join("state").join("hwm.json"))
        .unwrap_or_else(|e| panic!("up recorded no high-water mark: {e}"));
    let mark: serde_json::Value = serde_json::from_str(&mark).unwrap();
    assert!(mark["revision"].as_i64().is_some_and(|r| r >= 1), "{mark}");
    let plan = hactl(&["plan", "-i", inv.to_str().unwrap()]);
    assert!(plan.status.success(), "{}", text(&plan));
    assert_eq!(String::from_utf8_lossy(&plan.stdout).trim(), "no changes");
    let plan = hactl(&["plan", "-i", inv.to_str().unwrap(), "-o", "json"]);
    assert!(plan.status.success(), "{}", text(&plan));
    let json: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"apiVersion": "hactl.io/v1alpha1", "kind": "Plan", "changes": false, "pendingNodes": [], "phases": []})
    );
    // `up --dry-run` is `plan`, word for word.
    let dry = hactl(&["up", "--dry-run", "-i", inv.to_str().unwrap(), "-o", "json"]);
    assert!(dry.status.success(), "{}", text(&dry));
    assert_eq!(dry.stdout, plan.stdout, "{}", text(&dry));
}

#[test]
fn up_on_three_hosts_gives_a_tls_cluster_and_a_second_up_changes_nothing() {
    let Some(lab) = TestLab::up("up_on_three_hosts_gives_a_tls_cluster", 3, 0, 0, "trixie") else {
        return;
    };
    up_twice_then_plan_says_no_changes(&lab, 3);
}

#[test]
fn up_on_five_hosts_gives_a_tls_cluster_and_a_second_up_changes_nothing() {
    let Some(lab) = TestLab::up("up_on_five_hosts_gives_a_tls_cluster", 5, 0, 0, "trixie") else {
        return;
    };
    up_twice_then_plan_says_no_changes(&lab, 5);
}

/// A transport that refuses every upload and every command not marked read-only.
struct FailOnMutation {
    inner: Arc<dyn Transport>,
    mutations: Arc<AtomicUsize>,
}

#[async_trait]
impl Transport for FailOnMutation {
    fn host(&self) -> &str {
        self.inner.host()
    }
    fn sudo(&self) -> bool {
        self.inner.sudo()
    }
    async fn run(&self, cmd: &RemoteCommand) -> Result<RemoteOutput, hactl::ssh::Error> {
        if !cmd.read_only {
            self.mutations.fetch_add(1, Ordering::SeqCst);
            return Err(hactl::ssh::Error::Remote {
                what: format!("mutating command in a dry run: {}", cmd.line(false)),
                status: "refused".into(),
                stderr: String::new(),
            });
        }
        self.inner.run(cmd).await
    }
    async fn upload(&self, upload: &Upload) -> Result<UploadOutcome, hactl::ssh::Error> {
        self.mutations.fetch_add(1, Ordering::SeqCst);
        Err(hactl::ssh::Error::Remote {
            what: format!("upload in a dry run: {}", upload.path),
            status: "refused".into(),
            stderr: String::new(),
        })
    }
    async fn forward(
        &self,
        host: &str,
        port: u16,
    ) -> Result<(u16, hactl::ssh::ForwardGuard), hactl::ssh::Error> {
        self.inner.forward(host, port).await
    }
}

#[test]
fn plan_on_a_fresh_lab_lists_the_steps_and_changes_nothing() {
    let Some(lab) = TestLab::up("plan_on_a_fresh_lab_lists_the_steps", 3, 0, 0, "trixie") else {
        return;
    };
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mutations = Arc::new(AtomicUsize::new(0));
    let inv = hactl::inventory::load(lab.inventory()).unwrap();
    let state = hactl::state::StateView::open(&inv.state_dir).unwrap();
    let connect = hactl::exec::connect::ConnectSettings::default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let prepared = rt
        .block_on(hactl::converge::preview_with(
            inv,
            state,
            &connect,
            &[],
            |inner| {
                Arc::new(FailOnMutation {
                    inner,
                    mutations: mutations.clone(),
                }) as Arc<dyn Transport>
            },
        ))
        .expect("prepare");
    // The dry run goes through the same executor with the failing transports.
    rt.block_on(hactl::exec::run(
        &prepared.plan,
        hactl::exec::Mode::DryRun,
        &prepared.transports,
    ))
    .expect("dry run");
    assert_eq!(mutations.load(Ordering::SeqCst), 0, "planning sent a mutation");

    let plan = prepared.plan.to_string();
    for expected in [
        "== Configure etcd members",
        "== Start etcd members",
        "cp1: write /etc/hactl/pki/etcd/server.key mode=0600 owner=etcd:etcd",
        "cp3: run systemctl start --no-block etcd.service",
        "== Verify etcd",
    ] {
        assert!(plan.contains(expected), "plan lacks {expected:?}:\n{plan}");
    }
    assert!(!plan.contains("PRIVATE KEY"), "the plan shows key material");
    // Hosts appear in inventory order within each phase.
    let first = |h: &str| {
        plan.find(&format!("{h}: write /etc/hactl/pki/etcd/ca.crt"))
            .unwrap()
    };
    assert!(first("cp1") < first("cp2") && first("cp2") < first("cp3"));
    // Nothing was started on the hosts.
    for h in ["cp1", "cp2", "cp3"] {
        let out = lab.exec(h, &["systemctl", "is-active", "etcd.service"]);
        assert!(!out.status.success(), "{h}: etcd runs after a plan");
        let files = lab.exec(h, &["test", "-e", "/etc/hactl/pki/etcd/ca.crt"]);
        assert!(!files.status.success(), "{h}: plan wrote a file");
    }
}

/// Rewrites the lab inventory with the etcd role only on the first `n` control-plane hosts.
fn inventory_with_etcd_on(lab: &TestLab, n: usize, path: &Path) {
    let original = std::fs::read_to_string(lab.inventory()).unwrap();
    let mut out = String::new();
    let mut host_index = 0;
    for line in original.lines() {
        if line.trim_start().starts_with("- name: cp") {
            host_index += 1;
        }
        if line.trim() == "- etcd" && host_index > n {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn growing_three_to_five_joins_learners_one_at_a_time_while_writes_succeed() {
    let Some(lab) = TestLab::up("growing_three_to_five_joins_learners", 5, 0, 0, "trixie") else {
        return;
    };
    let three = lab.inventory().with_file_name("three.yaml");
    inventory_with_etcd_on(&lab, 3, &three);
    up_ok(&three);
    assert_healthy_voters(&three, 3);

    // A writer on cp1: one put every 50 ms with a 2 s timeout, logging each outcome.
    lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            "nohup sh -c 'i=0; while [ ! -e /tmp/stop-writer ]; do i=$((i+1)); \
             if hactl-etcdctl --command-timeout=2s put /writer/$i v >/dev/null 2>&1; then echo ok; else echo fail; fi; \
             sleep 0.05; done' > /tmp/writer.log 2>&1 &",
        ],
    );
    let out = hactl(&["up", "-i", lab.inventory().to_str().unwrap(), "--yes"]);
    lab.exec_ok("cp1", &["touch", "/tmp/stop-writer"]);
    assert!(out.status.success(), "grow failed:\n{}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let cp4 = log
        .find("Join etcd member cp4 as a learner")
        .expect("cp4 joined as a learner");
    let cp5 = log
        .find("Join etcd member cp5 as a learner")
        .expect("cp5 joined as a learner");
    assert!(cp4 < cp5, "joins out of order");
    assert!(
        log.contains("cp1: run /usr/local/sbin/hactl-etcd-member add-learner cp4"),
        "{log}"
    );
    assert_healthy_voters(lab.inventory(), 5);

    std::thread::sleep(std::time::Duration::from_millis(300));
    let writes = lab.exec_ok("cp1", &["cat", "/tmp/writer.log"]);
    let ok = writes.lines().filter(|l| *l == "ok").count();
    let failed = writes.lines().filter(|l| *l == "fail").count();
    println!("writer during the grow: {ok} ok, {failed} failed");
    assert!(ok > 10, "the writer barely ran: {writes}");
    assert_eq!(failed, 0, "writes failed while growing the cluster");
}

#[test]
fn a_power_cut_during_a_config_rollout_stops_it_and_quorum_holds() {
    let Some(mut lab) = TestLab::up("a_power_cut_during_a_config_rollout", 3, 0, 0, "trixie") else {
        return;
    };
    up_ok(lab.inventory());
    // A configuration change every member must restart for.
    let changed = lab.inventory().with_file_name("changed.yaml");
    let original = std::fs::read_to_string(lab.inventory()).unwrap();
    std::fs::write(
        &changed,
        original.replace(
            "  etcd:\n",
            "  etcd:\n    heartbeatInterval: 150\n    electionTimeout: 1500\n",
        ),
    )
    .unwrap();
    assert!(std::fs::read_to_string(&changed)
        .unwrap()
        .contains("heartbeatInterval: 150"));
    let hosts = ["cp1", "cp2", "cp3"];
    let before: Vec<String> = hosts.iter().map(|h| etcd_main_pid(&lab, h)).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["up", "-i", changed.to_str().unwrap(), "--yes"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The roll restarts one member at a time (followers first, the leader last). `up` logs
    // `<host>: run systemctl restart etcd.service` as it restarts a member: at the first such line it is
    // paused (SIGSTOP), another member's power is cut before its turn can come, and it goes on.
    // No race with the roll's pace: on a loaded machine, polling the members' pids missed the
    // window between two restarts.
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    let first = loop {
        let mut line = String::new();
        let n = std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert!(n > 0, "up ended before restarting a member:\n{log}");
        log.push_str(&line);
        if let Some((host, _)) = line
            .split_once(": run ")
            .filter(|(_, cmd)| cmd.contains("systemctl restart etcd.service"))
        {
            let host = host.split_whitespace().last().unwrap_or_default();
            let Some(i) = hosts.iter().position(|h| *h == host) else {
                panic!("a restart on an unknown host: {line}");
            };
            break i;
        }
    };
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let others: Vec<usize> = (0..hosts.len()).filter(|i| *i != first).collect();
    let (cut, kept) = (others[0], others[1]);
    lab.fault(hosts[cut], hactl::lab::Fault::PowerCut);
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let rest = std::thread::spawn(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
        rest
    });
    let out = child.wait_with_output().unwrap();
    log.push_str(&rest.join().unwrap());
    assert!(!out.status.success(), "the rollout went on:\n{log}");
    let stderr = log;
    assert!(
        stderr.contains("Restart changed etcd members") && stderr.contains(hosts[cut]),
        "the failure names neither the phase nor the host {}:\n{stderr}",
        hosts[cut]
    );
    // The member whose turn had not come was never restarted, and the two live members keep
    // quorum: writes work.
    assert_eq!(
        etcd_main_pid(&lab, hosts[kept]),
        before[kept],
        "{} restarted after the rollout stopped",
        hosts[kept]
    );
    lab.exec_ok(hosts[first], &["hactl-etcdctl", "put", "/after-cut", "ok"]);
    let got = lab.exec_ok(
        hosts[kept],
        &["hactl-etcdctl", "get", "/after-cut", "--print-value-only"],
    );
    assert_eq!(got.trim(), "ok");
}

/// Sets `spec.etcd.dataDir` in the lab's inventory (which has an `etcd` section already).
fn set_data_dir(inventory: &Path, dir: &str) {
    let text = std::fs::read_to_string(inventory).unwrap();
    let after = text.split_once("\nspec:\n").expect("a spec section").1;
    let indent: String = after.chars().take_while(|c| *c == ' ').collect();
    let section = format!("\n{indent}etcd:\n");
    assert!(text.contains(&section), "no etcd section in:\n{text}");
    let block = format!("{section}{indent}{indent}dataDir: {dir}\n");
    std::fs::write(inventory, text.replacen(&section, &block, 1)).unwrap();
}

fn exists(lab: &TestLab, host: &str, path: &str) -> bool {
    lab.exec(host, &["test", "-e", path]).status.success()
}

fn is_active(lab: &TestLab, host: &str, unit: &str) -> bool {
    lab.exec(host, &["systemctl", "is-active", "--quiet", unit])
        .status
        .success()
}

/// Issue 13: the data-directory rule on the hosts (points 1 and 5) and `reset` on every role.
#[test]
fn reset_stops_and_removes_what_hactl_installed_on_every_role() {
    let Some(lab) = TestLab::up("reset_every_role", 3, 2, 0, "trixie") else {
        return;
    };
    let inv = lab.inventory().to_str().unwrap().to_string();
    // cp2's data dir holds a file that is not etcd's: `up` refuses it and leaves it.
    lab.exec_ok(
        "cp2",
        &[
            "sh",
            "-c",
            "mkdir -p -m 755 /srv/etcd && echo keep > /srv/etcd/precious",
        ],
    );
    set_data_dir(lab.inventory(), "/srv/etcd");
    let out = hactl(&["up", "-i", &inv, "--yes"]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(
            "refusing to take /srv/etcd as etcd's data dir: it holds files but no etcd member/ (precious)"
        ),
        "{}",
        text(&out)
    );
    // `reset` refuses too, before it changes anything on any host, and names the directory.
    let out = hactl(&["reset", "-i", &inv, "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    for want in [
        "refusing to move /srv/etcd aside: it holds files but no etcd member/ (precious)",
        "rule: hactl creates, chmods or moves a data dir only when it is missing, empty or holds etcd's member/",
        "then run hactl reset again",
        "nothing was changed on any host",
    ] {
        assert!(text(&out).contains(want), "lacks {want}: {}", text(&out));
    }
    assert_eq!(lab.exec_ok("cp2", &["cat", "/srv/etcd/precious"]).trim(), "keep");
    assert_eq!(
        lab.exec_ok("cp2", &["stat", "-c", "%a %U", "/srv/etcd"]).trim(),
        "755 root"
    );
    for h in ["cp1", "cp3"] {
        assert!(
            exists(&lab, h, "/srv/etcd"),
            "{h}: reset moved a data dir after refusing"
        );
    }

    // Emptied, the directory is taken; the whole cluster comes up, load balancers included.
    lab.exec_ok("cp2", &["mv", "/srv/etcd/precious", "/root/precious"]);
    up_ok(lab.inventory());
    lab.exec_ok("cp1", &["hactl-etcdctl", "put", "/keep", "me"]);
    // A scheduled backup, as the timer takes it (the leader saves, the others skip).
    for h in ["cp1", "cp2", "cp3"] {
        lab.exec_ok(h, &["/usr/local/sbin/hactl-etcd-backup"]);
    }
    for h in ["lb1", "lb2"] {
        assert!(is_active(&lab, h, "keepalived.service") && is_active(&lab, h, "haproxy.service"));
        assert!(exists(&lab, h, "/etc/haproxy/haproxy.cfg.hactl-orig"), "{h}");
    }
    let no_tty = hactl(&["reset", "-i", &inv]);
    assert_eq!(
        no_tty.status.code(),
        Some(3),
        "reset without --yes and no terminal must ask: {}",
        text(&no_tty)
    );
    // A fence an interrupted operation left on cp3 goes with the rest.
    let fence = "/etc/systemd/system/etcd.service.d/hactl-fence.conf";
    lab.exec_ok(
        "cp3",
        &[
            "sh",
            "-c",
            &format!(
                "mkdir -p {d} && printf '[Unit]\\nAssertPathExists=!{fence}\\n' > {fence}",
                d = "/etc/systemd/system/etcd.service.d"
            ),
        ],
    );
    let out = hactl(&["reset", "-i", &inv, "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!exists(&lab, "cp3", fence), "cp3: the fence stayed after reset");
    // The snapshot is moved aside with its directory, never deleted, and the output says where.
    let mut saved = Vec::new();
    for h in ["cp1", "cp2", "cp3"] {
        assert!(
            !exists(&lab, h, "/var/lib/etcd-backups/latest.json"),
            "{h}: the backups stayed in place"
        );
        let aside = lab.exec_ok(
            h,
            &[
                "sh",
                "-c",
                "ls /var/lib/etcd-backups.hactl-reset-*/*.db 2>/dev/null || true",
            ],
        );
        saved.extend(aside.lines().map(|l| format!("{h}:{l}")));
    }
    assert!(!saved.is_empty(), "the leader's snapshot was not moved aside");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("(kept, never deleted): /var/lib/etcd-backups -> /var/lib/etcd-backups.hactl-reset-"),
        "{}",
        text(&out)
    );
    for h in ["cp1", "cp2", "cp3"] {
        assert!(!is_active(&lab, h, "etcd.service"), "{h}: etcd runs");
        for gone in [
            "/etc/systemd/system/etcd.service",
            "/etc/hactl/pki/etcd/server.key",
            "/etc/hactl/pki/etcd/client.key",
            "/srv/etcd",
        ] {
            assert!(!exists(&lab, h, gone), "{h}: {gone} is still there");
        }
        let aside = lab.exec_ok(h, &["sh", "-c", "ls -d /srv/etcd.hactl-reset-*/member"]);
        assert!(
            aside.contains("/srv/etcd.hactl-reset-"),
            "{h}: data not kept: {aside}"
        );
    }
    for h in ["lb1", "lb2"] {
        for unit in ["keepalived.service", "haproxy.service"] {
            assert!(!is_active(&lab, h, unit), "{h}: {unit} runs");
        }
        for gone in [
            "/etc/keepalived/keepalived.conf",
            "/etc/haproxy/haproxy.cfg.hactl-orig",
            "/usr/local/sbin/hactl-haproxy",
            "/usr/local/sbin/hactl-check-haproxy",
            "/etc/sysctl.d/90-hactl-load-balancer.conf",
        ] {
            assert!(!exists(&lab, h, gone), "{h}: {gone} is still there");
        }
        // The distribution's haproxy.cfg is back in place of hactl's.
        let cfg = lab.exec_ok(h, &["cat", "/etc/haproxy/haproxy.cfg"]);
        assert!(!cfg.contains("hactl"), "{h}: hactl's haproxy.cfg stayed:\n{cfg}");
        assert!(cfg.contains("global"), "{h}: {cfg}");
    }
    let again = hactl(&["reset", "-i", &inv, "--yes"]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("no changes"),
        "{}",
        text(&again)
    );
}

#[test]
fn up_is_refused_while_another_command_holds_the_cluster_lock() {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("lock.yaml");
    std::fs::write(
        &inv,
        concat!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: locked\nspec:\n",
            "  ssh:\n    agent: true\n  hosts:\n",
            "    - { name: cp1, address: 192.0.2.11, roles: [etcd] }\n",
            "    - { name: cp2, address: 192.0.2.12, roles: [etcd] }\n",
            "    - { name: cp3, address: 192.0.2.13, roles: [etcd] }\n",
        ),
    )
    .unwrap();
    // This process holds the cluster lock (as a `remove` would) in the state directory: `up`,
    // which takes the same one lock, is refused before it connects anywhere (exit 3).
    let state = hactl::state::StateDir::open(&dir.path().join(".hactl/locked")).unwrap();
    let holder = hactl::operations::lock::Owner::new("remove cp4", "remove-test-1");
    let path = state.subdir("locks").unwrap().join("cluster.lock");
    std::fs::write(&path, serde_json::to_string(&holder).unwrap()).unwrap();
    let out = hactl(&["up", "-i", inv.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the cluster lock on the state directory")
            && stderr.contains("`hactl remove cp4`")
            && stderr.contains("run remove-test-1"),
        "{stderr}"
    );
    assert!(stderr.contains("wait for it to finish"), "{stderr}");
    assert!(path.exists(), "the holder's lock was taken");
}
