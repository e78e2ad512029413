//! A CA rotation's decisions, pure: whether the inventory allows rotating this CA, which run a
//! rotation is (the state directory's marker names a rotation under way), and where
//! `--stop-after` cuts the steps. Table-tested below.
//!
//! Invariant: no I/O; the stage comes in as read from the state directory.

use crate::exit::{self, Refusal};
use crate::inventory::Inventory;
use crate::operations::manager::RunId;
use crate::pki::rotate::Stage;
use crate::pki::CaKind;

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

/// The run a rotation is: the one the state directory's marker names (resumed), or a new one.
pub fn run(stage: &Stage, new: impl FnOnce() -> String) -> RunId {
    match stage {
        Stage::Idle => RunId {
            id: new(),
            resumed: false,
        },
        Stage::Started { run }
        | Stage::Trusting { run }
        | Stage::Promoted { run }
        | Stage::Retired { run } => RunId {
            id: run.clone(),
            resumed: true,
        },
    }
}

/// How many of the steps `ids` run with `--stop-after`: all without it, those up to the named
/// step with it; an unknown step is refused, listing the steps.
pub fn cut(ids: &[&str], stop_after: Option<&str>, kind: CaKind) -> Result<usize, Refusal> {
    let Some(id) = stop_after else {
        return Ok(ids.len());
    };
    match ids.iter().position(|s| *s == id) {
        Some(i) => Ok(i + 1),
        None => Err(Refusal {
            code: exit::REFUSED,
            message: format!(
                "refused: --stop-after {id}: no such step in a rotation of the {} CA; nothing was changed. The steps are: {}",
                kind.dir(),
                ids.join(", ")
            ),
        }),
    }
}

/// What the operator is asked before a rotation of `kind` starts.
pub fn confirmation(kind: CaKind) -> &'static str {
    match kind {
        CaKind::FrontProxy => {
            "this rotation restarts every apiserver and controller-manager one at a time, three times"
        }
        CaKind::Kubernetes => {
            "this rotation restarts every apiserver, controller-manager and scheduler one at a time, and every \
kubelet and kube-proxy hactl installed, three times; kubeconfigs made outside hactl, kubelets hactl did not \
install and pods that read the CA once must take the new CA between the first roll and the last \
(docs/ca-rotation.md)"
        }
        _ => "this rotation restarts every etcd member and apiserver one at a time, three times",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_under_way_is_resumed_and_an_idle_one_starts_a_new_run() {
        let new = || "rotate-ca-new".to_string();
        assert_eq!(
            run(&Stage::Idle, new),
            RunId {
                id: "rotate-ca-new".into(),
                resumed: false
            }
        );
        for stage in [
            Stage::Started { run: "r1".into() },
            Stage::Trusting { run: "r1".into() },
            Stage::Promoted { run: "r1".into() },
            Stage::Retired { run: "r1".into() },
        ] {
            assert_eq!(
                run(&stage, new),
                RunId {
                    id: "r1".into(),
                    resumed: true
                },
                "{stage:?}"
            );
        }
    }

    #[test]
    fn stop_after_cuts_at_a_known_step_and_refuses_an_unknown_one() {
        let ids = ["C1", "C1.roll", "C2", "C3", "C4", "C5", "C6"];
        assert_eq!(cut(&ids, None, CaKind::Etcd).unwrap(), 7);
        assert_eq!(cut(&ids, Some("C1.roll"), CaKind::Etcd).unwrap(), 2);
        assert_eq!(cut(&ids, Some("C6"), CaKind::Etcd).unwrap(), 7);
        let e = cut(&ids, Some("C9"), CaKind::Etcd).unwrap_err();
        assert_eq!(e.code, exit::REFUSED);
        assert!(
            e.message.contains("C1, C1.roll, C2") && e.message.contains("nothing was changed"),
            "{}",
            e.message
        );
    }

    #[test]
    fn kubernetes_and_front_proxy_need_a_kubernetes_section() {
        let with = std::sync::Arc::new(
            crate::inventory::load(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/inventories/example.yaml"
            )))
            .unwrap(),
        );
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
