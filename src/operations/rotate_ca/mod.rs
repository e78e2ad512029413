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
//! Layout: `decide.rs` (pure: which rotations are refused, the run, where `--stop-after` cuts),
//! `steps.rs` (the step list), `acts.rs` (the state directory's changes and C5.publish); this
//! file is the operation the manager runs ([`RotateCa`]).
//!
//! Invariant: the state directory decides what is done; the journal records it.

pub mod acts;
pub mod decide;
pub mod steps;

use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use async_trait::async_trait;

use crate::exec::Transports;
use crate::exit;
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::{LocalAct, Outcome};
use crate::pki::CaKind;

pub use acts::PublishTrust;
pub use decide::refused;
pub use steps::steps;

/// What `hactl certs rotate-ca` is asked.
#[derive(Clone)]
pub struct Options {
    pub kind: CaKind,
    /// Stop once this step is done (`C1.roll`: restart workloads while both CAs are trusted).
    pub stop_after: Option<String>,
    /// Each roll: `up`'s plan, built afresh from the state directory and run (the command layer
    /// provides it).
    pub roll: Arc<dyn LocalAct>,
}

/// `hactl certs rotate-ca` as an [`Operation`].
pub struct RotateCa {
    opts: Options,
    stops_early: bool,
}

impl RotateCa {
    pub fn new(opts: Options) -> RotateCa {
        RotateCa {
            opts,
            stops_early: false,
        }
    }
}

#[async_trait(?Send)]
impl Operation for RotateCa {
    fn kind(&self) -> &'static str {
        "rotate-ca"
    }
    fn command(&self) -> String {
        format!("certs rotate-ca {}", self.opts.kind.dir())
    }
    fn run_id(&self, ctx: &Context<'_>) -> anyhow::Result<RunId> {
        let pki_dir = ctx.state.path.join("pki");
        let kind = self.opts.kind;
        if !pki_dir.join(kind.name()).with_extension("crt").exists() {
            bail!(
                "no {} CA in {}: run `hactl up` first (or point --state-dir at the cluster's state)",
                kind.dir(),
                pki_dir.display()
            );
        }
        let stage = crate::pki::rotate::stage(&pki_dir, kind)?;
        Ok(decide::run(&stage, || {
            crate::operations::journal::new_run_id("rotate-ca")
        }))
    }
    /// The cluster's hosts: the lock is taken on them (each roll connects afresh).
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let hosts: Vec<&crate::inventory::Host> =
            ctx.inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
        let reach = crate::exec::connect::reach(ctx.host_keys(), &hosts, ctx.connect).await;
        reach.refuse_changed_host_keys()?;
        Ok(reach.transports)
    }
    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let (inv, state) = (ctx.inv, ctx.state);
        let kind = self.opts.kind;
        let pki_dir = state.path.join("pki");
        let list = steps(
            pki_dir.clone(),
            Arc::new(inv.clone()),
            kind,
            &run.id,
            self.opts.roll.clone(),
            crate::kubernetes::published_ca::key_of(kind).map(|_| {
                Arc::new(PublishTrust {
                    kind,
                    dir: pki_dir.clone(),
                    inv: Arc::new(inv.clone()),
                    state: state.clone(),
                    connect: ctx.connect.clone(),
                }) as Arc<dyn LocalAct>
            }),
        );
        let ids: Vec<&str> = list.iter().map(|s| s.id.as_str()).collect();
        let upto = decide::cut(&ids, self.opts.stop_after.as_deref(), kind)?;
        self.stops_early = upto < list.len();
        let stage = crate::pki::rotate::stage(&pki_dir, kind)?;
        let summary = if run.resumed {
            format!(
                "rotate the {} CA: resuming run {} (state directory: {stage:?}); steps already done are skipped\n",
                kind.dir(),
                run.id
            )
        } else {
            format!("rotate the {} CA: run {}\n", kind.dir(), run.id)
        };
        Ok(Planned {
            summary,
            decisions: serde_json::json!({
                "ca": kind.dir(),
                "stage": format!("{stage:?}"),
                "stopAfter": self.opts.stop_after,
            }),
            steps: list.into_iter().take(upto).collect(),
            confirmation: Confirmation::Ask(decide::confirmation(kind).to_string()),
            resume: format!("hactl certs rotate-ca {} -i {}", kind.dir(), inv.source.display()),
            mirror_hosts: vec![],
            decided: vec![],
        })
    }
    async fn report(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        outcome: &Outcome,
        took: Duration,
    ) -> anyhow::Result<Report> {
        let kind = self.opts.kind;
        let how = match &self.opts.stop_after {
            Some(id) if self.stops_early => format!("stopped after {id} as asked"),
            _ => "done".to_string(),
        };
        let mut text = format!(
            "rotate-ca {}: run {} {how} in {:.1}s ({} steps done, {} already done)\n",
            kind.dir(),
            run.id,
            took.as_secs_f64(),
            outcome.done.len(),
            outcome.skipped.len()
        );
        if self.stops_early {
            text.push_str(&format!(
                "to go on: hactl certs rotate-ca {} -i {}\n",
                kind.dir(),
                ctx.inv.source.display()
            ));
        }
        Ok(Report { code: exit::OK, text })
    }
}
