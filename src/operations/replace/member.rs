//! The pure step builders P1–P7 send (fence, remove, move aside, the learner's env; unit-tested).
//!
//! Invariant: the fence is [`crate::fence`]'s, the one recover and maintenance use.

use std::time::Duration;

use crate::etcd::{self, hex_id, Member, UNIT};
use crate::fence;
use crate::inventory::{Host, Inventory};
use crate::plan::{Check, RemoteCommand, Step, Upload};
use crate::render;

/// The fence ([`crate::fence`]) on etcd, then stop.
pub fn fence_steps(member: &str, id: Option<u64>) -> Vec<Step> {
    let who = match id {
        Some(id) => format!("member {member} ({})", hex_id(id)),
        None => format!("member {member}"),
    };
    let script = fence::fence_and_stop(
        &[UNIT],
        &[
            &format!("Written by hactl: {who} is being replaced; it must not start on its old data."),
            "hactl removes this file when the replacement starts; it stays across reboots.",
        ],
    );
    vec![
        Step::Run(RemoteCommand::script(script)),
        Step::Wait(Check::command(
            format!("{who} is stopped: no etcd process, nothing on the peer port"),
            RemoteCommand::script(format!(
                "! systemctl is-active --quiet {UNIT} && ! pgrep -x etcd >/dev/null"
            )),
            Duration::from_secs(60),
        )),
    ]
}

/// Stops the Kubernetes units that run on a host being fenced (scheduler, controller-manager,
/// then the apiserver, whose backend was drained first), each with a runtime drop-in like
/// etcd's so none starts again on the old host; P8 lifts them on a host that is reused.
pub fn fence_kube_steps(active: &[&str]) -> Vec<Step> {
    if active.is_empty() {
        return vec![];
    }
    let script = fence::fence_and_stop(active, &["Written by hactl: this host is being replaced."]);
    vec![Step::Run(RemoteCommand::script(script))]
}

/// Static-pod mode: moves the control-plane manifests of a host being replaced out of the
/// kubelet's directory into `aside` (never deleted), so its kubelet stops the pods, and waits
/// until no control-plane process is left. P8 writes them again on a host that is reused.
pub fn manifests_aside_steps(aside: &str) -> Vec<Step> {
    let components: Vec<&str> = crate::kubernetes::Component::ALL
        .iter()
        .map(|c| c.binary())
        .collect();
    let mut args = vec!["sh", "-c", MANIFESTS_ASIDE, "hactl-manifests-aside", aside];
    args.extend(components.iter().copied());
    vec![
        Step::Run(RemoteCommand::new(args)),
        Step::Wait(Check::command(
            "the kubelet stopped the control-plane pods".to_string(),
            RemoteCommand::read_only(["sh", "-c", &control_plane_gone()]),
            Duration::from_secs(120),
        )),
    ]
}

/// `$1` the aside dir, then the components: each manifest still in the kubelet's directory moves.
const MANIFESTS_ASIDE: &str = r#"dest=$1; shift
for c in "$@"; do
  if [ -e "/etc/kubernetes/manifests/$c.yaml" ]; then mkdir -p "$dest" && mv -f "/etc/kubernetes/manifests/$c.yaml" "$dest/$c.yaml" && echo "moved /etc/kubernetes/manifests/$c.yaml to $dest/"; fi
done"#;

/// Read-only: no control-plane manifest in the kubelet's directory and no control-plane process.
pub fn control_plane_gone() -> String {
    crate::kubernetes::static_pods_gone(&crate::kubernetes::Component::ALL)
}

/// Lifts the fence (before the replacement starts).
pub fn unfence_step() -> Step {
    Step::Run(RemoteCommand::script(fence::lift_all(&[UNIT])))
}

/// `member remove ID` on a healthy member, after re-checking on that host that ID is still the
/// member at PEER_URL; an ID already gone is success (docs/recovery.md, "Replace and heal (P0–P10)" P3).
pub fn remove_step(id: u64, peer_url: &str) -> Step {
    let hex = hex_id(id);
    let ctl = etcd::ETCDCTL_WRAPPER;
    Step::Run(RemoteCommand::script(format!(
        "line=$({ctl} member list | awk -F', ' -v id={hex} '$1 == id')\n\
if [ -z \"$line\" ]; then echo \"member {hex} is not in the member list: already removed\"; exit 0; fi\n\
case \"$line\" in *\", {peer_url}, \"*) ;; *) echo \"refusing: member {hex} is not the member at {peer_url}: $line\" >&2; exit 1 ;; esac\n\
out=$({ctl} member remove {hex} 2>&1) && {{ echo \"$out\"; exit 0; }}\n\
case \"$out\" in *\"member not found\"*|*\"ID not found\"*) echo \"member {hex} already removed\"; exit 0 ;; esac\n\
echo \"$out\" >&2; exit 1"
    )))
}

/// Moves the data dir of a removed member aside on its host, after checking etcd is not running
/// there (never touch a running member's directory) and under the data-directory rule
/// ([`crate::etcd::data_dir`]: a directory holding files but no `member/` is refused).
pub fn move_aside_step(data_dir: &str, host: &str, old_id: Option<u64>, stamp: &str) -> Step {
    let aside = format!("{data_dir}.hactl-removed-{stamp}");
    let who = old_id.map(hex_id).unwrap_or_else(|| "(none)".into());
    let guard = crate::etcd::data_dir::guard();
    let guard_fn = crate::etcd::data_dir::GUARD_FN;
    Step::Run(RemoteCommand::script(format!(
        "{guard}{guard_fn} {data_dir} \"move {data_dir} aside\" 'hactl replace'\n\
if systemctl is-active --quiet {UNIT} || pgrep -x etcd >/dev/null; then echo \"refusing: etcd runs on {host}; its data dir stays\" >&2; exit 1; fi\n\
if [ -e {data_dir} ] && [ -n \"$(ls -A {data_dir} 2>/dev/null)\" ]; then mv --no-clobber -- {data_dir} {aside} && echo \"{host}: data of removed member {who} moved to {aside}\"; fi\n\
install -d -m 0700 -o etcd -g etcd {data_dir}"
    )))
}

/// The initial env of a learner joining `members` (the current list, which already holds it).
pub fn initial_env(inv: &Inventory, host: &Host, members: &[Member]) -> Result<Upload, render::RenderError> {
    let url = etcd::peer_url(inv, host);
    let mut parts = Vec::new();
    for m in members {
        let name = if m.peer_urls.contains(&url) {
            host.name.clone()
        } else if m.is_started() {
            m.name.clone()
        } else {
            continue; // a foreign unstarted member cannot be in our initial cluster
        };
        for u in &m.peer_urls {
            parts.push(format!("{name}={u}"));
        }
    }
    let text = render::render(
        "etcd-initial.env",
        &render::EtcdInitialEnv {
            name: host.name.clone(),
            initial_cluster: parts.join(","),
            state: "existing".into(),
            token: etcd::token(inv),
        },
    )?;
    Ok(Upload::new(
        etcd::INITIAL_ENV_PATH,
        0o644,
        "root",
        "root",
        text.into_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::replace::{F1_ORDER, F2_ORDER, P};
    use crate::operations::runner::StepCode;

    #[test]
    fn static_pod_manifests_move_aside_every_component_then_wait_for_the_pods_to_stop() {
        let steps = manifests_aside_steps("/etc/kubernetes/manifests.hactl-replaced-r1");
        let [Step::Run(mv), Step::Wait(wait)] = steps.as_slice() else {
            panic!("{steps:?}");
        };
        let line = mv.to_string();
        assert!(
            line.ends_with(
                "hactl-manifests-aside /etc/kubernetes/manifests.hactl-replaced-r1 kube-apiserver kube-controller-manager kube-scheduler"
            ),
            "{line}"
        );
        // Moved, never deleted; the aside dir is outside the kubelet's directory.
        assert!(!MANIFESTS_ASIDE.contains("rm "), "{MANIFESTS_ASIDE}");
        assert!(wait
            .to_string()
            .contains("(kube-apiserver|kube-controller-manager|kube-scheduler)"));
    }

    pub(super) fn pos(order: &[P], s: P) -> usize {
        order.iter().position(|x| *x == s).unwrap()
    }

    /// B10's static assertion: for a failed member, hactl never adds before it removes.
    #[test]
    pub(super) fn f1_removes_before_it_adds_and_f2_adds_first() {
        assert!(pos(&F1_ORDER, P::Remove) < pos(&F1_ORDER, P::AddLearner));
        assert!(pos(&F1_ORDER, P::MoveLeader) < pos(&F1_ORDER, P::Fence));
        assert!(pos(&F1_ORDER, P::Fence) < pos(&F1_ORDER, P::Remove));
        assert!(pos(&F1_ORDER, P::Prepare) < pos(&F1_ORDER, P::Start));
        assert!(pos(&F2_ORDER, P::Promote) < pos(&F2_ORDER, P::Remove));
        // F2 removes the healthy old member before it stops it: never 4 voters with one stopped.
        assert!(pos(&F2_ORDER, P::MoveLeader) < pos(&F2_ORDER, P::Remove));
        assert!(pos(&F2_ORDER, P::Remove) < pos(&F2_ORDER, P::Fence));
        // Both flows run every step once.
        for order in [F1_ORDER, F2_ORDER] {
            let mut o = order.to_vec();
            o.sort_by_key(|p| p.code());
            o.dedup();
            assert_eq!(o.len(), order.len());
        }
    }

    #[test]
    pub(super) fn the_remove_step_rechecks_the_id_and_url_on_the_host() {
        let Step::Run(cmd) = remove_step(0x921b590400393280, "https://10.0.0.13:2380") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(line.contains("921b590400393280"), "{line}");
        assert!(line.contains("https://10.0.0.13:2380"), "{line}");
        assert!(line.contains("already removed"), "{line}");
    }

    #[test]
    pub(super) fn the_kube_fence_writes_a_dropin_per_unit_then_stops_them_in_order() {
        assert!(fence_kube_steps(&[]).is_empty());
        let steps = fence_kube_steps(&["kube-scheduler.service", "kube-apiserver.service"]);
        let Step::Run(cmd) = &steps[0] else { panic!() };
        let script = &cmd.argv[2];
        assert!(
            script.contains("printf '[Unit]\\n# Written by hactl: this host is being replaced.\\nAssertPathExists=!%s\\n' \"/etc/systemd/system/kube-apiserver.service.d/hactl-fence.conf\" > \"/etc/systemd/system/kube-apiserver.service.d/hactl-fence.conf\""),
            "{script}"
        );
        assert!(
            script.ends_with(
                "systemctl daemon-reload && systemctl stop kube-scheduler.service kube-apiserver.service"
            ),
            "{script}"
        );
    }

    #[test]
    pub(super) fn moving_aside_never_deletes() {
        let Step::Run(cmd) = move_aside_step("/var/lib/etcd", "cp3", Some(1), "20261122T000000Z") else {
            panic!()
        };
        let line = cmd.line(false);
        assert!(
            line.contains("mv --no-clobber -- /var/lib/etcd /var/lib/etcd.hactl-removed-20261122T000000Z")
        );
        assert!(!line.contains("rm "), "{line}");
        // The data-directory rule runs first: a dir of the host's own is refused, not moved.
        let guard = line
            .find("hactl_data_dir_guard /var/lib/etcd")
            .expect("the guard is called");
        assert!(guard < line.find("mv --no-clobber").unwrap(), "{line}");
    }

    #[test]
    pub(super) fn the_learner_env_lists_current_members_and_itself() {
        let yaml = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata: {name: t}\nspec:\n  ssh: {user: root, keyFile: k}\n  hosts:\n  - {name: cp1, address: 10.0.0.11, roles: [etcd]}\n  - {name: cp2, address: 10.0.0.12, roles: [etcd]}\n  - {name: cp3, address: 10.0.0.13, roles: [etcd]}\n";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.yaml");
        std::fs::write(&path, yaml).unwrap();
        std::fs::write(dir.path().join("k"), "").unwrap();
        let inv = crate::inventory::load(&path).unwrap();
        let m = |id, name: &str, ip: &str, learner| Member {
            id,
            name: name.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: vec![],
            is_learner: learner,
        };
        let members = [
            m(1, "cp1", "10.0.0.11", false),
            m(2, "cp2", "10.0.0.12", false),
            m(3, "", "10.0.0.13", true),
        ];
        let up = initial_env(&inv, inv.host("cp3").unwrap(), &members).unwrap();
        let text = String::from_utf8(up.content.in_memory().unwrap().to_vec()).unwrap();
        assert!(text.contains("ETCD_INITIAL_CLUSTER=cp1=https://10.0.0.11:2380,cp2=https://10.0.0.12:2380,cp3=https://10.0.0.13:2380"), "{text}");
        assert!(text.contains("ETCD_INITIAL_CLUSTER_STATE=existing"));
        assert!(text.contains("ETCD_INITIAL_CLUSTER_TOKEN=hactl-t"));
    }
}
