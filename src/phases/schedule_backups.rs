//! Schedule local etcd snapshots on every etcd host: the snapshot helper, the backup script, and a
//! oneshot service driven by a timer (`spec.backup`). With `enabled: false` the timer is disabled;
//! the snapshots already taken stay.
//!
//! Invariant: uploads only where the facts show a difference; `daemon-reload` only after a unit
//! file changed; `enable --now` only when the timer is not enabled and active, so a converged
//! host plans nothing.

use serde::Serialize;

use super::{uploads_needed, Ctx, Phase, PlanError};
use crate::backup::{SCRIPT, SERVICE_PATH, TIMER, TIMER_PATH};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step, Upload};
use crate::render;

pub struct ScheduleBackups;

/// The backup script's context.
#[derive(Debug, Clone, Serialize)]
pub struct BackupScript {
    pub cluster: String,
    pub dir: String,
    pub retention: u32,
    /// `spec.backup.remote`, when set.
    pub remote: Option<RemoteScript>,
    pub key: &'static str,
    pub known_hosts: &'static str,
}

/// Where the script pushes (`spec.backup.remote`).
#[derive(Debug, Clone, Serialize)]
pub struct RemoteScript {
    /// `user@address` (IPv6 in brackets), as sftp takes it.
    pub target: String,
    pub port: u16,
    pub path: String,
    pub retention: u32,
    /// `user@address:path` for messages.
    pub describe: String,
}

/// The files the phase places on an etcd host; with `spec.backup.remote`, the push key (0600,
/// root only) and the remote's pinned host key too (`remote`: what `up` prepared, `None` while
/// the remote has not been reached, which `up` refuses before planning).
pub fn files(
    inv: &Inventory,
    remote: Option<&crate::backup_remote::HostFiles>,
) -> Result<Vec<Upload>, PlanError> {
    use crate::backup_remote::{HOST_KEY, HOST_KNOWN_HOSTS};
    let b = &inv.backup;
    let script_remote = b.remote.as_ref().map(|r| {
        let host = match r.ssh.address {
            std::net::IpAddr::V6(a) => format!("[{a}]"),
            a => a.to_string(),
        };
        RemoteScript {
            target: format!("{}@{host}", r.ssh.user),
            port: r.ssh.port,
            path: r.path.clone(),
            retention: r.retention,
            describe: r.describe(),
        }
    });
    let script = render::render(
        "hactl-etcd-backup",
        &BackupScript {
            cluster: inv.name.clone(),
            dir: b.dir.clone(),
            retention: b.retention,
            remote: script_remote,
            key: HOST_KEY,
            known_hosts: HOST_KNOWN_HOSTS,
        },
    )?;
    let service = render::render("hactl-etcd-backup.service", &serde_json::json!({}))?;
    let timer = render::render(
        "hactl-etcd-backup.timer",
        &serde_json::json!({ "interval": b.interval_text }),
    )?;
    let mut files = vec![
        crate::snapshot::helper_upload()?,
        Upload::new(SCRIPT, 0o755, "root", "root", script.into_bytes()),
        Upload::new(SERVICE_PATH, 0o644, "root", "root", service.into_bytes()),
        Upload::new(TIMER_PATH, 0o644, "root", "root", timer.into_bytes()),
    ];
    if let (Some(_), Some(r)) = (&b.remote, remote) {
        files.push(Upload::new(
            HOST_KEY,
            0o600,
            "root",
            "root",
            r.key.private_openssh.clone().into_bytes(),
        ));
        files.push(Upload::new(
            HOST_KNOWN_HOSTS,
            0o644,
            "root",
            "root",
            r.known_hosts.clone().into_bytes(),
        ));
    }
    Ok(files)
}

impl Phase for ScheduleBackups {
    fn title(&self) -> &'static str {
        "Schedule etcd backups"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let timer = f.units.get(TIMER).cloned().unwrap_or_default();
        if !ctx.inv.backup.enabled {
            // Disabled: stop scheduling; the script, units and snapshots stay on the host.
            if timer.enabled == "enabled" || timer.active == "active" {
                return Ok(vec![Step::Run(RemoteCommand::new([
                    "systemctl",
                    "disable",
                    "--now",
                    TIMER,
                ]))]);
            }
            return Ok(vec![]);
        }
        let mut steps = uploads_needed(f, files(ctx.inv, ctx.backup_remote)?);
        let units_changed = steps
            .iter()
            .any(|s| matches!(s, Step::Upload(u) if u.path == SERVICE_PATH || u.path == TIMER_PATH));
        let timer_changed = steps
            .iter()
            .any(|s| matches!(s, Step::Upload(u) if u.path == TIMER_PATH));
        if units_changed {
            steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
        }
        if timer.enabled != "enabled" || timer.active != "active" {
            steps.push(Step::Run(RemoteCommand::new([
                "systemctl",
                "enable",
                "--now",
                TIMER,
            ])));
        } else if timer_changed {
            // A running timer keeps its old schedule until restarted.
            steps.push(Step::Run(RemoteCommand::new(["systemctl", "restart", TIMER])));
        }
        Ok(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(remote: bool) -> Inventory {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id");
        std::fs::write(&key, "k").unwrap();
        let mut text = format!(
            "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  ssh:\n    keyFile: {}\n  hosts:\n",
            key.display()
        );
        for i in 1..=3 {
            text.push_str(&format!(
                "    - {{ name: cp{i}, address: 10.0.0.1{i}, roles: [etcd] }}\n"
            ));
        }
        if remote {
            text.push_str("  backup:\n    remote:\n      address: 10.0.0.30\n      path: /srv/etcd\n      retention: 2\n");
        }
        crate::inventory::load_str(&dir.path().join("c.yaml"), &text).unwrap()
    }

    fn script(inv: &Inventory, remote: Option<&crate::backup_remote::HostFiles>) -> String {
        let files = files(inv, remote).unwrap();
        let s = files.iter().find(|u| u.path == SCRIPT).unwrap();
        String::from_utf8(s.content.in_memory().unwrap().to_vec()).unwrap()
    }

    #[test]
    fn the_script_pushes_only_with_a_remote_and_parses_either_way() {
        let remote = crate::backup_remote::HostFiles {
            key: crate::backup_remote::PushKey {
                private_openssh: "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n".into(),
                public_line: "ssh-ed25519 AAAA".into(),
            },
            known_hosts: "10.0.0.30 ssh-ed25519 AAAA\n".into(),
        };
        let with = inventory(true);
        let text = script(&with, Some(&remote));
        assert!(text.contains("'root@10.0.0.30'"), "{text}");
        assert!(text.contains("tail -n +3"), "{text}");
        let without = script(&inventory(false), None);
        assert!(!without.contains("sftp"), "{without}");
        for t in [&text, &without] {
            let out = std::process::Command::new("sh")
                .args(["-n", "-c", t])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        // The key goes to the hosts 0600, root only; nothing without the remote.
        let files = files(&with, Some(&remote)).unwrap();
        let key = files
            .iter()
            .find(|u| u.path == crate::backup_remote::HOST_KEY)
            .unwrap();
        assert_eq!((key.mode, key.owner.as_str()), (0o600, "root"));
        assert!(!format!("{key}").contains("PRIVATE"));
        assert!(super::files(&inventory(false), None)
            .unwrap()
            .iter()
            .all(|u| u.path != crate::backup_remote::HOST_KEY));
    }
}
