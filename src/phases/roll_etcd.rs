//! Restart running etcd members whose unit, certificates or binary changed, or whose running
//! version is not the version they will run after this run (the declared `etcd.version`, else
//! the installed or uploaded binary's), one at a time: each restart waits for the whole cluster
//! to be healthy before, moves leadership off the member, and waits for the member (at its new
//! version) and the cluster after, so the cluster never loses quorum; the leader goes last, so
//! leadership moves once at most; a member that does not come back stops the rollout, with its
//! HAProxy `etcd-client` backend still in maintenance (the load balancers send a restarting
//! member no new client connection, so clients through the VIP see no failed request). The
//! clients that reach a member directly, the apiservers, are drained by etcd itself (see
//! `steps_for`).
//!
//! A version change is checked against the rules in `etcd::upgrade` before anything is planned:
//! a minor skip, a minor downgrade and a binary that is not the declared version are refused.

use std::collections::BTreeMap;
use std::time::Duration;

use semver::Version;

use super::etcd_files::{binary_paths, member_files};
use super::load_balancer::{drain_backend_steps_by, ready_backend_steps_by, Backend, Holder};
use super::{differs, Ctx, Phase, PlanError};
use crate::etcd::upgrade::{self, MemberVersion};
use crate::etcd::{probe, UNIT};
use crate::inventory::{BinarySource, Host, Inventory, Role};
use crate::plan::{HostSteps, Parallelism, PlannedPhase, RemoteCommand, Step};

pub struct RollEtcd;

/// Files whose change needs a restart (scripts and the client certificate do not).
fn needs_restart(path: &str) -> bool {
    path == crate::etcd::UNIT_PATH
        || path == format!("{}/etcd", crate::etcd::BIN_DIR)
        || [".crt", ".key"].iter().any(|ext| path.ends_with(ext)) && !path.contains("/client.")
}

/// What the roll decided for one running member.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberRoll {
    /// The version it will run after this run, when known.
    target: Option<Version>,
    /// Whether its running version differs from `target`.
    version_change: bool,
    /// Whether a file it reads at start changed.
    files_changed: bool,
}

/// The running members' versions, as the facts report them (inventory order).
fn member_versions(ctx: &Ctx<'_>) -> Vec<MemberVersion> {
    ctx.inv
        .with_role(Role::Etcd)
        .into_iter()
        .filter(|h| is_running_member(h, ctx))
        .map(|h| {
            let status = ctx.facts(h).etcd_status.as_ref();
            MemberVersion {
                host: h.name.clone(),
                running: status.and_then(|s| upgrade::parse(&s.version)),
                is_leader: status.is_some_and(|s| s.leader != 0 && s.leader == s.header.member_id),
            }
        })
        .collect()
}

fn is_running_member(host: &Host, ctx: &Ctx<'_>) -> bool {
    ctx.etcd.running.contains(&host.name) && ctx.etcd.has_data.contains(&host.name)
}

/// The version of the binary `host` will run: the package's on the host, or the operator's
/// bundle or release binary.
fn binary_version(host: &Host, ctx: &Ctx<'_>) -> Option<Version> {
    match &ctx.inv.etcd.source {
        BinarySource::Package => {
            let (etcd, _) = binary_paths(&BinarySource::Package);
            ctx.facts(host)
                .etcd_binaries
                .get(etcd)
                .and_then(|v| upgrade::parse(v))
        }
        _ => ctx.etcd.binary_version.clone(),
    }
}

/// Where the binary comes from, for messages.
fn origin(host: &Host, inv: &Inventory) -> String {
    match &inv.etcd.source {
        BinarySource::Package => format!("the etcd-server package on {}", host.name),
        BinarySource::Bundle { dir } => format!("bundle {}", dir.display()),
        BinarySource::Release { url, .. } => format!("release {url}"),
    }
}

/// Every running member's roll, in inventory order; refuses a version change the rules forbid.
fn decide(ctx: &Ctx<'_>) -> Result<BTreeMap<String, MemberRoll>, PlanError> {
    let members = member_versions(ctx);
    // Hashed once per plan: the binary is tens of MB and the same for every member.
    let binary_sha256 = binary_sha256(ctx);
    let binary_path = format!("{}/etcd", crate::etcd::BIN_DIR);
    let mut rolls = BTreeMap::new();
    for m in &members {
        let host = ctx.inv.host(&m.host).expect("members come from the inventory");
        let target = upgrade::target(
            ctx.inv.etcd.version.as_ref(),
            binary_version(host, ctx).as_ref(),
            &origin(host, ctx.inv),
        )?;
        if let Some(t) = &target {
            upgrade::check(&members, t)?;
        }
        let f = ctx.facts(host);
        let binary_changed = binary_sha256
            .as_ref()
            .is_some_and(|sha| f.files.get(&binary_path).is_none_or(|have| have.sha256 != *sha));
        let member_files = member_files(host, ctx)?;
        let read_at_start = member_files
            .iter()
            .map(|u| u.path.as_str())
            .chain([binary_path.as_str()])
            .filter(|p| needs_restart(p));
        // A file that already matches but was written after etcd started: a run uploaded it and
        // stopped before this member's restart, which is still due.
        let files_changed = binary_changed
            || member_files
                .iter()
                .any(|u| needs_restart(&u.path) && differs(f, u))
            || !f.written_after_start(UNIT, read_at_start).is_empty();
        rolls.insert(
            m.host.clone(),
            MemberRoll {
                version_change: upgrade::needs_restart(m, target.as_ref()),
                target,
                files_changed,
            },
        );
    }
    Ok(rolls)
}

/// The sha256 of the etcd binary `InstallEtcd` uploads for a bundle or release (none for packages).
fn binary_sha256(ctx: &Ctx<'_>) -> Option<String> {
    let bins = ctx.binaries?;
    let (_, blob) = bins.files.iter().find(|(name, _)| name == "etcd")?;
    Some(blob.sha256.clone())
}

/// Reads the member's version from its own `endpoint status`.
fn runs_version(host: &str, version: &Version, timeout: Duration) -> crate::plan::Check {
    let script = format!(
        "{} endpoint status -w json | grep -q '\"version\":\"{version}\"'",
        crate::etcd::ETCDCTL_WRAPPER
    );
    crate::plan::Check::command(
        format!("etcd member {host} runs {version}"),
        RemoteCommand {
            read_only: true,
            ..RemoteCommand::script(script)
        },
        timeout,
    )
}

/// The binary at the unit's path reports `version` (checked on every rolled host before the
/// first restart, so a wrong binary stops the roll before anything restarts).
fn binary_reports(path: &str, version: &Version) -> crate::plan::Check {
    let script = format!("{path} --version | head -n1 | grep -qx 'etcd Version: {version}'");
    crate::plan::Check::command(
        format!("{path} reports etcd {version}"),
        RemoteCommand {
            read_only: true,
            ..RemoteCommand::script(script)
        },
        Duration::from_secs(10),
    )
}

impl Phase for RollEtcd {
    fn title(&self) -> &'static str {
        "Restart changed etcd members"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    /// One at a time: each restart is a planned disruption of a quorum member.
    fn parallelism(&self) -> Parallelism {
        Parallelism::OneAtATime
    }
    fn disruptive(&self) -> bool {
        true
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        Ok(steps_for(host, &decide(ctx)?))
    }
    /// The members in roll order (the leader last), after a check of the new binary on every
    /// member that changes version; a minor change ends with the cluster version at the new minor.
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let rolls = decide(ctx)?;
        let mut phase = PlannedPhase {
            title: self.title().to_string(),
            parallelism: self.parallelism(),
            disruptive: self.disruptive(),
            hosts: self
                .hosts(ctx.inv)
                .into_iter()
                .map(|h| HostSteps {
                    host: h.name.clone(),
                    sudo: h.ssh.sudo,
                    steps: steps_for(h, &rolls),
                })
                .collect(),
        };
        let leader = member_versions(ctx)
            .into_iter()
            .find(|m| m.is_leader)
            .map(|m| m.host);
        let names: Vec<&str> = phase.hosts.iter().map(|h| h.host.as_str()).collect();
        let order: Vec<String> = upgrade::roll_order(&names, leader.as_deref())
            .into_iter()
            .map(String::from)
            .collect();
        let mut by_name: BTreeMap<String, HostSteps> =
            phase.hosts.drain(..).map(|h| (h.host.clone(), h)).collect();
        phase.hosts = order.iter().filter_map(|n| by_name.remove(n)).collect();

        let changing: Vec<(&String, &Version)> = rolls
            .iter()
            .filter(|(_, r)| r.version_change)
            .filter_map(|(h, r)| Some((h, r.target.as_ref()?)))
            .collect();
        let mut phases = Vec::new();
        if let Some((_, target)) = changing.first() {
            phase.title = format!("Roll etcd members to {target}, one at a time (leader last)");
            let (etcd_path, _) = binary_paths(&ctx.inv.etcd.source);
            let check = PlannedPhase {
                title: format!("Check the etcd binaries report {target}"),
                parallelism: Parallelism::All,
                disruptive: false,
                hosts: phase
                    .hosts
                    .iter()
                    .filter(|h| changing.iter().any(|(n, _)| **n == h.host))
                    .map(|h| HostSteps {
                        host: h.host.clone(),
                        sudo: h.sudo,
                        steps: vec![Step::Wait(binary_reports(etcd_path, target))],
                    })
                    .collect(),
            };
            phases.push(check);
            let minor_changes = member_versions(ctx).iter().any(|m| {
                m.running
                    .as_ref()
                    .is_some_and(|r| (r.major, r.minor) != (target.major, target.minor))
            });
            if minor_changes {
                if let Some(last) = phase.hosts.iter_mut().rev().find(|h| !h.steps.is_empty()) {
                    last.steps.push(Step::Wait(probe::cluster_version_is(
                        target.major,
                        target.minor,
                        Duration::from_secs(60),
                    )));
                }
            }
        }
        // HAProxy sends the member no new client connection while it restarts (only on the
        // load balancers already serving: a first `up` configures them after this phase).
        let serving: Vec<&str> = ctx
            .inv
            .with_role(Role::LoadBalancer)
            .into_iter()
            .filter(|lb| {
                ctx.facts(lb)
                    .files
                    .contains_key(crate::load_balancer::HAPROXY_CLI)
            })
            .map(|lb| lb.name.as_str())
            .collect();
        let on_serving = |steps: Vec<HostSteps>| -> Vec<HostSteps> {
            steps
                .into_iter()
                .filter(|h| serving.contains(&h.host.as_str()))
                .collect()
        };
        let mut hosts = Vec::new();
        for member in phase.hosts.drain(..) {
            if member.steps.is_empty() {
                continue;
            }
            let name = member.host.clone();
            hosts.extend(on_serving(drain_backend_steps_by(
                ctx.inv,
                Backend::EtcdClient,
                &name,
                Holder::Up,
            )));
            hosts.push(member);
            hosts.extend(on_serving(ready_backend_steps_by(
                ctx.inv,
                Backend::EtcdClient,
                &name,
                Duration::from_secs(60),
                Holder::Up,
            )));
        }
        phase.hosts = hosts;
        phases.push(phase);
        Ok(phases)
    }
}

/// The restart of one member, with its gates; nothing when it needs none. The restart drains
/// the member's direct clients (the apiservers, which no HAProxy drain moves): its client URLs
/// serve gRPC alone, which etcd stops gracefully, and the unit's `ExecStop=`
/// (`hactl-etcd-member stop`) resets the streams still open a second after the listener closed
/// (docs/how-to/upgrades.md).
fn steps_for(host: &Host, rolls: &BTreeMap<String, MemberRoll>) -> Vec<Step> {
    let Some(roll) = rolls.get(&host.name) else {
        return vec![];
    };
    if !roll.files_changed && !roll.version_change {
        return vec![];
    }
    let mut steps = vec![
        Step::Wait(probe::cluster_healthy(
            &format!("before restarting {}", host.name),
            Duration::from_secs(30),
        )),
        // Leadership moves off the member first, so its restart costs no election.
        Step::Run(RemoteCommand::new([crate::etcd::MEMBER_SCRIPT, "step-down"])),
        Step::Run(RemoteCommand::new(["systemctl", "restart", "etcd.service"])),
        Step::Wait(probe::member_healthy(&host.name, Duration::from_secs(60))),
    ];
    if let Some(target) = roll.target.as_ref().filter(|_| roll.version_change) {
        steps.push(Step::Wait(runs_version(
            &host.name,
            target,
            Duration::from_secs(30),
        )));
    }
    steps.push(Step::Wait(probe::cluster_healthy(
        &format!("after restarting {}", host.name),
        Duration::from_secs(60),
    )));
    steps
}

#[cfg(test)]
mod tests {
    /// A process standing for etcd: it ignores SIGTERM and exits after `secs`, reaped by a
    /// thread as soon as it exits (a zombie would still answer `kill -0`).
    fn etcd_standin(secs: f32) -> (u32, std::thread::JoinHandle<()>) {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("trap '' TERM; sleep {secs}")])
            .spawn()
            .unwrap();
        let pid = child.id();
        // Let the shell set its trap before any signal comes.
        std::thread::sleep(std::time::Duration::from_millis(100));
        (pid, std::thread::spawn(move || drop(child.wait())))
    }

    /// Runs `hactl-etcd-member stop ADDR 2379` as etcd.service's `ExecStop=` would (the real
    /// `sh`, `sleep` and `kill`; `MAINPID` as given) with a fake `ss` that logs its arguments
    /// and lists a listener when `listening`. Returns the exit code, the `ss` calls and stdout.
    fn run_stop(addr: &str, main_pid: Option<u32>, listening: bool) -> (i32, Vec<String>, String) {
        let script = crate::render::render("hactl-etcd-member", &serde_json::json!({})).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let listener = if listening { "echo LISTEN" } else { "true" };
        let ss = dir.path().join("ss");
        let body = format!(
            "#!/bin/sh\necho \"ss $*\" >> {}\ncase \"$1\" in -Htln) {listener} ;; -Htn) echo CONN ;; esac\n",
            log.display()
        );
        std::fs::write(&ss, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ss, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap());
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", &script, "hactl-etcd-member", "stop", addr, "2379"])
            .env("PATH", path)
            .env_remove("MAINPID");
        if let Some(pid) = main_pid {
            cmd.env("MAINPID", pid.to_string());
        }
        let o = cmd.output().unwrap();
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        (
            o.status.code().unwrap_or(-1),
            log.lines().map(str::to_string).collect(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    }

    #[test]
    fn a_stop_resets_the_connections_still_open_a_moment_after_the_listener_closed() {
        let closed = "ss -Htln ( sport = :2379 ) src 10.0.0.11";
        let count = "ss -Htn state established ( sport = :2379 ) src 10.0.0.11";
        let reset = "ss -K state established ( sport = :2379 ) src 10.0.0.11";
        // The member still runs a while after its listener closed: its streams are reset, and
        // the stop waits until it has exited.
        let (pid, reaper) = etcd_standin(2.0);
        let (rc, ss, out) = run_stop("10.0.0.11", Some(pid), false);
        assert_eq!((rc, ss), (0, vec![closed.into(), count.into(), reset.into()]));
        assert!(out.contains("reset 1 client connection(s)"), "{out}");
        assert!(reaper.is_finished(), "the stop returned before the member exited");
        reaper.join().unwrap();
        // IPv6, as the unit writes it (in brackets) or not: ss's address in brackets.
        for addr in ["[fd00::11]", "fd00::11"] {
            let (pid, reaper) = etcd_standin(1.5);
            let (_, ss, _) = run_stop(addr, Some(pid), false);
            assert_eq!(
                ss.last().unwrap(),
                "ss -K state established ( sport = :2379 ) src [fd00::11]"
            );
            reaper.join().unwrap();
        }
        // Listening until it has gone: nothing is reset.
        let (pid, reaper) = etcd_standin(0.5);
        let (rc, ss, _) = run_stop("10.0.0.11", Some(pid), true);
        assert!(rc == 0 && !ss.iter().any(|l| l.starts_with("ss -K")), "{ss:?}");
        reaper.join().unwrap();
        // A member that exits on SIGTERM at once: nothing is reset.
        let mut quick = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = quick.id();
        let reaper = std::thread::spawn(move || drop(quick.wait()));
        let (rc, ss, _) = run_stop("10.0.0.11", Some(pid), false);
        assert!(rc == 0 && !ss.iter().any(|l| l.starts_with("ss -K")), "{ss:?}");
        reaper.join().unwrap();
        // No main process (it exited on its own): nothing to do.
        assert_eq!(run_stop("10.0.0.11", None, false), (0, vec![], String::new()));
        // A wrong call stops nothing.
        let script = crate::render::render("hactl-etcd-member", &serde_json::json!({})).unwrap();
        let o = std::process::Command::new("/bin/sh")
            .args(["-c", &script, "hactl-etcd-member", "stop", "10.0.0.11"])
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
    }

    #[test]
    fn only_unit_binary_and_member_certificates_need_a_restart() {
        assert!(super::needs_restart("/etc/systemd/system/etcd.service"));
        assert!(super::needs_restart("/etc/hactl/pki/etcd/peer.key"));
        assert!(super::needs_restart("/etc/hactl/pki/etcd/ca.crt"));
        assert!(super::needs_restart("/usr/local/bin/etcd"));
        assert!(!super::needs_restart("/usr/local/bin/etcdctl"));
        assert!(!super::needs_restart("/etc/hactl/pki/etcd/client.crt"));
        assert!(!super::needs_restart("/usr/local/sbin/hactl-etcdctl"));
    }
}
