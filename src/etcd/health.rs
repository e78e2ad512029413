//! What the cluster looks like right now, as seen from one healthy member host (the peer vantage
//! point): member list, per-member status and health, alarms. Turned into the [`Counts`] the
//! safety rules read.
//!
//! Invariant: observing only reads (`RemoteCommand::read_only`); parsing is pure and tested on
//! recorded etcdctl output.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::safety::Counts;
use super::{Member, MemberList};
use crate::exec::Transport;
use crate::plan::RemoteCommand;

/// `etcdctl endpoint status -w json`, one entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct EndpointStatus {
    #[serde(rename = "Endpoint")]
    pub endpoint: String,
    #[serde(rename = "Status")]
    pub status: StatusBody,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StatusBody {
    pub header: super::Header,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub leader: u64,
    #[serde(default)]
    pub raft_index: u64,
    #[serde(default)]
    pub raft_applied_index: u64,
    #[serde(default)]
    pub is_learner: bool,
    #[serde(default)]
    pub errors: Vec<String>,
}

/// `etcdctl endpoint health -w json`, one entry.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct EndpointHealth {
    pub endpoint: String,
    pub health: bool,
    #[serde(default)]
    pub error: String,
}

/// One alarm from `etcdctl alarm list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    pub member_id: u64,
    pub alarm: String,
}

/// The cluster as one member host saw it.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The host whose member answered.
    pub observer: String,
    pub members: MemberList,
    /// By client URL.
    pub status: BTreeMap<String, EndpointStatus>,
    /// By client URL.
    pub health: BTreeMap<String, EndpointHealth>,
    pub alarms: Vec<Alarm>,
}

/// The read-only probe: member list, then status, health and alarms of every member, each
/// bounded by a short command timeout so a dead member costs seconds, not minutes.
///
/// The health check runs while the status is read (bash process substitution), so a member that
/// does not answer costs one 3 s timeout per observation, not two; the output keeps its order.
pub fn probe_command() -> RemoteCommand {
    let ctl = super::ETCDCTL_WRAPPER;
    let script = format!(
        "set -u; c={ctl}\n\
echo '== members'; $c --command-timeout=5s member list -w json || exit 3\n\
exec 3< <($c --command-timeout=3s endpoint health --cluster -w json 2>/dev/null)\n\
echo; echo '== status'; $c --command-timeout=3s endpoint status --cluster -w json 2>/dev/null\n\
echo; echo '== health'; cat <&3; exec 3<&-\n\
echo; echo '== alarms'; $c --command-timeout=3s alarm list 2>/dev/null\n\
exit 0\n"
    );
    RemoteCommand::read_only(["bash", "-c", script.as_str()]).with_timeout(std::time::Duration::from_secs(40))
}

#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("no etcd host could report the cluster ({0})")]
    NoObserver(String),
    #[error("{host}: cannot parse the member list")]
    Parse {
        host: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Parses the probe's output.
pub fn parse(observer: &str, text: &str) -> Result<Observation, ObserveError> {
    let mut sections: BTreeMap<&str, String> = BTreeMap::new();
    let mut current = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            current = match name.trim() {
                "members" => "members",
                "status" => "status",
                "health" => "health",
                "alarms" => "alarms",
                _ => "",
            };
            continue;
        }
        if !current.is_empty() {
            let s = sections.entry(current).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    let members: MemberList = serde_json::from_str(sections.get("members").map_or("", |s| s.trim()))
        .map_err(|source| ObserveError::Parse {
            host: observer.to_string(),
            source,
        })?;
    let status: Vec<EndpointStatus> = sections
        .get("status")
        .and_then(|s| serde_json::from_str(s.trim()).ok())
        .unwrap_or_default();
    let health: Vec<EndpointHealth> = sections
        .get("health")
        .and_then(|s| serde_json::from_str(s.trim()).ok())
        .unwrap_or_default();
    let alarms = sections
        .get("alarms")
        .map(|s| parse_alarms(s))
        .unwrap_or_default();
    Ok(Observation {
        observer: observer.to_string(),
        members,
        status: status.into_iter().map(|s| (s.endpoint.clone(), s)).collect(),
        health: health.into_iter().map(|h| (h.endpoint.clone(), h)).collect(),
        alarms,
    })
}

/// `memberID:123 alarm:NOSPACE` lines.
pub fn parse_alarms(text: &str) -> Vec<Alarm> {
    text.lines()
        .filter_map(|l| {
            let mut id = None;
            let mut alarm = None;
            for w in l.split_whitespace() {
                if let Some(v) = w.strip_prefix("memberID:") {
                    id = v.parse().ok();
                }
                if let Some(v) = w.strip_prefix("alarm:") {
                    alarm = Some(v.to_string());
                }
            }
            Some(Alarm {
                member_id: id?,
                alarm: alarm?,
            })
        })
        .collect()
}

/// Asks the hosts in `observers` in order; the first whose member answers the member list wins.
pub async fn observe(
    observers: &[(String, std::sync::Arc<dyn Transport>)],
) -> Result<Observation, ObserveError> {
    let mut why = Vec::new();
    for (name, t) in observers {
        match t.run(&probe_command()).await {
            Ok(out) if out.success() => return parse(name, &out.stdout_str()),
            Ok(out) => why.push(format!("{name}: exit {:?}", out.status)),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(ObserveError::NoObserver(why.join("; ")))
}

impl Observation {
    pub fn by_id(&self, id: u64) -> Option<&Member> {
        self.members.members.iter().find(|m| m.id == id)
    }
    pub fn by_name(&self, name: &str) -> Option<&Member> {
        self.members.members.iter().find(|m| m.name == name)
    }
    /// The member's status, by its client URL.
    pub fn status_of(&self, m: &Member) -> Option<&EndpointStatus> {
        m.client_urls.iter().find_map(|u| self.status.get(u))
    }
    /// A started member whose health check (a linearizable read through it) succeeded.
    pub fn is_healthy(&self, m: &Member) -> bool {
        m.is_started()
            && m.client_urls
                .iter()
                .any(|u| self.health.get(u).is_some_and(|h| h.health))
    }
    /// Why a member is not healthy, for people.
    pub fn why_unhealthy(&self, m: &Member) -> String {
        if !m.is_started() {
            return "added but never started".into();
        }
        let errs: Vec<String> = m
            .client_urls
            .iter()
            .filter_map(|u| self.health.get(u))
            .filter(|h| !h.health)
            .map(|h| h.error.clone())
            .collect();
        if errs.is_empty() {
            "no answer to the health check".into()
        } else {
            errs.join("; ")
        }
    }
    /// The leader's member ID, as the members that answered agree on it.
    pub fn leader(&self) -> Option<u64> {
        let leaders: BTreeSet<u64> = self
            .status
            .values()
            .map(|s| s.status.leader)
            .filter(|l| *l != 0)
            .collect();
        (leaders.len() == 1).then(|| *leaders.iter().next().unwrap())
    }
    pub fn cluster_ids(&self) -> BTreeSet<u64> {
        let mut ids: BTreeSet<u64> = self.status.values().map(|s| s.status.header.cluster_id).collect();
        ids.insert(self.members.header.cluster_id);
        ids
    }
    pub fn voters(&self) -> impl Iterator<Item = &Member> {
        self.members.members.iter().filter(|m| !m.is_learner)
    }
    pub fn learners(&self) -> impl Iterator<Item = &Member> {
        self.members.members.iter().filter(|m| m.is_learner)
    }
    pub fn alarm_names(&self) -> Vec<String> {
        let set: BTreeSet<String> = self.alarms.iter().map(|a| a.alarm.clone()).collect();
        set.into_iter().collect()
    }
    /// The numbers the safety rules read. `in_maintenance` names members stopped by hactl
    /// maintenance (counted unhealthy); `ignore_learner` is a learner this run created (adopted,
    /// not a foreign transition).
    pub fn counts(&self, in_maintenance: &BTreeSet<String>, ignore_learner: Option<u64>) -> Counts {
        let voters: Vec<&Member> = self.voters().collect();
        let healthy = voters
            .iter()
            .filter(|m| self.is_healthy(m) && !in_maintenance.contains(&m.name))
            .count();
        Counts {
            voters: voters.len(),
            healthy,
            learners: self.learners().filter(|m| Some(m.id) != ignore_learner).count(),
            unstarted: self
                .members
                .members
                .iter()
                .filter(|m| !m.is_started() && Some(m.id) != ignore_learner)
                .count(),
            alarms: self.alarm_names(),
            in_maintenance: voters.iter().filter(|m| in_maintenance.contains(&m.name)).count(),
            foreign_operation: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from a lab cluster (etcd 3.5.16) with cp3's etcd stopped.
    const ONE_DOWN: &str = r#"== members
{"header":{"cluster_id":15067032264122847024,"member_id":9706445710491682653,"raft_term":2},"members":[{"ID":9706445710491682653,"name":"cp1","peerURLs":["https://10.213.31.11:2380"],"clientURLs":["https://10.213.31.11:2379"]},{"ID":10528106427627156096,"name":"cp3","peerURLs":["https://10.213.31.13:2380"],"clientURLs":["https://10.213.31.13:2379"]},{"ID":14885582839574665025,"name":"cp2","peerURLs":["https://10.213.31.12:2380"],"clientURLs":["https://10.213.31.12:2379"]}]}

== status
[{"Endpoint":"https://10.213.31.11:2379","Status":{"header":{"cluster_id":15067032264122847024,"member_id":9706445710491682653,"revision":1,"raft_term":2},"version":"3.5.16","dbSize":20480,"leader":9706445710491682653,"raftIndex":12,"raftTerm":2,"raftAppliedIndex":12,"dbSizeInUse":16384}},{"Endpoint":"https://10.213.31.12:2379","Status":{"header":{"cluster_id":15067032264122847024,"member_id":14885582839574665025,"revision":1,"raft_term":2},"version":"3.5.16","dbSize":20480,"leader":9706445710491682653,"raftIndex":12,"raftTerm":2,"raftAppliedIndex":12,"dbSizeInUse":16384}}]

== health
[{"endpoint":"https://10.213.31.11:2379","health":true,"took":"7.664662ms"},{"endpoint":"https://10.213.31.12:2379","health":true,"took":"8.814917ms"},{"endpoint":"https://10.213.31.13:2379","health":false,"took":"15.005074238s","error":"context deadline exceeded"}]

== alarms
memberID:9706445710491682653 alarm:NOSPACE
"#;

    #[test]
    fn a_recorded_observation_with_one_member_down() {
        let o = parse("cp1", ONE_DOWN).unwrap();
        assert_eq!(o.members.members.len(), 3);
        let cp3 = o.by_name("cp3").unwrap();
        assert!(!o.is_healthy(cp3));
        assert_eq!(o.why_unhealthy(cp3), "context deadline exceeded");
        assert!(o.is_healthy(o.by_name("cp1").unwrap()));
        assert_eq!(o.leader(), Some(9706445710491682653));
        assert_eq!(o.cluster_ids().len(), 1);
        let c = o.counts(&BTreeSet::new(), None);
        assert_eq!((c.voters, c.healthy, c.learners), (3, 2, 0));
        assert_eq!(c.alarms, ["NOSPACE"]);
        let maint: BTreeSet<String> = ["cp2".to_string()].into();
        assert_eq!(o.counts(&maint, None).healthy, 1);
    }

    #[test]
    fn a_missing_member_list_is_an_error() {
        assert!(parse("cp1", "== members\n\n== status\n").is_err());
    }
}
