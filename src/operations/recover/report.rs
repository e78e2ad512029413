//! What recover prints: the plan header before anything changes (and in a dry run), and the
//! report when it is done (members, what was kept where, the data-loss window, follow-ups).
//!
//! Invariant: pure text from the decisions (and the baseline record the run left).

use crate::inventory::{Inventory, Role};
use crate::operations::run_dir::RunDir;
use crate::state::StateDir;

use super::{Bump, Decisions, Source};

/// The plan: source, mode, token and cluster ID, the revision bump, what is moved aside.
pub fn plan_header(d: &Decisions, inv: &Inventory) -> String {
    let source = match &d.source {
        Source::File {
            path,
            sha256,
            revision,
            ..
        } => format!(
            "snapshot {path} (sha256 {sha256}{})",
            revision.map(|r| format!(", revision {r}")).unwrap_or_default()
        ),
        Source::Member { host } => {
            format!("the data of surviving member {host} (a copy; the original is kept)")
        }
    };
    let bump = match d.bump {
        Bump::Restore { by } => format!("--bump-revision {by} --mark-compacted"),
        Bump::Emulated { target } => format!("emulated: writes up to revision {target}, then a compaction"),
        Bump::None => "none (--accept-revision-rewind)".into(),
    };
    let mut s = format!(
        "recover plan {run} for cluster {c}:\n  source: {source}\n  mode: {mode:?}, seed {seed}, new members {targets}\n  token: {token} → cluster ID {cid}\n  revision bump: {bump} (high-water mark {hwm}); etcd {v} via {tool}\n  data dirs moved aside to {dd}.hactl-pre-{run} on {dirs}\n",
        run = d.run,
        c = d.cluster,
        mode = d.mode,
        seed = d.seed,
        targets = d.targets.join(", "),
        token = d.token,
        cid = d.expected_cluster_id,
        hwm = d.hwm.as_ref().map(|h| h.revision.to_string()).unwrap_or_else(|| "unknown".into()),
        v = d.etcd_version,
        tool = d.tool,
        dd = inv.etcd.data_dir,
        dirs = if d.data_dirs.is_empty() { "none".into() } else { d.data_dirs.join(", ") },
    );
    if !d.confirmed_dead.is_empty() {
        s.push_str(&format!(
            "  left out (attested dead): {}\n",
            d.confirmed_dead.join(", ")
        ));
    }
    let left_out = left_out_by_members(d, inv);
    if !left_out.is_empty() {
        s.push_str(&format!(
            "  left out by --members: {} (fenced and data moved aside like the others, not rejoined)\n",
            left_out.join(", ")
        ));
    }
    if !d.old_fenced.is_empty() {
        s.push_str(&format!(
            "  old members fenced for good before the new cluster starts (R1.5): {} (their units stopped, disabled and fenced; data dirs moved to {})\n",
            d.old_fenced.join(", "),
            crate::old_members::retire::aside(&inv.etcd.data_dir, &d.run)
        ));
    }
    if !d.old_attested.is_empty() {
        s.push_str(&format!(
            "  old members attested dead: {} (fenced the moment they answer again: `hactl up` or `hactl heal --once`)\n",
            d.old_attested.join(", ")
        ));
    }
    if !d.nodes_unreached.is_empty() {
        s.push_str(&format!(
            "  nodes that do not answer (their kubelets are not restarted): {}\n",
            d.nodes_unreached.join(", ")
        ));
    }
    if d.converges() {
        s.push_str(&format!(
            "  then (R7) `hactl up`'s plan, once etcd is back: {}\n",
            d.converge.join("; ")
        ));
    } else if !d.converge.is_empty() {
        s.push_str(&format!(
            "  left for `hactl up` after it (recover exits 5 until then): {}\n",
            d.converge.join("; ")
        ));
    }
    s
}

/// The exit code of a finished recover: 5 (degraded) while something R0 found is left for
/// `hactl up` that R7 could not run (a member attested dead: `up` needs every host).
pub fn finish_code(d: &Decisions) -> i32 {
    if !d.converge.is_empty() && !d.converges() {
        crate::exit::DEGRADED
    } else {
        crate::exit::OK
    }
}

/// What `recover --dry-run -o json` adds to the decisions (the `decisions` of the manager's
/// document, as a live run saves them): `dataDir` and `asideDataDir`, where the data dirs of
/// `dataDirs` are moved; `leftOutByMembers`, the hosts `--members` leaves out.
pub fn plan_extras(d: &Decisions, inv: &Inventory) -> [(&'static str, serde_json::Value); 3] {
    [
        ("dataDir", serde_json::json!(inv.etcd.data_dir)),
        ("asideDataDir", serde_json::json!(d.aside(&inv.etcd.data_dir))),
        ("leftOutByMembers", serde_json::json!(left_out_by_members(d, inv))),
    ]
}

/// Reachable etcd hosts of the inventory that `--members` leaves out of the new cluster.
fn left_out_by_members(d: &Decisions, inv: &Inventory) -> Vec<String> {
    inv.with_role(Role::Etcd)
        .iter()
        .map(|h| h.name.clone())
        .filter(|h| !d.targets.contains(h) && !d.confirmed_dead.contains(h))
        .collect()
}

/// The report of a finished recover.
pub fn finish_report(d: &Decisions, inv: &Inventory, state: &StateDir) -> String {
    let mut s = format!(
        "cluster {} recovered: members {}, cluster ID {}, token {}\n",
        d.cluster,
        d.targets.join(", "),
        d.expected_cluster_id,
        d.token
    );
    for h in &d.data_dirs {
        s.push_str(&format!(
            "kept on {h}: {} (the old data dir; remove it yourself when no longer needed)\n",
            d.aside(&inv.etcd.data_dir)
        ));
    }
    s.push_str(&format!(
        "kept on {}: {} (the staged snapshot and markers of this run)\n",
        d.targets.join(", "),
        d.work_dir()
    ));
    let (snap_rev, snap_time) = match &d.source {
        Source::File { revision, time, .. } => (*revision, time.clone()),
        Source::Member { .. } => (None, None),
    };
    match (&d.hwm, snap_rev) {
        (Some(h), Some(r)) => s.push_str(&format!(
            "data-loss window: writes after revision {r}{} are lost (the highest revision seen was {} at {})\n",
            snap_time.map(|t| format!(" (snapshot taken {t})")).unwrap_or_default(),
            h.revision,
            h.time
        )),
        (Some(h), None) => s.push_str(&format!(
            "data-loss window: writes the survivor had not applied are lost; the highest revision seen was {} at {}\n",
            h.revision, h.time
        )),
        _ => s.push_str("data-loss window: unknown (no high-water mark was recorded)\n"),
    }
    if let Ok(b) = crate::bounded::read_to_string(RunDir::new(state, &d.run).baseline(), crate::bounded::TEXT)
    {
        s.push_str(&format!("baseline backup: {}", b));
    }
    if !d.confirmed_dead.is_empty() {
        s.push_str(&format!(
            "follow-up: {} stayed out (attested dead); the moment it answers, `hactl heal --once` fences it (its etcd would start on the old data), then `hactl up` joins it as a learner\n",
            d.confirmed_dead.join(", ")
        ));
    }
    let history = crate::old_members::record::load(&state.view(), inv);
    for h in &d.old_fenced {
        match history.hosts.get(h).map(|r| r.data_aside.as_str()) {
            Some(aside) if !aside.is_empty() => s.push_str(&format!(
                "kept on {h}: {aside} (the old member's data dir; its etcd and the units its roles no longer need are fenced for good)\n"
            )),
            _ => s.push_str(&format!(
                "fenced for good on {h}: its etcd and the units its roles no longer need (no member data was left there)\n"
            )),
        }
    }
    if !d.old_attested.is_empty() {
        s.push_str(&format!(
            "follow-up: old members {} were attested dead; the moment they answer, `hactl heal --once` (or `hactl up`) fences them for good, and `hactl status` names them until then\n",
            d.old_attested.join(", ")
        ));
    }
    for h in &d.nodes_unreached {
        s.push_str(&format!(
            "follow-up: node {h} did not answer and its kubelet was not restarted; its caches predate the restore: once {h} answers, restart it (`systemctl restart kubelet` on {h}) unless {h} rebooted since\n"
        ));
    }
    if d.converges() {
        s.push_str(&format!("R7: `hactl up`'s plan ran: {}\n", d.converge.join("; ")));
    } else if !d.converge.is_empty() {
        s.push_str(&format!(
            "still to do (exit 5 until then): {}\n",
            d.converge.join("; ")
        ));
    }
    let left_out = left_out_by_members(d, inv);
    if !left_out.is_empty() {
        s.push_str(&format!(
            "follow-up: {} left out by --members stay fenced until reboot, their data dirs moved aside: remove their etcd role from the inventory (or run `hactl up` to join them as learners)\n",
            left_out.join(", ")
        ));
    }
    if d.targets.len().is_multiple_of(2) {
        s.push_str("warning: the cluster now has an even number of members: add one (`hactl up`) to tolerate a failure\n");
    }
    s
}
