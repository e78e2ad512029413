//! How a recover run begins (R0, docs/recovery.md "Recover (R0–R6)"): a new run assesses the
//! etcd hosts read-only, picks the source and decides; a resumed run reloads the decisions it
//! saved and checks it can still reach every host it acts on. Also R0's journal entries.

use anyhow::Context as _;

use super::decide::{self, Assessed};
use super::steps::R;
use super::{Decisions, Options};
use crate::exec::connect::ConnectSettings;
use crate::exec::connect::Reach;
use crate::exec::Transports;
use crate::exit::refuse;
use crate::inventory::Inventory;
use crate::operations::run_dir::RunDir;
use crate::operations::runner::StepId;
use crate::state::StateDir;

/// A resumed run: its saved decisions, and transports to every host it acts on that is not
/// attested dead.
pub fn resume(
    inv: &Inventory,
    state: &StateDir,
    run: &str,
    reach: Reach,
) -> anyhow::Result<(Decisions, Transports)> {
    let path = RunDir::new(state, run).decisions();
    let text = crate::bounded::read_to_string(&path, crate::bounded::TEXT).map_err(|e| {
        refuse(
            crate::exit::REFUSED,
            format!("cannot resume run {run}: {e} (a run that stopped before its plan was confirmed changed nothing: start a new one)"),
        )
    })?;
    let mut d: Decisions =
        serde_json::from_str(&text).with_context(|| format!("{} is not a recover plan", path.display()))?;
    if d.cluster != inv.name {
        return Err(refuse(
            crate::exit::REFUSED,
            format!("run {run} belongs to cluster {}", d.cluster),
        ));
    }
    let (transports, down) = (reach.transports, reach.unreachable);
    // The hosts the run acts on: the etcd hosts not attested dead, and the old members it fences.
    let acts_on = |h: &str| {
        inv.host(h).is_some_and(|x| x.has(crate::inventory::Role::Etcd))
            && !d.confirmed_dead.iter().any(|c| c == h)
            || d.old_fenced.iter().any(|o| o == h)
    };
    let missing: Vec<String> = down
        .iter()
        .filter(|(h, _)| acts_on(h))
        .map(|(h, e)| format!("{h}: {e}"))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(
            crate::exit::NEEDS_INPUT,
            format!("cannot reach hosts run {run} acts on:\n{}", missing.join("\n")),
        ));
    }
    // A node that is not an etcd host and stopped answering since R0 does not hold the recover
    // up: its kubelet is not restarted, and the report says so.
    let gone: Vec<String> = d
        .kubelets
        .iter()
        .filter(|h| !acts_on(h) && down.contains_key(h.as_str()))
        .cloned()
        .collect();
    for h in gone {
        eprintln!("{h} (a node) no longer answers: its kubelet will not be restarted");
        d.kubelets.retain(|k| *k != h);
        d.nodes_unreached.push(h);
    }
    Ok((d, transports))
}

/// R0: read-only assessment, the source, and the decisions of run `run`.
pub async fn assess_and_decide(
    opts: &Options,
    connect: &ConnectSettings,
    inv: &Inventory,
    state: &StateDir,
    run: &str,
    reach: Reach,
    history: crate::old_members::History,
) -> anyhow::Result<(Decisions, Transports)> {
    // The etcd hosts get recover's assessment; the other hosts of the member history (old
    // members) the old-member probe.
    let is_etcd = |h: &str| inv.host(h).is_some_and(|x| x.has(crate::inventory::Role::Etcd));
    let etcd_transports: Transports = reach
        .transports
        .iter()
        .filter(|(h, _)| is_etcd(h))
        .map(|(h, t)| (h.clone(), t.clone()))
        .collect();
    let hosts = super::assess::assess_hosts(inv, &etcd_transports, connect.concurrency).await?;
    // Only the history's hosts: a worker that never held a member is not an old member.
    let not_old = |h: &str| is_etcd(h) || !history.hosts.contains_key(h);
    let old = probe_old_members(inv, &reach.transports, &not_old).await;
    eprintln!("assessment:");
    for a in &hosts {
        eprintln!("  {}", a.describe());
    }
    for s in &old {
        eprintln!("  {}", describe_old(s, &history));
    }
    for (h, e) in &reach.unreachable {
        if is_etcd(h) || history.hosts.contains_key(h) {
            let what = if is_etcd(h) { "" } else { " (an old member)" };
            eprintln!("  {h}{what}: unreachable: {e}");
        }
    }
    let (node_kubelets, nodes_down) = probe_node_kubelets(inv, &reach, &is_etcd).await;
    let assessed = Assessed {
        hosts,
        down: reach
            .unreachable
            .iter()
            .filter(|(h, _)| is_etcd(h))
            .map(|(h, e)| (h.clone(), e.to_string()))
            .collect(),
        history,
        old,
        node_kubelets,
        nodes_down,
    };
    let inputs = decide::Options {
        run: run.to_string(),
        now: time::OffsetDateTime::now_utc(),
        mode: opts.mode,
        members: opts.members.clone(),
        confirm_dead: opts.confirm_dead.clone(),
        force_destructive: opts.force_destructive,
        accept_data_loss_window: opts.accept_data_loss_window,
        bump_revision: opts.bump_revision,
        accept_revision_rewind: opts.accept_revision_rewind,
        in_maintenance: crate::operations::maintenance_record::in_maintenance(state)
            .into_iter()
            .collect(),
    };
    let targets = decide::targets(inv, &assessed, &inputs).map_err(anyhow::Error::new)?;
    for note in &targets.notes {
        eprintln!("{note}");
    }
    let transports = reach.transports;
    let source = super::source::choose(
        opts,
        connect,
        inv,
        state,
        &transports,
        &assessed.hosts,
        &targets.targets,
    )
    .await?;
    let d = decide::decide(inv, &assessed, &inputs, crate::hwm::read(state), source)
        .map_err(anyhow::Error::new)?;
    Ok((d, transports))
}

/// The old-member probe on every reachable host not `skip`ped (read-only), in inventory order; a
/// host whose probe fails counts as not answering.
async fn probe_old_members(
    inv: &Inventory,
    transports: &Transports,
    skip: &dyn Fn(&str) -> bool,
) -> Vec<crate::old_members::probe::HostSeen> {
    let cmd = crate::old_members::probe::command(&inv.etcd.data_dir, crate::etcd::METRICS_PORT, None);
    let asks = inv
        .hosts
        .iter()
        .filter(|h| !skip(&h.name))
        .filter_map(|h| Some((h.name.clone(), transports.get(&h.name)?.clone())))
        .map(|(name, t)| {
            let cmd = cmd.clone();
            async move {
                let out = t.run(&cmd).await;
                (name, out)
            }
        });
    let mut seen = Vec::new();
    for (name, out) in futures::future::join_all(asks).await {
        match out {
            Ok(o) if o.success() => seen.push(crate::old_members::probe::parse(&name, &o.stdout_str())),
            Ok(o) => eprintln!("  {name}: old-member probe failed: {}", o.stderr_str().trim()),
            Err(e) => eprintln!("  {name}: old-member probe failed: {e}"),
        }
    }
    seen
}

/// The nodes that are not etcd hosts, in inventory order: those that answered with a kubelet
/// unit installed (read-only: `systemctl show`), and those that did not answer (each printed
/// with the reason). Their kubelets restart in R5.4, after the control plane is back; a node
/// that does not answer does not hold the recover up.
async fn probe_node_kubelets(
    inv: &Inventory,
    reach: &Reach,
    is_etcd: &dyn Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let nodes: Vec<&str> = inv
        .node_hosts()
        .into_iter()
        .filter(|h| !is_etcd(&h.name))
        .map(|h| h.name.as_str())
        .collect();
    let cmd = crate::plan::RemoteCommand::read_only([
        "systemctl",
        "show",
        super::KUBELET_UNIT,
        "-p",
        "LoadState",
        "--value",
    ]);
    let asks = nodes.iter().map(|&name| {
        let (cmd, t) = (cmd.clone(), reach.transports.get(name).cloned());
        async move {
            let answer = match t {
                Some(t) => match t.run(&cmd).await {
                    Ok(o) if o.success() => Ok(o.stdout_str().trim() == "loaded"),
                    Ok(o) => Err(o.stderr_str().trim().to_string()),
                    Err(e) => Err(e.to_string()),
                },
                None => Err(reach
                    .unreachable
                    .get(name)
                    .map_or_else(|| "not connected".to_string(), |e| e.to_string())),
            };
            (name, answer)
        }
    });
    let (mut kubelets, mut down) = (Vec::new(), Vec::new());
    for (name, answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(true) => {
                eprintln!("  {name}: node, kubelet installed (restarted once the control plane is back)");
                kubelets.push(name.to_string());
            }
            Ok(false) => eprintln!("  {name}: node, no kubelet installed"),
            Err(e) => {
                eprintln!("  {name} (a node): unreachable: {e}; its kubelet will not be restarted");
                down.push(name.to_string());
            }
        }
    }
    (kubelets, down)
}

/// One assessment line for an old member.
fn describe_old(s: &crate::old_members::probe::HostSeen, history: &crate::old_members::History) -> String {
    let recorded = history
        .state_of(&s.host)
        .map(|st| st.as_str())
        .unwrap_or("unknown");
    let etcd = match (s.etcd_running(), s.status) {
        (true, Some(st)) => format!(
            "etcd runs (cluster {:x}, {})",
            st.cluster_id,
            if st.leader != 0 && s.healthy {
                "healthy with a leader"
            } else {
                "no leader"
            }
        ),
        (true, None) => "etcd runs".to_string(),
        (false, _) => "etcd stopped".to_string(),
    };
    format!(
        "{}: old member ({recorded} in the member history), {etcd}, {}",
        s.host,
        if s.data_member {
            "data intact"
        } else {
            "no member data"
        }
    )
}

/// R0's journal entries (R0.1 targets, R0.3 gate, R0.5 bump, R0.6 identity), each naming the
/// sha256 of the saved decisions.
pub fn r0_entries(
    decisions: &Decisions,
    force_destructive: bool,
    sha: &str,
) -> anyhow::Result<Vec<(StepId, serde_json::Value)>> {
    Ok(vec![
        (
            R::Targets.into(),
            serde_json::json!({ "targets": decisions.targets, "confirmed_dead": decisions.confirmed_dead, "old_fenced": decisions.old_fenced, "old_attested": decisions.old_attested, "decisions_sha256": sha }),
        ),
        (
            R::Gate.into(),
            serde_json::json!({ "gate": "no quorum, none restorable", "force_destructive": force_destructive }),
        ),
        (R::Bump.into(), serde_json::to_value(decisions.bump)?),
        (
            R::Identity.into(),
            serde_json::json!({ "expected_cluster_id": decisions.expected_cluster_id, "token": decisions.token }),
        ),
    ])
}
