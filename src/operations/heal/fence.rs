//! heal's fence of an old member (H2): an etcd that is not of the cluster on an inventory host (a
//! zombie), or an old member attested dead that answers again, fenced for good through the
//! manager as a one-step operation ([`super::steps::fence`]), journaled like every other, and
//! recorded in the member history.
//!
//! Invariant: the step re-checks on the host, right before it acts, that the etcd it stops is
//! not a member of the cluster ([`crate::old_members::retire::Guard`]).

use std::time::Duration;

use async_trait::async_trait;

use crate::clock::now_rfc3339;
use crate::exec::Transports;
use crate::exit;
use crate::old_members::{retire, Finding};
use crate::operations::manager::{Confirmation, Context, Operation, Planned, Report, RunId};
use crate::operations::runner::Outcome;

/// The fence of the old member `finding` names, as an [`Operation`].
pub struct FenceOld {
    pub host: String,
    pub finding: Finding,
    /// What the step re-checks on the host first.
    pub guard: retire::Guard,
    /// The connections heal's look made.
    pub transports: Transports,
}

#[async_trait(?Send)]
impl Operation for FenceOld {
    fn kind(&self) -> &'static str {
        "heal"
    }
    fn command(&self) -> String {
        format!("heal: fence the old member on {}", self.host)
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(RunId::new_or_resumed(None, &format!("heal-fence-{}", self.host)))
    }
    async fn reach(&mut self, _ctx: &Context<'_>) -> anyhow::Result<Transports> {
        Ok(self.transports.clone())
    }
    async fn plan(&mut self, ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        let why = format!(
            "Written by hactl heal {}: {}",
            run.id,
            self.finding.problem_line()
        );
        Ok(Planned {
            summary: format!(
                "heal: fence the old member on {} for good: {}\n",
                self.host, self.finding.detail
            ),
            decisions: serde_json::json!({ "action": "fence", "host": self.host, "finding": self.finding }),
            steps: super::steps::fence(ctx.inv, ctx.state, &self.host, &run.id, &why, self.guard),
            confirmation: Confirmation::None,
            resume: "hactl heal --once".into(),
            mirror_hosts: vec![self.host.clone()],
            decided: vec![],
        })
    }
    async fn report(
        &mut self,
        ctx: &Context<'_>,
        run: &RunId,
        _o: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        let h = crate::old_members::record::load(&ctx.state.view(), ctx.inv);
        let aside = h
            .hosts
            .get(&self.host)
            .map(|r| r.data_aside.clone())
            .filter(|a| !a.is_empty())
            .map(|a| format!("; its old data is kept in {a}"))
            .unwrap_or_default();
        Ok(Report {
            code: exit::OK,
            text: format!(
                "{} heal: fenced the old member on {} for good (run {}){aside}; recorded in {}\n",
                now_rfc3339(),
                self.host,
                run.id,
                ctx.state.file(crate::old_members::record::FILE).display()
            ),
        })
    }
}
