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
}

/// The files the phase places on an etcd host.
pub fn files(inv: &Inventory) -> Result<Vec<Upload>, PlanError> {
    let b = &inv.backup;
    let script = render::render(
        "hactl-etcd-backup",
        &BackupScript {
            cluster: inv.name.clone(),
            dir: b.dir.clone(),
            retention: b.retention,
        },
    )?;
    let service = render::render("hactl-etcd-backup.service", &serde_json::json!({}))?;
    let timer = render::render(
        "hactl-etcd-backup.timer",
        &serde_json::json!({ "interval": b.interval_text }),
    )?;
    Ok(vec![
        crate::snapshot::helper_upload()?,
        Upload::new(SCRIPT, 0o755, "root", "root", script.into_bytes()),
        Upload::new(SERVICE_PATH, 0o644, "root", "root", service.into_bytes()),
        Upload::new(TIMER_PATH, 0o644, "root", "root", timer.into_bytes()),
    ])
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
        let mut steps = uploads_needed(f, files(ctx.inv)?);
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
