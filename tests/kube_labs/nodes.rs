//! Lab tests of what nodes stand on: each host in cgroups of its own (gone once it stops), the
//! node packages in the base image, the lab's node-prep unit (cgroups writable, `/dev/kmsg`, the
//! kubelet's kernel settings inside the host while the machine keeps its own), worker hosts with
//! the `worker` role, and the node images importing into containerd in a host.
//! They need root; without it each prints `SKIPPED <name>: needs root`.

use crate::support::lab as lab_support;

use hactl::images::{parse_ctr_images_ls, ImageSet};
use hactl::inventory::Role;
use hactl::lab::{Fault, HostState};
use lab_support::TestLab;
use std::path::{Path, PathBuf};

/// The three kernel settings a kubelet must find that differ from a default kernel's, as
/// `(path under /proc/sys, what the kubelet wants)`.
const KUBELET_SYSCTLS: [(&str, &str); 3] = [
    ("vm/overcommit_memory", "1"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
];

/// The machine's own values of [`KUBELET_SYSCTLS`].
fn machine_sysctls() -> Vec<String> {
    KUBELET_SYSCTLS
        .iter()
        .map(|(key, _)| {
            std::fs::read_to_string(Path::new("/proc/sys").join(key))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect()
}

/// Every cgroup hierarchy mounted on the machine.
fn hierarchies() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fstype = right.split(' ').next()?;
            let mount = PathBuf::from(left.split(' ').nth(4)?);
            (fstype == "cgroup" || fstype == "cgroup2").then_some(mount)
        })
        .collect()
}

/// The lab cgroups (`hactl-lab-<machine>`) of `machine` that exist in some hierarchy.
fn cgroups_of(machine: &str) -> Vec<PathBuf> {
    hierarchies()
        .into_iter()
        .map(|h| h.join(format!("hactl-lab-{machine}")))
        .filter(|d| d.exists())
        .collect()
}

/// `/proc/<pid>/cgroup` of the host's PID 1 (its systemd), read on the machine: one
/// `(hierarchy, path)` per line.
fn cgroups_of_pid1(lab: &TestLab, host: &str) -> Vec<(String, String)> {
    let pid1 = lab.lab().pid1(host).unwrap().expect("the host runs");
    std::fs::read_to_string(format!("/proc/{pid1}/cgroup"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next();
            let controllers = parts.next().unwrap().to_string();
            (controllers, parts.next().unwrap().to_string())
        })
        .collect()
}

#[test]
fn hosts_run_in_cgroups_of_their_own_with_the_node_packages_and_the_kubelet_sysctls() {
    let before = machine_sysctls();
    let Some(mut lab) = TestLab::up(
        "hosts_run_in_cgroups_of_their_own_with_the_node_packages",
        1,
        0,
        1,
        "trixie",
    ) else {
        return;
    };
    let machines: Vec<String> = lab.hosts().iter().map(|h| h.machine.clone()).collect();

    // Each host's systemd is in its own cgroup in every hierarchy, none shared with the other.
    let cp1 = cgroups_of_pid1(&lab, "cp1");
    let spare1 = cgroups_of_pid1(&lab, "spare1");
    assert_eq!(cp1.len(), hierarchies().len(), "{cp1:?}");
    for ((host, lines), machine) in [("cp1", &cp1), ("spare1", &spare1)].into_iter().zip(&machines) {
        let own = format!("/hactl-lab-{machine}");
        for (controllers, path) in lines.iter() {
            assert!(
                path == &own || path.starts_with(&format!("{own}/")),
                "{host}: {controllers} cgroup {path} is not under {own}"
            );
        }
        assert_eq!(cgroups_of(machine).len(), hierarchies().len(), "{host}");
    }
    for (a, b) in cp1.iter().zip(&spare1) {
        assert_eq!(a.0, b.0);
        assert_ne!(a.1, b.1, "cp1 and spare1 share the {} cgroup {}", a.0, a.1);
    }

    for h in ["cp1", "spare1"] {
        // The node packages, from the base image.
        let containerd = lab.exec_ok(h, &["containerd", "--version"]);
        assert!(containerd.contains("containerd"), "{h}: {containerd}");
        let runc = lab.exec_ok(h, &["runc", "--version"]);
        assert!(runc.starts_with("runc version"), "{h}: {runc}");
        for plugin in ["bridge", "host-local", "loopback", "portmap"] {
            lab.exec_ok(h, &["test", "-x", &format!("/usr/lib/cni/{plugin}")]);
        }
        lab.exec_ok(h, &["iptables", "--version"]);
        lab.exec_ok(h, &["conntrack", "--version"]);
        // Debian's containerd unit is off until hactl configures it.
        let active = lab.exec(h, &["systemctl", "is-active", "containerd.service"]);
        assert!(!active.status.success(), "{h}: Debian's containerd runs");

        // The node-prep unit ran: writable controllers, a /dev/kmsg, the kubelet's sysctls.
        assert_eq!(
            lab.exec_ok(h, &["systemctl", "is-active", "hactl-lab-node-prep.service"])
                .trim(),
            "active"
        );
        let options = lab.exec_ok(h, &["findmnt", "-n", "-o", "OPTIONS", "/sys/fs/cgroup/memory"]);
        assert!(
            options.starts_with("rw,"),
            "{h}: /sys/fs/cgroup/memory is mounted {options}"
        );
        lab.exec_ok(h, &["test", "-e", "/dev/kmsg"]);
        for (key, want) in KUBELET_SYSCTLS {
            let got = lab.exec_ok(h, &["cat", &format!("/proc/sys/{key}")]);
            assert_eq!(got.trim(), want, "{h}: /proc/sys/{key}");
        }
    }
    // What a kubelet that wanted another value would write goes to the host's file, not the kernel.
    let machine_panic = std::fs::read_to_string("/proc/sys/kernel/panic").unwrap();
    let written = lab.exec_ok(
        "cp1",
        &[
            "sh",
            "-c",
            "echo 7 >/proc/sys/kernel/panic && cat /proc/sys/kernel/panic",
        ],
    );
    assert_eq!(written.trim(), "7");
    let now = std::fs::read_to_string("/proc/sys/kernel/panic").unwrap();
    if now != machine_panic {
        std::fs::write("/proc/sys/kernel/panic", &machine_panic).unwrap();
        panic!("a write in cp1 reached the machine's kernel.panic ({machine_panic:?} -> {now:?}; restored)");
    }
    assert_eq!(machine_sysctls(), before, "the machine's own sysctls changed");

    // A power cut: the host's cgroups go with it, and it gets them back when it boots.
    lab.fault("spare1", Fault::PowerCut);
    assert_eq!(lab.lab().host_states()[1], HostState::Stopped);
    assert!(
        cgroups_of(&machines[1]).is_empty(),
        "{:?}",
        cgroups_of(&machines[1])
    );
    assert_eq!(
        cgroups_of(&machines[0]).len(),
        hierarchies().len(),
        "cp1 lost its cgroups"
    );
    lab.fault("spare1", Fault::Poweron);
    assert_eq!(cgroups_of(&machines[1]).len(), hierarchies().len());
    assert_eq!(
        lab.exec_ok("spare1", &["cat", "/proc/sys/kernel/panic"]).trim(),
        "10",
        "a fresh boot writes the host's sysctl files again"
    );

    lab.down().unwrap();
    for machine in &machines {
        assert!(
            cgroups_of(machine).is_empty(),
            "{machine}: {:?}",
            cgroups_of(machine)
        );
    }
    assert_eq!(machine_sysctls(), before, "the machine's own sysctls changed");
}

#[test]
fn lab_up_with_workers_gives_worker_hosts_that_plan_leaves_alone() {
    let Some(lab) = TestLab::up_cli(
        "lab_up_with_workers_gives_worker_hosts",
        &["--control-planes", "1", "--load-balancers", "0", "--workers", "1"],
    ) else {
        return;
    };
    let names: Vec<&str> = lab.hosts().iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, ["cp1", "w1"]);
    assert_eq!(lab.ip("w1").octets()[3], 41);
    assert_eq!(lab.lab().host_states(), [HostState::Running, HostState::Running]);
    assert_eq!(lab.exec_ok("w1", &["hostname"]).trim(), "w1");

    let inv = hactl::inventory::load(lab.inventory()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(inv.host("w1").unwrap().roles, [Role::Worker]);
    assert!(
        inv.kubernetes.is_some(),
        "a lab with workers has a kubernetes section"
    );

    // Nothing is planned for a worker yet: the plan names cp1 only.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["plan", "-o", "json", "-i"])
        .arg(lab.inventory())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "plan failed: {stderr}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut planned = std::collections::BTreeSet::new();
    for phase in plan["phases"].as_array().unwrap() {
        for h in phase["hosts"].as_array().unwrap() {
            if h["steps"].as_array().is_some_and(|s| !s.is_empty()) {
                planned.insert(h["host"].as_str().unwrap().to_string());
            }
        }
    }
    assert_eq!(planned.into_iter().collect::<Vec<_>>(), ["cp1"], "{plan:#}");

    // And `--workers` without Kubernetes is refused before anything is made.
    let other = format!("{}-x", lab.name());
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_hactl"))
        .args(["lab", "up", "--name", &other, "--workers", "1", "--no-kubernetes"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("--no-kubernetes"), "{why}");
    assert!(!hactl::lab::lab_dir(&hactl::lab::lab_root(), &other).exists());
}

/// What containerd needs in a lab host (systemd-nspawn on a machine with cgroup v1): the native
/// snapshotter (overlayfs does not stack on the host's overlay root), no OOM score below the
/// caller's (the machine withholds CAP_SYS_RESOURCE), no new session keyring per container
/// (nspawn's seccomp filter refuses the keyring calls), cgroupfs like the kubelet, the local pause
/// image, and Debian's CNI plugin directory.
const CONTAINERD_CONFIG: &str = r#"version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "@PAUSE@"
  restrict_oom_score_adj = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
  NoNewKeyring = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
"#;

#[test]
fn node_images_import_into_containerd_in_a_lab_host_with_the_recorded_digests() {
    let test = "node_images_import_into_containerd_in_a_lab_host";
    if !lab_support::have_root(test) {
        return;
    }
    let version = hactl::lab::kubernetes::DEFAULT_VERSION;
    let bins = hactl::lab::kubernetes::ensure_binaries(version).unwrap_or_else(|e| panic!("{e}"));
    let dir = hactl::lab::kubernetes::ensure_images(version, &bins).unwrap_or_else(|e| panic!("{e}"));
    let set = ImageSet::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    set.verify_archives().unwrap_or_else(|e| panic!("{e}"));
    let references: Vec<&str> = set.images.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(
        references,
        [
            "hactl.local/pause:3.4",
            "hactl.local/busybox:1.35.0",
            "hactl.local/kube-apiserver:v1.20.2",
            "hactl.local/kube-controller-manager:v1.20.2",
            "hactl.local/kube-scheduler:v1.20.2",
        ]
    );
    let pause = set.get("hactl.local/pause").unwrap();

    let Some(lab) = TestLab::up(test, 1, 0, 0, "trixie") else {
        return;
    };
    let merged = &lab.host("cp1").merged;
    std::fs::create_dir_all(merged.join("root/images")).unwrap();
    for image in &set.images {
        std::fs::copy(
            set.archive_path(image),
            merged.join("root/images").join(&image.archive),
        )
        .unwrap();
    }
    std::fs::create_dir_all(merged.join("etc/containerd")).unwrap();
    std::fs::write(
        merged.join("etc/containerd/config.toml"),
        CONTAINERD_CONFIG.replace("@PAUSE@", &pause.reference),
    )
    .unwrap();
    lab.exec_ok("cp1", &["systemctl", "start", "containerd.service"]);
    for image in &set.images {
        let archive = format!("/root/images/{}", image.archive);
        lab.exec_ok(
            "cp1",
            &[
                "ctr",
                "-n",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
                &archive,
            ],
        );
    }
    let listed = lab.exec_ok("cp1", &["ctr", "-n", "k8s.io", "images", "ls"]);
    let got = parse_ctr_images_ls(&listed);
    for image in &set.images {
        let digest = got
            .iter()
            .find(|(r, _)| r == &image.reference)
            .map(|(_, d)| d.as_str())
            .unwrap_or_else(|| panic!("{} was not imported:\n{listed}", image.reference));
        assert_eq!(digest, image.digest, "{}:\n{listed}", image.reference);
    }
    // The CRI plugin took the config: it pins the pause image as its sandbox image.
    let pause_line = listed
        .lines()
        .find(|l| l.starts_with(&format!("{} ", pause.reference)))
        .unwrap();
    assert!(
        pause_line.contains("io.cri-containerd.pinned=pinned"),
        "{pause_line}"
    );
}
