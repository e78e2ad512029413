//! R4–R6: verify etcd and take a baseline backup, start Kubernetes in the mandatory order,
//! record and release.

use super::*;

/// R4: verify etcd, then a new baseline backup.
pub(super) fn r4_verify(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let i = s.i;
    let inv = s.inv;
    let cid_dec = &s.cid_dec;
    // R4: verify etcd, then a new baseline backup.
    let names = d.targets.join(",");
    let endpoints = d
        .targets
        .iter()
        .map(|h| crate::etcd::client_url(inv, host(inv, h)))
        .collect::<Vec<_>>()
        .join(",");
    let min_rev = d.min_revision.to_string();
    let verify =
        RemoteCommand::read_only(sh(VERIFY, "hactl-verify", &[&names, cid_dec, &min_rev, &endpoints]).argv);
    steps.push(
        JournaledStep::new(
            R::Verify,
            "verify: exact membership, one cluster ID, health, equal hashkv, no alarms, revision past the mark",
            Some(&d.seed),
        )
        .done_when(verify.clone())
        .step(Step::Wait(Check::command(
            "the recovered cluster passes every check",
            verify,
            Duration::from_secs(90),
        ))),
    );
    let marker = crate::operations::run_dir::RunDir::new(i.state, &d.run).baseline();
    let baseline = Arc::new(acts::Baseline {
        inv: inv.clone(),
        state: i.state.clone(),
        marker,
    });
    steps.push(
        JournaledStep::new(R::Baseline, "take a new baseline backup", None)
            .done_when_local(baseline.clone())
            .local(baseline),
    );
}

/// R5: Kubernetes, in the mandatory order, where installed.
pub(super) fn r5_kubernetes(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let aside_dir = s.d.manifests_aside();
    let d = s.d;
    let work = &s.work;
    let kube_started = &s.kube_started;
    // R5: Kubernetes, in the mandatory order, where installed.
    let with = |unit: &str| -> Vec<(String, Vec<String>)> {
        d.kube_units
            .iter()
            .filter(|(_, us)| us.iter().any(|u| u == unit))
            .map(|(h, _)| (h.clone(), vec![unit.to_string()]))
            .collect()
    };
    for (h, units) in with("kube-apiserver.service") {
        steps.push(
            JournaledStep::new(R::StartApiserver.at(&h), "start kube-apiserver", Some(&h))
                .done_when(started(&units))
                .run(unfence_start(&units, false, kube_started))
                .verify(Check::command(
                    format!("{h}: kube-apiserver listens on :6443"),
                    RemoteCommand::read_only(["sh", "-c", "ss -Hltn 'sport = :6443' | grep -q ."]),
                    Duration::from_secs(180),
                )),
        );
    }
    for (h, components) in static_pods_with(d, "kube-apiserver") {
        steps.push(
            JournaledStep::new(
                R::StartApiserver.at(&h).part("manifests"),
                "move the kube-apiserver manifest back",
                Some(&h),
            )
            .done_when(manifests_back(&components, &aside_dir))
            .run(sh(
                MANIFESTS_BACK,
                "hactl-manifests-back",
                &manifest_back_args(&aside_dir, kube_started, &components),
            ))
            .verify(Check::command(
                format!("{h}: kube-apiserver listens on :6443"),
                RemoteCommand::read_only(["sh", "-c", "ss -Hltn 'sport = :6443' | grep -q ."]),
                Duration::from_secs(180),
            )),
        );
    }
    for unit in ["kube-controller-manager.service", "kube-scheduler.service"] {
        let component = unit.trim_end_matches(".service");
        for (h, components) in static_pods_with(d, component) {
            steps.push(
                JournaledStep::new(
                    R::StartControllers.at(&h).part(&format!("{component}:manifest")),
                    format!("move the {component} manifest back"),
                    Some(&h),
                )
                .done_when(manifests_back(&components, &aside_dir))
                .run(sh(
                    MANIFESTS_BACK,
                    "hactl-manifests-back",
                    &manifest_back_args(&aside_dir, kube_started, &components),
                ))
                .verify(Check::command(
                    format!("{h}: a {component} container runs (where crictl is installed)"),
                    container_running(component),
                    Duration::from_secs(180),
                )),
            );
        }
        for (h, units) in with(unit) {
            steps.push(
                JournaledStep::new(
                    R::StartControllers.at(&h).part(unit.trim_end_matches(".service")),
                    format!("start {unit}"),
                    Some(&h),
                )
                .done_when(started(&units))
                .run(unfence_start(&units, false, kube_started)),
            );
        }
    }
    for h in &d.kubelets {
        let marker = format!("{work}/kubelet-restarted");
        steps.push(
            JournaledStep::new(R::RestartKubelet.at(h), "restart the kubelet", Some(h))
                .done_when(RemoteCommand::read_only(["test", "-e", &marker]))
                .run(sh(
                    "mkdir -p \"$(dirname \"$1\")\" && systemctl restart kubelet.service && touch \"$1\"",
                    "hactl-kubelet",
                    &[&marker],
                )),
        );
    }
}

/// R6: record the high-water mark, mark the run finished on the hosts.
pub(super) fn r6_release(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let i = s.i;
    let reachable = &s.reachable;
    let fin = Arc::new(acts::Finalize {
        state: i.state.clone(),
        hosts: reachable.clone(),
        seed: d.seed.clone(),
        run: d.run.clone(),
        cluster_id: d.expected_cluster_id.clone(),
    });
    steps.push(
        JournaledStep::new(
            R::Finish,
            "record the high-water mark, mark the run finished",
            None,
        )
        .done_when_local(fin.clone())
        .local(fin),
    );
    // The member history: who holds the new cluster, who awaits a fence.
    let left_out: Vec<String> = s
        .inv
        .with_role(crate::inventory::Role::Etcd)
        .iter()
        .map(|h| h.name.clone())
        .filter(|h| !d.targets.contains(h) && !d.confirmed_dead.contains(h))
        .collect();
    let record = Arc::new(acts::RecordMembers {
        inv: s.inv.clone(),
        state: i.state.clone(),
        run: d.run.clone(),
        seed: d.seed.clone(),
        cluster_id: d.expected_cluster_id.clone(),
        targets: d.targets.clone(),
        attested: d.confirmed_dead.iter().chain(&d.old_attested).cloned().collect(),
        left_out,
        aside: d.aside(s.dd),
    });
    steps.push(
        JournaledStep::new(
            crate::operations::runner::StepId::from(R::Finish).part("members"),
            "record the members of the new cluster, and the old members still to fence",
            None,
        )
        .done_when_local(record.clone())
        .local(record),
    );
}

/// R7: what R0 found left once etcd is back (the control plane on new hosts, HAProxy's
/// backends): `hactl up`'s plan, run in this recover, so it ends with a working cluster.
pub(super) fn r7_converge(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    if !d.converges() {
        return;
    }
    let act = Arc::new(acts::Converge {
        inv: s.inv.clone(),
        state: s.i.state.clone(),
        connect: s.i.connect.clone(),
        reasons: d.converge.clone(),
        marker: crate::operations::run_dir::RunDir::new(s.i.state, &d.run)
            .path()
            .join("converged"),
    });
    steps.push(
        JournaledStep::new(
            R::Converge,
            "bring the rest of the cluster to the inventory (`hactl up`'s plan)",
            None,
        )
        .done_when_local(act.clone())
        .local(act),
    );
}
