//! R3: the other members join one at a time, as learners.

use super::*;

/// R3: the other members join one at a time, as learners.
pub(super) fn r3_join(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let dd = s.dd;
    let cid_dec = &s.cid_dec;
    let etcd_units = &s.etcd_units;
    let etcd_started = &s.etcd_started;
    let initial = &s.initial;
    // R3: the other members join one at a time, as learners.
    if d.mode == RecoverMode::Seed {
        let mut members = initial.clone();
        let joiners: Vec<&String> = d.targets.iter().filter(|h| **h != d.seed).collect();
        let last = joiners.last().map(|h| h.as_str());
        for h in joiners.iter().copied() {
            let u = s.url(h);
            members.push((h.clone(), u.clone()));
            let env = initial_env(h, &members, "existing", &d.token);
            steps.push(
                JournaledStep::new(
                    R::JoinEnv.at(h),
                    format!("initial env: join {} with state existing", members.len() - 1),
                    Some(h),
                )
                .done_when(files_match(std::slice::from_ref(&env)))
                .precheck(RemoteCommand::read_only([
                    "sh",
                    "-c",
                    "[ ! -e \"$1/member\" ] || { echo \"$1 holds data: it must be moved aside first\" >&2; exit 1; }",
                    "hactl-empty",
                    dd,
                ]))
                .step(Step::Upload(env)),
            );
            let has_member = RemoteCommand::read_only([
                "sh",
                "-c",
                "/usr/local/sbin/hactl-etcdctl member list | awk -F', ' -v u=\"$1\" '$4 == u' | grep -q .",
                "hactl-has-member",
                &u,
            ]);
            steps.push(
                JournaledStep::new(
                    R::AddLearner.at(h),
                    format!("add {h} as a learner"),
                    Some(&d.seed),
                )
                .done_when(has_member)
                .step(Step::Wait(crate::etcd::probe::cluster_healthy(
                    &format!("before adding {h}"),
                    Duration::from_secs(60),
                )))
                .run(sh(ADD_LEARNER, "hactl-add-learner", &[h, &u]).with_timeout(Duration::from_secs(150))),
            );
            let mut start = JournaledStep::new(R::StartLearner.at(h), "start etcd as a learner", Some(h))
                .done_when(member_in_cluster(cid_dec, false))
                .run(RemoteCommand::new([
                    "install", "-d", "-o", "etcd", "-g", "etcd", "-m", "0700", dd,
                ]))
                .run(unfence_start(etcd_units, false, etcd_started));
            if Some(h.as_str()) == last {
                start = start.run(
                    sh(
                        LEARNER_READY,
                        "hactl-learner-ready",
                        &[&crate::etcd::METRICS_PORT.to_string()],
                    )
                    .with_timeout(Duration::from_secs(150)),
                );
            }
            steps.push(
                start.verify(
                    Check::command(
                        format!("learner {h} serves cluster {}", d.expected_cluster_id),
                        member_in_cluster(cid_dec, false),
                        Duration::from_secs(120),
                    )
                    .diagnose_with(crate::etcd::probe::journal_tail()),
                ),
            );
            steps.push(
                JournaledStep::new(
                    R::Promote.at(h),
                    format!("promote {h} once in sync"),
                    Some(&d.seed),
                )
                .done_when(RemoteCommand::read_only([
                    crate::etcd::MEMBER_SCRIPT,
                    "is-voter",
                    &u,
                ]))
                .run(
                    RemoteCommand::new([crate::etcd::MEMBER_SCRIPT, "promote", &u, "600"])
                        .with_timeout(Duration::from_secs(630)),
                )
                .verify(crate::etcd::probe::cluster_healthy(
                    &format!("after promoting {h}"),
                    Duration::from_secs(60),
                )),
            );
        }
    }
}
