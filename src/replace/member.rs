//! P1–P7: move leadership off the old member, fence it, remove it, prepare the replacement host,
//! add it as a learner, start it, promote it; and the step builders they send (pure, unit-tested).
//!
//! Invariant: the fence is [`crate::operations::fence`]'s, the one recover and maintenance use.

use std::time::Duration;

use anyhow::bail;

use super::{Run, PROMOTE_TIMEOUT_SECS};
use crate::etcd::errors::{classify, ErrorClass};
use crate::etcd::{self, hex_id, probe, safety, Member, UNIT};
use crate::exec::Mode;
use crate::exit::{self, refusal, refuse};
use crate::inventory::{Host, Inventory};
use crate::operations::{self, fence, StepState};
use crate::phases::{etcd_files, install_etcd::InstallEtcd, Ctx, EtcdView, Phase};
use crate::plan::{Check, RemoteCommand, Step, Upload};
use crate::render;

/// The fence ([`crate::operations::fence`]) on etcd, then stop.
pub fn fence_steps(member: &str, id: Option<u64>) -> Vec<Step> {
    let who = match id {
        Some(id) => format!("member {member} ({})", hex_id(id)),
        None => format!("member {member}"),
    };
    let script = fence::fence_and_stop(
        &[UNIT],
        &[
            &format!("Written by hactl: {who} is being replaced; it must not start on its old data."),
            "hactl removes this file when the replacement starts; it stays across reboots.",
        ],
    );
    vec![
        Step::Run(RemoteCommand::script(script)),
        Step::Wait(Check::command(
            format!("{who} is stopped: no etcd process, nothing on the peer port"),
            RemoteCommand::script(format!(
                "! systemctl is-active --quiet {UNIT} && ! pgrep -x etcd >/dev/null"
            )),
            Duration::from_secs(60),
        )),
    ]
}

/// Stops the Kubernetes units that run on a host being fenced (scheduler, controller-manager,
/// then the apiserver, whose backend was drained first), each with a runtime drop-in like
/// etcd's so none starts again on the old host; P8 lifts them on a host that is reused.
pub fn fence_kube_steps(active: &[&str]) -> Vec<Step> {
    if active.is_empty() {
        return vec![];
    }
    let script = fence::fence_and_stop(active, &["Written by hactl: this host is being replaced."]);
    vec![Step::Run(RemoteCommand::script(script))]
}

/// Lifts the fence (before the replacement starts).
pub fn unfence_step() -> Step {
    Step::Run(RemoteCommand::script(fence::lift_all(&[UNIT])))
}

/// `member remove ID` on a healthy member, after re-checking on that host that ID is still the
/// member at PEER_URL; an ID already gone is success (docs/recovery.md, "Replace and heal (P0–P10)" P3).
pub fn remove_step(id: u64, peer_url: &str) -> Step {
    let hex = hex_id(id);
    let ctl = etcd::ETCDCTL_WRAPPER;
    Step::Run(RemoteCommand::script(format!(
        "line=$({ctl} member list | awk -F', ' -v id={hex} '$1 == id')\n\
if [ -z \"$line\" ]; then echo \"member {hex} is not in the member list: already removed\"; exit 0; fi\n\
case \"$line\" in *\", {peer_url}, \"*) ;; *) echo \"refusing: member {hex} is not the member at {peer_url}: $line\" >&2; exit 1 ;; esac\n\
out=$({ctl} member remove {hex} 2>&1) && {{ echo \"$out\"; exit 0; }}\n\
case \"$out\" in *\"member not found\"*|*\"ID not found\"*) echo \"member {hex} already removed\"; exit 0 ;; esac\n\
echo \"$out\" >&2; exit 1"
    )))
}

/// Moves the data dir of a removed member aside on its host, after checking etcd is not running
/// there (never touch a running member's directory) and under the data-directory rule
/// ([`crate::etcd::data_dir`]: a directory holding files but no `member/` is refused).
pub fn move_aside_step(data_dir: &str, host: &str, old_id: Option<u64>, stamp: &str) -> Step {
    let aside = format!("{data_dir}.hactl-removed-{stamp}");
    let who = old_id.map(hex_id).unwrap_or_else(|| "(none)".into());
    let guard = crate::etcd::data_dir::guard();
    let guard_fn = crate::etcd::data_dir::GUARD_FN;
    Step::Run(RemoteCommand::script(format!(
        "{guard}{guard_fn} {data_dir} \"move {data_dir} aside\" 'hactl replace'\n\
if systemctl is-active --quiet {UNIT} || pgrep -x etcd >/dev/null; then echo \"refusing: etcd runs on {host}; its data dir stays\" >&2; exit 1; fi\n\
if [ -e {data_dir} ] && [ -n \"$(ls -A {data_dir} 2>/dev/null)\" ]; then mv --no-clobber -- {data_dir} {aside} && echo \"{host}: data of removed member {who} moved to {aside}\"; fi\n\
install -d -m 0700 -o etcd -g etcd {data_dir}"
    )))
}

/// The initial env of a learner joining `members` (the current list, which already holds it).
pub fn initial_env(inv: &Inventory, host: &Host, members: &[Member]) -> Result<Upload, render::RenderError> {
    let url = etcd::peer_url(inv, host);
    let mut parts = Vec::new();
    for m in members {
        let name = if m.peer_urls.contains(&url) {
            host.name.clone()
        } else if m.is_started() {
            m.name.clone()
        } else {
            continue; // a foreign unstarted member cannot be in our initial cluster
        };
        for u in &m.peer_urls {
            parts.push(format!("{name}={u}"));
        }
    }
    let text = render::render(
        "etcd-initial.env",
        &render::EtcdInitialEnv {
            name: host.name.clone(),
            initial_cluster: parts.join(","),
            state: "existing".into(),
            token: etcd::token(inv),
        },
    )?;
    Ok(Upload::new(
        etcd::INITIAL_ENV_PATH,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    ))
}

impl<'a> Run<'a> {
    pub(super) async fn p1_move_leader(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let Some(old) = self.old.as_ref().and_then(|o| obs.by_id(o.id)) else {
            return self.journal.record(
                "P1",
                StepState::Skipped,
                "",
                "the old member is not in the cluster",
            );
        };
        if obs.leader() != Some(old.id) || !obs.is_healthy(old) {
            return self
                .journal
                .record("P1", StepState::Skipped, "", "the old member does not lead");
        }
        let Some(next) = obs
            .voters()
            .filter(|m| m.id != old.id && obs.is_healthy(m))
            .max_by_key(|m| obs.status_of(m).map(|s| s.status.raft_applied_index).unwrap_or(0))
        else {
            bail!("no healthy member to take over leadership");
        };
        let observer = self.observer_host(&obs);
        let endpoints = old.client_urls.join(",");
        self.journal.record(
            "P1",
            StepState::Started,
            &observer.name,
            &format!(
                "moving leadership from {} to {} ({})",
                self.target,
                next.name,
                hex_id(next.id)
            ),
        )?;
        operations::run_on(
            self.mode,
            &self.reach.transports,
            "P1 move leadership",
            observer,
            vec![Step::Run(RemoteCommand::new([
                etcd::ETCDCTL_WRAPPER.to_string(),
                format!("--endpoints={endpoints}"),
                "move-leader".to_string(),
                hex_id(next.id),
            ]))],
        )
        .await?;
        self.journal.record(
            "P1",
            StepState::Done,
            &observer.name,
            &format!("leader is {}", next.name),
        )
    }

    pub(super) async fn p2_fence(&mut self) -> anyhow::Result<()> {
        // Fence at the load balancers first: clients through the VIP stop reaching the old
        // member (and, if it holds the VIP, the VIP moves) before its etcd stops.
        if let Some(host) = self.target_host {
            self.balancers
                .move_vip_off(self.mode, &self.journal, "P2 vip", host)
                .await?;
        }
        self.balancers
            .drain(self.mode, self.inv, &self.journal, "P2 lb-drain", &self.target)
            .await?;
        let Some(host) = self.target_host else {
            return self.need_confirm_dead("it is not in the inventory");
        };
        let Some(_) = self.reach.transports.get(&host.name) else {
            let why = self
                .reach
                .unreachable
                .get(&host.name)
                .cloned()
                .unwrap_or_default();
            return self.need_confirm_dead(&format!("its host is unreachable ({why})"));
        };
        if self.args.planned
            || self.old.is_some()
            || self.target_host.is_some_and(|h| h.name != self.replacement.name)
        {
            let id = self.old.as_ref().map(|o| o.id);
            let kube: Vec<&str> = operations::KUBE_UNITS
                .into_iter()
                .filter(|u| {
                    self.reach
                        .facts
                        .get(&host.name)
                        .and_then(|f| f.units.get(*u))
                        .is_some_and(|x| x.active == "active")
                })
                .collect();
            self.journal.record(
                "P2",
                StepState::Started,
                &host.name,
                &format!(
                    "fencing member {}{}",
                    self.target,
                    if kube.is_empty() {
                        String::new()
                    } else {
                        format!(" and stopping {}", kube.join(", "))
                    }
                ),
            )?;
            let mut steps = fence_kube_steps(&kube);
            steps.extend(fence_steps(&self.target, id));
            operations::run_on(
                self.mode,
                &self.reach.transports,
                "P2 fence the old member",
                host,
                steps,
            )
            .await?;
            return self
                .journal
                .record("P2", StepState::Done, &host.name, "etcd stopped and fenced");
        }
        self.journal.record(
            "P2",
            StepState::Skipped,
            &host.name,
            "the old member is already removed",
        )
    }

    pub(super) async fn p3_remove(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let Some(old) = self.old.as_ref().and_then(|o| obs.by_id(o.id)).cloned() else {
            return self.journal.record(
                "P3",
                StepState::Skipped,
                "",
                "the old member is not in the member list (already removed)",
            );
        };
        // Re-check R-remove right before acting (KCP's pre-terminate hook does the same).
        let ours = self.new_member(&obs).filter(|m| m.is_learner).map(|m| m.id);
        let counts = obs.counts(&operations::maintenance_record::in_maintenance(self.state), ours);
        safety::r_remove(&counts, obs.is_healthy(&old))
            .into_result()
            .map_err(refusal)?;
        let observer = self.observer_host(&obs);
        let url = old.peer_urls.first().cloned().unwrap_or_default();
        self.journal.record(
            "P3",
            StepState::Started,
            &observer.name,
            &format!("removing member {} ({}) at {url}", self.target, hex_id(old.id)),
        )?;
        operations::run_on(
            self.mode,
            &self.reach.transports,
            "P3 remove the old member",
            observer,
            vec![remove_step(old.id, &url)],
        )
        .await?;
        self.journal.record(
            "P3",
            StepState::Done,
            &observer.name,
            &format!("member {} removed", hex_id(old.id)),
        )
    }

    pub(super) async fn p4_prepare(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        if let Some(m) = self.new_member(&obs) {
            return self.journal.record(
                "P4",
                StepState::Skipped,
                &r.name,
                &format!("member {} already added at {}", hex_id(m.id), self.new_url),
            );
        }
        if obs.members.by_peer_url(&self.new_url).is_some() && self.mode == Mode::Live {
            bail!(
                "the old member still holds {}: it must be removed before its host is prepared",
                self.new_url
            );
        }
        let facts = self.reach.facts.clone();
        let view = EtcdView::default();
        let ctx = Ctx {
            inv: self.inv,
            pki: self.pki,
            facts: &facts,
            etcd: &view,
            binaries: None,
            kubernetes: None,
            vrrp_password: None,
        };
        let mut steps = InstallEtcd.steps(r, &ctx)?;
        steps.push(move_aside_step(
            &self.inv.etcd.data_dir,
            &r.name,
            self.old.as_ref().map(|o| o.id),
            &self.stamp,
        ));
        let f = ctx.facts(r);
        steps.extend(crate::phases::uploads_needed(
            f,
            etcd_files::member_files(r, &ctx)?,
        ));
        steps.push(Step::Run(RemoteCommand::new(["systemctl", "daemon-reload"])));
        // The replacement gets the scheduled backups `up` gives every etcd host, so the
        // inventory and the hosts agree again when the replace is done.
        steps.extend(crate::phases::schedule_backups::ScheduleBackups.steps(r, &ctx)?);
        self.journal.record(
            "P4",
            StepState::Started,
            &r.name,
            "moving old data aside; installing and configuring etcd",
        )?;
        operations::run_on(
            self.mode,
            &self.reach.transports,
            "P4 prepare the replacement host",
            r,
            steps,
        )
        .await?;
        self.journal.record("P4", StepState::Done, &r.name, "")
    }

    pub(super) async fn p5_add_learner(&mut self) -> anyhow::Result<()> {
        let r = self.replacement;
        for attempt in 1..=6 {
            let obs = self.observe().await?;
            if let Some(m) = self.new_member(&obs) {
                return self.journal.record(
                    "P5",
                    StepState::Skipped,
                    &r.name,
                    &format!(
                        "{} is already member {} (learner: {})",
                        self.new_url,
                        hex_id(m.id),
                        m.is_learner
                    ),
                );
            }
            let mut counts = obs.counts(&operations::maintenance_record::in_maintenance(self.state), None);
            if self.args.planned {
                counts.foreign_operation = None;
            }
            let decision = if self.mode == Mode::DryRun {
                safety::Decision::Allowed // P3 has not run in a dry run; the live run checks R-add here
            } else {
                safety::r_add(&counts)
            };
            if let safety::Decision::Refused(why) = &decision {
                if self.mode == Mode::DryRun || attempt == 6 {
                    return Err(refusal(why.clone()));
                }
                tracing::info!("P5: {why}; waiting 5 s (etcd's health interval) and checking again");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            let observer = self.observer_host(&obs);
            self.journal.record(
                "P5",
                StepState::Started,
                &observer.name,
                &format!("adding {} at {} as a learner", r.name, self.new_url),
            )?;
            let step = Step::Run(RemoteCommand::new([
                etcd::MEMBER_SCRIPT,
                "add-learner",
                r.name.as_str(),
                self.new_url.as_str(),
            ]));
            match operations::run_on(
                self.mode,
                &self.reach.transports,
                "P5 add the replacement as a learner",
                observer,
                vec![step],
            )
            .await
            {
                Ok(()) => return self.journal.record("P5", StepState::Done, &observer.name, ""),
                Err(e) if classify(&format!("{e:#}")) == ErrorClass::RetryAfterHealthGate && attempt < 6 => {
                    tracing::info!("P5: etcd said the cluster is unhealthy; retrying in 5 s");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                Err(e) => return Err(e),
            }
        }
        bail!("the learner could not be added after 6 attempts")
    }

    pub(super) async fn p6_start(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        let member = self.new_member(&obs).cloned();
        let running = self.reach.etcd_active(&r.name);
        if let Some(m) = member.as_ref().filter(|m| m.is_started() && running) {
            // Started before (a resumed run): its postcondition holds. Whether it keeps up is
            // P7's catch-up gate to judge, not a reason to wait here.
            return self.journal.record(
                "P6",
                StepState::Skipped,
                &r.name,
                &format!(
                    "member {} has started and etcd is active on {}",
                    hex_id(m.id),
                    r.name
                ),
            );
        }
        let members: Vec<Member> = if self.mode == Mode::DryRun && member.is_none() {
            // The dry run cannot add the learner; show the env the live run will write.
            let mut m = obs.members.members.clone();
            m.retain(|x| self.old.as_ref().is_none_or(|o| o.id != x.id) || self.args.planned);
            m.push(Member {
                id: 0,
                name: String::new(),
                peer_urls: vec![self.new_url.clone()],
                client_urls: vec![],
                is_learner: true,
            });
            m
        } else {
            obs.members.members.clone()
        };
        let env = initial_env(self.inv, r, &members)?;
        let steps = vec![
            Step::Upload(env),
            unfence_step(),
            Step::Run(RemoteCommand::new(["systemctl", "enable", UNIT])),
            Step::Run(RemoteCommand::new(["systemctl", "start", "--no-block", UNIT])),
            Step::Wait(
                Check::command(
                    format!("member {} serves (as a learner until promoted)", r.name),
                    RemoteCommand::read_only([etcd::ETCDCTL_WRAPPER, "endpoint", "status"]),
                    Duration::from_secs(120),
                )
                .diagnose_with(probe::journal_tail()),
            ),
        ];
        self.journal.record(
            "P6",
            StepState::Started,
            &r.name,
            "starting etcd with state existing",
        )?;
        if let Err(e) = operations::run_on(
            self.mode,
            &self.reach.transports,
            "P6 start the replacement",
            r,
            steps,
        )
        .await
        {
            let text = format!("{e:#}");
            if classify(&text) == ErrorClass::DataDirInvalid {
                bail!(
                    "{} failed with an identity error (its data dir is unusable): {text}",
                    r.name
                );
            }
            return Err(e);
        }
        self.journal.record("P6", StepState::Done, &r.name, "")
    }

    pub(super) async fn p7_promote(&mut self) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        if let Some(m) = self.new_member(&obs) {
            if !m.is_learner {
                return self.journal.record(
                    "P7",
                    StepState::Skipped,
                    &r.name,
                    &format!("member {} is already a voter", hex_id(m.id)),
                );
            }
        }
        let counts = obs.counts(
            &operations::maintenance_record::in_maintenance(self.state),
            self.new_member(&obs).map(|m| m.id),
        );
        if self.mode == Mode::Live {
            safety::r_promote(&counts, true).into_result().map_err(refusal)?;
        }
        let observer = self.observer_host(&obs);
        let timeout = std::env::var("HACTL_PROMOTE_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(PROMOTE_TIMEOUT_SECS);
        self.journal.record(
            "P7",
            StepState::Started,
            &observer.name,
            &format!("promoting {} once it caught up (up to {timeout} s)", r.name),
        )?;
        let steps = vec![
            Step::Run(
                RemoteCommand::new([
                    etcd::MEMBER_SCRIPT,
                    "promote",
                    self.new_url.as_str(),
                    &timeout.to_string(),
                ])
                .with_timeout(Duration::from_secs(timeout + 30)),
            ),
            Step::Wait(probe::cluster_healthy(
                &format!("after promoting {}", r.name),
                Duration::from_secs(60),
            )),
        ];
        if let Err(e) = operations::run_on(
            self.mode,
            &self.reach.transports,
            "P7 promote the replacement",
            observer,
            steps,
        )
        .await
        {
            return self.rollback_learner(e).await;
        }
        self.journal.record(
            "P7",
            StepState::Done,
            &observer.name,
            &format!("{} is a voter", r.name),
        )
    }

    /// P7 timed out: remove the learner (quorum-neutral), fence its host, count a retry.
    pub(super) async fn rollback_learner(&mut self, cause: anyhow::Error) -> anyhow::Result<()> {
        let obs = self.observe().await?;
        let r = self.replacement;
        let observer = self.observer_host(&obs);
        if let Some(m) = self.new_member(&obs).filter(|m| m.is_learner).cloned() {
            self.journal.record(
                "P7",
                StepState::Started,
                &observer.name,
                &format!("rollback: removing learner {} ({})", r.name, hex_id(m.id)),
            )?;
            operations::run_on(
                self.mode,
                &self.reach.transports,
                "P7 rollback: remove the learner",
                observer,
                vec![remove_step(m.id, &self.new_url)],
            )
            .await?;
            operations::run_on(
                self.mode,
                &self.reach.transports,
                "P7 rollback: stop the learner",
                r,
                fence_steps(&r.name, Some(m.id)),
            )
            .await?;
        }
        let retries =
            operations::remediation::record_failure(self.state, &self.target, &format!("{cause:#}"))?;
        self.journal.record(
            "P7",
            StepState::Failed,
            &observer.name,
            &format!("learner did not catch up; removed; retryCount={retries}"),
        )?;
        Err(refuse(
            exit::FAILED_AFTER_CHANGES,
            format!(
                "P7: the learner {} did not catch up: {cause:#}\nit was removed again (quorum-neutral) and its etcd stopped; retryCount={retries}. Check its disk and peer traffic, then run `hactl replace {} ...` again",
                r.name, self.target
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replace::{F1_ORDER, F2_ORDER};

    pub(super) fn pos(order: &[&str], s: &str) -> usize {
        order.iter().position(|x| *x == s).unwrap()
    }

    /// B10's static assertion: for a failed member, hactl never adds before it removes.
    #[test]
    pub(super) fn f1_removes_before_it_adds_and_f2_adds_first() {
        assert!(pos(&F1_ORDER, "P3") < pos(&F1_ORDER, "P5"));
        assert!(pos(&F1_ORDER, "P1") < pos(&F1_ORDER, "P2"));
        assert!(pos(&F1_ORDER, "P2") < pos(&F1_ORDER, "P3"));
        assert!(pos(&F1_ORDER, "P4") < pos(&F1_ORDER, "P6"));
        assert!(pos(&F2_ORDER, "P7") < pos(&F2_ORDER, "P3"));
    }

    #[test]
    pub(super) fn the_remove_step_rechecks_the_id_and_url_on_the_host() {
        let Step::Run(cmd) = remove_step(0x921b590400393280, "https://10.0.0.13:2380") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(line.contains("921b590400393280"), "{line}");
        assert!(line.contains("https://10.0.0.13:2380"), "{line}");
        assert!(line.contains("already removed"), "{line}");
    }

    #[test]
    pub(super) fn the_kube_fence_writes_a_dropin_per_unit_then_stops_them_in_order() {
        assert!(fence_kube_steps(&[]).is_empty());
        let steps = fence_kube_steps(&["kube-scheduler.service", "kube-apiserver.service"]);
        let Step::Run(cmd) = &steps[0] else { panic!() };
        let script = &cmd.argv[2];
        assert!(
            script.contains("printf '[Unit]\\n# Written by hactl: this host is being replaced.\\nAssertPathExists=!%s\\n' \"/etc/systemd/system/kube-apiserver.service.d/hactl-fence.conf\" > \"/etc/systemd/system/kube-apiserver.service.d/hactl-fence.conf\""),
            "{script}"
        );
        assert!(
            script.ends_with(
                "systemctl daemon-reload && systemctl stop kube-scheduler.service kube-apiserver.service"
            ),
            "{script}"
        );
    }

    #[test]
    pub(super) fn moving_aside_never_deletes() {
        let Step::Run(cmd) = move_aside_step("/var/lib/etcd", "cp3", Some(1), "20261122T000000Z") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(
            line.contains("mv --no-clobber -- /var/lib/etcd /var/lib/etcd.hactl-removed-20261122T000000Z")
        );
        assert!(!line.contains("rm "), "{line}");
        // The data-directory rule runs first: a dir of the host's own is refused, not moved.
        let guard = line
            .find("hactl_data_dir_guard /var/lib/etcd")
            .expect("the guard is called");
        assert!(guard < line.find("mv --no-clobber").unwrap(), "{line}");
    }

    #[test]
    pub(super) fn the_learner_env_lists_current_members_and_itself() {
        let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, yaml).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let m = |id, name: &str, ip: &str, learner| Member {
            id,
            name: name.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: vec![],
            is_learner: learner,
        };
        let members = [
            m(1, "cp1", "10.0.0.11", false),
            m(2, "cp2", "10.0.0.12", false),
            m(3, "", "10.0.0.13", true),
        ];
        let up = initial_env(&inv, inv.host("cp3").unwrap(), &members).unwrap();
        let text = String::from_utf8(up.content.to_vec()).unwrap();
        assert!(text.contains("ETCD_INITIAL_CLUSTER=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380"), "{text}");
        assert!(text.contains("ETCD_INITIAL_CLUSTER_STATE=existing"));
        assert!(text.contains("ETCD_INITIAL_CLUSTER_TOKEN=hactl-t"));
    }
}
