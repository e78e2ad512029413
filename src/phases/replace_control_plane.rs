//! The Kubernetes side of `hactl replace` (docs/recovery.md, steps P8 and P9), as steps:
//!
//! - P8, on the replacement host (static-pod mode: its containerd, images and kubelet first):
//!   install, configure and start kube-apiserver (its
//!   `--etcd-servers` lists every etcd host of the inventory, which after the replace is every
//!   member), then the controller-manager and scheduler, each waiting for its health endpoint.
//!   Only then may its `kubernetes-api` backend be made ready on the load balancers.
//! - P9, on each other control-plane host, one at a time: its `kubernetes-api` backend is put in
//!   MAINT on every load balancer, the changed files (the new `--etcd-servers`, the apiserver
//!   certificate with the new host's address) are written, the apiserver restarts and must answer
//!   `/readyz`, and the backend is made ready again before the next host.
//!
//! Invariant: pure (no I/O): what is needed follows from fresh facts of the host and, for P9 in
//! systemd mode, whether the running apiserver's command line still carries the old member list
//! (a crash between writing the unit and restarting leaves exactly that).

use std::time::Duration;

use super::configure_kubernetes::ConfigureKubernetes;
use super::install_kubernetes::InstallKubernetes;
use super::roll_apiservers::{restart_needed, restart_steps};
use super::start_kubernetes::StartKubernetes;
use super::{Ctx, Phase, PlanError};
use crate::inventory::{Host, Inventory, KubernetesMode, Role};
use crate::kubernetes::{files, probe, Component};
use crate::plan::{HostSteps, RemoteCommand, Step};

/// Whether replace runs Kubernetes components on `host` (a kubernetes section and the
/// control-plane role).
pub fn runs_kubernetes(inv: &Inventory, host: &Host) -> bool {
    inv.kubernetes.is_some() && host.has(Role::ControlPlane)
}

/// The `--etcd-servers` flag every apiserver gets from the inventory.
pub fn etcd_servers_flag(inv: &Inventory, host: &Host) -> Option<String> {
    files::flags(Component::ApiServer, host, inv)
        .into_iter()
        .find(|f| f.starts_with("--etcd-servers="))
}

/// A read-only probe printing `stale` when the running kube-apiserver on the host was started
/// with another `--etcd-servers` than `flag`, `current` otherwise (also when none runs: starting
/// a stopped apiserver is not P9's job).
pub fn running_flag_probe(flag: &str) -> RemoteCommand {
    let unit = Component::ApiServer.unit();
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "pid=$(systemctl show -p MainPID --value {unit} 2>/dev/null); \
if [ \"${{pid:-0}}\" = 0 ] || [ ! -r /proc/$pid/cmdline ]; then echo current; exit 0; fi; \
if tr '\\0' '\\n' < /proc/$pid/cmdline | grep -qxF -- '{flag}'; then echo current; else echo stale; fi"
        ),
    ])
}

/// P8 on the replacement host: lift the fence P2 left on its Kubernetes units, install and
/// configure what differs, start what is not running (each start waits for health), restart a
/// running apiserver whose files changed, and end with the apiserver answering `/readyz`.
/// Empty without a kubernetes section or when the host has no control-plane role.
pub fn start_on_replacement(host: &Host, ctx: &Ctx<'_>) -> Result<Vec<Step>, PlanError> {
    if !runs_kubernetes(ctx.inv, host) {
        return Ok(vec![]);
    }
    super::install_kubernetes::refuse(ctx)?;
    let units: Vec<String> = Component::ALL.iter().map(|c| c.unit()).collect();
    let units: Vec<&str> = units.iter().map(String::as_str).collect();
    let mut steps = vec![Step::Run(RemoteCommand::script(crate::fence::lift_all(&units)))];
    steps.extend(InstallKubernetes.steps(host, ctx)?);
    steps.extend(ConfigureKubernetes.steps(host, ctx)?);
    // Static-pod mode: the host's kubelet runs the control plane, so it (with containerd and
    // the images) comes first, as in `up`.
    if super::start_nodes::runs_control_plane(ctx.inv, host) {
        steps.extend(super::install_nodes::InstallNodes.steps(host, ctx)?);
        steps.extend(super::configure_nodes::ConfigureNodes.steps(host, ctx)?);
        steps.extend(super::start_kubelets::StartKubelets.steps(host, ctx)?);
    }
    // Its backend is out of rotation (drained in P2, or not rendered yet): restart in place.
    if let Some(manifest) = restart_needed(Component::ApiServer, host, ctx)? {
        steps.extend(restart_steps(Component::ApiServer, host, manifest));
    }
    steps.extend(StartKubernetes.steps(host, ctx)?);
    steps.push(Step::Wait(probe::wait_healthy(
        Component::ApiServer,
        host,
        Duration::from_secs(180),
    )));
    Ok(steps)
}

/// P9 for one other control-plane host: nothing when its files match and its running apiserver
/// already has the new member list; else drain its `kubernetes-api` backend on every load
/// balancer, write the changed files, restart the apiserver, wait for `/readyz`, ready the
/// backend. `running_stale`: [`running_flag_probe`] said `stale` (systemd mode).
pub fn propagate_to(host: &Host, ctx: &Ctx<'_>, running_stale: bool) -> Result<Vec<HostSteps>, PlanError> {
    if !runs_kubernetes(ctx.inv, host) {
        return Ok(vec![]);
    }
    let Some(kube) = &ctx.inv.kubernetes else {
        return Ok(vec![]);
    };
    let mut steps = ConfigureKubernetes.steps(host, ctx)?;
    let restart = match restart_needed(Component::ApiServer, host, ctx)? {
        Some(manifest) => Some(manifest),
        None if running_stale && kube.mode == KubernetesMode::Systemd => Some(None),
        None => None,
    };
    let Some(manifest) = restart else {
        // Files a running apiserver does not read (or none) changed: write them, no restart.
        return Ok(if steps.is_empty() {
            vec![]
        } else {
            vec![HostSteps {
                host: host.name.clone(),
                sudo: host.ssh.sudo,
                steps,
            }]
        });
    };
    steps.extend(restart_steps(Component::ApiServer, host, manifest));
    Ok(super::roll_apiservers::behind_drained_apiserver(
        ctx.inv, host, steps,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{FileState, HostFacts, UnitState};
    use crate::kubernetes::{secrets::EncryptionKey, KubernetesInputs};
    use crate::plan::Upload;
    use std::collections::BTreeMap;

    /// cp3 replaced by cp4 (new address): cp4 carries the roles, cp3 has none.
    const YAML: &str = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd, control-plane]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd, control-plane]}\n  - {name: cp3, address: 10.0.0.13, roles: []}\n  - {name: cp4, address: 10.0.0.14, roles: [etcd, control-plane]}\n  - {name: lb1, address: 10.0.0.21, roles: [load-balancer]}\n  - {name: lb2, address: 10.0.0.22, roles: [load-balancer]}\n  vip: {address: 10.0.0.100}\n  kubernetes: {version: 1.31.4, source: bundle, bundleDir: b}\n";

    fn setup(yaml: &str) -> (tempfile::TempDir, Inventory, crate::pki::Pki) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, yaml).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        std::fs::create_dir(dir.path().join("b")).unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let pki = crate::pki::ensure(
            &dir.path().join("pki"),
            &inv,
            time::macros::datetime!(2026-01-01 00:00:00 UTC),
        )
        .unwrap();
        (dir, inv, pki)
    }

    fn inputs() -> KubernetesInputs {
        let bins = crate::binaries::LocalBinaries {
            files: Component::ALL
                .iter()
                .map(|c| {
                    (
                        c.binary().to_string(),
                        crate::plan::Blob::bytes(format!("bytes of {}", c.binary()).into_bytes()),
                    )
                })
                .collect(),
            origin: "test".into(),
        };
        KubernetesInputs::new(Some(&bins), EncryptionKey::from_bytes([7; 32]))
    }

    /// Facts of a host where `uploads` are in place and every Kubernetes unit runs.
    fn running(uploads: &[Upload]) -> HostFacts {
        let mut f = HostFacts::default();
        for u in uploads {
            f.files.insert(
                u.path.clone(),
                FileState {
                    sha256: u.sha256.clone(),
                    mode: u.mode,
                    owner: u.owner.clone(),
                    group: u.group.clone(),
                    mtime: 0,
                },
            );
        }
        for c in Component::ALL {
            f.units.insert(
                c.unit(),
                UnitState {
                    active: "active".into(),
                    main_pid: 100,
                    enabled: "enabled".into(),
                    started_monotonic_us: 0,
                },
            );
            f.kube_versions
                .insert(c.binary().into(), "Kubernetes v1.31.4".into());
        }
        f.etcd_version = Some("etcd Version: 3.5.16".into());
        f
    }

    fn lines(hosts: &[HostSteps]) -> Vec<String> {
        let mut out = Vec::new();
        for h in hosts {
            for s in &h.steps {
                out.push(match s {
                    Step::Upload(u) => format!("{}: write {}", h.host, u.path),
                    Step::Run(c) => format!("{}: run {}", h.host, c.line(false)),
                    Step::Wait(c) => format!("{}: wait {}", h.host, c.description),
                    Step::Api(r) => format!("{}: api {r}", h.host),
                });
            }
        }
        out
    }

    /// The facts cp1 and cp2 had before the replace: everything rendered for the old
    /// membership (cp3 at 10.0.0.13 instead of cp4), every unit running.
    fn before_replace(
        old: &Inventory,
        pki: &crate::pki::Pki,
        inputs: &KubernetesInputs,
    ) -> BTreeMap<String, HostFacts> {
        let mut facts = BTreeMap::new();
        let none = BTreeMap::new();
        let ctx = Ctx::new(old, pki, &none).with_kubernetes(Some(inputs));
        for name in ["cp1", "cp2"] {
            let h = old.host(name).unwrap();
            let (mut up, runners) = super::super::configure_kubernetes::uploads(h, &ctx).unwrap();
            up.extend(runners);
            up.extend(inputs.binaries.iter().cloned());
            facts.insert(name.to_string(), running(&up));
        }
        facts
    }

    #[test]
    fn p9_rolls_the_new_member_list_into_each_other_apiserver_behind_a_drained_backend() {
        let (_d, inv, pki) = setup(YAML);
        let old_yaml = YAML
            .replace(
                "{name: cp3, address: 10.0.0.13, roles: []}",
                "{name: cp3, address: 10.0.0.13, roles: [etcd, control-plane]}",
            )
            .replace(
                "{name: cp4, address: 10.0.0.14, roles: [etcd, control-plane]}",
                "{name: cp4, address: 10.0.0.14, roles: []}",
            );
        let (_d2, old, old_pki) = setup(&old_yaml);
        let inputs = inputs();
        let facts = before_replace(&old, &old_pki, &inputs);
        let ctx = Ctx::new(&inv, &pki, &facts).with_kubernetes(Some(&inputs));
        let cp1 = inv.host("cp1").unwrap();
        assert_eq!(
            etcd_servers_flag(&inv, cp1).unwrap(),
            "--etcd-servers=https://10.0.0.11:2379,https://10.0.0.12:2379,https://10.0.0.14:2379"
        );
        let got = lines(&propagate_to(cp1, &ctx, false).unwrap());
        let unit = Component::ApiServer.unit_path();
        // Drained on both load balancers, the unit (new --etcd-servers) written, restarted,
        // /readyz waited for, then ready again on both.
        let pos = |needle: &str| {
            got.iter()
                .position(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle} not in {got:#?}"))
        };
        // Drain (no new session), the open ones ended, then maintenance, then MAINT seen.
        assert_eq!(
            got[..5],
            [
                // Noted as `up`'s first: a run cut before it is back leaves the note behind.
                "lb1: run sh -c 'mkdir -p \"${1%/*}\" && date -u +%Y-%m-%dT%H:%M:%SZ > \"$1\"' hactl-hold /var/lib/hactl/held-by-up/kubernetes-api,cp1",
                "lb1: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 drain",
                "lb1: run /usr/local/sbin/hactl-haproxy idle kubernetes-api cp1 10",
                "lb1: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 maint",
                "lb1: wait HAProxy shows kubernetes-api/cp1 MAINT",
            ]
        );
        assert_eq!(
            got[6],
            "lb2: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 drain"
        );
        let write_unit = pos(&format!("cp1: write {unit}"));
        let restart = pos("cp1: run systemctl restart kube-apiserver.service");
        let ready = pos("cp1: wait kube-apiserver on cp1 answers");
        assert!(
            10 <= write_unit && write_unit < restart && restart < ready,
            "{got:#?}"
        );
        assert_eq!(got.len(), ready + 7, "{got:#?}");
        assert_eq!(
            got[ready + 1],
            "lb1: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 ready"
        );
        assert_eq!(
            got[ready + 4],
            "lb2: run /usr/local/sbin/hactl-haproxy state kubernetes-api cp1 ready"
        );
        assert!(got[ready + 5].starts_with("lb2: wait"), "{got:#?}");
        // The note goes once the server is UP.
        assert_eq!(
            got[ready + 6],
            "lb2: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp1"
        );
        assert!(
            got.iter()
                .any(|l| l == &format!("cp1: write {}", files::APISERVER_CRT)),
            "the serving certificate gets cp4's address: {got:#?}"
        );
        assert!(
            !got.iter().any(
                |l| l.contains("kube-controller-manager.service") || l.contains("kube-scheduler.service")
            ),
            "{got:#?}"
        );

        // Converged (files match the new membership): nothing, unless the running process
        // still has the old list (a crash between write and restart), then a restart only.
        let (mut up, runners) = super::super::configure_kubernetes::uploads(cp1, &ctx).unwrap();
        up.extend(runners);
        up.extend(inputs.binaries.iter().cloned());
        let mut converged = facts.clone();
        converged.insert("cp1".into(), running(&up));
        let ctx = Ctx {
            facts: &converged,
            ..ctx
        };
        assert!(propagate_to(cp1, &ctx, false).unwrap().is_empty());
        let got = lines(&propagate_to(cp1, &ctx, true).unwrap());
        assert!(!got.iter().any(|l| l.contains(": write ")), "{got:#?}");
        assert!(
            got.iter()
                .any(|l| l == "cp1: run systemctl restart kube-apiserver.service"),
            "{got:#?}"
        );
        assert!(
            got[0].ends_with("hactl-hold /var/lib/hactl/held-by-up/kubernetes-api,cp1")
                && got[1].ends_with("kubernetes-api cp1 drain")
                && got.last().unwrap() == "lb2: run rm -f /var/lib/hactl/held-by-up/kubernetes-api,cp1",
            "{got:#?}"
        );
    }

    #[test]
    fn p8_starts_the_apiserver_on_the_replacement_and_waits_for_readyz() {
        let (_d, inv, pki) = setup(YAML);
        let inputs = inputs();
        let facts = BTreeMap::new();
        let ctx = Ctx::new(&inv, &pki, &facts).with_kubernetes(Some(&inputs));
        let cp4 = inv.host("cp4").unwrap();
        let got = lines(&[HostSteps {
            host: "cp4".into(),
            sudo: false,
            steps: start_on_replacement(cp4, &ctx).unwrap(),
        }]);
        let pos = |needle: &str| {
            got.iter()
                .position(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle} not in {got:#?}"))
        };
        assert!(got[0].contains("hactl-fence.conf"), "{got:#?}");
        let unit = pos(&format!("cp4: write {}", Component::ApiServer.unit_path()));
        let start = pos("hactl-start kube-apiserver.service");
        let kcm = pos("hactl-start kube-controller-manager.service");
        assert!(
            pos("cp4: write /usr/local/bin/kube-apiserver") < unit && unit < start && start < kcm,
            "{got:#?}"
        );
        assert!(
            got.last()
                .unwrap()
                .starts_with("cp4: wait kube-apiserver on cp4 answers"),
            "{got:#?}"
        );
        assert!(
            !got.iter().any(|l| l.contains("hactl-haproxy")),
            "the backend is readied by replace after this: {got:#?}"
        );

        // Without a kubernetes section there is nothing to start.
        let yaml = YAML.replace(
            "  kubernetes: {version: 1.31.4, source: bundle, bundleDir: b}\n",
            "",
        );
        let (_d, inv, pki) = setup(&yaml);
        let ctx = Ctx {
            inv: &inv,
            pki: &pki,
            kubernetes: None,
            ..ctx
        };
        let cp4 = inv.host("cp4").unwrap();
        assert!(start_on_replacement(cp4, &ctx).unwrap().is_empty());
        assert!(propagate_to(inv.host("cp1").unwrap(), &ctx, true)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_running_flag_probe_only_reads_and_names_the_flag() {
        let c = running_flag_probe("--etcd-servers=https://10.0.0.11:2379");
        assert!(c.read_only);
        let line = c.line(false);
        assert!(line.contains("grep -qxF -- "), "{line}");
        assert!(line.contains("--etcd-servers=https://10.0.0.11:2379"), "{line}");
    }
}
