//! Install etcd: binaries (distribution package, or release/bundle binaries uploaded from the
//! operator machine), the `etcd` system user, and the data dir (0700, owned by etcd).

use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{BinarySource, Host, Inventory, Role};
use crate::plan::{HostSteps, PlannedPhase, RemoteCommand, Step, Upload};

pub struct InstallEtcd;

/// apt-get with service starts blocked, so the package's own unit never starts a default etcd.
pub const APT_INSTALL_ETCD: &str = "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server etcd-client; rc=$?; rm -f /usr/sbin/policy-rc.d; exit $rc";

impl Phase for InstallEtcd {
    fn title(&self) -> &'static str {
        "Install etcd"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        steps_with(host, ctx, &binary_uploads(ctx))
    }
    /// The binaries are hashed once for every host (they are tens of MB each).
    fn plan(&self, ctx: &Ctx<'_>) -> Result<Vec<PlannedPhase>, PlanError> {
        let uploads = binary_uploads(ctx);
        let mut hosts = Vec::new();
        for host in self.hosts(ctx.inv) {
            hosts.push(HostSteps {
                host: host.name.clone(),
                sudo: host.ssh.sudo,
                steps: steps_with(host, ctx, &uploads)?,
            });
        }
        Ok(vec![PlannedPhase {
            title: self.title().to_string(),
            parallelism: self.parallelism(),
            disruptive: self.disruptive(),
            hosts,
        }])
    }
}

/// The release or bundle binaries as uploads to `BIN_DIR` (none for packages).
fn binary_uploads(ctx: &Ctx<'_>) -> Vec<Upload> {
    match (&ctx.inv.etcd.source, ctx.binaries) {
        (BinarySource::Package, _) | (_, None) => vec![],
        (_, Some(bins)) => bins
            .files
            .iter()
            .map(|(name, content)| {
                Upload::new(
                    format!("{}/{name}", crate::etcd::BIN_DIR),
                    0o755,
                    "root",
                    "root",
                    content.clone(),
                )
            })
            .collect(),
    }
}

fn steps_with(host: &Host, ctx: &Ctx<'_>, binaries: &[Upload]) -> Result<Vec<Step>, PlanError> {
    let f = ctx.facts(host);
    let mut steps = Vec::new();
    match &ctx.inv.etcd.source {
        BinarySource::Package => {
            if !f.binaries.contains_key("etcd") || !f.binaries.contains_key("etcdctl") {
                steps.push(Step::Run(
                    RemoteCommand::script(APT_INSTALL_ETCD).with_timeout(std::time::Duration::from_secs(600)),
                ));
            }
        }
        BinarySource::Release { .. } | BinarySource::Bundle { .. } => {
            for up in binaries {
                if differs(f, up) {
                    steps.push(Step::Upload(up.clone()));
                }
            }
        }
    }
    let package_makes_user = matches!(ctx.inv.etcd.source, BinarySource::Package) && !steps.is_empty();
    if !f.etcd_user && !package_makes_user {
        steps.push(Step::Run(RemoteCommand::new([
            "useradd",
            "--system",
            "--home-dir",
            &ctx.inv.etcd.data_dir,
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            "etcd",
        ])));
    }
    let data_dir_ok = f
        .data_dir
        .as_ref()
        .is_some_and(|d| d.mode == 0o700 && d.owner == "etcd" && d.group == "etcd");
    if !data_dir_ok {
        // `install -d` creates it or fixes mode and owner; it never touches the contents.
        steps.push(Step::Run(RemoteCommand::new([
            "install",
            "-d",
            "-m",
            "0700",
            "-o",
            "etcd",
            "-g",
            "etcd",
            &ctx.inv.etcd.data_dir,
        ])));
    }
    Ok(steps)
}
