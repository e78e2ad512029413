//! The Kubernetes side of `maintenance` and `heal`: reaching an apiserver, cordon and uncordon,
//! the ordered drain through the Eviction API, and the Node annotations that mirror the
//! maintenance stage and heal's retry record.
//!
//! Invariant: what to evict and in which order, and what an Eviction's answer means, is decided by
//! the pure [`crate::kubernetes::drain`]; this file only drives the API with it. A dry run reads
//! the API but never writes to it.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::exec::connect::ConnectSettings;
use crate::exec::{Mode, Transports};
use crate::exit;
use crate::exit::refuse;
use crate::inventory::{Inventory, Role};
use crate::kubernetes::api::{ApiClient, MAINTENANCE_STAGE_ANNOTATION};
use crate::kubernetes::drain::{self, Eviction, PodRef};
use crate::kubernetes::objects::Node;
use crate::operations::{Journal, StepState};
use crate::state::StateDir;

/// An apiserver to talk to, and whether the node in question is registered.
pub struct Kube {
    pub api: ApiClient,
    /// The Node by the host's name, as read before anything changed; `None` when no kubelet
    /// registered one (a host without the node components, or whose kubelet never started):
    /// then there is nothing to cordon or drain.
    pub node: Option<Node>,
}

/// The mark in the maintenance record's `stopped` list: hactl cordoned the Node, so Complete
/// uncordons it. A Node someone else had cordoned before stays cordoned.
pub const CORDON_MARK: &str = "node-unschedulable";

/// Connects to the apiserver of a control-plane host (hosts other than `avoid` first, since
/// `avoid` is the one going out of service) through an SSH port forward, and checks `/readyz`.
/// Hosts without a connection in `transports` are connected here.
pub async fn connect_api(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    connect: &ConnectSettings,
    avoid: &str,
) -> anyhow::Result<ApiClient> {
    let mut hosts = inv.with_role(Role::ControlPlane);
    hosts.sort_by_key(|h| h.name == avoid);
    let missing: Vec<_> = hosts
        .iter()
        .copied()
        .filter(|h| !transports.contains_key(&h.name))
        .collect();
    let extra = if missing.is_empty() {
        Default::default()
    } else {
        crate::exec::connect::connect(state, &missing, connect).await
    };
    let pki = state.path.join("pki");
    let mut errors = Vec::new();
    for h in hosts {
        let t = match transports.get(&h.name) {
            Some(t) => t.clone(),
            None => match extra.get(&h.name) {
                Some(Ok(t)) => t.clone(),
                Some(Err(e)) => {
                    errors.push(format!("{}: unreachable: {e}", h.name));
                    continue;
                }
                None => continue,
            },
        };
        let api = match ApiClient::through(t.as_ref(), &h.name, &h.address.to_string(), &pki).await {
            Ok(a) => a,
            Err(e) => {
                errors.push(format!("{}: {:#}", h.name, anyhow::Error::from(e)));
                continue;
            }
        };
        match api.request(reqwest::Method::GET, "/readyz", "", None).await {
            Ok((200, _)) => return Ok(api),
            Ok((code, body)) => errors.push(format!(
                "{}: /readyz answered {code}: {}",
                h.name,
                body.trim().lines().last().unwrap_or("")
            )),
            Err(e) => errors.push(format!("{}: {:#}", h.name, anyhow::Error::from(e))),
        }
    }
    anyhow::bail!(
        "no apiserver answered /readyz ({}); the Kubernetes steps need one: check `hactl status`",
        if errors.is_empty() {
            "no control-plane host".to_string()
        } else {
            errors.join("; ")
        }
    )
}

/// [`connect_api`] and whether the Node `node` exists; `None` when the inventory has no
/// Kubernetes section.
pub async fn kube_for(
    inv: &Inventory,
    state: &StateDir,
    transports: &Transports,
    connect: &ConnectSettings,
    node: &str,
) -> anyhow::Result<Option<Kube>> {
    if inv.kubernetes.is_none() {
        return Ok(None);
    }
    let api = connect_api(inv, state, transports, connect, node).await?;
    let node = api
        .node(node)
        .await
        .with_context(|| format!("cannot read Node {node}"))?;
    Ok(Some(Kube { api, node }))
}

/// Why cordon, drain and uncordon do nothing, when they do nothing.
pub fn not_applicable(inv: &Inventory, kube: Option<&Kube>, node: &str) -> Option<String> {
    match kube {
        None => Some("no kubernetes section in the inventory".into()),
        Some(k) if k.node.is_none() => Some(format!(
            "no Node named {node} in the cluster (its kubelet has not registered one{}), so no pod runs there",
            if inv.host(node).is_some_and(|h| h.is_node()) {
                ": `hactl up` installs and starts it"
            } else {
                ""
            }
        )),
        Some(_) => None,
    }
}

/// Writes the stage to the Node annotation; a failure is a warning (the journal and the state
/// directory hold the stage).
pub async fn annotate_stage(kube: Option<&Kube>, mode: Mode, node: &str, stage: &str) {
    let Some(k) = kube.filter(|k| k.node.is_some()) else {
        return;
    };
    if mode == Mode::DryRun {
        eprintln!("{node}: would annotate {MAINTENANCE_STAGE_ANNOTATION}={stage}");
        return;
    }
    if let Err(e) = k
        .api
        .annotate_node(node, MAINTENANCE_STAGE_ANNOTATION, Some(stage))
        .await
    {
        eprintln!(
            "{node}: warning: cannot record stage {stage} in the Node annotation {MAINTENANCE_STAGE_ANNOTATION}: {:#} (the journal and the state directory hold it)",
            anyhow::Error::from(e)
        );
    }
}

/// Cordon (`true`) or uncordon, verified on the returned Node.
pub async fn set_unschedulable(
    k: &Kube,
    mode: Mode,
    journal: &Journal,
    step: &str,
    node: &str,
    unschedulable: bool,
) -> anyhow::Result<()> {
    let verb = if unschedulable { "cordon" } else { "uncordon" };
    journal.record(
        step,
        StepState::Started,
        node,
        &format!("{verb} through {}", k.api.through),
    )?;
    if mode == Mode::DryRun {
        return journal.record(step, StepState::Done, node, &format!("would {verb} Node {node}"));
    }
    let n = k
        .api
        .set_unschedulable(node, unschedulable)
        .await
        .with_context(|| format!("cannot {verb} Node {node}"))?;
    if n.spec.unschedulable != unschedulable {
        anyhow::bail!(
            "{verb} of Node {node} did not hold: spec.unschedulable is {} after the patch",
            n.spec.unschedulable
        );
    }
    journal.record(
        step,
        StepState::Done,
        node,
        &format!("Node {node} spec.unschedulable={unschedulable}"),
    )
}

/// What `maintenance plan` prints for the Drain stage: the waves, the pods that stay and what
/// would block evictions now.
pub async fn describe_drain(k: &Kube, node: &str) -> anyhow::Result<Vec<String>> {
    let pods = k.api.pods_on_node(node).await?;
    let pdbs = k.api.pod_disruption_budgets().await?;
    let plan = drain::plan(&pods);
    let mut out = Vec::new();
    for w in &plan.waves {
        out.push(format!(
            "evict ({}, priority {}): {}",
            w.band,
            w.priority,
            w.pods
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if plan.waves.is_empty() {
        out.push("no pod to evict".into());
    }
    for (p, why) in &plan.kept {
        out.push(format!("stays: {p} ({why})"));
    }
    for b in drain::blockers(&pods, &pdbs) {
        out.push(format!("blocker: {b}"));
    }
    Ok(out)
}

/// The drain: waves of Evictions by ascending priority until no evictable pod is left on `node`,
/// each wave gone before the next; an Eviction answered 429 is retried with backoff until
/// `timeout`, then the stage fails naming the pod and the budget.
pub async fn drain(
    k: &Kube,
    mode: Mode,
    journal: &Journal,
    node: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let stuck = |what: String| {
        refuse(
            exit::FAILED_AFTER_CHANGES,
            format!("{what}. {node} stays cordoned at stage Drain; nothing was stopped. Then `hactl maintenance complete {node}` cancels (uncordons), or start again once the cause is fixed"),
        )
    };
    journal.record(
        "drain",
        StepState::Started,
        node,
        &format!(
            "through {}; --drain-timeout {}s",
            k.api.through,
            timeout.as_secs()
        ),
    )?;
    let mut evicted = 0usize;
    loop {
        let pods = k.api.pods_on_node(node).await?;
        let plan = drain::plan(&pods);
        if mode == Mode::DryRun {
            for line in describe_drain(k, node).await? {
                eprintln!("drain {node}: would {line}");
            }
            return journal.record("drain", StepState::Done, node, "dry run: nothing evicted");
        }
        let Some(wave) = plan.waves.first() else {
            let kept = plan.kept.len();
            return journal.record(
                "drain",
                StepState::Done,
                node,
                &format!("{evicted} pod(s) evicted; no evictable pod left; {kept} stay (DaemonSet, static or terminal)"),
            );
        };
        if Instant::now() >= deadline {
            return Err(stuck(format!(
                "the drain of {node} ran out of --drain-timeout ({}s) with pods still to evict: {}",
                timeout.as_secs(),
                plan.evictions()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        eprintln!(
            "drain {node}: evicting {} pod(s) ({}, priority {})",
            wave.pods.len(),
            wave.band,
            wave.priority
        );
        let mut pending: Vec<PodRef> = wave.pods.clone();
        let mut accepted: Vec<PodRef> = Vec::new();
        let mut attempt = 0;
        loop {
            let mut blocked = Vec::new();
            for pod in pending {
                match k.api.evict(&pod).await? {
                    Eviction::Accepted => accepted.push(pod),
                    Eviction::Gone => {}
                    Eviction::Blocked { message, budgets } => blocked.push((pod, message, budgets)),
                    Eviction::Failed { code, message } => {
                        return Err(stuck(format!(
                            "the eviction of pod {pod} from {node} was answered {code}: {message}"
                        )))
                    }
                }
            }
            if blocked.is_empty() {
                break;
            }
            let wait = drain::backoff(attempt);
            if Instant::now() + wait > deadline {
                let (pod, message, named) = &blocked[0];
                let pdbs = k.api.pod_disruption_budgets().await.unwrap_or_default();
                let budgets = pods
                    .iter()
                    .find(|p| PodRef::of(p) == *pod)
                    .map(|p| drain::budgets_for(p, &pdbs))
                    .unwrap_or_default();
                let text = drain::blocked_refusal(node, pod, message, &budgets, named, timeout);
                journal.record("drain", StepState::Failed, node, &text)?;
                return Err(refuse(exit::FAILED_AFTER_CHANGES, text));
            }
            eprintln!(
                "drain {node}: {} eviction(s) answered 429 ({}), retrying in {}s",
                blocked.len(),
                blocked[0].1,
                wait.as_secs()
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
            pending = blocked.into_iter().map(|(p, _, _)| p).collect();
        }
        // The wave is gone before the next starts.
        let mut poll = Duration::from_millis(200);
        loop {
            let now = k.api.pods_on_node(node).await?;
            let left = drain::still_present(&now, &accepted);
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let text = format!(
                    "{} evicted pod(s) still on {node} after the --drain-timeout of {}s: {} (terminating: a long grace period or a finalizer holds them; see `kubectl get pod -n NAMESPACE NAME -o yaml`)",
                    left.len(),
                    timeout.as_secs(),
                    left.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                );
                journal.record("drain", StepState::Failed, node, &text)?;
                return Err(stuck(text));
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 2).min(Duration::from_secs(2));
        }
        evicted += accepted.len();
    }
}
