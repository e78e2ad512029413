//! `<state>/runs/<run>/`: where a run keeps its journal and its other files on the operator
//! machine. The one place that spells the layout.
//!
//! Invariant: every path is inside the state directory (0700); files are written 0600 by
//! `StateDir`.

use std::path::{Path, PathBuf};

use crate::state::StateDir;

/// The directory of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    run: String,
    path: PathBuf,
}

impl RunDir {
    /// The directory of run `run` (it may not exist yet).
    pub fn new(state: &StateDir, run: &str) -> RunDir {
        RunDir {
            run: run.to_string(),
            path: state.file(Self::relative_to_state(run)),
        }
    }
    /// `runs/<run>`, relative to the state dir (for `StateDir::subdir` and `write_file`).
    pub fn relative_to_state(run: &str) -> PathBuf {
        Path::new("runs").join(run)
    }
    /// Where every run's directory is.
    pub fn all(state: &StateDir) -> PathBuf {
        state.file("runs")
    }
    pub fn run(&self) -> &str {
        &self.run
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The run's journal, `journal.jsonl`.
    pub fn journal(&self) -> PathBuf {
        self.path.join("journal.jsonl")
    }
    /// recover's decisions, `recover.json` (written before the first step; `--resume` reads them).
    pub fn decisions(&self) -> PathBuf {
        self.path.join("recover.json")
    }
    /// `decisions()` relative to the state dir.
    pub fn decisions_relative(&self) -> PathBuf {
        Self::relative_to_state(&self.run).join("recover.json")
    }
    /// The baseline backup a finished recover took, `baseline.json`.
    pub fn baseline(&self) -> PathBuf {
        self.path.join("baseline.json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_spelled_once() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(&tmp.path().join("s")).unwrap();
        let d = RunDir::new(&state, "r1");
        assert_eq!(d.path(), state.path.join("runs/r1"));
        assert_eq!(d.journal(), state.path.join("runs/r1/journal.jsonl"));
        assert_eq!(d.decisions(), state.path.join("runs/r1/recover.json"));
        assert_eq!(d.decisions_relative(), Path::new("runs/r1/recover.json"));
        assert_eq!(d.baseline(), state.path.join("runs/r1/baseline.json"));
        assert_eq!(RunDir::all(&state), state.path.join("runs"));
    }
}
