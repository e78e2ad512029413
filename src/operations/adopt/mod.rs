//! `hactl adopt`: a state directory rebuilt from the running cluster, when the cluster's own is
//! lost and no backup bundle is at hand (a bundle restores every CA and stays the first advice:
//! `hactl etcd snapshot restore-bundle`). docs/recovery.md, "State directory lost or wrong".
//!
//! The operator gives the inventory. Before anything is written (its reach): every host with a
//! role answers, with its host key checked against what the state directory may already hold and
//! otherwise trusted for the run and printed, for the operator to compare; the facts probe and a
//! small probe of adopt's own read each host; [`decide`] compares the inventory with what runs
//! (the etcd members at their peer URLs against the etcd hosts, each host's units against its
//! roles), checks that the hosts trust one CA of each kind and share the secrets every apiserver
//! must share, and lists what to read back from where, or refuses (exit 2) naming every
//! difference. Then, under the one lock, as journaled steps:
//!
//! | step | what | postcondition |
//! |---|---|---|
//! | AD1 | the host keys recorded; the marker `<state>/adopt` names the run | the marker names the run |
//! | AD2 | every certificate, key and secret the hosts hold read back, checked, written: the etcd leaves; the Kubernetes signing CA with its key (the controller-manager signs with it), every Kubernetes leaf, the service-account key pair, the encryption key; the front-proxy client; the backup push key; the high-water mark and the etcd token; the rotations of the etcd and front-proxy CAs started (their new CAs as `ca-next`); last, the CA certificates the hosts trust, keyless | `pki/etcd/ca.crt` exists |
//! | C1…C6 | the CA rotation (`rotate_ca`) of the etcd CA and, with Kubernetes, the front-proxy CA, whose keys lived only in the lost state directory: from a trust bundle holding the hosts' CA and the new one, three rolls in all, writes flowing | as in a rotation |
//! | AD3 | the marker becomes `<run>.done` | no marker |
//!
//! What is not read back, and why: the etcd and front-proxy CA keys (never on a host: rotated
//! away instead); the backup bundles' age identity (never left the operator machine: the next
//! `etcd snapshot save` makes a new one; older bundles need the old identity); the admin
//! kubeconfig (the first roll writes a new one from the read-back Kubernetes CA); heal's retry
//! records and the journals of earlier runs (history only); the VRRP password (unused since
//! keepalived speaks VRRPv3); downloaded binaries (a cache).
//!
//! Invariants: nothing is written before the lock is held and the run confirmed; a refusal
//! leaves no trace (the state directory is not even created); an existing state directory that
//! holds a CA is never touched (adopt refuses it); a key is never printed, logged, journaled or
//! put in argv.

pub mod acts;
pub mod decide;
pub mod observe;
pub mod steps;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::exec::Transports;
use crate::exit;
use crate::inventory::Host;
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::{LocalAct, Outcome};
use crate::pki::CaKind;

pub use decide::Decisions;

/// What `hactl adopt` is given.
#[derive(Clone)]
pub struct Options {
    /// Each roll of the rotation: `up`'s plan, built afresh from the state directory and run
    /// (the command layer provides it).
    pub roll: Arc<dyn LocalAct>,
}

/// `hactl adopt` as an [`Operation`].
pub struct Adopt {
    opts: Options,
    seen_keys: Option<Arc<crate::ssh::KnownHosts>>,
    decisions: Option<Decisions>,
    /// A resumed run whose read-back is done: the hosts are checked against the state
    /// directory it wrote, as every other operation checks them.
    past_read_back: bool,
}

impl Adopt {
    pub fn new(opts: Options) -> Adopt {
        Adopt {
            opts,
            seen_keys: None,
            decisions: None,
            past_read_back: false,
        }
    }
}

/// The refusal for a state directory that already holds CAs.
fn refuse_existing(ctx: &Context<'_>, expected: &crate::identity::Expected) -> anyhow::Error {
    let held: Vec<String> = expected
        .cas
        .iter()
        .flat_map(|(kind, certs)| certs.iter().map(move |c| format!("{kind}: {c}")))
        .collect();
    exit::refuse(
        exit::REFUSED,
        format!(
            "refused: the state directory {} already holds CAs ({}); adopt rebuilds a lost state \
             directory and never overwrites one; nothing was changed. If it is this cluster's own, \
             `hactl up -i {inv}` uses it; if `up` refuses it as another cluster's, point \
             --state-dir at a new path (or move this directory aside) and run `hactl adopt -i {inv}` again",
            ctx.state.path.display(),
            held.join("; "),
            inv = ctx.inv.source.display()
        ),
    )
}

/// The refusal for what [`decide::decide`] found.
fn refuse_problems(ctx: &Context<'_>, problems: &[String]) -> anyhow::Error {
    let inv = ctx.inv.source.display();
    exit::refuse(
        exit::REFUSED,
        format!(
            "refused: adopt would not record the cluster that runs; nothing was written, on any \
             host or in the state directory:\n  - {}\nfix what each line says, then check with \
             `hactl adopt -i {inv} --dry-run`. With a backup bundle and its identity at hand, \
             restore the state directory from it instead (`hactl etcd snapshot restore-bundle \
             <snapshot>.bundle.age --identity <backup-identity.txt> -i {inv}`)",
            problems.join("\n  - ")
        ),
    )
}

#[async_trait(?Send)]
impl Operation for Adopt {
    fn kind(&self) -> &'static str {
        "adopt"
    }

    fn command(&self) -> String {
        "adopt".into()
    }

    fn run_id(&self, ctx: &Context<'_>) -> anyhow::Result<RunId> {
        if let Some(run) = acts::marker_run(ctx.state) {
            return Ok(RunId {
                id: run,
                resumed: true,
            });
        }
        let expected = crate::identity::Expected::from_pki_dir(&ctx.state.file("pki"))?;
        if !expected.cas.is_empty() {
            return Err(refuse_existing(ctx, &expected));
        }
        Ok(RunId::new_or_resumed(None, "adopt"))
    }

    fn checks_identity(&self) -> bool {
        self.past_read_back
    }

    /// Every host with a role, its key checked and never recorded here (AD1 records it); then,
    /// still read-only and before the lock, the observation and the decisions: a refusal
    /// leaves nothing behind.
    async fn reach(&mut self, ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let inv = ctx.inv;
        let hosts: Vec<&Host> = inv.hosts.iter().filter(|h| !h.roles.is_empty()).collect();
        let (conns, known) = crate::exec::connect::connect_keeping_keys(
            crate::exec::connect::HostKeys::Check(ctx.state),
            &hosts,
            ctx.connect,
        )
        .await;
        let transports = crate::exec::connect::Reach::sort(&hosts, conns).require_all()?;
        self.seen_keys = known;
        self.past_read_back = acts::read_back_done(ctx.state);
        if !self.past_read_back {
            let seen = observe::observe(inv, &transports).await?;
            match decide::decide(inv, &seen) {
                Ok(d) => self.decisions = Some(d),
                Err(problems) => return Err(refuse_problems(ctx, &problems)),
            }
        }
        Ok(transports)
    }

    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let (inv, state) = (ctx.inv, ctx.state);
        let decisions = match self.decisions.clone() {
            Some(d) => d,
            None => {
                let path = crate::operations::run_dir::RunDir::new(state, &run.id).decisions();
                let text = fs_err::read_to_string(&path).map_err(|e| {
                    anyhow::anyhow!(
                        "{e}: run {} read its hosts back already, and its decisions are gone; \
                         finish its CA rotation with `hactl certs rotate-ca etcd -i {}` (and \
                         `front-proxy` with Kubernetes)",
                        run.id,
                        inv.source.display()
                    )
                })?;
                serde_json::from_str(&text)?
            }
        };
        self.decisions = Some(decisions.clone());
        let unrecorded = self
            .seen_keys
            .as_ref()
            .map(|k| k.unrecorded())
            .unwrap_or_default();
        let summary = summary(ctx, run, &decisions, &unrecorded);
        let connect = ctx.connect.clone();
        let pki_dir = state.file("pki");
        let (inv_arc, state_clone) = (Arc::new(inv.clone()), state.clone());
        let publish = {
            let (inv_arc, state_clone) = (inv_arc.clone(), state_clone.clone());
            move |kind: CaKind| {
                crate::kubernetes::published_ca::key_of(kind).map(|_| {
                    Arc::new(crate::operations::rotate_ca::PublishTrust {
                        kind,
                        dir: pki_dir.clone(),
                        inv: inv_arc.clone(),
                        state: state_clone.clone(),
                        connect: connect.clone(),
                    }) as Arc<dyn LocalAct>
                })
            }
        };
        let list = steps::steps(steps::Inputs {
            state: state_clone,
            inv: inv_arc,
            run: run.id.clone(),
            seen_keys: self.seen_keys.clone(),
            decisions: decisions.clone(),
            roll: self.opts.roll.clone(),
            publish: Box::new(publish),
        });
        let rotated: Vec<&str> = decisions.rotate.iter().map(String::as_str).collect();
        Ok(Planned {
            summary,
            decisions: serde_json::to_value(&decisions)?,
            steps: list,
            confirmation: Confirmation::Ask(format!(
                "adopt writes the state directory {} from the hosts and rotates the {} CA{}: every \
                 etcd member{} restarts one at a time, three times",
                state.path.display(),
                rotated.join(" and "),
                if rotated.len() > 1 { "s" } else { "" },
                if inv.kubernetes.is_some() {
                    ", apiserver and controller-manager"
                } else {
                    ""
                }
            )),
            resume: format!("hactl adopt -i {}", inv.source.display()),
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
        let inv = ctx.inv.source.display();
        let pki = ctx.state.file("pki");
        let fingerprint = |rel: &str| {
            fs_err::read_to_string(pki.join(rel))
                .ok()
                .and_then(|pem| crate::identity::certs_in(&pem).into_iter().next())
                .map(|c| c.fingerprint)
                .unwrap_or_else(|| "?".into())
        };
        let mut text = format!(
            "adopt: run {} done in {:.1}s ({} steps done, {} already done): the state directory {} holds cluster {} again\n",
            run.id,
            took.as_secs_f64(),
            outcome.done.len(),
            outcome.skipped.len(),
            ctx.state.path.display(),
            ctx.inv.name
        );
        if let Some(d) = &self.decisions {
            for ca in &d.cas {
                if ca.key_read_back {
                    text.push_str(&format!(
                        "  {} CA: {} read back with its key\n",
                        ca.ca, ca.fingerprint
                    ));
                } else {
                    text.push_str(&format!(
                        "  {} CA: {} (the hosts', kept as ca-retired-{}) replaced by {}\n",
                        ca.ca,
                        ca.fingerprint,
                        run.id,
                        fingerprint(&format!("{}/ca.crt", ca.ca))
                    ));
                }
            }
        }
        text.push_str(&format!(
            "next: `hactl up -i {inv}` (no changes), then `hactl etcd snapshot save -i {inv}` for a \
             backup with a bundle of this state directory (keep its backup-identity.txt apart)\n"
        ));
        Ok(Report { code: exit::OK, text })
    }
}

/// What the run does, for the operator (the dry run and the confirmation print it).
fn summary(ctx: &Context<'_>, run: &RunId, d: &Decisions, unrecorded: &[String]) -> String {
    let inv = ctx.inv.source.display();
    let mut out = format!(
        "adopt cluster {} into the state directory {} (run {}{})\n",
        ctx.inv.name,
        ctx.state.path.display(),
        run.id,
        if run.resumed { ", resumed" } else { "" }
    );
    out.push_str(&format!(
        "  first choice, when a backup bundle and its identity are at hand: `hactl etcd snapshot \
         restore-bundle <snapshot>.bundle.age --identity <backup-identity.txt> -i {inv}` keeps every CA; \
         adopt rebuilds what the hosts hold and replaces the CAs whose keys only the lost state directory had\n"
    ));
    out.push_str(&format!(
        "  the cluster: etcd cluster {}, revision {}, members {}\n",
        d.cluster_id,
        d.revision,
        d.members
            .iter()
            .map(|m| format!("{} ({})", m.name, m.peer_urls.join(",")))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !unrecorded.is_empty() {
        out.push_str(
            "  host keys seen for the first time, recorded by AD1 (compare each with `ssh-keygen -lf \
             /etc/ssh/ssh_host_ed25519_key.pub` on its host before you confirm):\n",
        );
        for line in unrecorded {
            out.push_str(&format!("    {line}\n"));
        }
    }
    for ca in &d.cas {
        if ca.key_read_back {
            out.push_str(&format!(
                "  the {} CA {} ({}): read back with its key from the control-plane hosts, kept\n",
                ca.ca, ca.fingerprint, ca.subject
            ));
        } else {
            out.push_str(&format!(
                "  the {} CA {} ({}): its key lived only in the lost state directory; trusted beside a \
                 new CA, which replaces it in the rotation's three rolls (C1–C6) with writes flowing\n",
                ca.ca, ca.fingerprint, ca.subject
            ));
        }
    }
    if ctx.inv.kubernetes.is_some() {
        out.push_str(
            "  read back as they are: the service-account key pair (tokens stay valid), the \
             encryption key (Secrets stay readable), every certificate and key the hosts hold\n",
        );
    }
    out.push_str(
        "  not recovered: the backup bundles' age identity (it never left the operator machine: \
         the next `etcd snapshot save` makes a new one, older bundles need the old one), heal's \
         retry records and earlier runs' journals (history)\n",
    );
    for w in &d.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    out
}

#[cfg(test)]
mod tests;
