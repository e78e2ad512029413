//! adopt's steps (data, so `--dry-run` prints them): AD1 and AD2 rebuild the state directory,
//! then the CA rotation's steps (`rotate_ca::steps_for`) roll the cluster to new etcd and
//! front-proxy CAs with writes flowing, and AD3 closes the run.

use std::sync::Arc;

use super::acts::{Close, Holds, ReadBack, Start, MARKER};
use super::decide::Decisions;
use crate::inventory::Inventory;
use crate::operations::runner::{JournaledStep, LocalAct};
use crate::pki::CaKind;
use crate::state::StateDir;

crate::step_codes! {
    /// The steps of `hactl adopt` besides the rotation's (docs/recovery.md).
    pub enum A {
        /// Record the host keys; the marker names the run.
        Start = "AD1",
        /// Read back and write the state directory; start the rotations.
        ReadBack = "AD2",
        /// Close the run.
        Close = "AD3",
    }
}

/// What the steps are built from.
pub struct Inputs {
    pub state: StateDir,
    pub inv: Arc<Inventory>,
    pub run: String,
    pub seen_keys: Option<Arc<crate::ssh::KnownHosts>>,
    pub decisions: Decisions,
    /// Each roll: `up`'s plan, built afresh from the state directory and run.
    pub roll: Arc<dyn LocalAct>,
    /// C5.publish for a rotated CA the apiservers publish (front-proxy).
    pub publish: Box<dyn Fn(CaKind) -> Option<Arc<dyn LocalAct>>>,
}

/// AD1, AD2, the rotation of every CA the decisions rotate, AD3.
pub fn steps(i: Inputs) -> Vec<JournaledStep> {
    let state_path = i.state.path.display().to_string();
    // AD1–AD3 write the operator machine's state directory only: nothing the cluster serves
    // from (a failure in them leaves the cluster as it was).
    let step = |code: A, title: &str, act: Arc<dyn LocalAct>, holds: String| {
        JournaledStep::new(code, title, None)
            .done_when_local(Arc::new(Holds {
                what: holds,
                act: act.clone(),
            }))
            .local(act)
            .no_cluster_change()
    };
    let mut list = vec![
        step(
            A::Start,
            "record the host keys; the marker names this run",
            Arc::new(Start {
                state: i.state.clone(),
                run: i.run.clone(),
                seen: i.seen_keys.clone(),
            }),
            format!("{state_path}/{MARKER} names run {}", i.run),
        ),
        step(
            A::ReadBack,
            "rebuild the state directory from the hosts; start the CA rotations",
            Arc::new(ReadBack {
                state: i.state.clone(),
                inv: i.inv.clone(),
                run: i.run.clone(),
                decisions: i.decisions.clone(),
            }),
            format!("{state_path}/pki/etcd/ca.crt exists (the read-back writes it last)"),
        ),
    ];
    let cas: Vec<(CaKind, Option<Arc<dyn LocalAct>>)> = i
        .decisions
        .rotated()
        .into_iter()
        .map(|k| (k, (i.publish)(k)))
        .collect();
    list.extend(crate::operations::rotate_ca::steps::steps_for(
        i.state.file("pki"),
        i.inv.clone(),
        &cas,
        &i.run,
        i.roll.clone(),
    ));
    list.push(step(
        A::Close,
        "close the adoption",
        Arc::new(Close {
            state: i.state.clone(),
            run: i.run.clone(),
        }),
        format!("no {state_path}/{MARKER}"),
    ));
    list
}
