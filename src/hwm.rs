//! The revision high-water mark (HWM): the highest etcd revision hactl has seen the cluster at,
//! with when and where. `hactl status`, `hactl up`, `hactl etcd snapshot save` and the scheduled
//! backups record it; `hactl recover` sizes the revision bump from it and estimates the data lost.
//!
//! Kept in `<state>/hwm.json` on the operator machine and in `/var/lib/hactl/hwm.json` on the
//! hosts (so a different workstation can recover). Invariant: a record only ever raises it.

use serde::{Deserialize, Serialize};

use crate::plan::RemoteCommand;
use crate::state::StateDir;

/// The copy on each host.
pub const HOST_PATH: &str = "/var/lib/hactl/hwm.json";
/// The mark in the state directory.
pub const FILE: &str = "hwm.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hwm {
    pub revision: i64,
    /// RFC 3339, UTC.
    pub time: String,
    /// Hex cluster ID the revision was seen on (empty when unknown).
    #[serde(default)]
    pub cluster_id: String,
    /// What saw it: `status`, `up`, `snapshot`, `backup@cp1`, …
    #[serde(default)]
    pub source: String,
}

impl Hwm {
    pub fn now(revision: i64, cluster_id: &str, source: &str) -> Hwm {
        Hwm {
            revision,
            time: crate::clock::timestamp(time::OffsetDateTime::now_utc()),
            cluster_id: cluster_id.to_string(),
            source: source.to_string(),
        }
    }
}

/// Parses an `hwm.json` (also the hosts' copies); `None` for anything else.
pub fn parse(text: &str) -> Option<Hwm> {
    serde_json::from_str(text.trim()).ok()
}

/// The higher of two marks.
pub fn max(a: Option<Hwm>, b: Option<Hwm>) -> Option<Hwm> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.revision > a.revision { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The operator machine's mark.
pub fn read(state: &StateDir) -> Option<Hwm> {
    crate::bounded::read_to_string(state.file(FILE), crate::bounded::TEXT)
        .ok()
        .and_then(|t| parse(&t))
}

/// Raises the operator machine's mark to `seen` if it is higher; returns the mark now held.
pub fn record(state: &StateDir, seen: Hwm) -> Result<Hwm, crate::state::StateError> {
    let current = read(state);
    if current.as_ref().is_some_and(|c| c.revision >= seen.revision) {
        return Ok(current.unwrap_or(seen));
    }
    let text = serde_json::to_string_pretty(&seen).map_err(std::io::Error::other)?;
    state.write_file(FILE, format!("{text}\n").as_bytes(), 0o600)?;
    Ok(seen)
}

/// Raises a host's mark to `seen` if it is higher (never lowers it).
pub fn host_record_command(seen: &Hwm) -> RemoteCommand {
    let json = serde_json::to_string(seen).unwrap_or_default();
    RemoteCommand::new([
        "sh",
        "-c",
        r#"cur=$(sed -n 's/.*"revision":\([0-9]*\).*/\1/p' "$1" 2>/dev/null | head -n1)
if [ -z "$cur" ] || [ "$cur" -lt "$2" ]; then
  mkdir -p "$(dirname "$1")" && printf '%s\n' "$3" > "$1.tmp" && mv "$1.tmp" "$1"
fi"#,
        "hactl-hwm",
        HOST_PATH,
        &seen.revision.to_string(),
        &json,
    ])
}

/// Read-only: prints the host's mark (nothing when it has none).
pub fn host_read_command() -> RemoteCommand {
    RemoteCommand::read_only(["cat", HOST_PATH])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_only_rises() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        assert_eq!(read(&state), None);
        assert_eq!(record(&state, Hwm::now(10, "a", "status")).unwrap().revision, 10);
        assert_eq!(record(&state, Hwm::now(5, "a", "status")).unwrap().revision, 10);
        assert_eq!(record(&state, Hwm::now(12, "b", "up")).unwrap().revision, 12);
        let h = read(&state).unwrap();
        assert_eq!(
            (h.revision, h.cluster_id.as_str(), h.source.as_str()),
            (12, "b", "up")
        );
        assert_eq!(max(Some(h.clone()), Some(Hwm::now(3, "", ""))), Some(h.clone()));
        assert_eq!(max(None, Some(h.clone())), Some(h));
    }

    #[test]
    fn the_host_command_never_lowers_the_mark() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("hactl/hwm.json");
        let run = |rev: i64| {
            let mut cmd = host_record_command(&Hwm::now(rev, "c", "t"));
            cmd.argv[4] = path.to_string_lossy().into_owned();
            assert!(std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd.line(false))
                .status()
                .unwrap()
                .success());
            parse(&fs_err::read_to_string(&path).unwrap()).unwrap().revision
        };
        assert_eq!(run(100), 100);
        assert_eq!(run(7), 100);
        assert_eq!(run(1000), 1000);
    }
}
