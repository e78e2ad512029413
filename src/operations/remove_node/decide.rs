//! The decisions of `hactl remove NODE` for a node host that held no etcd member (a worker):
//! which Node, which host is stopped and moved aside (or none, with `--confirm-dead`), and
//! whether the Node is still registered.
//!
//! Invariant: no I/O. What was read (the inventory, the PKI's record of the host, the API's
//! answer, who answered over SSH) comes in as [`Inputs`]; every refusal says what to do instead.

use serde::{Deserialize, Serialize};

use crate::exit::{self, Refusal};
use crate::inventory::Inventory;

/// What a node removal acts on, kept in `runs/<run>/decisions.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions {
    pub cluster: String,
    pub run: String,
    /// The Node's name (its former host's inventory name).
    pub node: String,
    /// The host (kept in the inventory with `roles: []`) whose node components are stopped and
    /// whose data is moved aside; `None` with `--confirm-dead`.
    pub host: Option<String>,
    /// The Node was registered when the run was decided.
    pub registered: bool,
}

impl Decisions {
    /// The suffix of the moved-aside data dirs: `<dir>.hactl-removed-<run>`.
    pub fn aside(&self) -> String {
        format!("hactl-removed-{}", self.run)
    }
}

/// What [`decide`] reads.
pub struct Inputs<'a> {
    pub inv: &'a Inventory,
    pub node: &'a str,
    pub run: &'a str,
    /// Whether the API lists a Node of that name.
    pub registered: bool,
    /// Whether the node's host answered over SSH.
    pub reachable: bool,
    pub confirm_dead: bool,
}

/// Whether `hactl remove NAME` removes a node host rather than an etcd member: the state
/// directory issued NAME a kubelet certificate but never an etcd peer certificate (the PKI
/// keeps both once issued), or the run resumed is a node removal.
pub fn is_node_removal(had_kubelet: bool, had_etcd_member: bool, resume: Option<&str>) -> bool {
    match resume {
        Some(run) => run.starts_with(RUN_PREFIX),
        None => had_kubelet && !had_etcd_member,
    }
}

/// The prefix of a node removal's run id.
pub const RUN_PREFIX: &str = "remove-node";

fn refused(code: i32, message: String) -> Refusal {
    Refusal { code, message }
}

/// Decides the removal of `inputs.node`.
pub fn decide(i: &Inputs<'_>) -> Result<Decisions, Refusal> {
    let node = i.node;
    let host = i.inv.host(node);
    if let Some(h) = host.filter(|h| !h.roles.is_empty()) {
        let roles: Vec<&str> = h.roles.iter().map(|r| r.as_str()).collect();
        return Err(refused(
            exit::REFUSED,
            format!(
                "refused: {node} still has the roles {} in the inventory; nothing was changed. Give it `roles: []` \
                 (keep the host, so hactl can stop it and move its data aside) or delete it with --confirm-dead, \
                 then run `hactl remove {node}` again",
                roles.join(", ")
            ),
        ));
    }
    let host = match (host, i.confirm_dead) {
        (_, true) => None,
        (None, false) => {
            return Err(refused(
                exit::REFUSED,
                format!(
                    "refused: {node} is not in the inventory, so hactl cannot stop its node components; nothing was \
                     changed. Keep it in hosts with `roles: []`, or add --confirm-dead {node} when the machine is gone \
                     for good"
                ),
            ))
        }
        (Some(_), false) if !i.reachable => {
            return Err(refused(
                exit::NEEDS_INPUT,
                format!(
                    "{node} does not answer over SSH; nothing was changed. Bring it back and run again, or add \
                     --confirm-dead {node} when it is gone for good (its kubelet then stays installed there)"
                ),
            ))
        }
        (Some(h), false) => Some(h.name.clone()),
    };
    if host.is_none() && !i.registered {
        return Err(refused(
            exit::REFUSED,
            format!("refused: no Node named {node} is registered and --confirm-dead leaves its host alone: nothing to remove"),
        ));
    }
    Ok(Decisions {
        cluster: i.inv.name.clone(),
        run: i.run.to_string(),
        node: node.to_string(),
        host,
        registered: i.registered,
    })
}

/// The run's summary for the operator.
pub fn summary(d: &Decisions) -> String {
    let mut out = format!(
        "remove Node {}{}: cordon and drain it, ",
        d.node,
        if d.registered { "" } else { " (not registered)" }
    );
    match &d.host {
        Some(h) => out.push_str(&format!(
            "stop its kubelet, kube-proxy, pods and containerd on {h}, delete the Node, move its data aside as \
             <dir>.{} on {h}, ",
            d.aside()
        )),
        None => out.push_str("delete the Node (--confirm-dead: its host is left alone), "),
    }
    out.push_str("and route the remaining nodes without it\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(w2_roles: Option<&str>) -> Inventory {
        let mut yaml = [
            "apiVersion: hactl.io/v1alpha1",
            "kind: Cluster",
            "metadata:",
            "  name: t",
            "spec:",
            "  ssh:",
            "    agent: true",
            "  hosts:",
            "  - { name: cp1, address: 10.0.0.11, roles: [etcd, control-plane] }",
            "  - { name: cp2, address: 10.0.0.12, roles: [etcd, control-plane] }",
            "  - { name: cp3, address: 10.0.0.13, roles: [etcd, control-plane] }",
            "  - { name: w1, address: 10.0.0.41, roles: [worker] }",
            "",
        ]
        .join("\n");
        if let Some(roles) = w2_roles {
            yaml.push_str(&format!(
                "  - {{ name: w2, address: 10.0.0.42, roles: {roles} }}\n"
            ));
        }
        yaml.push_str("  kubernetes:\n    version: 1.20.2\n    source: bundle\n    bundleDir: /\n");
        crate::inventory::load_str(std::path::Path::new("/tmp/t.yaml"), &yaml).unwrap()
    }

    fn inputs<'a>(inv: &'a Inventory, registered: bool, reachable: bool, confirm_dead: bool) -> Inputs<'a> {
        Inputs {
            inv,
            node: "w2",
            run: "remove-node-1",
            registered,
            reachable,
            confirm_dead,
        }
    }

    #[test]
    fn a_worker_is_removed_only_once_the_inventory_lets_it_go() {
        // (w2's roles in the inventory, registered, reachable, --confirm-dead) -> host or refusal
        let kept = inventory(Some("[]"));
        let gone = inventory(None);
        let still = inventory(Some("[worker]"));
        let d = decide(&inputs(&kept, true, true, false)).unwrap();
        assert_eq!(d.host.as_deref(), Some("w2"));
        assert_eq!(d.aside(), "hactl-removed-remove-node-1");
        assert!(summary(&d).contains("move its data aside as <dir>.hactl-removed-remove-node-1 on w2"));
        let d = decide(&inputs(&gone, true, false, true)).unwrap();
        assert_eq!(d.host, None);
        let e = decide(&inputs(&still, true, true, false)).unwrap_err();
        assert!(e.message.contains("still has the roles worker"), "{e}");
        assert_eq!(e.code, exit::REFUSED);
        let e = decide(&inputs(&gone, true, false, false)).unwrap_err();
        assert!(e.message.contains("--confirm-dead w2"), "{e}");
        let e = decide(&inputs(&kept, true, false, false)).unwrap_err();
        assert_eq!(e.code, exit::NEEDS_INPUT, "{e}");
        let e = decide(&inputs(&gone, false, false, true)).unwrap_err();
        assert!(e.message.contains("nothing to remove"), "{e}");
        // Not registered but its host still runs the components: stopped and moved aside.
        assert!(decide(&inputs(&kept, false, true, false)).is_ok());
    }

    #[test]
    fn the_state_directory_tells_a_node_removal_from_a_member_removal() {
        assert!(is_node_removal(true, false, None));
        assert!(
            !is_node_removal(true, true, None),
            "a control-plane host: a member removal"
        );
        assert!(!is_node_removal(false, false, None));
        assert!(is_node_removal(false, true, Some("remove-node-20261122T000000Z")));
        assert!(!is_node_removal(true, false, Some("remove-20261122T000000Z")));
    }
}
