//! The steps of a replace, built from P0's decisions and observation (no I/O): the list a dry
//! run prints and the runner ([`crate::operations::runner`]) runs.
//!
//! Invariant: every step's postcondition is read from the hosts (a member-list line, a fence
//! file, a unit state), so a re-run or `--resume` skips exactly what is done; a step whose work
//! P0 already found done carries that finding as its postcondition and does nothing.

use std::sync::Arc;
use std::time::Duration;

use super::acts::{AllOf, BalanceOff, Fact, Gate, Propagate, RemoteOn, RollbackLearner, Rule, Serve, Verify};
use super::decide::Decisions;
use super::member::{fence_kube_steps, fence_steps, initial_env, move_aside_step, remove_step, unfence_step};
use super::{Run, F1_ORDER, F2_ORDER};
use crate::etcd::health::Observation;
use crate::etcd::{self, hex_id, probe, Member, UNIT};
use crate::exit::{self, refuse};
use crate::fence;
use crate::inventory::Role;
use crate::operations;
use crate::operations::runner::{JournaledStep, LocalAct};
use crate::phases::{etcd_files, install_etcd::InstallEtcd, Ctx, Phase};
use crate::plan::{Check, RemoteCommand, Step};

crate::step_codes! {
    /// The steps of a replace (docs/recovery.md, "Replace and heal (P0–P10)"); P0 decides
    /// before any step.
    pub enum P {
        /// The decisions (journaled before the first step).
        Decide = "P0",
        /// The foreign learner `--cleanup-learner` names, removed (quorum-neutral).
        CleanupLearner = "P0.learner",
        MoveLeader = "P1",
        /// The old member out of the load balancers (VIP, MAINT), before it stops.
        Balancers = "P2 lb",
        Fence = "P2",
        Remove = "P3",
        Prepare = "P4",
        AddLearner = "P5",
        Start = "P6",
        Promote = "P7",
        Serve = "P8",
        /// The old host's node components stopped (the member moved to another host).
        NodeStop = "P8 node-stop",
        /// The old host's Node deleted (the member moved to another host).
        NodeDelete = "P8 node-delete",
        Propagate = "P9",
        Verify = "P10",
        /// The replacement brought up as a Node by `hactl up`'s plan (the member moved to a new
        /// host, with a kubernetes section).
        Nodes = "P11",
    }
}

impl P {
    /// The step's short name, for the one-line flow.
    pub fn short(self) -> &'static str {
        match self {
            P::Decide => "check",
            P::CleanupLearner => "remove the foreign learner",
            P::MoveLeader => "move leadership",
            P::Balancers => "drain at the load balancers",
            P::Fence => "fence and stop",
            P::Remove => "remove",
            P::Prepare => "prepare",
            P::AddLearner => "add learner",
            P::Start => "start",
            P::Promote => "promote",
            P::Serve => "serve",
            P::NodeStop => "stop the old node",
            P::NodeDelete => "delete the old Node",
            P::Propagate => "propagate",
            P::Verify => "verify",
            P::Nodes => "bring up the Node",
        }
    }
}

/// Read-only, on a member host: exits 0 when the member list (which must answer) has a line for
/// which the awk condition holds (`$1` ID, `$2` status, `$3` name, `$4` peer URLs, `$6` learner).
fn member_list_has(condition: &str) -> RemoteCommand {
    let ctl = etcd::ETCDCTL_WRAPPER;
    RemoteCommand::read_only([
        "sh",
        "-c",
        &format!(
            "out=$({ctl} --command-timeout=5s member list) || exit 2\nprintf '%s\\n' \"$out\" | awk -F', ' '{condition} {{f=1}} END {{exit !f}}'"
        ),
    ])
}

/// The member at `url` that is not the old member `old`.
fn new_member_cond(url: &str, old: Option<u64>, extra: &str) -> String {
    let not_old = old
        .map(|id| format!(" && $1 != \"{}\"", hex_id(id)))
        .unwrap_or_default();
    format!("$4 == \"{url}\"{not_old}{extra}")
}

fn on(run: &Run, host: &str, cmd: RemoteCommand, what: &str) -> Arc<dyn LocalAct> {
    Arc::new(RemoteOn {
        host: host.to_string(),
        sudo: run.sudo(Some(host)),
        cmd,
        what: what.to_string(),
    })
}

fn fact(text: String, holds: bool) -> Arc<dyn LocalAct> {
    Arc::new(Fact { text, holds })
}

/// The steps after P0, in the flow's order (F1, or F2 with `--planned`).
pub(super) fn build(run: &Arc<Run>, obs: &Observation, d: &Decisions) -> anyhow::Result<Vec<JournaledStep>> {
    let observer = run.observer_host(obs).name.clone();
    let order = if run.opts.planned { F2_ORDER } else { F1_ORDER };
    let mut steps = Vec::new();
    if let Some((id, url)) = &d.cleanup_learner {
        let hex = hex_id(*id);
        let ctl = etcd::ETCDCTL_WRAPPER;
        steps.push(
            JournaledStep::new(P::CleanupLearner, format!("remove foreign learner {hex} at {url}"), Some(&observer))
                .done_when(RemoteCommand::read_only([
                    "sh",
                    "-c",
                    &format!(
                        "out=$({ctl} --command-timeout=5s member list) || exit 2\n! printf '%s\\n' \"$out\" | grep -q '^{hex}, '"
                    ),
                ]))
                .step(remove_step(*id, url)),
        );
    }
    for p in order {
        match p {
            P::MoveLeader => {
                steps.push(p1_move_leader(run, obs, &observer));
                steps.extend(p2_balancers(run));
            }
            P::Fence => steps.push(p2_fence(run)?),
            P::Remove => steps.push(p3_remove(run, &observer)),
            P::Prepare => steps.push(p4_prepare(run, &observer)?),
            P::AddLearner => steps.push(p5_add(run, &observer)),
            P::Start => steps.push(p6_start(run, obs, &observer)?),
            P::Promote => steps.push(p7_promote(run, &observer)),
            P::Serve => {
                steps.push(p8_serve(run));
                steps.extend(p8_old_node(run));
            }
            P::Propagate => steps.push(p9_propagate(run)),
            P::Verify => steps.push(
                JournaledStep::new(
                    P::Verify,
                    "verify: one leader, every member a healthy voter",
                    None,
                )
                .local(Arc::new(Verify { run: run.clone() })),
            ),
            P::Decide | P::CleanupLearner | P::Balancers | P::NodeStop | P::NodeDelete | P::Nodes => {
                unreachable!("not in the flow tables")
            }
        }
    }
    steps.extend(p11_nodes(run));
    Ok(steps)
}

fn p1_move_leader(run: &Run, obs: &Observation, observer: &str) -> JournaledStep {
    let Some(old) = &run.old else {
        return JournaledStep::new(P::MoveLeader, format!("move leadership off {}", run.target), None)
            .done_when_local(fact("the old member is not in the cluster".into(), true));
    };
    if !run.opts.planned && (!obs.is_healthy(old) || obs.leader().is_some_and(|l| l != old.id)) {
        // F1 runs P1 right after P0: a member P0 saw unhealthy cannot lead now (it would need a
        // new election it cannot win without answering), and one that does not lead only
        // becomes leader through an election. Asking it again would wait out its timeout.
        return JournaledStep::new(P::MoveLeader, format!("move leadership off {}", run.target), None)
            .done_when_local(fact(
                format!(
                    "member {} ({}) does not lead{}",
                    run.target,
                    hex_id(old.id),
                    if obs.is_healthy(old) { "" } else { " (unhealthy)" }
                ),
                true,
            ));
    }
    let endpoints = old.client_urls.join(",");
    let ctl = etcd::ETCDCTL_WRAPPER;
    // Holds when the old member does not lead (or does not answer: then it cannot lead).
    let not_leader = RemoteCommand::read_only([
        "sh",
        "-c",
        &format!(
            "st=$({ctl} --endpoints={endpoints} --command-timeout=2s endpoint status -w json 2>/dev/null) || exit 0\n\
me=$(printf '%s' \"$st\" | grep -o '\"member_id\":[0-9]*' | head -n1 | cut -d: -f2)\n\
leader=$(printf '%s' \"$st\" | grep -o '\"leader\":[0-9]*' | head -n1 | cut -d: -f2)\n\
[ \"$me\" != \"$leader\" ]"
        ),
    ]);
    let next = obs
        .voters()
        .filter(|m| m.id != old.id && obs.is_healthy(m))
        .max_by_key(|m| obs.status_of(m).map(|s| s.status.raft_applied_index).unwrap_or(0));
    let step = JournaledStep::new(
        P::MoveLeader,
        format!(
            "move leadership off {} ({}){}",
            run.target,
            hex_id(old.id),
            next.map(|n| format!(" to {} ({})", n.name, hex_id(n.id)))
                .unwrap_or_default()
        ),
        Some(observer),
    )
    .done_when(not_leader);
    match next {
        Some(n) => step.run(RemoteCommand::new([
            ctl.to_string(),
            format!("--endpoints={endpoints}"),
            "move-leader".to_string(),
            hex_id(n.id),
        ])),
        None => step.run(RemoteCommand::script(
            "echo 'no healthy member to take over leadership' >&2; exit 1",
        )),
    }
}

/// Before the old member stops: clients through the VIP stop reaching it (the VIP moves off its
/// host when it holds it; its servers go to MAINT on every load balancer).
fn p2_balancers(run: &Arc<Run>) -> Option<JournaledStep> {
    if run.inv.with_role(Role::LoadBalancer).is_empty() {
        return None;
    }
    Some(
        JournaledStep::new(
            P::Balancers,
            format!("take {} out of the load balancers", run.target),
            None,
        )
        .local(Arc::new(BalanceOff { run: run.clone() })),
    )
}

fn p2_fence(run: &Run) -> anyhow::Result<JournaledStep> {
    let title = format!("fence and stop member {}", run.target);
    let need_confirm = |why: String| -> anyhow::Result<JournaledStep> {
        if run.opts.confirm_dead.contains(&run.target) {
            return Ok(JournaledStep::new(P::Fence, title.clone(), None)
                .done_when_local(fact(format!("confirmed dead by the operator ({why})"), true)));
        }
        Err(refuse(
            exit::NEEDS_INPUT,
            format!(
                "cannot fence {}: {why}. Power it off (it could come back as a zombie member), then run again with --confirm-dead {}",
                run.target, run.target
            ),
        ))
    };
    let Some(host) = &run.target_host else {
        return need_confirm("it is not in the inventory".into());
    };
    if !run.reach.transports.contains_key(&host.name) {
        let why = run.reach.unreachable.get(&host.name).cloned().unwrap_or_default();
        return need_confirm(format!("its host is unreachable ({why})"));
    }
    let moved_host = host.name != run.replacement.name;
    if !(run.opts.planned || run.old.is_some() || moved_host) {
        return Ok(JournaledStep::new(P::Fence, title, None)
            .done_when_local(fact("the old member is already removed".into(), true)));
    }
    let id = run.old.as_ref().map(|o| o.id);
    let kube: Vec<&str> = operations::KUBE_UNITS
        .into_iter()
        .filter(|u| {
            run.reach
                .facts
                .get(&host.name)
                .and_then(|f| f.units.get(*u))
                .is_some_and(|x| x.active == "active")
        })
        .collect();
    let data_dir = &run.inv.etcd.data_dir;
    let mut done = format!(
        "test -e {} && ! systemctl is-active --quiet {UNIT} && ! pgrep -x etcd >/dev/null",
        fence::dropin_path(UNIT)
    );
    if moved_host {
        done.push_str(&format!(
            " && ! [ -e {data_dir} ] && ! systemctl is-enabled --quiet {UNIT} && ! systemctl is-enabled --quiet {}",
            crate::backup::TIMER
        ));
    }
    let step = JournaledStep::new(
        P::Fence,
        if kube.is_empty() {
            title
        } else {
            format!("{title} and its {}", kube.join(", "))
        },
        Some(&host.name),
    );
    let static_pod = run
        .inv
        .kubernetes
        .as_ref()
        .is_some_and(|k| k.mode == crate::inventory::KubernetesMode::StaticPod);
    if static_pod {
        done.push_str(" && ");
        done.push_str(&super::member::control_plane_gone());
    }
    let mut step = step.done_when(RemoteCommand::read_only(["sh", "-c", &done]));
    let manifests = if static_pod {
        super::member::manifests_aside_steps(&format!(
            "{}.hactl-replaced-{}",
            crate::kubernetes::MANIFEST_DIR,
            run.run_id
        ))
    } else {
        vec![]
    };
    for s in fence_kube_steps(&kube)
        .into_iter()
        .chain(manifests)
        .chain(fence_steps(&run.target, id))
    {
        step = step.step(s);
    }
    if moved_host {
        // The member now lives on another host: this one keeps no etcd of its own. The unit
        // is disabled (the fence already keeps it from starting, across reboots too) and the
        // old data moved aside, never deleted.
        let aside = format!("{data_dir}.hactl-replaced-{}", run.run_id);
        step = step.run(RemoteCommand::script(format!(
            "if systemctl is-active --quiet {UNIT} || pgrep -x etcd >/dev/null; then echo \"refusing: etcd runs on {h}; its data dir stays\" >&2; exit 1; fi\n\
systemctl disable --quiet {UNIT} 2>/dev/null || true\n\
systemctl disable --now --quiet {timer} 2>/dev/null || true\n\
if [ -e {data_dir} ]; then mv --no-clobber -- {data_dir} {aside} && echo \"{h}: data dir of the replaced member moved to {aside}\"; fi\n\
! [ -e {data_dir} ]",
            h = host.name,
            timer = crate::backup::TIMER
        )));
    }
    Ok(step)
}

fn p3_remove(run: &Arc<Run>, observer: &str) -> JournaledStep {
    let Some(old) = &run.old else {
        return JournaledStep::new(P::Remove, format!("remove member {}", run.target), None).done_when_local(
            fact(
                "the old member is not in the member list (already removed when P0 looked)".into(),
                true,
            ),
        );
    };
    let hex = hex_id(old.id);
    let url = old.peer_urls.first().cloned().unwrap_or_default();
    let ctl = etcd::ETCDCTL_WRAPPER;
    JournaledStep::new(
        P::Remove,
        format!("remove member {} ({hex}) at {url}", run.target),
        Some(observer),
    )
    .done_when(RemoteCommand::read_only([
        "sh",
        "-c",
        &format!(
            "out=$({ctl} --command-timeout=5s member list) || exit 2\n! printf '%s\\n' \"$out\" | grep -q '^{hex}, '"
        ),
    ]))
    .local(Arc::new(Gate {
        run: run.clone(),
        rule: Rule::Remove,
    }))
    .step(remove_step(old.id, &url))
}

fn p4_prepare(run: &Run, observer: &str) -> anyhow::Result<JournaledStep> {
    let r = &run.replacement;
    let old = run.old.as_ref().map(|o| o.id);
    let ctx = Ctx::new(&run.inv, &run.pki, &run.reach.facts);
    let mut step = JournaledStep::new(
        P::Prepare,
        "prepare the replacement host: old data aside, etcd installed and configured",
        Some(&r.name),
    )
    .done_when_local(on(
        run,
        observer,
        member_list_has(&new_member_cond(&run.new_url, old, "")),
        &format!("a new member is at {}", run.new_url),
    ));
    if let Some(id) = old {
        // Never prepare the host while the old member still holds the URL the new one takes.
        step = step.local(on(
            run,
            observer,
            RemoteCommand::read_only([
                "sh",
                "-c",
                &format!(
                    "out=$({} --command-timeout=5s member list) || exit 2\n! printf '%s\\n' \"$out\" | awk -F', ' '$1 == \"{}\" && $4 == \"{}\" {{f=1}} END {{exit !f}}'",
                    etcd::ETCDCTL_WRAPPER,
                    hex_id(id),
                    run.new_url
                ),
            ]),
            &format!("the old member still holds {}: it must be removed before its host is prepared", run.new_url),
        ));
    }
    for s in InstallEtcd.steps(r, &ctx)? {
        step = step.step(s);
    }
    step = step.step(move_aside_step(&run.inv.etcd.data_dir, &r.name, old, &run.stamp));
    let uploads = crate::phases::uploads_needed(ctx.facts(r), etcd_files::member_files(r, &ctx)?);
    // systemd reads a unit file again only after a reload; with nothing written it has nothing
    // new to read (a reload costs a second or more on a busy host).
    let reload = !uploads.is_empty();
    for s in uploads {
        step = step.step(s);
    }
    if reload {
        step = step.run(RemoteCommand::new(["systemctl", "daemon-reload"]));
    }
    // The replacement gets the scheduled backups `up` gives every etcd host, so the inventory
    // and the hosts agree again when the replace is done.
    for s in crate::phases::schedule_backups::ScheduleBackups.steps(r, &ctx)? {
        step = step.step(s);
    }
    Ok(step)
}

fn p5_add(run: &Arc<Run>, observer: &str) -> JournaledStep {
    let r = &run.replacement;
    let old = run.old.as_ref().map(|o| o.id);
    JournaledStep::new(
        P::AddLearner,
        format!("add {} at {} as a learner", r.name, run.new_url),
        Some(observer),
    )
    .done_when(member_list_has(&new_member_cond(&run.new_url, old, "")))
    .local(Arc::new(Gate {
        run: run.clone(),
        rule: Rule::Add,
    }))
    .run(RemoteCommand::new([
        etcd::MEMBER_SCRIPT,
        "add-learner",
        r.name.as_str(),
        run.new_url.as_str(),
    ]))
}

fn p6_start(run: &Run, obs: &Observation, observer: &str) -> anyhow::Result<JournaledStep> {
    let r = &run.replacement;
    let old = run.old.as_ref().map(|o| o.id);
    // The member list once P3 and P5 have run: the old member gone (unless F2, where it leaves
    // later), the learner at the replacement's URL.
    let mut members: Vec<Member> = obs.members.members.clone();
    members.retain(|x| run.opts.planned || old.is_none_or(|o| o != x.id));
    if run.new_member(obs).is_none() {
        members.push(Member {
            id: 0,
            name: String::new(),
            peer_urls: vec![run.new_url.clone()],
            client_urls: vec![],
            is_learner: true,
        });
    }
    let env = initial_env(&run.inv, r, &members)?;
    let started: Arc<dyn LocalAct> = Arc::new(AllOf(vec![
        on(
            run,
            observer,
            member_list_has(&new_member_cond(&run.new_url, old, " && $2 == \"started\"")),
            &format!("the member at {} has started", run.new_url),
        ),
        on(
            run,
            &r.name,
            RemoteCommand::read_only(["systemctl", "is-active", "--quiet", UNIT]),
            &format!("etcd is active on {}", r.name),
        ),
    ]));
    Ok(JournaledStep::new(
        P::Start,
        format!("start {} with state existing", r.name),
        Some(&r.name),
    )
    .done_when_local(started)
    .step(Step::Upload(env))
    .step(unfence_step())
    // `enable` only when needed: it costs seconds on a busy host even with nothing to do.
    .run(RemoteCommand::script(format!(
        "systemctl is-enabled --quiet {UNIT} || systemctl enable {UNIT}\nsystemctl start --no-block {UNIT}"
    )))
    .verify(
        Check::command(
            format!("member {} serves (as a learner until promoted)", r.name),
            RemoteCommand::read_only([etcd::ETCDCTL_WRAPPER, "endpoint", "status"]),
            Duration::from_secs(120),
        )
        .diagnose_with(probe::journal_tail()),
    ))
}

fn p7_promote(run: &Arc<Run>, observer: &str) -> JournaledStep {
    let r = &run.replacement;
    let old = run.old.as_ref().map(|o| o.id);
    let timeout = run.promote_timeout.as_secs();
    JournaledStep::new(
        P::Promote,
        format!("promote {} once it caught up (up to {timeout} s)", r.name),
        Some(observer),
    )
    .done_when(member_list_has(&new_member_cond(
        &run.new_url,
        old,
        " && $2 == \"started\" && $6 == \"false\"",
    )))
    .local(Arc::new(Gate {
        run: run.clone(),
        rule: Rule::Promote,
    }))
    .step(Step::Run(
        RemoteCommand::new([
            etcd::MEMBER_SCRIPT,
            "promote",
            run.new_url.as_str(),
            &timeout.to_string(),
        ])
        .with_timeout(Duration::from_secs(timeout + 30)),
    ))
    .verify(probe::cluster_healthy(
        &format!("after promoting {}", r.name),
        Duration::from_secs(60),
    ))
    .on_failure(Arc::new(RollbackLearner { run: run.clone() }))
}

fn p8_serve(run: &Arc<Run>) -> JournaledStep {
    let r = &run.replacement;
    let kube = crate::phases::replace_control_plane::runs_kubernetes(&run.inv, r);
    let lbs = !run.inv.with_role(Role::LoadBalancer).is_empty();
    let step = JournaledStep::new(
        P::Serve,
        format!("{} serves behind the load balancers", r.name),
        None,
    );
    if !kube && !lbs {
        return step.done_when_local(fact(
            "no kubernetes section and no load balancer: etcd clients already see the member".into(),
            true,
        ));
    }
    step.local(Arc::new(Serve { run: run.clone() }))
}

/// After P8, when the member moved to another host: the old host's node components stopped
/// (when it answers) and its Node deleted, so no Node of a host that left the control plane stays
/// behind NotReady. The new host's own node components come with `hactl up`, which the report
/// names (known gap: replace does not install them itself).
fn p8_old_node(run: &Arc<Run>) -> Vec<JournaledStep> {
    let moved = run.replacement.name != run.target;
    let reachable = run
        .target_host
        .as_ref()
        .is_some_and(|h| run.reach.transports.contains_key(&h.name));
    let node = run.target.clone();
    let delete = || {
        let act = Arc::new(crate::operations::remove_node::acts::DeleteNode {
            inputs: Arc::new(crate::operations::remove_node::acts::Inputs {
                inv: run.inv.clone(),
                pki: run.pki.clone(),
                kubernetes: None,
                state: run.state.clone(),
            }),
            node: node.clone(),
        });
        JournaledStep::new(P::NodeDelete, format!("delete Node {node}"), None)
            .done_when_local(act.clone())
            .local(act)
    };
    match super::decide::old_node(run.inv.kubernetes.is_some(), moved, reachable) {
        super::decide::OldNode::Keep(_) => vec![],
        super::decide::OldNode::DeleteOnly(why) => vec![
            JournaledStep::new(P::NodeStop, format!("stop the node components on {node}"), None)
                .done_when_local(fact(why, true)),
            delete(),
        ],
        super::decide::OldNode::StopThenDelete => vec![
            JournaledStep::new(
                P::NodeStop,
                format!("stop the node components on {node} (kubelet, kube-proxy, pods, containerd)"),
                Some(&node),
            )
            .done_when(crate::operations::remove_node::steps::node_stopped())
            .run(crate::converge::reset::stop_node_components()),
            delete(),
        ],
    }
}

/// P11, after P10 when the member moved to another host with a kubernetes section: the
/// replacement becomes a Node. Its kubelet, containerd and kube-proxy, the pod routes to it on
/// every other node (which need the pod CIDR its Node gets once its kubelet registered) and its
/// labels are exactly `hactl up`'s node phases, so the step runs `up`'s plan, computed when it
/// runs (recover's R7 act); done once that run finished (a marker in the run's directory).
fn p11_nodes(run: &Arc<Run>) -> Option<JournaledStep> {
    let r = &run.replacement;
    if !run.brings_up_node() {
        return None;
    }
    let act = Arc::new(crate::operations::recover::acts::Converge {
        inv: run.inv.clone(),
        state: run.state.clone(),
        connect: run.connect.clone(),
        reasons: vec![format!(
            "{} is a new node host: its kubelet, containerd and kube-proxy, the pod routes to it, its labels",
            r.name
        )],
        marker: crate::operations::run_dir::RunDir::new(&run.state, &run.run_id)
            .path()
            .join("nodes-converged"),
    });
    Some(
        JournaledStep::new(
            P::Nodes,
            format!("bring {} up as a Node (`hactl up`'s plan)", r.name),
            None,
        )
        .done_when_local(act.clone())
        .local(act),
    )
}

fn p9_propagate(run: &Arc<Run>) -> JournaledStep {
    let step = JournaledStep::new(
        P::Propagate,
        "roll the new member list into the other apiservers, one at a time",
        None,
    );
    if run.inv.kubernetes.is_none() {
        return step.done_when_local(fact(
            "no kubernetes section: no apiserver to roll (HAProxy followed in P8)".into(),
            true,
        ));
    }
    step.local(Arc::new(Propagate { run: run.clone() }))
}
