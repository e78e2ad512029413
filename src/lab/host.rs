//! One lab host: its overlayfs, its own identity (hostname, address, machine-id, sshd host key,
//! the lab key in root's authorized_keys), and its systemd-nspawn process.
//!
//! Invariants: a host's identity is written into its overlay (never the base) before it boots; a
//! host's systemd-nspawn process is found by its `-D <merged>` argument in /proc, never by a
//! recorded pid alone; every systemd-nspawn started here is detached (its own session, output to
//! the host's console.log) so it outlives the `hactl` that started it.

use super::proc::{self, run};
use super::{cgroup, net, HostState, Lab, LabError, LabHost, Result};
use crate::local_command;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A PATH for commands run inside a host.
const HOST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Least per-user inotify instances and watches for booting lab hosts. Every host's systemd takes
/// several inotify instances, and all hosts of all labs on the machine run as root, so the kernel's
/// default of 128 instances lets only a few labs boot at once; past it a host's PID 1 exits with
/// "Failed to allocate manager object: Too many open files".
const INOTIFY_LIMITS: [(&str, u64); 2] = [
    ("/proc/sys/fs/inotify/max_user_instances", 8192),
    ("/proc/sys/fs/inotify/max_user_watches", 1_048_576),
];

/// Raises the machine's inotify limits to [`INOTIFY_LIMITS`] where they are lower (never lowers
/// them); says what it changed. A failure only warns: the boot then reports what went wrong.
pub fn raise_inotify_limits(progress: &mut dyn FnMut(String)) {
    for (path, least) in INOTIFY_LIMITS {
        let Ok(now) = std::fs::read_to_string(path) else {
            continue;
        };
        let Ok(now) = now.trim().parse::<u64>() else {
            continue;
        };
        if now >= least {
            continue;
        }
        match std::fs::write(path, least.to_string()) {
            Ok(()) => progress(format!("raised {path} from {now} to {least} for the lab's hosts")),
            Err(e) => progress(format!(
                "warning: could not raise {path} from {now} to {least}: {e}"
            )),
        }
    }
}

/// `ssh-keygen -t ed25519 -N ''` into `path` (and `path.pub`), unless the key exists; 0600.
pub fn generate_key(path: &Path, comment: &str) -> Result<()> {
    if !path.exists() {
        run(local_command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(path))?;
    }
    fs_err::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// Mounts the host's overlay and writes its identity into it; returns its public host key line
/// (`ssh-ed25519 AAAA…`) for the lab's known_hosts.
pub fn prepare(lab: &Lab, h: &LabHost, base: &Path, public_key: &str) -> Result<String> {
    for d in [&h.upper, &h.work, &h.merged] {
        fs_err::create_dir_all(d)?;
    }
    mount_overlay(h, base)?;
    let m = &h.merged;
    fs_err::write(m.join("etc/hostname"), format!("{}\n", h.name))?;

    let mut hosts = String::from(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
    );
    for other in &lab.hosts {
        hosts.push_str(&format!("{}\t{}\n", other.ip, other.name));
    }
    fs_err::write(m.join("etc/hosts"), hosts)?;

    let machine_id: u128 = rand::random();
    fs_err::write(m.join("etc/machine-id"), format!("{machine_id:032x}\n"))?;

    fs_err::create_dir_all(m.join("etc/systemd/network"))?;
    fs_err::write(
        m.join("etc/systemd/network/10-host0.network"),
        format!(
            "# hactl lab: a static address; sorts before the shipped 80-container-host0.network.\n\
             [Match]\nName=host0\n\n[Network]\nAddress={}/24\nDHCP=no\n\
             LinkLocalAddressing=no\nIPv6AcceptRA=no\n",
            h.ip
        ),
    )?;

    let ssh_dir = m.join("root/.ssh");
    fs_err::create_dir_all(&ssh_dir)?;
    fs_err::set_permissions(m.join("root"), std::fs::Permissions::from_mode(0o700))?;
    fs_err::set_permissions(&ssh_dir, std::fs::Permissions::from_mode(0o700))?;
    let keys = ssh_dir.join("authorized_keys");
    fs_err::write(&keys, public_key)?;
    fs_err::set_permissions(&keys, std::fs::Permissions::from_mode(0o600))?;

    let host_key = m.join("etc/ssh/ssh_host_ed25519_key");
    if !host_key.exists() {
        run(local_command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                &format!("root@{}", h.name),
                "-f",
            ])
            .arg(&host_key))?;
    }
    let public = fs_err::read_to_string(host_key.with_extension("pub"))?;
    // Drop the comment: known_hosts wants `type key`.
    Ok(public.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
}

/// Mounts the overlay at `merged` unless it is mounted already.
pub fn mount_overlay(h: &LabHost, base: &Path) -> Result<()> {
    if proc::is_mounted(&h.merged) {
        return Ok(());
    }
    run(local_command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            base.display(),
            h.upper.display(),
            h.work.display()
        ))
        .arg(&h.merged))?;
    Ok(())
}

/// The launcher: moves itself into the host's own cgroups (each `cgroup.procs` file given before
/// the command; writing `0` moves the writer), then execs the command detached, output to the log.
/// A move that fails stops the launch, with the reason in the log.
const LAUNCHER: &str = r#"log=$1; n=$2; shift 2
(
  while [ "$n" -gt 0 ]; do
    echo 0 >"$1" || { echo "hactl lab: cannot move the launcher into $1" >>"$log"; exit 1; }
    shift; n=$((n - 1))
  done
  exec setsid "$@" </dev/null >>"$log" 2>&1
) &
echo $!"#;

/// Starts the host's systemd-nspawn detached, in cgroups of its own (see `cgroup.rs`), and returns
/// its pid. Double fork through `sh`: the process is then not a child of this one, so it outlives
/// `hactl lab up`.
pub fn spawn(lab: &Lab, h: &LabHost) -> Result<u32> {
    use std::io::Write;
    let mut log = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&h.log)?;
    writeln!(
        log,
        "==== hactl lab: booting {} ({}) at unix time {} ====",
        h.name,
        h.ip,
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    )?;
    drop(log);
    let procs = cgroup::create(&h.machine).map_err(|e| LabError::Host {
        host: h.name.clone(),
        message: format!(
            "cannot create its cgroups ({}<machine> in each hierarchy): {e}",
            cgroup::PREFIX
        ),
    })?;
    let mut cmd = local_command::new("sh");
    cmd.arg("-c")
        .arg(LAUNCHER)
        .arg("sh")
        .arg(&h.log)
        .arg(procs.len().to_string())
        .args(&procs)
        .arg("systemd-nspawn")
        .args(["--keep-unit", "--register=no", "--link-journal=no", "-D"])
        .arg(&h.merged)
        .args(["-M", &h.machine, "-b"])
        .arg(format!("--network-bridge={}", lab.bridge))
        // runc gives every container a session keyring of its own, which nspawn's default
        // system-call filter refuses (a lab quirk: real hosts have no such filter).
        .arg("--system-call-filter=@keyring")
        .stdin(Stdio::null());
    let out = run(&mut cmd)?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| LabError::Host {
            host: h.name.clone(),
            message: format!("systemd-nspawn did not start: {}", proc::display(&cmd)),
        })
}

/// Whether `pid` is a systemd-nspawn process started for `h` (found by its `-D <merged>`).
fn is_nspawn_of(pid: u32, merged: &str) -> bool {
    proc::cmdline(pid).is_some_and(|argv| {
        argv.first()
            .is_some_and(|a| a.rsplit('/').next() == Some("systemd-nspawn"))
            && argv.iter().any(|a| a == merged)
    })
}

/// The running systemd-nspawn process of `h`, if any (the outermost one: while it sets up, its
/// children carry the same command line for a moment).
pub fn nspawn_pid(h: &LabHost) -> Option<u32> {
    let merged = h.merged.to_string_lossy();
    proc::all_pids().into_iter().find(|&pid| {
        proc::alive(pid)
            && is_nspawn_of(pid, &merged)
            && !proc::status(pid).is_some_and(|s| is_nspawn_of(s.ppid, &merged))
    })
}

/// Waits until `h` answers with an SSH banner on port 22; fails early with the console log's tail
/// if its systemd-nspawn exits.
pub fn wait_ready(h: &LabHost, deadline: Duration) -> Result<()> {
    let start = Instant::now();
    let mut interval = Duration::from_millis(50);
    let mut gone_since: Option<Instant> = None;
    loop {
        if net::ssh_banner(h.ip, Duration::from_millis(500)) {
            return Ok(());
        }
        // The pid recorded at spawn is systemd-nspawn itself (exec keeps the pid); the scan is
        // the fallback for a host booted before. Both must say gone, for a while, under load.
        let recorded_alive = h.nspawn_pid.is_some_and(proc::alive);
        if !recorded_alive && nspawn_pid(h).is_none() {
            let since = *gone_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(3) {
                return Err(LabError::BootExited {
                    host: h.name.clone(),
                    log: h.log.clone(),
                    tail: proc::tail(&h.log, 30),
                });
            }
        } else {
            gone_since = None;
        }
        if start.elapsed() >= deadline {
            return Err(LabError::BootTimeout {
                host: h.name.clone(),
                address: h.ip,
                seconds: deadline.as_secs(),
                log: h.log.clone(),
                tail: proc::tail(&h.log, 30),
            });
        }
        std::thread::sleep(interval);
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

/// Stops `h` cleanly: SIGTERM to systemd-nspawn (it shuts the container down), then after `grace`
/// SIGKILL to the host's PID 1, then to systemd-nspawn. Returns once both are gone.
pub fn stop(h: &LabHost, grace: Duration) -> Result<()> {
    let Some(nspawn) = nspawn_pid(h) else {
        return release_cgroups(h);
    };
    proc::signal(nspawn, "TERM");
    if proc::wait_gone(&[nspawn], grace).is_empty() {
        return release_cgroups(h);
    }
    kill_hard(nspawn);
    if proc::wait_gone(&[nspawn], Duration::from_secs(10)).is_empty() {
        release_cgroups(h)
    } else {
        Err(LabError::Host {
            host: h.name.clone(),
            message: format!("systemd-nspawn (pid {nspawn}) survived SIGKILL"),
        })
    }
}

/// How long a stopped host's cgroups may stay busy while its last processes exit.
pub const CGROUP_RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Removes the cgroups of `h`, which has stopped (see `cgroup.rs`).
pub fn release_cgroups(h: &LabHost) -> Result<()> {
    let left = cgroup::remove(&h.machine, CGROUP_RELEASE_WAIT);
    if left.is_empty() {
        return Ok(());
    }
    Err(LabError::Host {
        host: h.name.clone(),
        message: format!(
            "its cgroups could not be removed (a process still in them?): {}",
            left.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Power cut: SIGKILL to the container's PID 1 (the kernel then kills its whole PID namespace),
/// then SIGKILL to systemd-nspawn if it lingers.
pub fn kill_hard(nspawn: u32) {
    if let Some(init) = proc::container_init(nspawn) {
        proc::signal(init, "KILL");
        if proc::wait_gone(&[nspawn], Duration::from_secs(5)).is_empty() {
            return;
        }
    }
    proc::signal(nspawn, "KILL");
}

/// Processes left by the lab in `dir`: any whose command line mentions the lab directory or one
/// of its `-M <lab>-…` machine names.
pub fn processes_of(dir: &Path, lab: &str) -> Vec<u32> {
    let dir = dir.to_string_lossy().into_owned();
    let in_dir = |a: &str| a == dir || a.strip_prefix(dir.as_str()).is_some_and(|r| r.starts_with('/'));
    let me = std::process::id();
    proc::all_pids()
        .into_iter()
        .filter(|&pid| pid != me && proc::alive(pid))
        .filter(|&pid| {
            proc::cmdline(pid).is_some_and(|argv| {
                let nspawn = argv
                    .first()
                    .is_some_and(|a| a.rsplit('/').next() == Some("systemd-nspawn"));
                let machine = argv.windows(2).any(|w| w[0] == "-M" && is_machine_of(&w[1], lab));
                (nspawn && machine) || argv.iter().any(|a| in_dir(a))
            })
        })
        .collect()
}

/// Whether `machine` is `<lab>-<host>` with a host name the lab gives (`cp1`, `lb2`, `spare1`,
/// `w1`): lab `a` must not claim lab `a-b`'s machines.
pub fn is_machine_of(machine: &str, lab: &str) -> bool {
    machine
        .strip_prefix(lab)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|host| {
            ["cp", "lb", "spare", "w"]
                .iter()
                .find_map(|p| host.strip_prefix(p))
        })
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Stops every host of the lab in `dir` in parallel, recorded or not (a half-built lab may have
/// no `lab.json`); bounded by `grace` plus the SIGKILL wait.
pub fn stop_all_under(dir: &Path, lab: &str, grace: Duration) {
    let nspawns: Vec<u32> = processes_of(dir, lab)
        .into_iter()
        .filter(|&p| {
            proc::cmdline(p).is_some_and(|a| {
                a.first()
                    .is_some_and(|a| a.rsplit('/').next() == Some("systemd-nspawn"))
            }) && proc::container_init(p).is_some()
        })
        .collect();
    for &p in &nspawns {
        proc::signal(p, "TERM");
    }
    let left = proc::wait_gone(&nspawns, grace);
    for &p in &left {
        kill_hard(p);
    }
    proc::wait_gone(&left, Duration::from_secs(10));
    // Anything else still naming the lab (a systemd-nspawn caught mid-setup, a stray command).
    let stray = processes_of(dir, lab);
    for &p in &stray {
        proc::signal(p, "KILL");
    }
    proc::wait_gone(&stray, Duration::from_secs(5));
    // What is left is reported by `down` (see `cgroup::machines_of`).
    for machine in cgroup::machines_of(lab) {
        cgroup::remove(&machine, CGROUP_RELEASE_WAIT);
    }
}

/// `nsenter -t <pid1> -a` running `argv` (or a login shell) with a clean environment.
pub fn nsenter_command(pid1: u32, argv: &[String]) -> Command {
    let mut cmd = local_command::new("nsenter");
    cmd.args(["-t", &pid1.to_string(), "-a", "--", "/usr/bin/env", "-i"])
        .arg(format!("PATH={HOST_PATH}"))
        .args(["HOME=/root", "USER=root", "LOGNAME=root", "LANG=C.UTF-8"]);
    if let Ok(term) = std::env::var("TERM") {
        cmd.arg(format!("TERM={term}"));
    }
    if argv.is_empty() {
        cmd.args(["/bin/bash", "-l"]);
    } else {
        cmd.args(argv);
    }
    cmd
}

/// Running, isolated (its veth down) or stopped.
pub fn state(lab: &Lab, h: &LabHost) -> HostState {
    let Some(init) = nspawn_pid(h).and_then(proc::container_init) else {
        return HostState::Stopped;
    };
    match net::host_veth(&lab.bridge, init) {
        Ok(Some(veth)) if !net::link_up(&veth) => HostState::Isolated,
        _ => HostState::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_belong_to_their_own_lab_only() {
        assert!(is_machine_of("a-cp1", "a"));
        assert!(is_machine_of("a-spare12", "a"));
        assert!(!is_machine_of("a-b-cp1", "a"));
        assert!(is_machine_of("a-b-cp1", "a-b"));
        assert!(!is_machine_of("a-cp", "a"));
        assert!(!is_machine_of("ab-cp1", "a"));
        assert!(is_machine_of("a-w3", "a"));
        assert!(!is_machine_of("a-w", "a"));
        assert!(!is_machine_of("a-b-w1", "a"));
    }
}
