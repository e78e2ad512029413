//! R1: stop and fence (Kubernetes first, then etcd), move the data dirs aside. (The lock is the
//! operation manager's, held from before R0.)

use super::*;

/// R1.2–R1.3: the Kubernetes control plane stopped and fenced (or its static-pod manifests moved
/// aside), then etcd stopped and fenced.
pub(super) fn r1_lock_and_fence(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let etcd_units = &s.etcd_units;
    let etcd_started = &s.etcd_started;
    let kube_started = &s.kube_started;
    let etcd_ports = s.etcd_ports;
    let reachable = &s.reachable;
    // R1.2: stop the Kubernetes control plane everywhere before touching etcd.
    for (h, units) in &d.kube_units {
        if units.is_empty() {
            continue;
        }
        let mut s = JournaledStep::new(
            R::StopKubernetes.at(h),
            format!("stop and fence {}", units.join(" ")),
            Some(h),
        )
        .done_when(fenced_or(units, &[6443], None, Some(kube_started)))
        .run(fence(&d.run, units))
        .group(R::StopKubernetes.code(), h);
        s = s.verify(Check::command(
            format!("{h}: no apiserver listens on :6443"),
            fenced(units, &[6443], None),
            Duration::from_secs(60),
        ));
        steps.push(s);
    }
    // R1.2 (static-pod mode): move the manifests aside, so the kubelet stops the pods.
    let aside_dir = d.manifests_aside();
    for (h, components) in &d.kube_manifests {
        steps.push(
            JournaledStep::new(
                R::StopKubernetes.at(h).part("manifests"),
                format!("move the {} manifests to {aside_dir}/", components.join(" ")),
                Some(h),
            )
            .done_when(manifests_stopped(components, Some(kube_started)))
            .run(sh(
                MANIFESTS_OUT,
                "hactl-manifests-out",
                &manifest_args(&aside_dir, components),
            ))
            .verify(Check::command(
                format!("{h}: no apiserver listens on :6443, no control-plane container runs"),
                manifests_stopped(components, None),
                Duration::from_secs(120),
            )),
        );
    }
    // R1.3: stop and fence etcd on every reachable host.
    for h in reachable.iter() {
        steps.push(
            JournaledStep::new(R::StopEtcd.at(h), "stop and fence etcd", Some(h))
                .group(R::StopEtcd.code(), h)
                .done_when(fenced_or(
                    etcd_units,
                    &etcd_ports,
                    Some("etcd"),
                    Some(etcd_started),
                ))
                .run(fence(&d.run, etcd_units))
                .verify(Check::command(
                    format!(
                        "{h}: no etcd process, nothing on :{}/:{}",
                        etcd_ports[0], etcd_ports[1]
                    ),
                    fenced(etcd_units, &etcd_ports, Some("etcd")),
                    Duration::from_secs(60),
                )),
        );
    }
}

/// R1.4: every data dir moved aside (never deleted), under the data-directory rule
/// ([`crate::etcd::data_dir`]).
pub(super) fn r1_4_move_aside(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let dd = s.dd;
    // R1.4: move every data dir aside (never deleted).
    for h in &d.data_dirs {
        let aside = d.aside(dd);
        steps.push(
            JournaledStep::new(R::MoveAside.at(h), format!("move {dd} aside to {aside}"), Some(h))
                .group(R::MoveAside.code(), h)
                .done_when(RemoteCommand::read_only(["test", "-e", &aside]))
                .precheck(RemoteCommand::read_only([
                    "sh",
                    "-c",
                    "! pgrep -x etcd >/dev/null && [ ! -e \"$2\" ] || { echo \"etcd runs, or both $1 and $2 exist: needs a human\" >&2; exit 1; }",
                    "hactl-aside-check",
                    dd,
                    &aside,
                ]))
                .run(sh(
                    &crate::etcd::data_dir::guarded(
                        "move $1 aside",
                        &format!("hactl recover --resume {}", d.run),
                        "mv -T -- \"$1\" \"$2\"",
                    ),
                    "hactl-aside",
                    &[dd, &aside],
                )),
        );
    }
}

/// R1.5: every old member that answers fenced for good (the units the inventory no longer gives
/// its host, any etcd on its old data, its data dir moved to `<dataDir>.hactl-retired-<run>`),
/// all at once, before the new cluster starts; each recorded as fenced in the member history.
pub(super) fn r1_5_retire_old(s: &Shared<'_>, steps: &mut Vec<JournaledStep>) {
    let d = s.d;
    let why = format!(
        "Written by hactl recover {}: this host held a member of the cluster that was restored elsewhere; it must not serve the old data.",
        d.run
    );
    for h in &d.old_fenced {
        steps.push(
            crate::operations::old_members::fence_step(
                R::RetireOld.at(h),
                s.inv,
                s.i.state,
                h,
                &d.run,
                &format!("recover {}", d.run),
                &why,
                crate::old_members::retire::Guard::None,
            )
            .group(R::RetireOld.code(), h),
        );
    }
}
