//! Install etcd: binaries (distribution package, or release/bundle binaries uploaded from the
//! operator machine), curl for the health probes, the `etcd` system user, and the data dir (0700,
//! owned by etcd).

use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{BinarySource, Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step, Upload};

pub struct InstallEtcd;

/// Creates etcd's data dir, or fixes its mode and owner (`install -d` never touches contents),
/// under the data-directory rule ([`crate::etcd::data_dir`]): only when the directory is
/// missing, empty or holds etcd's `member/`; anything else is refused and named.
pub fn ensure_data_dir(data_dir: &str) -> RemoteCommand {
    let script = crate::etcd::data_dir::guarded(
        "take $1 as etcd's data dir",
        "hactl up",
        "install -d -m 0700 -o etcd -g etcd \"$1\"",
    );
    RemoteCommand::new(["sh", "-c", &script, "hactl-etcd-data-dir", data_dir])
}

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
}

/// The release or bundle binaries as uploads to `BIN_DIR` (none for packages).
fn binary_uploads(ctx: &Ctx<'_>) -> Vec<Upload> {
    match (&ctx.inv.etcd.source, ctx.binaries) {
        (BinarySource::Package, _) | (_, None) => vec![],
        (_, Some(bins)) => bins
            .files
            .iter()
            .map(|(name, blob)| {
                Upload::of(
                    format!("{}/{name}", crate::etcd::BIN_DIR),
                    0o755,
                    "root",
                    "root",
                    blob,
                )
            })
            .collect(),
    }
}

fn steps_with(host: &Host, ctx: &Ctx<'_>, binaries: &[Upload]) -> Result<Vec<Step>, PlanError> {
    let f = ctx.facts(host);
    let mut steps = Vec::new();
    let etcd_missing = !f.binaries.contains_key("etcd") || !f.binaries.contains_key("etcdctl");
    let install_package = matches!(ctx.inv.etcd.source, BinarySource::Package) && etcd_missing;
    // curl too: the health probes run it on etcd hosts.
    let packages = super::with_curl(
        f,
        if install_package {
            vec!["etcd-server", "etcd-client"]
        } else {
            vec![]
        },
    );
    if !packages.is_empty() {
        steps.push(Step::Run(super::apt_install(&packages)));
    }
    if !matches!(ctx.inv.etcd.source, BinarySource::Package) {
        for up in binaries {
            if differs(f, up) {
                steps.push(Step::Upload(up.clone()));
            }
        }
    }
    // The package creates the etcd user itself.
    if !f.etcd_user && !install_package {
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
        steps.push(Step::Run(ensure_data_dir(&ctx.inv.etcd.data_dir)));
    }
    Ok(steps)
}
