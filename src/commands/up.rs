//! `hactl up` and `hactl plan`: one code path ([`crate::converge`]). Facts are gathered
//! read-only and the plan is built from [`crate::converge::phases`]; `up` executes it under the
//! cluster lock and `plan` prints it.
//!
//! Invariant: `plan` opens the state directory read-only ([`StateView`]): it creates and
//! changes nothing there or on a host. `up` writes nothing anywhere, its state directory
//! included, before the cluster identity was checked (the lock is taken on the hosts first,
//! in the state directory once the check passed).

use crate::cli::{OutputFormat, PlanArgs, UpArgs};
use crate::converge::Gate;
use crate::exec::{self, Mode, Transports};
use crate::inventory::Inventory;
use crate::operations::lock::{self, ClusterLock, Owner};
use crate::state::StateDir;

/// `hactl plan`: prints what `up` would do.
pub async fn plan(args: &PlanArgs) -> anyhow::Result<i32> {
    let (inv, view) = super::load_read_only(&args.up.inventory)?;
    let fresh = !view.exists();
    let prepared = crate::converge::preview(inv, view, &args.up.connect.settings(), &[]).await?;
    print_plan(&prepared, fresh, args.output).await?;
    Ok(crate::exit::OK)
}

/// Prints a previewed plan as `hactl plan` does (also `certs renew --dry-run`): the text, or the
/// plan as JSON.
pub(super) async fn print_plan(
    prepared: &crate::converge::Prepared,
    fresh: bool,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match output {
        OutputFormat::Table => {
            if fresh || !prepared.unrecorded_host_keys.is_empty() {
                eprint!("{}", first_use(prepared, fresh));
            }
            exec::run(&prepared.plan, Mode::DryRun, &prepared.transports).await?;
            if !prepared.pending_nodes.is_empty() {
                println!(
                    "then, once the Nodes of {} have registered: their pod network (CNI configuration, \
                     routes to the other nodes) and the control-plane Nodes' labels, planned by \
                     `hactl up` from the pod CIDRs they get (a second round of the same run)",
                    prepared.pending_nodes.join(", ")
                );
            }
        }
        OutputFormat::Json => {
            let mut json = prepared.plan.to_json();
            json["pendingNodes"] = serde_json::json!(prepared.pending_nodes);
            crate::output::print_document(crate::plan::JSON_KIND, &json)?;
        }
    }
    Ok(())
}

/// What `up` would create before its first step, for a plan without state (or with hosts
/// whose keys are not recorded yet): the state directory, the CAs and certificates, the host
/// keys (to compare with the hosts' own).
fn first_use(p: &crate::converge::Prepared, fresh: bool) -> String {
    let mut out = String::new();
    if fresh {
        out.push_str(&format!(
            "no state directory at {}: `hactl up` would create it, with:\n",
            p.state.path.display()
        ));
        for change in p.pki.changes() {
            out.push_str(&format!("  pki/{change}\n"));
        }
    }
    if !p.unrecorded_host_keys.is_empty() {
        out.push_str(
            "host keys `hactl up` would record (compare each with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on its host):\n",
        );
        for line in &p.unrecorded_host_keys {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// `hactl up`: converges the hosts on the inventory.
pub async fn up(args: &UpArgs) -> anyhow::Result<i32> {
    up_renewing(args, &[]).await
}

/// [`up`], re-issuing the leaves named in `renew` first (`hactl certs renew`).
pub async fn up_renewing(args: &UpArgs, renew: &[String]) -> anyhow::Result<i32> {
    let (inv, view) = super::load_read_only(&args.inventory)?;
    let command = if renew.is_empty() { "up" } else { "certs renew" };
    lock::refuse_if_held_here(&view).map_err(|e| anyhow::Error::new(e.refusal()))?;
    let mut gate = LockGate::new(&inv, command);
    crate::converge::apply(inv, view, &args.options(), renew, &mut gate).await
}

/// The cluster lock as `up` takes it: on the hosts once they answered, in the state directory
/// once the identity check passed and it may be written. Given back when dropped.
pub struct LockGate {
    hosts: Vec<String>,
    owner: Owner,
    lock: Option<ClusterLock>,
}

impl LockGate {
    pub fn new(inv: &Inventory, command: &str) -> LockGate {
        let run = crate::operations::journal::new_run_id(command);
        LockGate {
            hosts: lock::cluster_hosts(inv),
            owner: Owner::new(command, &run),
            lock: None,
        }
    }
}

#[async_trait::async_trait]
impl Gate for LockGate {
    async fn hosts_reached(&mut self, transports: &Transports) -> anyhow::Result<()> {
        let lock = ClusterLock::on_hosts_first(transports, &self.hosts, self.owner.clone())
            .await
            .map_err(|e| anyhow::Error::new(e.refusal()))?;
        self.lock = Some(lock);
        Ok(())
    }
    fn state_opened(&mut self, state: &StateDir) -> anyhow::Result<()> {
        if let Some(lock) = &mut self.lock {
            lock.add_local(state)
                .map_err(|e| anyhow::Error::new(e.refusal()))?;
        }
        refuse_in_maintenance(state)
    }
}

/// Refuses (exit 2) while `maintenance start` has stopped something on a host and `complete`
/// has not run: `up` would start it again (a static-pod manifest written back, a fenced unit
/// failing to start) on a host the operator took out of service. A maintenance that only
/// cordoned does not stand in the way.
fn refuse_in_maintenance(state: &StateDir) -> anyhow::Result<()> {
    use crate::operations::maintenance_record::maintenance_records;
    for (host, r) in maintenance_records(state) {
        // A record whose `complete` would cancel (only the cordon done) does not stand in the way.
        if !crate::operations::maintenance::steps::cancels(&r) {
            let stopped: Vec<&str> = r
                .stopped
                .iter()
                .map(String::as_str)
                .filter(|x| *x != crate::operations::node::CORDON_MARK)
                .collect();
            return Err(crate::exit::refuse(
                crate::exit::REFUSED,
                format!(
                    "{host} is in maintenance (stage {}, since {}; stopped: {}): `hactl up` would \
                     start it again on a host taken out of service; run `hactl maintenance \
                     complete {host}` first, then `hactl up`",
                    r.stage,
                    r.since,
                    stopped.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// [`crate::converge::apply`] for an inventory loaded by a caller that holds the cluster lock
/// (each roll of `certs rotate-ca`).
pub async fn converge(
    inv: Inventory,
    state: StateDir,
    args: &UpArgs,
    renew: &[String],
) -> anyhow::Result<i32> {
    crate::converge::apply(
        inv,
        state.view(),
        &args.options(),
        renew,
        &mut crate::converge::NoGate,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::maintenance_record::{record_path, MaintenanceRecord, Stage};

    fn write(state: &StateDir, host: &str, stage: Stage, stopped: &[&str]) {
        let r = MaintenanceRecord {
            host: host.into(),
            stage,
            since: "2026-11-26T00:00:00Z".into(),
            reason: String::new(),
            stopped: stopped.iter().map(|s| s.to_string()).collect(),
        };
        let path = record_path(state, host);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, serde_json::to_string(&r).unwrap()).unwrap();
    }

    #[test]
    fn up_refuses_while_a_maintenance_has_stopped_something() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        refuse_in_maintenance(&state).unwrap();
        // Only cordoned, or complete: no refusal.
        write(
            &state,
            "cp2",
            Stage::Drain,
            &[crate::operations::node::CORDON_MARK],
        );
        write(&state, "cp3", Stage::Complete, &["etcd.service"]);
        refuse_in_maintenance(&state).unwrap();
        write(
            &state,
            "cp1",
            Stage::StopControlPlane,
            &["kube-scheduler.service", "etcd.service"],
        );
        let e = refuse_in_maintenance(&state).unwrap_err();
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::REFUSED);
        let text = format!("{e:#}");
        assert!(
            text.contains("cp1 is in maintenance (stage StopControlPlane"),
            "{text}"
        );
        assert!(
            text.contains("stopped: kube-scheduler.service, etcd.service"),
            "{text}"
        );
        assert!(
            text.contains("run `hactl maintenance complete cp1` first"),
            "{text}"
        );
    }
}
