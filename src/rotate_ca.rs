//! `hactl certs rotate-ca`: replacing a CA with no downtime, as journaled steps (data, so
//! `--dry-run` prints them; each re-checks its postcondition in the state directory, so running
//! the command again resumes a rotation wherever it stopped).
//!
//! | step | what | postcondition |
//! |---|---|---|
//! | C1 | trust old and new: the new CA is created (`ca-next`); the trust files carry both | the new CA exists |
//! | C1.roll | roll: `up`'s plan uploads the trust files and restarts what reads them, one host at a time | — (a converged cluster plans nothing) |
//! | C2 | re-issue the leaves from the new CA (the old CA stays trusted as `ca-previous`) | the new CA signs, every leaf is its |
//! | C3 | roll: the new leaves go out and each member (then each apiserver) restarts with them | — |
//! | C4 | trust only the new: the old CA is retired (`ca-retired-<run>`, kept) | no `ca-previous` |
//! | C5 | roll again: the trust files hold the new CA alone, and each reader restarts | — |
//! | C5.publish | kubernetes and front-proxy: kube-system/extension-apiserver-authentication publishes the new CA alone | its `client-ca-file` (kubernetes) or `requestheader-client-ca-file` (front-proxy) holds exactly the trust file's CAs |
//! | C6 | done: the rotation's marker is closed | no marker |
//!
//! Why a roll after C1 as well as after C2: etcd reads its trusted CAs only at start, so every
//! member must run with both CAs trusted before any member presents a leaf from the new one.
//! (etcd re-reads its own certificate and key on every handshake, so members present the new
//! leaves as soon as C3 uploads them: the C1 roll is what makes that safe.)
//!
//! The rolls are `hactl up`'s own phases (`RollEtcd`: one member at a time, leader last, its
//! HAProxy backend drained, health gates before and after; `RollApiservers` likewise), so a
//! rotation restarts nothing `up` would not.
//!
//! Which CAs: etcd (read by etcd, HAProxy's checks and the apiservers' etcd client);
//! front-proxy (read by the apiservers' `--requestheader-client-ca-file` and the
//! controller-manager's; its one leaf is the apiservers' `--proxy-client-cert-file`); kubernetes
//! (the trust file `/etc/hactl/pki/kubernetes/ca.crt`, read by the apiservers' `--client-ca-file`
//! and `--kubelet-certificate-authority`, the controller-manager's `--client-ca-file` and
//! `--root-ca-file` (what every ServiceAccount token Secret's `ca.crt` and each namespace's
//! `kube-root-ca.crt` ConfigMap carry), the host kubeconfigs, HAProxy's `/readyz` check, the admin
//! kubeconfig and hactl's own client; its leaves are the apiservers' serving and kubelet-client
//! certificates and the admin, controller-manager and scheduler client certificates; the
//! controller-manager signs with the signing CA alone, `signing-ca.crt`). The apiservers publish
//! the kubernetes and front-proxy CAs in kube-system/extension-apiserver-authentication for
//! aggregated API servers, but only ever add to it ([`crate::kubernetes::published_ca`]), so those
//! rotations end by writing the new CA alone there (C5.publish).
//!
//! Invariant: the state directory decides what is done; the journal records it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::cli::ConnectArgs;
use crate::exec::journaled::{JournaledStep, LocalAct};
use crate::exec::Transports;
use crate::inventory::{Inventory, Role};
use crate::pki::rotate::{self, Stage};
use crate::pki::CaKind;
use crate::state::StateDir;

/// Why a rotation of `kind` is refused for `inv` (a refusal, exit 2), or `None` when it can run.
pub fn refused(kind: CaKind, inv: &Inventory) -> Option<String> {
    match kind {
        CaKind::Etcd => None,
        CaKind::FrontProxy | CaKind::Kubernetes if inv.kubernetes.is_none() => Some(format!(
            "refused: the {} CA exists only with Kubernetes, and the inventory of cluster {} has no `kubernetes` section \
(so no {} CA was ever created); nothing was changed. Add the `kubernetes` section and run `hactl up`, \
or rotate the etcd CA with `hactl certs rotate-ca etcd`",
            kind.dir(),
            inv.name,
            kind.dir()
        )),
        CaKind::FrontProxy | CaKind::Kubernetes => None,
    }
}

/// A change to the state directory's PKI, as a step's act and postcondition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// C1: the marker and the new CA.
    CreateNext,
    /// C2: the new CA signs; every leaf of the CA re-issued from it.
    Promote,
    /// C4: the old CA retired.
    Retire,
    /// C6: the marker closed.
    Finish,
}

/// One [`Change`] against the PKI directory `dir`.
pub struct StateChange {
    pub change: Change,
    pub kind: CaKind,
    pub dir: PathBuf,
    pub run: String,
    pub inv: Arc<Inventory>,
}

impl StateChange {
    fn stage(&self) -> anyhow::Result<Stage> {
        Ok(rotate::stage(&self.dir, self.kind)?)
    }

    /// Every leaf of this CA in the state directory is signed by its signing CA.
    fn leaves_signed(&self) -> anyhow::Result<bool> {
        let ca = fs_err::read_to_string(self.dir.join(format!("{}.crt", self.kind.name())))?;
        for request in crate::pki::requests(&self.inv)
            .into_iter()
            .filter(|r| r.ca == self.kind)
        {
            let Ok(leaf) = fs_err::read_to_string(self.dir.join(format!("{}.crt", request.name))) else {
                return Ok(false);
            };
            if !crate::pki::is_signed_by(&leaf, &ca)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[async_trait]
impl LocalAct for StateChange {
    fn describe(&self) -> String {
        let d = self.kind.dir();
        let pki = self.dir.display();
        match self.change {
            Change::CreateNext => format!(
                "create the new {d} CA as {pki}/{d}/ca-next.{{crt,key}} (rotation marker {pki}/{d}/rotation = {}); trust files carry the signing CA and ca-next",
                self.run
            ),
            Change::Promote => format!(
                "keep the old {d} CA as {pki}/{d}/ca-previous.{{crt,key}} (still trusted), make ca-next the signing CA, re-issue every {d} leaf from it"
            ),
            Change::Retire => format!(
                "rename {pki}/{d}/ca-previous.{{crt,key}} to ca-retired-{}.{{crt,key}}: the trust files hold the new CA alone",
                self.run
            ),
            Change::Finish => format!(
                "close the rotation: {pki}/{d}/rotation becomes rotation-{}.done",
                self.run
            ),
        }
    }

    async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
        let now = time::OffsetDateTime::now_utc();
        match self.change {
            Change::CreateNext => {
                rotate::start(&self.dir, self.kind, &self.run)?;
                rotate::create_next(&self.dir, &self.inv, self.kind, now)?;
            }
            Change::Promote => {
                rotate::promote(&self.dir, self.kind)?;
                let pki = crate::pki::ensure(&self.dir, &self.inv, now)?;
                let reissued: Vec<String> = pki
                    .changes()
                    .filter(|c| c.file.starts_with(&format!("{}/", self.kind.dir())))
                    .map(|c| c.file.clone())
                    .collect();
                return Ok(serde_json::json!({ "reissued": reissued }));
            }
            Change::Retire => rotate::retire(&self.dir, self.kind)?,
            Change::Finish => rotate::finish(&self.dir, self.kind)?,
        }
        Ok(serde_json::json!({ "stage": format!("{:?}", self.stage()?) }))
    }

    async fn holds(&self, _: &Transports) -> anyhow::Result<bool> {
        let stage = self.stage()?;
        Ok(match self.change {
            Change::CreateNext => {
                matches!(stage, Stage::Promoted { .. } | Stage::Retired { .. })
                    || (matches!(stage, Stage::Trusting { .. })
                        && self.dir.join(format!("{}/ca-next.crt", self.kind.dir())).exists())
            }
            Change::Promote => {
                matches!(stage, Stage::Promoted { .. } | Stage::Retired { .. }) && self.leaves_signed()?
            }
            Change::Retire => matches!(stage, Stage::Retired { .. }),
            Change::Finish => stage == Stage::Idle,
        })
    }
}

/// A [`StateChange`]'s postcondition, described as what holds (for the dry run's `skip when`).
struct Done(Arc<StateChange>);

#[async_trait]
impl LocalAct for Done {
    fn describe(&self) -> String {
        let d = self.0.kind.dir();
        match self.0.change {
            Change::CreateNext => format!("the new {d} CA exists (ca-next, or already signing)"),
            Change::Promote => format!(
                "the new {d} CA signs (ca-previous or retired beside it) and every {d} leaf is signed by it"
            ),
            Change::Retire => format!("no {d}/ca-previous: the old CA is retired"),
            Change::Finish => format!("no {d}/rotation marker"),
        }
    }
    async fn act(&self, transports: &Transports) -> anyhow::Result<serde_json::Value> {
        self.0.act(transports).await
    }
    async fn holds(&self, transports: &Transports) -> anyhow::Result<bool> {
        self.0.holds(transports).await
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
    let change = |change| {
        Arc::new(StateChange {
            change,
            kind,
            dir: dir.clone(),
            run: run.to_string(),
            inv: inv.clone(),
        })
    };
    let state_step = |id: &str, title: &str, c: Change| {
        let act = change(c);
        JournaledStep::new(id, title, None)
            .done_when_local(Arc::new(Done(act.clone())))
            .local(act)
    };
    let roll_step = |id: &str, title: &str| JournaledStep::new(id, title, None).local(roll.clone());
    let d = kind.dir();
    let mut list = vec![
        state_step("C1", &format!("trust old and new {d} CAs"), Change::CreateNext),
        roll_step("C1.roll", "roll the trust files holding both CAs"),
        state_step(
            "C2",
            &format!("re-issue the {d} leaves from the new CA"),
            Change::Promote,
        ),
        roll_step("C3", "roll the new leaves"),
        state_step("C4", &format!("trust only the new {d} CA"), Change::Retire),
        roll_step("C5", "roll again: the trust files hold the new CA alone"),
    ];
    if let Some(publish) = publish {
        list.push(
            JournaledStep::new(
                "C5.publish",
                "publish the new CA alone to aggregated API servers",
                None,
            )
            .done_when_local(publish.clone())
            .local(publish),
        );
    }
    list.push(state_step("C6", "close the rotation", Change::Finish));
    list
}

/// C5.publish: kube-system/extension-apiserver-authentication's key for the CA (`client-ca-file`
/// for kubernetes, `requestheader-client-ca-file` for front-proxy) is written to the state
/// directory's trust file (the new CA alone, once C4 is done), through the first control-plane
/// apiserver that answers `/readyz`. As a postcondition: the key already holds exactly those CAs.
#[derive(Clone)]
pub struct PublishTrust {
    /// The CA whose trust file is published (kubernetes or front-proxy:
    /// [`crate::kubernetes::published_ca::key_of`]).
    pub kind: CaKind,
    /// The state directory's PKI directory.
    pub dir: PathBuf,
    pub inv: Arc<Inventory>,
    pub state: StateDir,
    pub connect: ConnectArgs,
}

impl PublishTrust {
    fn key(&self) -> anyhow::Result<&'static str> {
        crate::kubernetes::published_ca::key_of(self.kind).ok_or_else(|| {
            anyhow::anyhow!(
                "the {} CA is not published to aggregated API servers",
                self.kind.dir()
            )
        })
    }

    /// Reads the published CAs through the first apiserver that answers and, with `write`,
    /// patches them to the trust file when they differ: (whether they held it before, the host).
    async fn sync(&self, write: bool) -> anyhow::Result<(bool, String)> {
        use crate::kubernetes::published_ca;
        let key = self.key()?;
        let trust = rotate::trust_bundle(&self.dir, self.kind)?;
        let hosts = self.inv.with_role(Role::ControlPlane);
        let reach = crate::exec::connect::reach(&self.state, &hosts, &self.connect.settings()).await;
        let (host, api) = crate::kubernetes::rbac::first_ready(&self.inv, &reach.transports, &self.dir)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "no apiserver answered /readyz to publish the {} CA: {e}",
                    self.kind.dir()
                )
            })?;
        let held = published_ca::published(&api, key)
            .await?
            .is_some_and(|published| published_ca::same_certificates(&published, &trust));
        if write && !held {
            published_ca::publish(&api, key, &trust).await?;
        }
        Ok((held, host))
    }

    /// [`PublishTrust::sync`] on a runtime of its own on a blocking thread (the SSH connect's
    /// future is not `Send`, as with the roll).
    async fn sync_off_thread(&self, write: bool) -> anyhow::Result<(bool, String)> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(me.sync(write))
        })
        .await?
    }
}

#[async_trait]
impl LocalAct for PublishTrust {
    fn describe(&self) -> String {
        use crate::kubernetes::published_ca::{CONFIGMAP, NAMESPACE};
        format!(
            "{NAMESPACE}/{CONFIGMAP}'s {} holds exactly the CAs of {}/{}/ca.crt (and ca-next or \
ca-previous): else it is merge-patched to them, through the first control-plane apiserver that answers \
/readyz (apiservers only add CAs there, so the old one stays until this write)",
            self.key().unwrap_or("?"),
            self.dir.display(),
            self.kind.dir()
        )
    }
    async fn act(&self, _: &Transports) -> anyhow::Result<serde_json::Value> {
        let (held, host) = self.sync_off_thread(true).await?;
        Ok(serde_json::json!({ "through": host, "written": !held }))
    }
    async fn holds(&self, _: &Transports) -> anyhow::Result<bool> {
        Ok(self.sync_off_thread(false).await?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let opts = crate::exec::journaled::RunOptions::default();
        let out = crate::exec::journaled::run(&list, &transports, &mut journal, &opts)
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
        let again = crate::exec::journaled::run(&list[5..], &transports, &mut journal, &opts)
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
        let opts = crate::exec::journaled::RunOptions::default();
        let out = crate::exec::journaled::run(&list, &transports, &mut journal, &opts)
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
        let opts = crate::exec::journaled::RunOptions::default();
        // C1 alone first: both trusted, the old one still signs alone.
        let mut journal = crate::operations::journal::Journal::dry_run("rotate-ca-k1");
        crate::exec::journaled::run(&list[..1], &transports, &mut journal, &opts)
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
        let out = crate::exec::journaled::run(&list, &transports, &mut journal, &opts)
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

    #[test]
    fn kubernetes_and_front_proxy_need_a_kubernetes_section() {
        let with = example();
        for kind in [CaKind::Etcd, CaKind::FrontProxy, CaKind::Kubernetes] {
            assert_eq!(refused(kind, &with), None, "{kind:?}");
        }
        let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: plain\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - { name: cp1, address: 10.0.0.11, roles: [etcd] }\n  allowSingleMember: true\n";
        let without =
            crate::inventory::load_str(std::path::Path::new("/nonexistent/plain.yaml"), yaml).unwrap();
        assert!(without.kubernetes.is_none());
        for (kind, name) in [
            (CaKind::FrontProxy, "front-proxy"),
            (CaKind::Kubernetes, "kubernetes"),
        ] {
            let f = refused(kind, &without).unwrap();
            assert!(
                f.contains(&format!("the {name} CA exists only with Kubernetes"))
                    && f.contains("no `kubernetes` section")
                    && f.contains("hactl up")
                    && f.contains("nothing was changed"),
                "{f}"
            );
        }
        assert_eq!(refused(CaKind::Etcd, &without), None);
    }
}
