//! The load balancers' part of `hactl status`: which host holds the VIP, HAProxy's view of every
//! backend server on every load-balancer host, and `/readyz` through the VIP.
//!
//! Invariant: read-only (one read-only command per load-balancer host, plus one `/readyz`).
//! Degraded when no host or more than one holds the VIP, when a host, its HAProxy or keepalived
//! is down, when a backend server is DOWN, or when `/readyz` through the VIP fails.

use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

use super::{
    parse_show_stat, ServerStat, API_PORT, HAPROXY_CLI, HAPROXY_UNIT, HELD_DIR, KEEPALIVED_UNIT,
    KUBERNETES_CA,
};
use crate::inventory::{Host, Inventory, Role};
use crate::plan::RemoteCommand;

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    pub vip: String,
    /// Load-balancer hosts that hold the VIP now (exactly one when healthy).
    pub vip_holders: Vec<String>,
    pub hosts: Vec<BalancerRow>,
    /// Every backend server as each load-balancer host's HAProxy sees it.
    pub servers: Vec<BackendRow>,
    /// `/readyz` through the VIP: `ok`, `skipped: …`, or what went wrong.
    pub readyz: String,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct BalancerRow {
    pub name: String,
    pub reachable: bool,
    pub holds_vip: bool,
    /// systemd ActiveState of haproxy.service and keepalived.service; empty (`null`) when the
    /// host did not answer.
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub haproxy: String,
    #[serde(serialize_with = "crate::output::empty_as_null")]
    pub keepalived: String,
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendRow {
    /// The load-balancer host whose HAProxy reports this.
    pub balancer: String,
    #[serde(flatten)]
    pub stat: ServerStat,
    /// When `hactl up` took it out, as the balancer's note says ([`super::HELD_DIR`]); `null`
    /// without a note. A server out of the rotation with a note was left there by a cut run.
    pub held_by_up_since: Option<String>,
}

/// Generous: status only reads, and a slow host (an overloaded VM in CI took over 5 s) that
/// is reported as not answering sends the operator after the wrong problem.
const TIMEOUT: Duration = Duration::from_secs(15);
const STAT_MARK: &str = "--- show stat";

/// What one load-balancer host is asked: its addresses, its two units, the notes of servers
/// `up` took out ([`super::HELD_DIR`]), HAProxy's `show stat`.
pub fn probe() -> RemoteCommand {
    RemoteCommand::read_only([
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "ip -o addr show | awk '{{print \"addr\", $2, $4}}'; \
echo \"unit haproxy $(systemctl is-active {HAPROXY_UNIT})\"; \
echo \"unit keepalived $(systemctl is-active {KEEPALIVED_UNIT})\"; \
{held_fn}hactl_held_notes {HELD_DIR} | sed 's/^/held /'; \
echo '{STAT_MARK}'; {HAPROXY_CLI} show stat",
            held_fn = crate::facts::HELD_NOTES_FN
        ),
    ])
    .with_timeout(TIMEOUT)
}

/// `/readyz` through the VIP, from a load-balancer host, verified with the Kubernetes CA.
pub fn readyz_probe(vip: &str) -> RemoteCommand {
    RemoteCommand::read_only([
        "curl",
        "-sS",
        "--max-time",
        "3",
        "--cacert",
        KUBERNETES_CA,
        &format!("https://{vip}:{API_PORT}/readyz"),
    ])
    .with_timeout(TIMEOUT)
}

/// HAProxy's servers on one load balancer, each with the time `up` took it out where a note
/// says so.
type Servers = Vec<(ServerStat, Option<String>)>;

/// One host's answer to [`probe`]: its row and its servers.
fn parse_probe(host: &Host, vip: Option<std::net::IpAddr>, text: &str) -> (BalancerRow, Servers) {
    let (head, stat) = text.split_once(STAT_MARK).unwrap_or((text, ""));
    let facts = crate::facts::parse(head);
    let unit = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("unit {name} ")))
            .unwrap_or("unknown")
            .trim()
            .to_string()
    };
    let row = BalancerRow {
        name: host.name.clone(),
        reachable: true,
        holds_vip: vip.is_some_and(|v| facts.addresses.iter().any(|a| a.address == v)),
        haproxy: unit("haproxy"),
        keepalived: unit("keepalived"),
        errors: vec![],
    };
    // `held <backend>,<server> <since>`
    let held: std::collections::BTreeMap<(&str, &str), &str> = head
        .lines()
        .filter_map(|l| {
            let (backend, server, since) =
                crate::facts::parse_held_note(&mut l.strip_prefix("held ")?.split_whitespace())?;
            Some(((backend, server), since))
        })
        .collect();
    let stats = parse_show_stat(stat.trim_start())
        .into_iter()
        .map(|st| {
            let since = held
                .get(&(st.backend.as_str(), st.server.as_str()))
                .map(|s| s.to_string());
            (st, since)
        })
        .collect();
    (row, stats)
}

/// Reads the load balancers' state; `None` when the inventory has none.
pub async fn gather(
    inv: &Inventory,
    state: &crate::state::StateView,
    connect: &crate::exec::connect::ConnectSettings,
) -> Option<LoadBalancerStatus> {
    let hosts: Vec<&Host> = inv.with_role(Role::LoadBalancer);
    if hosts.is_empty() {
        return None;
    }
    let vip = inv.vip.as_ref().map(|v| v.address);
    let conns = crate::exec::connect::connect(state, &hosts, connect).await;
    let answers: Vec<(BalancerRow, Servers)> = futures::stream::iter(hosts.iter().map(|h| {
        let conn = conns.get(&h.name).cloned();
        async move {
            let failed = |why: String| BalancerRow {
                name: h.name.clone(),
                errors: vec![why],
                ..BalancerRow::default()
            };
            let t = match conn {
                Some(Ok(t)) => t,
                Some(Err(e)) => return (failed(format!("ssh: {e}")), vec![]),
                None => return (failed("ssh: not connected".into()), vec![]),
            };
            match t.run(&probe()).await {
                // A stopped HAProxy fails the last command; the unit states say so already.
                Ok(out) => parse_probe(h, vip, &out.stdout_str()),
                Err(e) => (failed(format!("{:#}", anyhow::Error::from(e))), vec![]),
            }
        }
    }))
    .buffered(connect.concurrency.max(1))
    .collect()
    .await;

    let vip_text = vip.map(|v| v.to_string()).unwrap_or_default();
    let mut s = LoadBalancerStatus {
        vip: vip_text.clone(),
        ..LoadBalancerStatus::default()
    };
    for (row, stats) in answers {
        if row.holds_vip {
            s.vip_holders.push(row.name.clone());
        }
        s.servers
            .extend(stats.into_iter().map(|(stat, held_by_up_since)| BackendRow {
                balancer: row.name.clone(),
                stat,
                held_by_up_since,
            }));
        s.hosts.push(row);
    }

    s.readyz = match (&inv.kubernetes, vip) {
        (None, _) => "skipped: the inventory has no kubernetes section".into(),
        (Some(_), None) => "skipped: no VIP".into(),
        (Some(_), Some(v)) => {
            let url_host = match v {
                std::net::IpAddr::V4(a) => a.to_string(),
                std::net::IpAddr::V6(a) => format!("[{a}]"),
            };
            let reachable = s.hosts.iter().find(|r| r.reachable).map(|r| r.name.clone());
            match reachable.and_then(|n| conns.get(&n).cloned()) {
                Some(Ok(t)) => match t.run(&readyz_probe(&url_host)).await {
                    Ok(out) if out.success() && out.stdout_str().trim() == "ok" => "ok".into(),
                    Ok(out) => format!(
                        "failed: {}",
                        [out.stdout_str().trim(), out.stderr_str().trim()]
                            .iter()
                            .filter(|t| !t.is_empty())
                            .copied()
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    Err(e) => format!("failed: {:#}", anyhow::Error::from(e)),
                },
                _ => "failed: no load-balancer host is reachable".into(),
            }
        }
    };
    s.problems = problems(&s);
    Some(s)
}

/// Why the front door is degraded; empty when it is healthy. Pure, so it is unit-tested.
pub fn problems(s: &LoadBalancerStatus) -> Vec<String> {
    let mut out = Vec::new();
    match s.vip_holders.as_slice() {
        [] => out.push(format!(
            "no load balancer holds the VIP {}: check keepalived there (`journalctl -u keepalived`) and run `hactl up`",
            s.vip
        )),
        [_] => {}
        many => out.push(format!(
            "the VIP {} is held by {} at once: VRRP between them is broken (check that they reach each other)",
            s.vip,
            many.join(" and ")
        )),
    }
    for h in &s.hosts {
        if !h.reachable || !h.errors.is_empty() {
            out.push(format!(
                "load balancer {} did not answer: {}",
                h.name,
                h.errors.join("; ")
            ));
            continue;
        }
        for (unit, state) in [("haproxy", &h.haproxy), ("keepalived", &h.keepalived)] {
            if state != "active" {
                out.push(format!(
                    "{unit} on {} is {state}: run `hactl up` to start it",
                    h.name
                ));
            }
        }
    }
    for r in s.servers.iter().filter(|r| r.stat.state() == "DOWN") {
        out.push(format!(
            "HAProxy on {} marks {}/{} DOWN ({})",
            r.balancer, r.stat.backend, r.stat.server, r.stat.check_status
        ));
    }
    // Out of the rotation on purpose (`hactl maintenance`, an operator's `set server`) is no
    // problem; out because a run of `up` stopped before bringing it back is.
    for r in &s.servers {
        let Some(since) = &r.held_by_up_since else {
            continue;
        };
        if matches!(r.stat.state(), "MAINT" | "DRAIN") {
            out.push(format!(
                "HAProxy on {} keeps {}/{} out of the rotation ({}) since {since}: a `hactl up` took it out (a roll or a mode switch) and stopped before bringing it back; run `hactl up`, which returns it once {} answers",
                r.balancer, r.stat.backend, r.stat.server, r.stat.status, r.stat.server
            ));
        }
    }
    if s.readyz.starts_with("failed") {
        out.push(format!("/readyz through the VIP {}", s.readyz));
    }
    out
}

/// The human table, appended to `hactl status`'s.
pub fn table(s: &LoadBalancerStatus) -> String {
    let mut out = format!(
        "\nVIP {} held by {}\n",
        s.vip,
        if s.vip_holders.is_empty() {
            "NOBODY".to_string()
        } else {
            s.vip_holders.join(", ")
        }
    );
    out.push_str(&format!(
        "{:<10} {:<5} {:<10} {:<10}\n",
        "BALANCER", "VIP", "HAPROXY", "KEEPALIVED"
    ));
    for h in &s.hosts {
        let line = format!(
            "{:<10} {:<5} {:<10} {:<10}{}",
            h.name,
            if h.holds_vip { "yes" } else { "-" },
            if h.reachable { &h.haproxy } else { "?" },
            if h.reachable { &h.keepalived } else { "?" },
            if h.errors.is_empty() {
                String::new()
            } else {
                format!(" {}", h.errors.join("; "))
            }
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{:<10} {:<16} {:<10} {:<10} {:<8} {:>8}\n",
        "BALANCER", "BACKEND", "SERVER", "STATUS", "CHECK", "SESSIONS"
    ));
    for r in &s.servers {
        out.push_str(&format!(
            "{:<10} {:<16} {:<10} {:<10} {:<8} {:>8}\n",
            r.balancer, r.stat.backend, r.stat.server, r.stat.status, r.stat.check_status, r.stat.sessions
        ));
    }
    out.push_str(&format!("/readyz through the VIP: {}\n", s.readyz));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(backend: &str, server: &str, status: &str) -> BackendRow {
        BackendRow {
            balancer: "lb1".into(),
            stat: ServerStat {
                backend: backend.into(),
                server: server.into(),
                status: status.into(),
                check_status: "L4CON".into(),
                last_change_secs: 1,
                sessions: 0,
            },
            held_by_up_since: None,
        }
    }

    fn healthy() -> LoadBalancerStatus {
        LoadBalancerStatus {
            vip: "10.0.0.100".into(),
            vip_holders: vec!["lb1".into()],
            hosts: ["lb1", "lb2"]
                .iter()
                .map(|n| BalancerRow {
                    name: n.to_string(),
                    reachable: true,
                    holds_vip: *n == "lb1",
                    haproxy: "active".into(),
                    keepalived: "active".into(),
                    errors: vec![],
                })
                .collect(),
            servers: vec![
                stat("etcd-client", "cp1", "UP"),
                stat("etcd-client", "cp2", "MAINT"),
            ],
            readyz: "skipped: the inventory has no kubernetes section".into(),
            problems: vec![],
        }
    }

    #[test]
    fn one_holder_and_no_down_server_is_healthy() {
        assert_eq!(problems(&healthy()), Vec::<String>::new());
    }

    #[test]
    fn no_holder_two_holders_a_down_server_and_a_stopped_unit_are_problems() {
        let mut s = healthy();
        s.vip_holders.clear();
        assert!(problems(&s)[0].starts_with("no load balancer holds the VIP 10.0.0.100"));
        s.vip_holders = vec!["lb1".into(), "lb2".into()];
        assert!(problems(&s)[0].contains("held by lb1 and lb2 at once"));
        let mut s = healthy();
        s.servers.push(stat("etcd-client", "cp3", "DOWN"));
        s.hosts[1].haproxy = "inactive".into();
        s.readyz = "failed: connection refused".into();
        assert_eq!(
            problems(&s),
            [
                "haproxy on lb2 is inactive: run `hactl up` to start it",
                "HAProxy on lb1 marks etcd-client/cp3 DOWN (L4CON)",
                "/readyz through the VIP failed: connection refused",
            ]
        );
    }

    #[test]
    fn a_server_a_cut_up_left_out_is_a_problem_one_taken_out_otherwise_is_not() {
        let mut s = healthy();
        // etcd-client/cp2 is in MAINT without a note (`hactl maintenance`): healthy() has it.
        s.servers.push(BackendRow {
            held_by_up_since: Some("2026-11-26T10:00:00Z".into()),
            ..stat("kubernetes-api", "cp3", "MAINT")
        });
        // A note whose server is UP again (a reload forgot the state): no problem.
        s.servers.push(BackendRow {
            held_by_up_since: Some("2026-11-26T10:00:00Z".into()),
            ..stat("kubernetes-api", "cp1", "UP")
        });
        assert_eq!(
            problems(&s),
            ["HAProxy on lb1 keeps kubernetes-api/cp3 out of the rotation (MAINT) since 2026-11-26T10:00:00Z: \
              a `hactl up` took it out (a roll or a mode switch) and stopped before bringing it back; \
              run `hactl up`, which returns it once cp3 answers"]
        );
    }

    #[test]
    fn parses_a_recorded_probe_answer() {
        let host = crate::inventory::Host {
            name: "lb1".into(),
            address: "10.0.0.21".parse().unwrap(),
            prefix_length: 24,
            roles: vec![Role::LoadBalancer],
            interface: None,
            ssh: crate::inventory::SshSpec {
                address: "10.0.0.21".parse().unwrap(),
                port: 22,
                user: "root".into(),
                auth: crate::inventory::SshAuth::Agent,
                sudo: false,
                bastion: None,
                connect_timeout_secs: 10,
            },
        };
        let text = "addr lo 127.0.0.1/8\naddr host0 10.0.0.21/24\naddr host0 10.0.0.100/24\n\
unit haproxy active\nunit keepalived active\nheld etcd-client,cp2 2026-11-26T10:00:00Z\n--- show stat\n\
# pxname,svname,status,check_status\netcd-client,cp1,UP,L7OK\netcd-client,cp2,MAINT,L7OK\n";
        let (row, stats) = parse_probe(&host, Some("10.0.0.100".parse().unwrap()), text);
        assert!(row.holds_vip);
        assert_eq!(
            (row.haproxy.as_str(), row.keepalived.as_str()),
            ("active", "active")
        );
        assert_eq!(stats.len(), 2);
        assert_eq!((stats[0].0.server.as_str(), stats[0].1.as_deref()), ("cp1", None));
        assert_eq!(
            (stats[1].0.server.as_str(), stats[1].1.as_deref()),
            ("cp2", Some("2026-11-26T10:00:00Z"))
        );
        let (row, _) = parse_probe(&host, Some("10.0.0.101".parse().unwrap()), text);
        assert!(!row.holds_vip);
    }
}
