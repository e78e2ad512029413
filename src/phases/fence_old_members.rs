//! Fence old etcd members for good on hosts without the etcd role (`up`): a host whose etcd
//! answers as a member of another cluster than the inventory's etcd hosts run (a zombie: an old
//! member restarted on its old data), or one the member history says was attested dead
//! (`--confirm-dead`) and must be fenced the moment it answers again. The fence is
//! [`crate::old_members::retire`]'s: the units the host's roles no longer need stopped, disabled
//! and fenced, any etcd on hactl's data stopped, the data dir moved aside. `up` then records the
//! host as fenced in the member history.
//!
//! A host without the etcd role whose etcd is a member of the current cluster is not this phase's
//! business: `up` refuses it earlier and names `hactl remove`.
//!
//! Invariant: planned only from facts (nothing is read here); a host already fenced plans
//! nothing, so a converged cluster plans nothing.

use super::{Ctx, Phase, PlanError};
use crate::etcd::UNIT;
use crate::inventory::{Host, Inventory, Role};
use crate::old_members::retire;
use crate::plan::Step;

pub struct FenceOldMembers;

/// The phase's title (the member history recorder finds the hosts it fenced by it).
pub const TITLE: &str = "Fence old etcd members for good";

/// Why the phase fences `host`: `Some` when its etcd is a zombie or its fence is due.
pub fn why(host: &Host, ctx: &Ctx<'_>) -> Option<String> {
    if host.has(Role::Etcd) {
        return None;
    }
    let f = ctx.facts(host);
    let current = ctx.etcd.members.as_ref().map(|m| m.header.cluster_id);
    let url = crate::etcd::peer_url(ctx.inv, host);
    let in_list = ctx
        .etcd
        .members
        .as_ref()
        .is_some_and(|m| m.by_peer_url(&url).is_some());
    let unit = f.units.get(UNIT);
    let active = unit.is_some_and(|u| u.active == "active");
    let zombie = match (&f.etcd_status, current) {
        (Some(st), Some(cur)) if st.header.cluster_id != cur && !in_list => Some(format!(
            "its etcd answers as member {:x} of cluster {:x}, not of the cluster {cur:x}",
            st.header.member_id, st.header.cluster_id
        )),
        (None, Some(_)) if active && !in_list => {
            Some("its etcd runs and is a member of no current member list".to_string())
        }
        _ => None,
    };
    if zombie.is_some() {
        return zombie;
    }
    let fenced = f.files.contains_key(&crate::fence::dropin_path(UNIT))
        && !active
        && !f.data_dir_has_member
        && unit.is_none_or(|u| u.enabled != "enabled");
    (ctx.etcd.fence_due.contains(&host.name) && !fenced && !f.units.is_empty())
        .then(|| "it was attested dead (--confirm-dead) and answers again".to_string())
}

impl Phase for FenceOldMembers {
    fn title(&self) -> &'static str {
        TITLE
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.hosts.iter().filter(|h| !h.has(Role::Etcd)).collect()
    }
    fn disruptive(&self) -> bool {
        true
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let Some(reason) = why(host, ctx) else {
            return Ok(vec![]);
        };
        let f = ctx.facts(host);
        let stamp = format!("up-{}", f.time_ns / 1_000_000_000);
        let guard = match ctx.etcd.members.as_ref().map(|m| m.header.cluster_id) {
            Some(cur) => retire::Guard::NotOfClusterOrSilent(cur),
            None => retire::Guard::None,
        };
        let why = format!(
            "Written by hactl up: {} held an etcd member and {reason}; it must not serve old data.",
            host.name
        );
        Ok(vec![Step::Run(retire::command(
            &why,
            &stamp,
            &ctx.inv.etcd.data_dir,
            guard,
            &retire::units_for(&host.roles),
        ))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{FileState, HostFacts, UnitState};
    use crate::phases::EtcdView;
    use std::collections::BTreeMap;

    /// old1 held a member before the cluster moved to cp1–cp3 (roles: []).
    const YAML: &str = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n  - {name: old1, address: 10.0.0.1, roles: []}\n";

    fn setup() -> (tempfile::TempDir, Inventory, crate::pki::Pki) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, YAML).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let pki = crate::pki::ensure(
            &dir.path().join("pki"),
            &inv,
            time::macros::datetime!(2026-01-01 00:00:00 UTC),
        )
        .unwrap();
        (dir, inv, pki)
    }

    fn view(fence_due: &[&str]) -> EtcdView {
        let list: crate::etcd::MemberList = serde_json::from_str(
            r#"{"header":{"cluster_id":11,"member_id":1},"members":[{"ID":1,"name":"cp1","peerURLs":["https://10.0.0.11:2380"]}]}"#,
        )
        .unwrap();
        EtcdView {
            members: Some(list),
            fence_due: fence_due.iter().map(|h| h.to_string()).collect(),
            ..EtcdView::default()
        }
    }

    /// old1's facts: etcd `active` or not, answering as a member of `cluster` (when Some), its
    /// data dir holding a member, its etcd fenced.
    fn old1(active: bool, cluster: Option<u64>, data: bool, fenced: bool) -> BTreeMap<String, HostFacts> {
        let mut f = HostFacts {
            time_ns: 1_700_000_000_000_000_000,
            data_dir_has_member: data,
            ..HostFacts::default()
        };
        f.units.insert(
            UNIT.into(),
            UnitState {
                active: if active { "active" } else { "inactive" }.into(),
                enabled: if fenced { "disabled" } else { "enabled" }.into(),
                ..UnitState::default()
            },
        );
        f.files
            .insert(crate::etcd::UNIT_PATH.into(), FileState::default());
        if fenced {
            f.files
                .insert(crate::fence::dropin_path(UNIT), FileState::default());
        }
        if let Some(c) = cluster {
            f.etcd_status = serde_json::from_str::<crate::etcd::health::StatusBody>(&format!(
                r#"{{"header":{{"cluster_id":{c},"member_id":77}},"leader":77}}"#
            ))
            .ok();
        }
        [("old1".to_string(), f)].into()
    }

    fn planned(
        facts: &BTreeMap<String, HostFacts>,
        view: &EtcdView,
        inv: &Inventory,
        pki: &crate::pki::Pki,
    ) -> Vec<Step> {
        let ctx = Ctx::new(inv, pki, facts).with_etcd(view);
        FenceOldMembers.steps(inv.host("old1").unwrap(), &ctx).unwrap()
    }

    #[test]
    fn a_zombie_or_a_due_fence_is_fenced_and_a_fenced_host_plans_nothing() {
        let (_d, inv, pki) = setup();
        // Its etcd answers as a member of another cluster (an old cluster that re-formed).
        let steps = planned(&old1(true, Some(99), true, false), &view(&[]), &inv, &pki);
        assert_eq!(steps.len(), 1);
        let Step::Run(cmd) = &steps[0] else { panic!() };
        let line = cmd.line(false);
        assert!(
            line.contains("/var/lib/etcd.hactl-retired-up-1700000000"),
            "{line}"
        );
        assert!(
            cmd.argv[2].contains("answers as member 4d of cluster 63"),
            "{}",
            cmd.argv[2]
        );
        // The guard names the current cluster (11): the host's etcd is re-checked first.
        assert!(line.contains(" 11 ' 10 0b ' yes "), "{line}");
        // A member of the current cluster on a host without the role is not fenced here.
        assert!(planned(&old1(true, Some(11), true, false), &view(&[]), &inv, &pki).is_empty());
        // Attested dead and back, etcd stopped but data and unit in place: fence due.
        assert_eq!(
            planned(&old1(false, None, true, false), &view(&["old1"]), &inv, &pki).len(),
            1
        );
        // Not attested: left to `retire_etcd` (disable only).
        assert!(planned(&old1(false, None, true, false), &view(&[]), &inv, &pki).is_empty());
        // Already fenced for good: nothing (a second `up` says `no changes`).
        assert!(planned(&old1(false, None, false, true), &view(&["old1"]), &inv, &pki).is_empty());
        // Did not answer (no facts): nothing.
        assert!(planned(&BTreeMap::new(), &view(&["old1"]), &inv, &pki).is_empty());
        // retire_etcd leaves a host this phase fences alone.
        let facts = old1(true, Some(99), true, false);
        let v = view(&[]);
        let ctx = Ctx::new(&inv, &pki, &facts).with_etcd(&v);
        let retire = crate::phases::retire_etcd::RetireEtcd;
        assert!(retire.steps(inv.host("old1").unwrap(), &ctx).unwrap().is_empty());
        // ... and disables the unit of one it does not.
        let facts = old1(false, None, true, false);
        let ctx = Ctx::new(&inv, &pki, &facts).with_etcd(&v);
        assert_eq!(retire.steps(inv.host("old1").unwrap(), &ctx).unwrap().len(), 1);
    }
}
