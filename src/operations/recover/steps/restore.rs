//! R0.4 and R2: the snapshot checked and trial-restored before any change (from a file, or
//! extracted from a copy of a survivor's data dir), then restored, swapped in and started.

use super::*;

/// R0.4 (file): stage the snapshot on the seed and trial-restore it, before any change; with
/// `--mode all` the copies to the other hosts run alongside it.
pub(super) fn r0_4_trial_file(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let snap = &s.snap;
    if let Source::File { path, sha256, .. } = &d.source {
        trial(s, steps);
        if d.mode == RecoverMode::All {
            let last = steps.pop().expect("the trial step");
            steps.push(last.group(TRIAL_AND_STAGE, &d.seed));
            for h in d.targets.iter().filter(|h| **h != d.seed) {
                let up = Arc::new(acts::UploadSnapshot {
                    host: h.clone(),
                    local: path.into(),
                    remote: snap.clone(),
                    sha256: sha256.clone(),
                });
                steps.push(
                    JournaledStep::new(R::StageSnapshot.at(h), "stage the snapshot", None)
                        .group(TRIAL_AND_STAGE, h)
                        .done_when_local(up.clone())
                        .local(up)
                        .no_cluster_change(),
                );
            }
        }
    }
}

/// R0.4b (survivor): a snapshot from a scratch etcd on a copy of its data dir, then its trial.
pub(super) fn r0_4b_extract(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let dd = s.dd;
    let work = &s.work;
    // R0.4b (survivor): a snapshot from a scratch etcd on a copy of its data dir.
    if let Source::Member { host: survivor } = &d.source {
        let port = "23790";
        let pport = "23800";
        steps.push(
            JournaledStep::new(
                R::Extract.at(survivor),
                "copy the data dir, open the copy with a --force-new-cluster etcd on unix sockets in a 0700 dir, save a snapshot",
                Some(survivor),
            )
            .done_when(RemoteCommand::read_only([
                "sh",
                "-c",
                "[ -e \"$1/trial.ok\" ] || [ -s \"$1/snapshot.db\" -a ! -e \"$1/probe/copy\" ]",
                "hactl-extracted",
                work,
            ]))
            .run(
                sh(EXTRACT, "hactl-extract", &[work, dd, survivor, port, pport])
                    .with_timeout(Duration::from_secs(900)),
            ),
        );
        trial(s, steps);
    }
}

/// R2: files on every target, the restore (the seed, or every member with `--mode all`), the
/// swap, the initial env and the start; R2.8 the emulated bump.
pub(super) fn r2_restore(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let i = s.i;
    let inv = s.inv;
    let dd = s.dd;
    let work = &s.work;
    let snap = &s.snap;
    let cid_dec = &s.cid_dec;
    let etcd_units = &s.etcd_units;
    let etcd_started = &s.etcd_started;
    let initial = &s.initial;
    let helper = &s.helper;
    // R2.3: certificates, scripts and the unit on every target (the same files `up` writes).
    let ctx = Ctx::without_facts(inv, i.pki);
    for h in &d.targets {
        let mut files =
            crate::phases::etcd_files::member_files(host(inv, h), &ctx).expect("member files render");
        files.push(helper.clone());
        let mut s = JournaledStep::new(
            R::Certificates.at(h),
            "certificates, keys, helper scripts and the etcd unit",
            Some(h),
        )
        .done_when(files_match(&files))
        .group(R::Certificates.code(), h);
        for f in files {
            s = s.step(Step::Upload(f));
        }
        steps.push(s.run(RemoteCommand::new(["systemctl", "daemon-reload"])));
    }

    let restored_ok = |h: &str, group: Option<&str>| -> JournaledStep {
        let mut args: Vec<String> = vec![work.clone(), dd.to_string(), d.expected_cluster_id.clone()];
        args.extend(s.restore_argv(h, &format!("{work}/staging")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = JournaledStep::new(
            R::Restore.at(h),
            format!("restore into {work}/staging with token {} and compare the cluster ID", d.token),
            Some(h),
        )
        .done_when(RemoteCommand::read_only([
            "sh",
            "-c",
            "[ -e \"$1/swapped\" ] || { [ \"$(cat \"$1/restored\" 2>/dev/null)\" = \"$2\" ] && [ -d \"$1/staging/member\" ]; }",
            "hactl-restored",
            work,
            &d.expected_cluster_id,
        ]))
        .run(sh(RESTORE, "hactl-restore", &args).with_timeout(Duration::from_secs(900)));
        match group {
            Some(g) => s.group(g, h),
            None => s,
        }
    };
    let swap = |h: &str| -> JournaledStep {
        JournaledStep::new(R::Swap.at(h), format!("rename the staging dir to {dd}"), Some(h))
            .done_when(RemoteCommand::read_only([
                "sh",
                "-c",
                "[ -e \"$1/swapped\" ] && [ -d \"$2/member\" ]",
                "hactl-swapped",
                work,
                dd,
            ]))
            .run(sh(&swap_script(&d.run), "hactl-swap", &[work, dd]))
    };
    let config = |h: &str, members: &[(String, String)], state: &str, record_token: bool| -> JournaledStep {
        let env = initial_env(h, members, state, &d.token);
        let mut s = JournaledStep::new(
            R::InitialEnv.at(h),
            format!("initial env: state {state}, token {}", d.token),
            Some(h),
        )
        .done_when(files_match(std::slice::from_ref(&env)))
        .step(Step::Upload(env));
        if record_token {
            s = s.local(Arc::new(acts::RecordToken {
                state: i.state.clone(),
                token: d.token.clone(),
            }));
        }
        s
    };

    match d.mode {
        RecoverMode::Seed => {
            steps.push(restored_ok(&d.seed, None));
            steps.push(swap(&d.seed));
            steps.push(config(&d.seed, initial, "new", true));
            steps.push(
                JournaledStep::new(
                    R::StartEtcd.at(&d.seed),
                    "start the seed as a one-member cluster",
                    Some(&d.seed),
                )
                .done_when(member_in_cluster(cid_dec, true))
                .run(unfence_start(etcd_units, true, etcd_started))
                .verify(
                    Check::command(
                        format!("{}: leads cluster {}", d.seed, d.expected_cluster_id),
                        member_in_cluster(cid_dec, true),
                        Duration::from_secs(60),
                    )
                    .diagnose_with(crate::etcd::probe::journal_tail()),
                ),
            );
        }
        RecoverMode::All => {
            for h in &d.targets {
                if let Source::Member { host: survivor } = &d.source {
                    if h != survivor {
                        steps.push(
                            JournaledStep::new(R::StageSnapshot.at(h), "stage the snapshot", None)
                                .group(STAGE_AND_RESTORE, h)
                                .done_when_local(Arc::new(acts::CopySnapshot {
                                    from: survivor.clone(),
                                    to: h.clone(),
                                    path: snap.clone(),
                                }))
                                .local(Arc::new(acts::CopySnapshot {
                                    from: survivor.clone(),
                                    to: h.clone(),
                                    path: snap.clone(),
                                })),
                        );
                    }
                }
            }
            // All restores before any swap or start: all or nothing. Each host's copy and
            // restore run alongside the other hosts' (R2.2/R2.4 form one group).
            for h in &d.targets {
                steps.push(restored_ok(h, Some(STAGE_AND_RESTORE)));
            }
            for h in &d.targets {
                steps.push(swap(h).group(R::Swap.code(), h));
            }
            for h in &d.targets {
                steps.push(config(h, initial, "new", h == &d.seed).group(R::InitialEnv.code(), h));
            }
            for h in &d.targets {
                steps.push(
                    // A member of a new multi-member cluster serves only once a quorum has
                    // started: started (or starting) after this run's start is what counts here;
                    // R2.9 waits for the cluster.
                    JournaledStep::new(R::StartEtcd.at(h), "start etcd", Some(h))
                        .group(R::StartEtcd.code(), h)
                        .done_when(RemoteCommand::read_only([
                            "sh",
                            "-c",
                            "[ -e \"$1\" ] && case \"$(systemctl is-active etcd.service)\" in active|activating) true ;; *) false ;; esac",
                            "hactl-starting",
                            etcd_started,
                        ]))
                        .run(unfence_start(etcd_units, false, etcd_started)),
                );
            }
            steps.push(
                JournaledStep::new(
                    R::OneLeader,
                    "every member is healthy with one leader",
                    Some(&d.seed),
                )
                .done_when(crate::etcd::probe::one_leader())
                .step(Step::Wait(crate::etcd::probe::cluster_has_one_leader(
                    Duration::from_secs(90),
                ))),
            );
        }
    }
    // R2.8: the emulated bump (etcd 3.4).
    if let Bump::Emulated { target } = d.bump {
        let act = Arc::new(acts::EmulatedBump {
            host: d.seed.clone(),
            client_port: inv.etcd.client_port,
            tls: i.tls.clone(),
            target,
        });
        steps.push(
            JournaledStep::new(
                R::EmulateBump.at(&d.seed),
                format!("emulate the revision bump to {target} (the tool has no --bump-revision)"),
                None,
            )
            .done_when_local(act.clone())
            .local(act),
        );
    }
}
