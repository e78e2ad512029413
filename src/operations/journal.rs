//! Run ids and the append-only journal of a run's steps: the one journal of recover, replace,
//! heal and maintenance.
//!
//! Every step of a day-two operation appends one JSON line per transition,
//! `{run, step, phase: started|done|skipped|failed, ts, host, inputs_sha, outputs}` (the phase is a
//! [`StepState`]),
//! to `<state>/runs/<run>/journal.jsonl` on the operator machine (written and fsynced before the
//! run goes on) and, best effort, to `/var/lib/hactl/runs/<run>/journal.jsonl` on the hosts
//! involved, so another workstation can see what happened.
//!
//! Invariants: lines are only ever appended; a journal is evidence, never the authority: a resumed
//! run re-checks each step's postcondition on the hosts (see [`crate::operations::runner`]).
//! `HACTL_CRASH_AFTER=<step-id>` makes the process exit with 137 right after that step's `done`
//! (or `skipped`) line is journaled, so tests can crash a run at every step. A dry run's journal
//! writes nothing: [`Journal::dry_run`] only prints. One run-id generator ([`new_run_id`]) names
//! every run.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::clock::timestamp;
use crate::exec::Transports;
use crate::operations::run_dir::RunDir;
use crate::plan::RemoteCommand;
use crate::state::StateDir;

/// Where hosts keep their copy of each run's journal.
pub const HOST_RUNS_DIR: &str = "/var/lib/hactl/runs";
/// The environment variable that crashes a run after a step (tests only).
pub const CRASH_AFTER_ENV: &str = "HACTL_CRASH_AFTER";
/// The exit code of a requested crash (as if killed by SIGKILL).
pub const CRASH_EXIT_CODE: i32 = 137;

/// A step's transition (written as `phase` in each line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepState {
    Started,
    Done,
    Skipped,
    Failed,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub run: String,
    pub step: String,
    pub phase: StepState,
    /// RFC 3339, UTC, milliseconds.
    pub ts: String,
    /// The host the step acts on; `None` for the operator machine.
    #[serde(default)]
    pub host: Option<String>,
    /// sha256 of what the step would send (its printed commands), so a resumed run can tell
    /// whether the step it finds in the journal is the one it is about to run.
    #[serde(default)]
    pub inputs_sha: String,
    #[serde(default)]
    pub outputs: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("run {run} already has a journal at {path}: use --resume {run}")]
    Exists { run: String, path: PathBuf },
    #[error("no run {run}: {path} does not exist (runs are listed in {dir})")]
    NoSuchRun {
        run: String,
        path: PathBuf,
        dir: PathBuf,
    },
    #[error("{path}:{line}: not a journal line")]
    BadLine {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0:?} is not a run id (lowercase letters, digits and dashes, at most 40)")]
    BadRunId(String),
}

/// A new run id: `[<op>-]YYYYMMDD-HHMMSS-xxxx` (UTC, then 4 random hex digits). Recover passes
/// no `op` (its id becomes part of the etcd cluster token `hactl-<cluster>-<run>`); replace, heal
/// and maintenance name themselves (`replace-cp2-20261122-024217-ab12`).
pub fn new_run_id(op: &str) -> String {
    run_id_at(op, time::OffsetDateTime::now_utc())
}

/// [`new_run_id`] at `now`. Sorts by time within an operation; a long `op` is cut to its first
/// word so the id stays valid (the journal records the host).
pub fn run_id_at(op: &str, now: time::OffsetDateTime) -> String {
    let stamp = now
        .format(time::macros::format_description!(
            "[year][month][day]-[hour][minute][second]"
        ))
        .unwrap_or_else(|_| "00000000-000000".into());
    let id = format!("{stamp}-{:04x}", rand::random::<u16>());
    if op.is_empty() {
        return id;
    }
    let full = format!("{op}-{id}");
    if valid_run_id(&full) {
        full
    } else {
        format!("{}-{id}", op.split('-').next().unwrap_or("run"))
    }
}

/// Whether `s` can be a run id (it becomes part of paths and of the etcd token).
pub fn valid_run_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
}

/// The journal of one run: a file on the operator machine, or nothing in a dry run.
#[derive(Debug)]
pub struct Journal {
    run: String,
    /// `None` in a dry run: nothing is written, transitions are only printed.
    file: Option<JournalFile>,
}

#[derive(Debug)]
struct JournalFile {
    dir: PathBuf,
    path: PathBuf,
    file: std::sync::Mutex<fs_err::File>,
}

impl Journal {
    /// Starts the journal of a new run in `<state>/runs/<run>/`.
    pub fn create(state: &StateDir, run: &str) -> Result<Journal, JournalError> {
        if !valid_run_id(run) {
            return Err(JournalError::BadRunId(run.to_string()));
        }
        let dir = state.subdir(RunDir::relative_to_state(run))?;
        let path = RunDir::new(state, run).journal();
        if path.exists() {
            return Err(JournalError::Exists {
                run: run.to_string(),
                path,
            });
        }
        Self::open_at(run, dir, path)
    }

    /// Re-opens the journal of an earlier run, to resume it.
    pub fn open(state: &StateDir, run: &str) -> Result<Journal, JournalError> {
        if !valid_run_id(run) {
            return Err(JournalError::BadRunId(run.to_string()));
        }
        let run_dir = RunDir::new(state, run);
        let (dir, path) = (run_dir.path().to_path_buf(), run_dir.journal());
        if !path.exists() {
            return Err(JournalError::NoSuchRun {
                run: run.to_string(),
                path,
                dir: RunDir::all(state),
            });
        }
        Self::open_at(run, dir, path)
    }

    fn open_at(run: &str, dir: PathBuf, path: PathBuf) -> Result<Journal, JournalError> {
        use fs_err::os::unix::fs::OpenOptionsExt;
        let file = fs_err::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        Ok(Journal {
            run: run.to_string(),
            file: Some(JournalFile {
                dir,
                path,
                file: std::sync::Mutex::new(file),
            }),
        })
    }

    /// A second handle on the same journal (appends go to the same file, one line per write):
    /// for work that journals its own sub-steps while a runner holds the first handle.
    pub fn reopen(&self) -> Result<Journal, JournalError> {
        match &self.file {
            Some(f) => Self::open_at(&self.run, f.dir.clone(), f.path.clone()),
            None => Ok(Journal::dry_run(&self.run)),
        }
    }

    /// The journal of a dry run: transitions are printed, nothing is written.
    pub fn dry_run(run: &str) -> Journal {
        Journal {
            run: run.to_string(),
            file: None,
        }
    }

    /// Continues run `run` (`--resume`) or starts it; a dry run writes nothing.
    pub fn open_or_create(
        state: &StateDir,
        run: &str,
        mode: crate::exec::Mode,
    ) -> Result<Journal, JournalError> {
        if mode == crate::exec::Mode::DryRun {
            return Ok(Journal::dry_run(run));
        }
        match Journal::open(state, run) {
            Ok(j) => Ok(j),
            Err(_) => Journal::create(state, run),
        }
    }

    pub fn run(&self) -> &str {
        &self.run
    }
    /// Whether this journal only prints (a dry run).
    pub fn is_dry_run(&self) -> bool {
        self.file.is_none()
    }
    /// `<state>/runs/<run>/`: the run's other files (its decisions, its outputs) live here; `None`
    /// in a dry run.
    pub fn dir(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.dir.as_path())
    }
    /// The journal file; `None` in a dry run.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Appends one line and fsyncs it before returning (in a dry run, only builds the entry).
    pub fn append(
        &self,
        step: &str,
        phase: StepState,
        host: Option<&str>,
        inputs_sha: &str,
        outputs: serde_json::Value,
    ) -> Result<Entry, JournalError> {
        let entry = Entry {
            run: self.run.clone(),
            step: step.to_string(),
            phase,
            ts: timestamp(time::OffsetDateTime::now_utc()),
            host: host.map(str::to_string),
            inputs_sha: inputs_sha.to_string(),
            outputs,
        };
        let Some(f) = &self.file else {
            return Ok(entry);
        };
        let mut line = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
        line.push('\n');
        let mut file = f.file.lock().expect("the journal file lock is never poisoned");
        file.write_all(line.as_bytes())?;
        file.sync_all()?;
        Ok(entry)
    }

    /// Journals a transition of an imperative step (replace, heal, maintenance) with a `detail`
    /// for the operator: one line on stderr, one journal line, and the crash a test asked for
    /// after a `done` or `skipped`. A dry run prints `planned` for `done` and writes nothing.
    pub fn record(&self, step: &str, state: StepState, host: &str, detail: &str) -> anyhow::Result<()> {
        let sep = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        match state {
            StepState::Done if self.is_dry_run() => eprintln!("{step} {host}: planned (dry run){sep}"),
            StepState::Started => eprintln!("{step} {host}: {detail}"),
            StepState::Done => eprintln!("{step} {host}: done{sep}"),
            StepState::Skipped => eprintln!("{step} {host}: skipped{sep}"),
            StepState::Failed => eprintln!("{step} {host}: failed{sep}"),
        }
        if self.is_dry_run() {
            return Ok(());
        }
        let host = (!host.is_empty()).then_some(host);
        self.append(step, state, host, "", serde_json::json!({ "detail": detail }))?;
        if matches!(state, StepState::Done | StepState::Skipped) {
            crash_if_requested(step);
        }
        Ok(())
    }

    /// Every line so far (none in a dry run).
    pub fn entries(&self) -> Result<Vec<Entry>, JournalError> {
        match &self.file {
            Some(f) => read(&f.path),
            None => Ok(vec![]),
        }
    }
}

/// The journal file of run `run` (for `--resume` and tests).
pub fn path_of(state: &StateDir, run: &str) -> PathBuf {
    RunDir::new(state, run).journal()
}

/// Every entry of run `run`.
pub fn read_run(state: &StateDir, run: &str) -> Result<Vec<Entry>, JournalError> {
    read(&path_of(state, run))
}

/// The `detail` an entry was recorded with by [`Journal::record`].
pub fn detail(entry: &Entry) -> &str {
    entry.outputs.get("detail").and_then(|d| d.as_str()).unwrap_or("")
}

/// Reads a journal file.
pub fn read(path: &Path) -> Result<Vec<Entry>, JournalError> {
    let text = crate::bounded::read_to_string(path, crate::bounded::TEXT)?;
    parse(path, &text)
}

fn parse(path: &Path, text: &str) -> Result<Vec<Entry>, JournalError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(e) => entries.push(e),
            // A crash mid-write can leave a torn last line; earlier lines were fsynced whole.
            Err(_) if i + 1 == text.lines().count() && !text.ends_with('\n') => {}
            Err(source) => {
                return Err(JournalError::BadLine {
                    path: path.to_path_buf(),
                    line: i + 1,
                    source,
                })
            }
        }
    }
    Ok(entries)
}

/// The last phase journaled for `step`, if any.
pub fn last_phase(entries: &[Entry], step: &str) -> Option<StepState> {
    entries.iter().rev().find(|e| e.step == step).map(|e| e.phase)
}

/// The command that appends `line` to the host's copy of the run's journal.
pub fn mirror_command(run: &str, line: &str) -> RemoteCommand {
    RemoteCommand::new([
        "sh",
        "-c",
        "umask 077 && mkdir -p \"$1/$2\" && printf '%s\\n' \"$3\" >> \"$1/$2/journal.jsonl\"",
        "hactl-journal",
        HOST_RUNS_DIR,
        run,
        line,
    ])
}

/// Appends `entry` to the journal copy on each of `hosts` that has a connection. Best effort:
/// a host that cannot take it gets a warning (it may be the dead host being recovered from).
pub async fn mirror(transports: &Transports, hosts: &[String], entry: &Entry) {
    let Ok(line) = serde_json::to_string(entry) else {
        return;
    };
    let cmd = mirror_command(&entry.run, &line);
    let runs = hosts
        .iter()
        .filter_map(|h| transports.get(h).map(|t| (h, t.clone())));
    let results = futures::future::join_all(runs.map(|(h, t)| {
        let cmd = cmd.clone();
        async move { (h, t.run(&cmd).await) }
    }))
    .await;
    for (host, r) in results {
        match r {
            Ok(out) if out.success() => {}
            Ok(out) => tracing::warn!(
                "{host}: could not append to the run journal: {}",
                out.stderr_str().trim()
            ),
            Err(e) => tracing::warn!("{host}: could not append to the run journal: {e}"),
        }
    }
}

/// Whether `HACTL_CRASH_AFTER` names this step: its full id (`R1.3@cp2`) or, for the first host
/// it runs on, the id without the host (`R1.3`).
pub fn crash_requested(step: &str, requested: Option<&str>) -> bool {
    match requested {
        Some(r) if !r.is_empty() => r == step || step.split('@').next() == Some(r),
        _ => false,
    }
}

/// Exits with [`CRASH_EXIT_CODE`] when `HACTL_CRASH_AFTER` names this step.
pub fn crash_if_requested(step: &str) {
    let requested = std::env::var(CRASH_AFTER_ENV).ok();
    if crash_requested(step, requested.as_deref()) {
        eprintln!(
            "{CRASH_AFTER_ENV}={}: exiting after step {step}",
            requested.unwrap_or_default()
        );
        std::process::exit(CRASH_EXIT_CODE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> (tempfile::TempDir, StateDir) {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        (tmp, state)
    }

    #[test]
    fn run_ids_sort_by_time_and_are_valid_tokens() {
        let a = run_id_at("", time::macros::datetime!(2026-01-02 03:04:05 UTC));
        assert!(a.starts_with("20260102-030405-"), "{a}");
        assert_eq!(a.len(), 20);
        assert!(valid_run_id(&a));
        let b = run_id_at("", time::macros::datetime!(2026-01-02 03:04:06 UTC));
        assert!(a < b);
        let r = run_id_at("replace-cp2", time::macros::datetime!(2026-01-02 03:04:05 UTC));
        assert!(
            r.starts_with("replace-cp2-20260102-030405-") && valid_run_id(&r),
            "{r}"
        );
        let long = run_id_at(
            &format!("replace-{}", "h".repeat(30)),
            time::macros::datetime!(2026-01-02 03:04:05 UTC),
        );
        assert!(
            long.starts_with("replace-20260102-") && valid_run_id(&long),
            "{long}"
        );
        for bad in ["", "A", "a/b", "../x", "-x", &"x".repeat(41)] {
            assert!(!valid_run_id(bad), "{bad}");
        }
    }

    #[test]
    fn lines_are_appended_and_read_back_in_order() {
        let (_tmp, state) = state();
        let j = Journal::create(&state, "r1").unwrap();
        j.append("R1.1", StepState::Started, None, "abc", serde_json::Value::Null)
            .unwrap();
        j.append(
            "R1.1",
            StepState::Done,
            Some("cp1"),
            "abc",
            serde_json::json!({"k": 1}),
        )
        .unwrap();
        let entries = j.entries().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].phase, StepState::Done);
        assert_eq!(entries[1].host.as_deref(), Some("cp1"));
        assert_eq!(entries[1].outputs["k"], 1);
        assert_eq!(last_phase(&entries, "R1.1"), Some(StepState::Done));
        assert_eq!(last_phase(&entries, "R9"), None);
        // The file is private and one JSON object per line with the documented keys.
        let text = fs_err::read_to_string(j.path().unwrap()).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for key in ["run", "step", "phase", "ts", "host", "inputs_sha", "outputs"] {
            assert!(first.get(key).is_some(), "missing {key}: {first}");
        }
        assert_eq!(first["phase"], "started");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs_err::metadata(j.path().unwrap()).unwrap().mode() & 0o777, 0o600);
        drop(j);
        // A new run with the same id is refused; resuming appends.
        assert!(matches!(
            Journal::create(&state, "r1"),
            Err(JournalError::Exists { .. })
        ));
        let j = Journal::open(&state, "r1").unwrap();
        j.append("R1.2", StepState::Skipped, None, "", serde_json::Value::Null)
            .unwrap();
        assert_eq!(j.entries().unwrap().len(), 3);
        assert!(matches!(
            Journal::open(&state, "nope"),
            Err(JournalError::NoSuchRun { .. })
        ));
    }

    #[test]
    fn a_torn_last_line_is_ignored_but_a_bad_middle_line_is_not() {
        let p = Path::new("j");
        let good = r#"{"run":"r","step":"a","phase":"done","ts":"t"}"#;
        assert_eq!(parse(p, &format!("{good}\n{{\"run\":")).unwrap().len(), 1);
        assert!(parse(p, &format!("{{\"run\":\n{good}\n")).is_err());
    }

    #[test]
    fn crash_requests_match_the_step_or_its_first_host() {
        assert!(crash_requested("R1.3@cp2", Some("R1.3@cp2")));
        assert!(crash_requested("R1.3@cp1", Some("R1.3")));
        assert!(!crash_requested("R1.3@cp1", Some("R1.3@cp2")));
        assert!(!crash_requested("R1.30", Some("R1.3")));
        assert!(!crash_requested("R1.3", None));
        assert!(!crash_requested("R1.3", Some("")));
    }

    #[test]
    fn the_mirror_command_appends_the_exact_line() {
        let tmp = tempfile::tempdir().unwrap();
        let line = r#"{"run":"r","step":"a b 'c'","phase":"done"}"#;
        let mut cmd = mirror_command("r1", line);
        cmd.argv[4] = tmp.path().to_string_lossy().into_owned();
        for _ in 0..2 {
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd.line(false))
                .status()
                .unwrap();
            assert!(ok.success());
        }
        let text = fs_err::read_to_string(tmp.path().join("r1/journal.jsonl")).unwrap();
        assert_eq!(text, format!("{line}\n{line}\n"));
    }
}
