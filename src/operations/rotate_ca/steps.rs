//! The steps of a CA rotation (pure: data, so `--dry-run` prints them): C1–C6, the rolls between
//! them (`up`'s plan, provided by the command layer), and C5.publish for the Kubernetes CAs.

use std::path::PathBuf;
use std::sync::Arc;

use super::acts::{Change, Done, StateChange};
use crate::inventory::Inventory;
use crate::operations::runner::{JournaledStep, LocalAct, StepCode as _};
use crate::pki::CaKind;

crate::step_codes! {
    /// The steps of a rotation (docs/ca-rotation.md).
    pub enum C {
        /// Trust old and new: the new CA created.
        TrustBoth = "C1",
        /// Roll the trust files holding both CAs.
        RollTrust = "C1.roll",
        /// Re-issue the leaves from the new CA.
        Reissue = "C2",
        /// Roll the new leaves.
        RollLeaves = "C3",
        /// Trust only the new CA: the old one retired.
        Retire = "C4",
        /// Roll again: the trust files hold the new CA alone.
        RollNew = "C5",
        /// Publish the new CA alone to aggregated API servers.
        Publish = "C5.publish",
        /// Close the rotation.
        Finish = "C6",
    }
}

/// The steps of a rotation of `kind` as run `run`; `roll` is `up`'s plan, built and executed
/// afresh each time (the top floor provides it); `publish` (kubernetes, front-proxy: a [`PublishTrust`])
/// runs after the last roll.
pub fn steps(
    dir: PathBuf,
    inv: Arc<Inventory>,
    kind: CaKind,
    run: &str,
    roll: Arc<dyn LocalAct>,
    publish: Option<Arc<dyn LocalAct>>,
) -> Vec<JournaledStep> {
    steps_for(dir, inv, &[(kind, publish)], run, roll)
}

/// The steps of one run rotating several CAs at once (`hactl adopt`: etcd and front-proxy):
/// each state step once per CA, in the order given, each roll once for all of them, so the
/// cluster restarts three times, not three times per CA. Each CA's rotation keeps its own order
/// (its trust file holds both CAs in a roll before any of its leaves comes from the new one),
/// and the rolls are `up`'s plan, which uploads whatever changed of every CA. With one CA the
/// steps are [`steps`]' (ids `C1`…); with several, a state step's id names its CA (`C1-etcd`).
pub fn steps_for(
    dir: PathBuf,
    inv: Arc<Inventory>,
    cas: &[(CaKind, Option<Arc<dyn LocalAct>>)],
    run: &str,
    roll: Arc<dyn LocalAct>,
) -> Vec<JournaledStep> {
    let several = cas.len() > 1;
    let id = |code: C, kind: CaKind| -> crate::operations::runner::StepId {
        if several {
            code.with(kind.dir())
        } else {
            code.into()
        }
    };
    let state_step = |code: C, kind: CaKind, title: String, c: Change| {
        let act = Arc::new(StateChange {
            change: c,
            kind,
            dir: dir.clone(),
            run: run.to_string(),
            inv: inv.clone(),
        });
        JournaledStep::new(id(code, kind), title, None)
            .done_when_local(Arc::new(Done(act.clone())))
            .local(act)
    };
    let state_steps = |code: C, title: &dyn Fn(&str) -> String, c: Change| -> Vec<JournaledStep> {
        cas.iter()
            .map(|(kind, _)| state_step(code, *kind, title(kind.dir()), c))
            .collect()
    };
    let roll_step = |code: C, title: &str| JournaledStep::new(code, title, None).local(roll.clone());
    let mut list = Vec::new();
    list.extend(state_steps(
        C::TrustBoth,
        &|d| format!("trust old and new {d} CAs"),
        Change::CreateNext,
    ));
    list.push(roll_step(C::RollTrust, "roll the trust files holding both CAs"));
    list.extend(state_steps(
        C::Reissue,
        &|d| format!("re-issue the {d} leaves from the new CA"),
        Change::Promote,
    ));
    list.push(roll_step(C::RollLeaves, "roll the new leaves"));
    list.extend(state_steps(
        C::Retire,
        &|d| format!("trust only the new {d} CA"),
        Change::Retire,
    ));
    list.push(roll_step(
        C::RollNew,
        "roll again: the trust files hold the new CA alone",
    ));
    for (kind, publish) in cas {
        if let Some(publish) = publish {
            list.push(
                JournaledStep::new(
                    id(C::Publish, *kind),
                    "publish the new CA alone to aggregated API servers",
                    None,
                )
                .done_when_local(publish.clone())
                .local(publish.clone()),
            );
        }
    }
    list.extend(state_steps(
        C::Finish,
        &|d| format!("close the {d} rotation"),
        Change::Finish,
    ));
    list
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Transports;
    use async_trait::async_trait;

    struct NoRoll;
    #[async_trait]
    impl LocalAct for NoRoll {
        fn describe(&self) -> String {
            "roll".into()
        }
        async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
            Ok(serde_json::Value::Null)
        }
    }

    /// The whole list on a state directory, run twice: the second run skips every state step.
    #[tokio::test]
    async fn the_steps_walk_a_rotation_and_a_second_run_skips_what_is_done() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = Arc::new(
            crate::inventory::load(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/inventories/example.yaml"
            )))
            .unwrap(),
        );
        let before = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        let list = steps(
            dir.clone(),
            inv.clone(),
            CaKind::Etcd,
            "rotate-ca-t1",
            Arc::new(NoRoll),
            None,
        );
        let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["C1", "C1.roll", "C2", "C3", "C4", "C5", "C6"]);
        let text: String = list.iter().map(|s| s.render(false)).collect();
        assert!(text.contains("ca-next"), "{text}");
        let transports = Transports::new();
        let mut journal = crate::operations::journal::Journal::dry_run("rotate-ca-t1");
        let opts = crate::operations::runner::RunOptions::default();
        let out = crate::operations::runner::run(&list, &transports, &mut journal, &opts)
            .await
            .unwrap();
        assert_eq!(out.done.len(), 7, "{out:?}");
        let after = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        assert_ne!(after.etcd_ca_pem(), before.etcd_ca_pem());
        assert_eq!(
            after.etcd_trust_pem(),
            after.etcd_ca_pem(),
            "only the new CA is trusted"
        );
        assert!(
            crate::pki::is_signed_by(&after.etcd_server("cp1").unwrap().cert_pem, after.etcd_ca_pem())
                .unwrap()
        );
        assert_eq!(
            after.kubernetes_ca().unwrap().cert_pem,
            before.kubernetes_ca().unwrap().cert_pem,
            "the other CAs are untouched"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("etcd/ca-retired-rotate-ca-t1.crt")).unwrap(),
            before.etcd_ca_pem()
        );
        // Every state step's postcondition now holds except C1's (a finished rotation is idle).
        let mut journal = crate::operations::journal::Journal::dry_run("rotate-ca-t1");
        let again = crate::operations::runner::run(&list[5..], &transports, &mut journal, &opts)
            .await
            .unwrap();
        assert_eq!(again.skipped, ["C6"]);
    }

    /// A stand-in for C5.publish that records it ran (the real one needs an apiserver: the
    /// Kubernetes lab test runs it).
    struct Published(std::sync::atomic::AtomicBool);
    #[async_trait]
    impl LocalAct for Published {
        fn describe(&self) -> String {
            "publish".into()
        }
        async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(serde_json::Value::Null)
        }
    }

    fn example() -> Arc<Inventory> {
        Arc::new(
            crate::inventory::load(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/inventories/example.yaml"
            )))
            .unwrap(),
        )
    }

    /// front-proxy: the same steps plus C5.publish after the last roll; the walk rotates the
    /// front-proxy CA alone and re-issues its one leaf.
    #[tokio::test]
    async fn the_front_proxy_steps_publish_after_the_last_roll_and_rotate_only_that_ca() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = example();
        let before = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        let published = Arc::new(Published(Default::default()));
        let list = steps(
            dir.clone(),
            inv.clone(),
            CaKind::FrontProxy,
            "rotate-ca-f1",
            Arc::new(NoRoll),
            Some(published.clone()),
        );
        let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["C1", "C1.roll", "C2", "C3", "C4", "C5", "C5.publish", "C6"]);
        let text: String = list.iter().map(|s| s.render(false)).collect();
        assert!(text.contains("front-proxy/ca-next"), "{text}");
        assert!(
            text.contains("[C5.publish]") && text.contains("    skip when: publish"),
            "{text}"
        );
        let transports = Transports::new();
        let mut journal = crate::operations::journal::Journal::dry_run("rotate-ca-f1");
        let opts = crate::operations::runner::RunOptions::default();
        let out = crate::operations::runner::run(&list, &transports, &mut journal, &opts)
            .await
            .unwrap();
        assert_eq!(out.done.len(), 8, "{out:?}");
        assert!(published.0.load(std::sync::atomic::Ordering::SeqCst));
        let after = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        let (old, new) = (
            before.front_proxy_ca().unwrap().cert_pem.clone(),
            after.front_proxy_ca().unwrap().cert_pem.clone(),
        );
        assert_ne!(new, old);
        assert_eq!(
            after.front_proxy_trust_pem().unwrap(),
            new,
            "only the new CA is trusted"
        );
        assert!(crate::pki::is_signed_by(&after.front_proxy_client().unwrap().cert_pem, &new).unwrap());
        assert_eq!(after.etcd_trust_pem(), before.etcd_trust_pem(), "etcd untouched");
        assert_eq!(
            after.kubernetes_ca().unwrap().cert_pem,
            before.kubernetes_ca().unwrap().cert_pem,
            "kubernetes untouched"
        );
        assert_eq!(
            after.get("kubernetes/admin").unwrap().cert_pem,
            before.get("kubernetes/admin").unwrap().cert_pem,
            "no kubernetes leaf re-issued"
        );
        // The etcd list has no publish step.
        let etcd = steps(dir, inv, CaKind::Etcd, "r", Arc::new(NoRoll), None);
        assert!(etcd.iter().all(|s| s.id != "C5.publish"));
    }

    /// Two CAs in one run (`hactl adopt`): each state step per CA, named after it, each roll
    /// once; the walk rotates both and leaves the third CA alone.
    #[tokio::test]
    async fn two_cas_rotate_together_with_one_roll_per_stage() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = example();
        let before = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        let published = Arc::new(Published(Default::default()));
        let list = steps_for(
            dir.clone(),
            inv.clone(),
            &[
                (CaKind::Etcd, None),
                (CaKind::FrontProxy, Some(published.clone() as Arc<dyn LocalAct>)),
            ],
            "adopt-t1",
            Arc::new(NoRoll),
        );
        let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "C1-etcd",
                "C1-front-proxy",
                "C1.roll",
                "C2-etcd",
                "C2-front-proxy",
                "C3",
                "C4-etcd",
                "C4-front-proxy",
                "C5",
                "C5.publish-front-proxy",
                "C6-etcd",
                "C6-front-proxy"
            ]
        );
        let transports = Transports::new();
        let mut journal = crate::operations::journal::Journal::dry_run("adopt-t1");
        let opts = crate::operations::runner::RunOptions::default();
        let out = crate::operations::runner::run(&list, &transports, &mut journal, &opts)
            .await
            .unwrap();
        assert_eq!(out.done.len(), 12, "{out:?}");
        assert!(published.0.load(std::sync::atomic::Ordering::SeqCst));
        let after = crate::pki::ensure(&dir, &inv, time::OffsetDateTime::now_utc()).unwrap();
        assert_ne!(after.etcd_ca_pem(), before.etcd_ca_pem());
        assert_eq!(after.etcd_trust_pem(), after.etcd_ca_pem());
        let (old_fp, new_fp) = (
            before.front_proxy_ca().unwrap().cert_pem.clone(),
            after.front_proxy_ca().unwrap().cert_pem.clone(),
        );
        assert_ne!(old_fp, new_fp);
        assert_eq!(after.front_proxy_trust_pem().unwrap(), new_fp);
        assert_eq!(
            after.kubernetes_ca().unwrap().cert_pem,
            before.kubernetes_ca().unwrap().cert_pem,
            "kubernetes untouched"
        );
        for kind in ["etcd", "front-proxy"] {
            assert!(
                dir.join(format!("{kind}/rotation-adopt-t1.done")).exists(),
                "{kind}"
            );
        }
    }

    /// kubernetes: C5.publish too; every kubernetes leaf (serving, kubelet client, admin,
    /// controller-manager, scheduler) is re-issued from the new CA; while both are trusted the
    /// trust file holds both and the signing CA is one certificate; the other CAs are untouched.
    #[tokio::test]
    async fn the_kubernetes_steps_reissue_every_kubernetes_leaf_and_keep_the_signing_ca_single() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pki");
        let inv = example();
        let now = time::OffsetDateTime::now_utc();
        let before = crate::pki::ensure(&dir, &inv, now).unwrap();
        let old = before.kubernetes_ca().unwrap().cert_pem.clone();
        let published = Arc::new(Published(Default::default()));
        let list = steps(
            dir.clone(),
            inv.clone(),
            CaKind::Kubernetes,
            "rotate-ca-k1",
            Arc::new(NoRoll),
            Some(published.clone()),
        );
        let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["C1", "C1.roll", "C2", "C3", "C4", "C5", "C5.publish", "C6"]);
        let transports = Transports::new();
        let opts = crate::operations::runner::RunOptions::default();
        // C1 alone first: both trusted, the old one still signs alone.
        let mut journal = crate::operations::journal::Journal::dry_run("rotate-ca-k1");
        crate::operations::runner::run(&list[..1], &transports, &mut journal, &opts)
            .await
            .unwrap();
        let trusting = crate::pki::ensure(&dir, &inv, now).unwrap();
        assert_eq!(
            trusting.kubernetes_ca().unwrap().cert_pem,
            old,
            "the old CA signs until C2"
        );
        let both = trusting.kubernetes_trust_pem().unwrap();
        assert_eq!(crate::pki::bundle_ders(&both).unwrap().len(), 2, "{both}");
        assert!(both.starts_with(&old), "the signing CA comes first");
        let out = crate::operations::runner::run(&list, &transports, &mut journal, &opts)
            .await
            .unwrap();
        assert_eq!(out.done.len() + out.skipped.len(), 8, "{out:?}");
        assert!(published.0.load(std::sync::atomic::Ordering::SeqCst));
        let after = crate::pki::ensure(&dir, &inv, now).unwrap();
        let new = after.kubernetes_ca().unwrap().cert_pem.clone();
        assert_ne!(new, old);
        assert_eq!(
            after.kubernetes_trust_pem().unwrap(),
            new,
            "only the new CA is trusted"
        );
        let leaves: Vec<String> = crate::pki::requests(&inv)
            .into_iter()
            .filter(|r| r.ca == CaKind::Kubernetes)
            .map(|r| r.name)
            .collect();
        assert!(leaves.len() >= 5, "{leaves:?}");
        for leaf in &leaves {
            let pem = &after.get(leaf).unwrap().cert_pem;
            assert!(
                crate::pki::is_signed_by(pem, &new).unwrap(),
                "{leaf} is not the new CA's"
            );
            assert!(
                !crate::pki::is_signed_by(pem, &old).unwrap(),
                "{leaf} is still the old CA's"
            );
        }
        assert_eq!(after.etcd_trust_pem(), before.etcd_trust_pem(), "etcd untouched");
        assert_eq!(
            after.front_proxy_trust_pem(),
            before.front_proxy_trust_pem(),
            "front-proxy untouched"
        );
    }
}
