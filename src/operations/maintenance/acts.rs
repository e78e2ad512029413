//! The operator-side acts of maintenance's journaled steps: the record and its stage, the
//! Kubernetes API (cordon, drain, the Lease handover, uncordon), the load balancers, and the
//! R-maint gate with the leadership move right before etcd stops.
//!
//! Invariant: each act reads what it needs at the moment it runs (a fresh observation before
//! etcd stops, the Leases before the controllers stop); nothing here decides which steps exist:
//! that is [`super::steps`], from facts read before the run.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;

use crate::etcd::{self, hex_id, safety};
use crate::exec::{Mode, Transports};
use crate::exit::{self, refuse};
use crate::inventory::Inventory;
use crate::kubernetes::api::ApiClient;
use crate::kubernetes::handover::{self, Held};
use crate::operations::balancers::Balancers;
use crate::operations::maintenance_record::{self, read_record, MaintenanceRecord, HOST_RECORD_DIR};
use crate::operations::node::{self, Kube};
use crate::operations::runner::LocalAct;
use crate::operations::{Journal, Reach};
use crate::plan::RemoteCommand;
use crate::state::StateDir;

/// What the acts of one maintenance run share.
pub struct Live {
    pub inv: Inventory,
    pub state: StateDir,
    pub host: String,
    pub connect: crate::exec::connect::ConnectSettings,
    pub reach: Reach,
    /// Connected before the run (start needs it for Cordon and Drain); `None` for complete,
    /// whose acts connect when they need the API (quorum may only return during the run).
    pub kube: Option<Kube>,
    pub balancers: Balancers,
    pub max_unavailable: usize,
    pub drain_timeout: Duration,
    /// The Leases as read before the controllers stopped (step `lease-read`).
    pub leases: Mutex<Vec<Held>>,
    /// A second handle on the run's journal, for the detail lines of the acts (set once the run
    /// is confirmed and its journal created).
    pub journal: OnceLock<Journal>,
}

impl Live {
    fn journal(&self) -> &Journal {
        static DRY: OnceLock<Journal> = OnceLock::new();
        self.journal
            .get()
            .unwrap_or_else(|| DRY.get_or_init(|| Journal::dry_run("maintenance")))
    }

    /// The Kubernetes API: the one read before the run, else a fresh connection.
    async fn kube(&self) -> anyhow::Result<Option<KubeRef<'_>>> {
        if let Some(k) = &self.kube {
            return Ok(Some(KubeRef::Borrowed(k)));
        }
        Ok(self.connect_kube().await?.map(|k| KubeRef::Owned(Box::new(k))))
    }

    /// [`node::kube_for`] over the connections this run already holds (the control-plane hosts,
    /// this host last).
    async fn connect_kube(&self) -> anyhow::Result<Option<Kube>> {
        if self.inv.kubernetes.is_none() {
            return Ok(None);
        }
        let pki = self.state.path.join("pki");
        let mut hosts = self.inv.with_role(crate::inventory::Role::ControlPlane);
        hosts.sort_by_key(|h| h.name == self.host);
        let mut errors = Vec::new();
        for h in hosts {
            let Some(t) = self.reach.transports.get(&h.name) else {
                errors.push(format!("{}: unreachable", h.name));
                continue;
            };
            let api = match ApiClient::through(t.as_ref(), &h.name, &h.address.to_string(), &pki).await {
                Ok(a) => a,
                Err(e) => {
                    errors.push(format!("{}: {:#}", h.name, anyhow::Error::from(e)));
                    continue;
                }
            };
            match api.request(reqwest::Method::GET, "/readyz", "", None).await {
                Ok((200, _)) => {
                    let node = api
                        .node(&self.host)
                        .await
                        .with_context(|| format!("cannot read Node {}", self.host))?;
                    return Ok(Some(Kube { api, node }));
                }
                Ok((code, _)) => errors.push(format!("{}: /readyz answered {code}", h.name)),
                Err(e) => errors.push(format!("{}: {:#}", h.name, anyhow::Error::from(e))),
            }
        }
        anyhow::bail!("no apiserver answered /readyz ({})", errors.join("; "))
    }
}

enum KubeRef<'a> {
    Borrowed(&'a Kube),
    Owned(Box<Kube>),
}

impl KubeRef<'_> {
    fn get(&self) -> &Kube {
        match self {
            KubeRef::Borrowed(k) => k,
            KubeRef::Owned(k) => k,
        }
    }
}

/// Writes the record in the state dir and, when reachable, on the host.
pub async fn write_record(
    state: &StateDir,
    transports: &Transports,
    rec: &MaintenanceRecord,
) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(rec)?;
    state
        .write_secret(format!("maintenance/{}.json", rec.host), json.as_bytes())
        .context("cannot record the maintenance stage")?;
    if let Some(t) = transports.get(&rec.host) {
        let path = format!("{HOST_RECORD_DIR}/{}.json", rec.host);
        let cmd = RemoteCommand::script(format!(
            "mkdir -p {HOST_RECORD_DIR} && printf '%s\\n' '{}' > {path}.tmp && mv {path}.tmp {path}",
            json.replace('\'', "")
        ));
        let out = t.run(&cmd).await?;
        if !out.success() {
            anyhow::bail!("cannot write {path} on {}: {}", rec.host, out.stderr_str().trim());
        }
    }
    Ok(())
}

/// `stage-<Stage>`: the record moves to the stage, with the marks of what this run stops.
pub struct EnterStage {
    pub live: Arc<Live>,
    pub record: MaintenanceRecord,
}

#[async_trait]
impl LocalAct for EnterStage {
    fn describe(&self) -> String {
        format!(
            "record {} at stage {} (state dir maintenance/{}.json, {HOST_RECORD_DIR}/{}.json on the host, Node annotation {}); marks: {}",
            self.record.host,
            self.record.stage,
            self.record.host,
            self.record.host,
            crate::kubernetes::api::MAINTENANCE_STAGE_ANNOTATION,
            if self.record.stopped.is_empty() {
                "none".to_string()
            } else {
                self.record.stopped.join(", ")
            }
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        write_record(&self.live.state, transports, &self.record).await?;
        let stage = self.record.stage.as_str();
        match self.live.kube().await {
            Ok(k) => node::annotate_stage(k.as_ref().map(|k| k.get()), Mode::Live, &self.live.host, stage).await,
            Err(e) => eprintln!(
                "{}: warning: stage {stage} not written to the Node annotation ({e:#}); the state directory holds it",
                self.live.host
            ),
        }
        Ok(serde_json::json!({ "stage": stage, "stopped": self.record.stopped }))
    }
    async fn holds(&self, _transports: &Transports) -> anyhow::Result<bool> {
        Ok(read_record(&self.live.state, &self.live.host).is_some_and(|r| r == self.record))
    }
}

/// A step with nothing to do, and why (journaled `skipped`).
pub struct Nothing(pub String);

#[async_trait]
impl LocalAct for Nothing {
    fn describe(&self) -> String {
        self.0.clone()
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::json!({ "detail": self.0 }))
    }
    async fn holds(&self, _transports: &Transports) -> anyhow::Result<bool> {
        Ok(true)
    }
}

/// A step that only journals what happened (`cancel`).
pub struct Note(pub String);

#[async_trait]
impl LocalAct for Note {
    fn describe(&self) -> String {
        self.0.clone()
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        eprintln!("{}", self.0);
        Ok(serde_json::json!({ "detail": self.0 }))
    }
}

/// Cordon (`true`) or uncordon the host's Node.
pub struct Schedulable {
    pub live: Arc<Live>,
    pub unschedulable: bool,
}

#[async_trait]
impl LocalAct for Schedulable {
    fn describe(&self) -> String {
        format!(
            "{} Node {} (spec.unschedulable={}) through the Kubernetes API",
            if self.unschedulable { "cordon" } else { "uncordon" },
            self.live.host,
            self.unschedulable
        )
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let step = if self.unschedulable { "cordon" } else { "uncordon" };
        let k = match self.live.kube().await {
            Ok(Some(k)) => k,
            Ok(None) => return Ok(serde_json::json!({ "detail": "no kubernetes section" })),
            Err(e) if !self.unschedulable => {
                return Err(refuse(
                    exit::FAILED_AFTER_CHANGES,
                    format!("{}: everything hactl stopped runs again, but the Node could not be uncordoned: {e:#}; run `hactl maintenance complete {}` again once an apiserver answers", self.live.host, self.live.host),
                ))
            }
            Err(e) => return Err(e),
        };
        node::set_unschedulable(
            k.get(),
            Mode::Live,
            self.live.journal(),
            step,
            &self.live.host,
            self.unschedulable,
        )
        .await?;
        Ok(serde_json::json!({ "unschedulable": self.unschedulable }))
    }
}

/// Drain: Evictions by ascending priority, PodDisruptionBudgets honoured.
pub struct Drain {
    pub live: Arc<Live>,
}

#[async_trait]
impl LocalAct for Drain {
    fn describe(&self) -> String {
        format!(
            "evict the pods of Node {} through the Eviction API by ascending priority, PodDisruptionBudgets honoured for up to --drain-timeout {}s",
            self.live.host,
            self.live.drain_timeout.as_secs()
        )
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let k = self
            .live
            .kube
            .as_ref()
            .context("the drain needs the Kubernetes API")?;
        node::drain(
            k,
            Mode::Live,
            self.live.journal(),
            &self.live.host,
            self.live.drain_timeout,
        )
        .await?;
        Ok(serde_json::Value::Null)
    }
}

/// Reads which Leases the host holds, before its controllers stop.
pub struct ReadLeases {
    pub live: Arc<Live>,
}

#[async_trait]
impl LocalAct for ReadLeases {
    fn describe(&self) -> String {
        format!(
            "read the leader-election Leases {} holds (kube-controller-manager, kube-scheduler)",
            self.live.host
        )
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let Some(k) = &self.live.kube else {
            return Ok(serde_json::Value::Null);
        };
        let leases = handover::read(&k.api).await.unwrap_or_default();
        let held: Vec<String> = handover::held_by(&leases, &self.live.host)
            .iter()
            .map(|l| l.name.clone())
            .collect();
        *self.live.leases.lock().expect("never poisoned") = leases;
        Ok(serde_json::json!({ "held": held }))
    }
}

/// Waits until the Leases the host held moved to another host.
pub struct LeaseHandover {
    pub live: Arc<Live>,
}

#[async_trait]
impl LocalAct for LeaseHandover {
    fn describe(&self) -> String {
        format!(
            "wait until the Leases {} held are held by another host (before its apiserver stops)",
            self.live.host
        )
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let host = &self.live.host;
        let Some(k) = &self.live.kube else {
            return Ok(serde_json::Value::Null);
        };
        let leases = self.live.leases.lock().expect("never poisoned").clone();
        let held = handover::held_by(&leases, host);
        if held.is_empty() {
            return Ok(serde_json::json!({ "detail": "held no Lease" }));
        }
        match handover::wait_moved(&k.api, &held, host).await {
            Ok(moved) => Ok(serde_json::json!({ "moved": moved })),
            Err(e) => Err(refuse(
                exit::FAILED_AFTER_CHANGES,
                format!("{e}; {host} stays at stage StopControlPlane with its apiserver and etcd running: check the other control-plane hosts' kube-controller-manager and kube-scheduler (`hactl status`), then `hactl maintenance complete {host}`"),
            )),
        }
    }
}

/// Takes the host's servers out of every HAProxy (MAINT), or puts them back.
pub struct Backends {
    pub live: Arc<Live>,
    pub ready: bool,
}

#[async_trait]
impl LocalAct for Backends {
    fn describe(&self) -> String {
        let lbs: Vec<String> = self
            .live
            .inv
            .with_role(crate::inventory::Role::LoadBalancer)
            .iter()
            .map(|h| h.name.clone())
            .collect();
        let backends: Vec<&str> = Balancers::backends(&self.live.inv)
            .iter()
            .map(|b| b.name())
            .collect();
        if self.ready {
            format!(
                "put {} back in {} on the load balancers ({}) and wait until HAProxy's check passes",
                self.live.host,
                backends.join(", "),
                lbs.join(", ")
            )
        } else {
            format!(
                "drain {} in {} on the load balancers ({}), let its open sessions end (up to 10 s), put it in MAINT and wait until HAProxy shows it",
                self.live.host,
                backends.join(", "),
                lbs.join(", ")
            )
        }
    }
    async fn act(&self, _transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let l = &self.live;
        if self.ready {
            l.balancers
                .ready(
                    Mode::Live,
                    &l.inv,
                    l.journal(),
                    "lb-ready",
                    &l.host,
                    Duration::from_secs(60),
                )
                .await?;
        } else {
            l.balancers
                .drain(Mode::Live, &l.inv, l.journal(), "lb-drain", &l.host)
                .await?;
        }
        Ok(serde_json::json!({ "unreachable": l.balancers.unreachable.keys().collect::<Vec<_>>() }))
    }
}

/// R-maint again right before etcd stops (the cluster may have changed while the host drained),
/// then etcd leadership moved off the host when it leads.
pub struct GateAndMoveLeader {
    pub live: Arc<Live>,
}

#[async_trait]
impl LocalAct for GateAndMoveLeader {
    fn describe(&self) -> String {
        format!(
            "R-maint re-checked on a fresh observation; if {} leads, `{} move-leader` to the healthy member with the highest applied index",
            self.live.host,
            etcd::ETCDCTL_WRAPPER
        )
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        let l = &self.live;
        let host = l.host.as_str();
        let obs = l.reach.observe(&l.inv, &[host]).await?;
        let mut others = maintenance_record::in_maintenance(&l.state);
        others.remove(host);
        if let safety::Decision::Refused(r) =
            safety::r_maint(&obs.counts(&others, None), 1, l.max_unavailable)
        {
            return Err(refuse(
                exit::REFUSED,
                format!("{r}\n{host} stays at stage StopControlPlane with etcd running; `hactl maintenance complete {host}` brings the rest back"),
            ));
        }
        let Some(me) = obs.by_name(host).filter(|m| obs.leader() == Some(m.id)).cloned() else {
            return Ok(serde_json::json!({ "leader": "elsewhere" }));
        };
        let next = obs
            .voters()
            .filter(|m| m.id != me.id && obs.is_healthy(m))
            .max_by_key(|m| obs.status_of(m).map(|s| s.status.raft_applied_index).unwrap_or(0))
            .context("no healthy member to take over leadership")?;
        let t = transports
            .get(&obs.observer)
            .with_context(|| format!("no connection to {}", obs.observer))?;
        let cmd = RemoteCommand::new([
            etcd::ETCDCTL_WRAPPER.to_string(),
            format!("--endpoints={}", me.client_urls.join(",")),
            "move-leader".to_string(),
            hex_id(next.id),
        ]);
        let out = t.run(&cmd).await?;
        if !out.success() {
            anyhow::bail!(
                "{} failed on {}: {}",
                cmd.line(t.sudo()),
                obs.observer,
                out.stderr_str().trim()
            );
        }
        Ok(serde_json::json!({ "moved_to": next.name, "id": hex_id(next.id) }))
    }
}
