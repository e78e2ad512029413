//! The acts of a CA rotation: each change to the state directory's PKI (C1, C2, C4, C6) with
//! its postcondition read from the state directory, and C5.publish through an apiserver.
//!
//! Invariant: every state change is idempotent and crash-safe; a CA is never deleted.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;

use crate::exec::connect::ConnectSettings;
use crate::exec::Transports;
use crate::inventory::{Inventory, Role};
use crate::operations::runner::LocalAct;
use crate::pki::rotate::{self, Stage};
use crate::pki::CaKind;
use crate::state::StateDir;

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
        let ca = crate::bounded::read_to_string(
            self.dir.join(format!("{}.crt", self.kind.name())),
            crate::bounded::TEXT,
        )?;
        for request in crate::pki::requests(&self.inv)
            .into_iter()
            .filter(|r| r.ca == self.kind)
        {
            let Ok(leaf) = crate::bounded::read_to_string(
                self.dir.join(format!("{}.crt", request.name)),
                crate::bounded::TEXT,
            ) else {
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
pub struct Done(pub Arc<StateChange>);

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
    pub connect: ConnectSettings,
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
        let reach = crate::exec::connect::reach(&self.state, &hosts, &self.connect).await;
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
