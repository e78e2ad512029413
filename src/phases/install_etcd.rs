//! Install etcd: binaries (distribution package, or release/bundle binaries uploaded from the
//! operator machine), curl for the health probes, the `etcd` system user, and the data dir (0700,
//! owned by etcd).

use super::{differs, Ctx, Phase, PlanError};
use crate::inventory::{BinarySource, Host, Inventory, Role};
use crate::plan::{RemoteCommand, Step, Upload};

pub struct InstallEtcd;

/// The distribution packages of etcd (`source: package`).
pub const ETCD_PACKAGES: [&str; 2] = ["etcd-server", "etcd-client"];

impl Phase for InstallEtcd {
    fn title(&self) -> &'static str {
        "Install etcd"
    }
    fn hosts<'a>(&self, inv: &'a Inventory) -> Vec<&'a Host> {
        inv.with_role(Role::Etcd)
    }
    fn steps(&self, host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
        let f = ctx.facts(host);
        let mut steps = Vec::new();
        let etcd_missing = !f.binaries.contains_key("etcd") || !f.binaries.contains_key("etcdctl");
        let install_package = matches!(ctx.inv.etcd.source, BinarySource::Package) && etcd_missing;
        let packages = super::with_curl(
            f,
            if install_package {
                ETCD_PACKAGES.to_vec()
            } else {
                vec![]
            },
        );
        if !packages.is_empty() {
            steps.push(Step::Run(super::apt_install(&packages)));
        }
        if let BinarySource::Release { .. } | BinarySource::Bundle { .. } = &ctx.inv.etcd.source {
            if let Some(bins) = ctx.binaries {
                for (name, content) in &bins.files {
                    let up = Upload::new(
                        format!("{}/{name}", crate::etcd::BIN_DIR),
                        0o755,
                        "root",
                        "root",
                        content.clone(),
                    );
                    if differs(f, &up) {
                        steps.push(Step::Upload(up));
                    }
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
}
