//! Lab tests: real hosts (systemd-nspawn with real systemd, sshd, etcd) on this machine.
//! They need root; without it each prints `SKIPPED <name>: needs root`.

use crate::support::lab as lab_support;

use hactl::lab::{Fault, HostState};
use lab_support::{eventually, link_exists, mounts_under, processes_mentioning, ssh_banner, TestLab};
use std::collections::BTreeSet;
use std::time::Duration;

#[test]
fn lab_up_boots_real_hosts_and_down_leaves_nothing() {
    let Some(lab) = TestLab::up(
        "lab_up_boots_real_hosts_and_down_leaves_nothing",
        3,
        2,
        0,
        "trixie",
    ) else {
        return;
    };
    let names: Vec<String> = lab.hosts().iter().map(|h| h.name.clone()).collect();
    assert_eq!(names, ["cp1", "cp2", "cp3", "lb1", "lb2"]);

    let mut machine_ids = BTreeSet::new();
    for h in lab.hosts() {
        let state = lab.exec(&h.name, &["systemctl", "is-system-running", "--wait"]);
        let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
        assert!(
            state == "running" || state == "degraded",
            "{}: systemd is {state:?}",
            h.name
        );
        assert!(ssh_banner(h.ip), "{}: no SSH banner on {}:22", h.name, h.ip);
        let version = lab.exec_ok(&h.name, &["etcd", "--version"]);
        assert!(version.contains("etcd Version: 3.5"), "{}: {version}", h.name);
        assert_eq!(lab.exec_ok(&h.name, &["hostname"]).trim(), h.name);
        machine_ids.insert(lab.exec_ok(&h.name, &["cat", "/etc/machine-id"]));
        for unit in ["etcd.service", "haproxy.service", "keepalived.service"] {
            let out = lab.exec(&h.name, &["systemctl", "is-active", unit]);
            assert!(!out.status.success(), "{}: Debian's {unit} runs", h.name);
        }
    }
    assert_eq!(machine_ids.len(), lab.hosts().len(), "machine-ids repeat");

    // Each host reaches every other over the bridge.
    for from in lab.hosts() {
        for to in lab.hosts().iter().filter(|t| t.name != from.name) {
            let ip = to.ip.to_string();
            lab.exec_ok(&from.name, &["ping", "-c", "1", "-W", "2", &ip]);
        }
    }

    // Each host has its own SSH host key, and the lab key logs in as root.
    let known_hosts = std::fs::read_to_string(&lab.lab().known_hosts).unwrap();
    let keys: BTreeSet<&str> = known_hosts
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(keys.len(), lab.hosts().len(), "host keys repeat");
    if std::path::Path::new("/usr/bin/ssh").exists() {
        let out = std::process::Command::new("ssh")
            .arg("-i")
            .arg(&lab.lab().key_path)
            .arg(format!(
                "-oUserKnownHostsFile={}",
                lab.lab().known_hosts.display()
            ))
            .args([
                "-oStrictHostKeyChecking=yes",
                "-oBatchMode=yes",
                "-oConnectTimeout=5",
            ])
            .arg(format!("root@{}", lab.ip("lb2")))
            .arg("hostname")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ssh with the lab key: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "lb2");
    }

    // The inventory is the one hactl reads.
    let inventory = std::fs::read_to_string(lab.inventory()).unwrap();
    assert!(inventory.contains("apiVersion: hactl.io/v1alpha1"), "{inventory}");

    let dir = lab.lab().dir.clone();
    let bridge = lab.lab().bridge.clone();
    let machines: Vec<String> = lab.hosts().iter().map(|h| h.machine.clone()).collect();
    let started = std::time::Instant::now();
    lab.down().expect("lab down");
    eprintln!("lab down in {:.1} s", started.elapsed().as_secs_f64());

    for m in &machines {
        let left = processes_mentioning(&format!("-M {m} "));
        assert!(left.is_empty(), "processes left for {m}: {left:?}");
    }
    let left = processes_mentioning(&dir.to_string_lossy());
    assert!(left.is_empty(), "processes left in {}: {left:?}", dir.display());
    assert_eq!(mounts_under(&dir), Vec::<String>::new(), "mounts left");
    assert!(!link_exists(&bridge), "bridge {bridge} left");
    assert!(!dir.exists(), "{} left", dir.display());
}

#[test]
fn power_cut_stops_sshd_and_poweron_brings_it_back() {
    let Some(mut lab) = TestLab::up(
        "power_cut_stops_sshd_and_poweron_brings_it_back",
        1,
        1,
        0,
        "trixie",
    ) else {
        return;
    };
    let cp1 = lab.ip("cp1");
    assert!(ssh_banner(cp1));

    lab.fault("cp1", Fault::PowerCut);
    assert!(
        eventually(Duration::from_secs(10), || !ssh_banner(cp1)),
        "cp1 still answers on port 22 after a power cut"
    );
    assert_eq!(lab.lab().host_states()[0], HostState::Stopped);

    lab.fault("cp1", Fault::Poweron);
    assert!(ssh_banner(cp1), "cp1 does not answer on port 22 after poweron");
    assert_eq!(lab.lab().host_states()[0], HostState::Running);

    // Isolation cuts the host off the bridge, and rejoining restores it.
    let ip = cp1.to_string();
    lab.fault("cp1", Fault::Isolate);
    assert_eq!(lab.lab().host_states()[0], HostState::Isolated);
    assert!(!lab
        .exec("lb1", &["ping", "-c", "1", "-W", "1", &ip])
        .status
        .success());
    lab.fault("cp1", Fault::Rejoin);
    assert!(eventually(Duration::from_secs(10), || {
        lab.exec("lb1", &["ping", "-c", "1", "-W", "1", &ip])
            .status
            .success()
    }));

    // A clean power-off stops sshd too.
    lab.fault("cp1", Fault::Poweroff);
    assert!(!ssh_banner(cp1));
    assert_eq!(lab.lab().host_states()[0], HostState::Stopped);
}

#[test]
fn two_labs_at_once_get_their_own_bridges_and_subnets() {
    let test = "two_labs_at_once_get_their_own_bridges_and_subnets";
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| TestLab::up(&format!("{test}-a"), 1, 0, 0, "trixie"));
        let b = s.spawn(|| TestLab::up(&format!("{test}-b"), 1, 0, 0, "trixie"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (Some(a), Some(b)) = (a, b) else {
        return;
    };
    assert_ne!(a.lab().bridge, b.lab().bridge);
    assert_ne!(a.lab().subnet, b.lab().subnet);
    assert!(ssh_banner(a.ip("cp1")) && ssh_banner(b.ip("cp1")));
    // Each lab's host sees only its own subnet.
    let other = b.ip("cp1").to_string();
    assert!(!a
        .exec("cp1", &["ping", "-c", "1", "-W", "1", &other])
        .status
        .success());
}

#[test]
fn a_panicking_test_still_tears_its_lab_down() {
    let test = "a_panicking_test_still_tears_its_lab_down";
    if !lab_support::have_root(test) {
        return;
    }
    let mut seen = None;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lab = TestLab::up(test, 1, 0, 0, "trixie").unwrap();
        seen = Some((lab.lab().dir.clone(), lab.lab().bridge.clone()));
        panic!("the test fails while its lab runs");
    }));
    assert!(result.is_err());
    let (dir, bridge) = seen.expect("the lab came up");
    assert!(!dir.exists(), "{} left", dir.display());
    assert!(!link_exists(&bridge), "bridge {bridge} left");
    let left = processes_mentioning(&dir.to_string_lossy());
    assert!(left.is_empty(), "processes left: {left:?}");
}

/// `up`'s first start of a unit (`phases::start_unit`: the Kubernetes units, HAProxy, keepalived)
/// on real systemd: a unit whose first start fails is started once more, 5 s later, and runs;
/// so does one that systemd restarted until its start limit was used up; a unit that fails every
/// start fails the step with its journal's last lines on stderr, naming the cause.
#[test]
fn a_failed_start_is_tried_once_more_and_a_second_failure_shows_the_journal() {
    let Some(lab) = TestLab::up(
        "a_failed_start_is_tried_once_more_and_a_second_failure_shows_the_journal",
        1,
        0,
        0,
        "trixie",
    ) else {
        return;
    };
    let unit = |name: &str, service: &str| {
        // hactl-limited's start limit is 3 starts in 60 s, so that a loaded machine reaches it.
        let limit = if name == "hactl-limited.service" {
            "[Unit]\nStartLimitIntervalSec=60\nStartLimitBurst=3\n"
        } else {
            ""
        };
        let text = format!("{limit}[Service]\n{service}");
        lab.exec_ok(
            "cp1",
            &[
                "sh",
                "-c",
                &format!("printf '%s' \"$1\" > /etc/systemd/system/{name}"),
                "write-unit",
                &text,
            ],
        );
    };
    // Fails the first time only (the marker survives the first try).
    unit(
        "hactl-flaky.service",
        "ExecStartPre=/bin/sh -c '[ -e /run/hactl-flaky ] || { touch /run/hactl-flaky; echo first-try-fails; exit 1; }'\n\
ExecStart=/bin/sleep infinity\n",
    );
    unit(
        "hactl-broken.service",
        "ExecStartPre=/bin/sh -c 'echo the-cause-of-the-failure; exit 1'\nExecStart=/bin/sleep infinity\n",
    );
    // Restarted by systemd at once until its start limit is used up (as HAProxy's unit was when
    // it could not bind), and able to start only once systemd refused a start for that limit:
    // the second start must reset the limit.
    unit(
        "hactl-limited.service",
        "Type=notify\nNotifyAccess=all\nRestart=always\nRestartSec=100ms\n\
ExecStart=/bin/sh -c '[ -e /run/hactl-limited-ok ] || exit 1; systemd-notify --ready; exec sleep infinity'\n",
    );
    lab.exec_ok("cp1", &["systemctl", "daemon-reload"]);
    let run = |unit: &str| {
        let argv = hactl::phases::start_unit(unit).argv;
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        lab.exec("cp1", &argv)
    };

    let flaky = run("hactl-flaky.service");
    let stderr = String::from_utf8_lossy(&flaky.stderr);
    assert!(flaky.status.success(), "{stderr}");
    assert!(stderr.contains("trying once more in 5 s"), "{stderr}");
    assert_eq!(
        lab.exec_ok("cp1", &["systemctl", "is-active", "hactl-flaky.service"])
            .trim(),
        "active"
    );

    lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            // (After 120 s without the refusal the marker appears anyway, and the journal
            // assertion below fails saying why.)
            "(for i in $(seq 1200); do journalctl -u hactl-limited.service --no-pager -o cat | \
               grep -q 'Start request repeated too quickly' && break; sleep 0.1; done; \
               touch /run/hactl-limited-ok) >/dev/null 2>&1 &",
        ],
    );
    let limited = run("hactl-limited.service");
    let stderr = String::from_utf8_lossy(&limited.stderr);
    assert!(limited.status.success(), "{stderr}");
    assert_eq!(
        lab.exec_ok("cp1", &["systemctl", "is-active", "hactl-limited.service"])
            .trim(),
        "active"
    );
    let journal = lab.exec_ok(
        "cp1",
        &[
            "journalctl",
            "-u",
            "hactl-limited.service",
            "--no-pager",
            "-o",
            "cat",
        ],
    );
    assert!(
        journal.contains("Start request repeated too quickly"),
        "the start limit was never reached, so this case tested nothing: {journal}"
    );

    let broken = run("hactl-broken.service");
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert_eq!(broken.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("trying once more") && stderr.contains("the-cause-of-the-failure"),
        "the journal is not shown: {stderr}"
    );
    lab.exec_ok(
        "cp1",
        &[
            "systemctl",
            "stop",
            "hactl-flaky.service",
            "hactl-limited.service",
        ],
    );
}
