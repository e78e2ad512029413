//! The driver's behaviour, tested once for every operation: a dry run, a live run, a resume after
//! a crash, Ctrl-C between steps, each exit code, the confirmation and the lock's refusals. The
//! operation here is a stand-in whose steps are real commands in a local shell (creating files
//! in a temporary directory); the operations' own decisions are table-tested in their folders.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::exec::{Output, Transport, UploadOutcome};
use crate::operations::runner::{LocalAct, StepCode};
use crate::plan::{RemoteCommand, Upload};
use crate::step_codes;

step_codes! {
    /// The stand-in's steps (S0: its decisions).
    enum T { S0 = "S0", S1 = "S1", S2 = "S2", S3 = "S3" }
}

/// A host that is this machine: commands run in a local shell (the host lock's directory moved
/// into the test's own), every line recorded; with `refuse_changes`, any command that is not
/// read-only and any upload fails the test instead (STYLE.md §7's dry-run transport).
struct Shell {
    locks: PathBuf,
    refuse_changes: bool,
    sent: Mutex<Vec<String>>,
}

#[async_trait]
impl Transport for Shell {
    fn host(&self) -> &str {
        "h1"
    }
    fn sudo(&self) -> bool {
        false
    }
    async fn run(&self, cmd: &RemoteCommand) -> Result<Output, crate::ssh::Error> {
        assert!(
            !self.refuse_changes || cmd.read_only,
            "a dry run sent a command that changes things: {}",
            cmd.line(false)
        );
        let mut cmd = cmd.clone();
        for a in cmd.argv.iter_mut() {
            if a == crate::operations::lock::HOST_LOCKS_DIR {
                *a = self.locks.to_string_lossy().into_owned();
            }
        }
        self.sent.lock().unwrap().push(cmd.line(false));
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(cmd.line(false))
            .output()
            .await
            .expect("sh");
        Ok(Output {
            status: out.status.code().map(|c| c as u32),
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }
    async fn upload(&self, u: &Upload) -> Result<UploadOutcome, crate::ssh::Error> {
        assert!(!self.refuse_changes, "a dry run uploaded {}", u.path);
        Ok(UploadOutcome::Unchanged)
    }
    async fn forward(&self, _h: &str, _p: u16) -> Result<(u16, crate::ssh::ForwardGuard), crate::ssh::Error> {
        unimplemented!("not used")
    }
}

const INV: &str = "apiVersion: hactl.io/v1alpha1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  ssh:\n    agent: true\n  hosts:\n    - { name: h1, address: 10.0.0.11, roles: [etcd] }\n  allowSingleMember: true\n";

struct Lab {
    tmp: tempfile::TempDir,
    inv: Inventory,
    state: StateDir,
    connect: ConnectSettings,
}

impl Lab {
    fn new() -> Lab {
        let tmp = tempfile::tempdir().unwrap();
        let inv = crate::inventory::load_str(Path::new("t.yaml"), INV).unwrap();
        let state = StateDir::open(&tmp.path().join("state")).unwrap();
        Lab {
            tmp,
            inv,
            state,
            connect: ConnectSettings::default(),
        }
    }
    fn ctx(&self) -> Context<'_> {
        Context::new(&self.inv, &self.state, &self.connect)
    }
    fn file(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
    fn shell(&self, refuse_changes: bool) -> Arc<Shell> {
        Arc::new(Shell {
            locks: self.tmp.path().join("host-locks"),
            refuse_changes,
            sent: Mutex::new(vec![]),
        })
    }
    fn host_lock(&self) -> PathBuf {
        self.tmp.path().join("host-locks/cluster/owner.json")
    }
    fn local_lock(&self) -> PathBuf {
        self.state.path.join("locks/cluster.lock")
    }
}

/// Creates a file on `h1`: done when it exists.
fn touch(code: T, path: &Path) -> JournaledStep {
    let p = path.to_string_lossy().into_owned();
    JournaledStep::new(code, format!("create {p}"), Some("h1"))
        .done_when(RemoteCommand::read_only(["test", "-e", &p]))
        .run(RemoteCommand::script(format!(
            "echo x >> '{p}.count' && touch '{p}'"
        )))
}

/// Sets a flag when it acts: the operator's Ctrl-C arriving while the step runs.
struct CtrlC(Arc<AtomicBool>);

#[async_trait]
impl LocalAct for CtrlC {
    fn describe(&self) -> String {
        "the operator presses Ctrl-C".into()
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        self.0.store(true, Ordering::SeqCst);
        Ok(serde_json::Value::Null)
    }
}

/// Refuses with `code` when it acts.
struct Gate(i32);

#[async_trait]
impl LocalAct for Gate {
    fn describe(&self) -> String {
        "a safety gate".into()
    }
    async fn act(&self, _t: &Transports) -> anyhow::Result<serde_json::Value> {
        Err(exit::refuse(self.0, "refused by R-test"))
    }
}

/// The stand-in operation.
struct Fake {
    shell: Arc<Shell>,
    steps: Vec<JournaledStep>,
    resume: Option<String>,
    confirmation: Confirmation,
    report: i32,
}

impl Fake {
    fn new(shell: Arc<Shell>, steps: Vec<JournaledStep>) -> Fake {
        Fake {
            shell,
            steps,
            resume: None,
            confirmation: Confirmation::Ask("the fake changes files".into()),
            report: exit::OK,
        }
    }
}

#[async_trait(?Send)]
impl Operation for Fake {
    fn kind(&self) -> &'static str {
        "fake"
    }
    fn command(&self) -> String {
        "fake h1".into()
    }
    fn run_id(&self, _ctx: &Context<'_>) -> anyhow::Result<RunId> {
        Ok(match &self.resume {
            Some(r) => RunId {
                id: r.clone(),
                resumed: true,
            },
            None => RunId {
                id: "fake-1".into(),
                resumed: false,
            },
        })
    }
    async fn reach(&mut self, _ctx: &Context<'_>) -> anyhow::Result<Transports> {
        let mut t = Transports::new();
        t.insert("h1".into(), self.shell.clone() as Arc<dyn Transport>);
        Ok(t)
    }
    async fn plan(&mut self, _ctx: &Context<'_>, run: &RunId, _t: &Transports) -> anyhow::Result<Planned> {
        Ok(Planned {
            summary: "fake: three files on h1\n".into(),
            decisions: serde_json::json!({ "files": 3 }),
            steps: self.steps.clone(),
            confirmation: self.confirmation.clone(),
            resume: format!("hactl fake --resume {}", run.id),
            mirror_hosts: vec![],
            decided: vec![(T::S0.into(), serde_json::json!({ "decided": true }))],
        })
    }
    async fn report(
        &mut self,
        _ctx: &Context<'_>,
        run: &RunId,
        outcome: &Outcome,
        _took: Duration,
    ) -> anyhow::Result<Report> {
        Ok(Report {
            code: self.report,
            text: format!(
                "fake: run {} done ({} done, {} skipped)\n",
                run.id,
                outcome.done.len(),
                outcome.skipped.len()
            ),
        })
    }
}

fn three(lab: &Lab) -> Vec<JournaledStep> {
    vec![
        touch(T::S1, &lab.file("a")),
        touch(T::S2, &lab.file("b")),
        touch(T::S3, &lab.file("c")),
    ]
}

fn yes() -> Flags {
    Flags {
        yes: true,
        ..Flags::default()
    }
}

fn code_of(r: anyhow::Result<i32>) -> i32 {
    match r {
        Ok(c) => c,
        Err(e) => exit::exit_code_of(&e),
    }
}

#[tokio::test]
async fn a_dry_run_prints_exactly_the_steps_and_sends_and_writes_nothing() {
    let lab = Lab::new();
    let shell = lab.shell(true);
    let mut op = Fake::new(shell.clone(), three(&lab));
    let flags = Flags {
        dry_run: true,
        ..Flags::default()
    };
    assert_eq!(run(&mut op, &lab.ctx(), &flags).await.unwrap(), exit::OK);
    // Only the identity check's read-only probe was sent (the shell refuses anything else).
    let probe = crate::identity::probe_command().line(false);
    assert!(
        shell.sent.lock().unwrap().iter().all(|l| *l == probe),
        "{:?}",
        shell.sent
    );
    for f in ["a", "b", "c"] {
        assert!(!lab.file(f).exists());
    }
    assert!(!lab.state.path.join("runs").exists(), "a dry run wrote a journal");
    assert!(!lab.local_lock().exists() && !lab.host_lock().exists());
    // What it prints: the summary, then each step as the runner sends it; as JSON the same steps.
    let planned = op
        .plan(&lab.ctx(), &op.run_id(&lab.ctx()).unwrap(), &Transports::new())
        .await
        .unwrap();
    let text = plan_text(&planned, &lab.inv);
    let want: String = std::iter::once("fake: three files on h1\n".to_string())
        .chain(op.steps.iter().map(|s| s.render(false)))
        .collect();
    assert_eq!(text, want);
    assert!(
        text.contains(&format!("    skip when: test -e {}\n", lab.file("a").display())),
        "{text}"
    );
    let json = plan_json(
        "fake",
        &RunId {
            id: "fake-1".into(),
            resumed: false,
        },
        &planned,
        &lab.inv,
    );
    let printed: serde_json::Value =
        serde_json::from_str(&serde_json::to_string(&crate::output::document(PLAN_KIND, &json)).unwrap())
            .unwrap();
    assert_eq!(printed["apiVersion"], API_VERSION);
    assert_eq!(printed["kind"], PLAN_KIND);
    assert_eq!(json["operation"], "fake");
    assert_eq!(json["run"], "fake-1");
    assert_eq!(json["decisions"]["files"], 3);
    assert_eq!(json["confirmation"], "the fake changes files");
    assert_eq!(json["resume"], "hactl fake --resume fake-1");
    let ids: Vec<&str> = json["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["S1", "S2", "S3"]);
    assert_eq!(json["steps"][0]["code"], "S1");
    assert!(json["steps"][0]["onFailure"].is_null() && json["steps"][0]["group"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_takes_the_lock_journals_its_decisions_runs_every_step_and_gives_the_lock_back() {
    let lab = Lab::new();
    let shell = lab.shell(false);
    let mut op = Fake::new(shell.clone(), three(&lab));
    assert_eq!(run(&mut op, &lab.ctx(), &yes()).await.unwrap(), exit::OK);
    for f in ["a", "b", "c"] {
        assert!(lab.file(f).exists());
    }
    let sent = shell.sent.lock().unwrap().clone();
    // The identity check reads the trust files first (read-only), then the lock is taken
    // before anything changes.
    assert_eq!(sent[0], crate::identity::probe_command().line(false));
    assert!(
        sent[1].contains("hactl-lock"),
        "the lock comes before any change: {sent:?}"
    );
    assert!(
        sent.last().unwrap().contains("hactl-unlock"),
        "and is given back last: {sent:?}"
    );
    assert!(!lab.local_lock().exists() && !lab.host_lock().exists());
    let journal = crate::operations::journal::read_run(&lab.state, "fake-1").unwrap();
    let lines: Vec<(&str, StepState)> = journal.iter().map(|e| (e.step.as_str(), e.phase)).collect();
    assert_eq!(lines[0], ("S0", StepState::Done));
    assert_eq!(lines.last().unwrap(), &("S3", StepState::Done));
    let saved = fs_err::read_to_string(RunDir::new(&lab.state, "fake-1").decisions()).unwrap();
    assert!(saved.contains("\"files\": 3"), "{saved}");
    // A degraded verification is the report's code.
    let lab = Lab::new();
    let mut op = Fake::new(lab.shell(false), three(&lab));
    op.report = exit::DEGRADED;
    assert_eq!(run(&mut op, &lab.ctx(), &yes()).await.unwrap(), exit::DEGRADED);
}

/// The crashing half of [`a_run_that_crashed_resumes_where_the_hosts_say_it_stopped`]: the
/// stand-in run in `dir` by a child process of the test, with `HACTL_CRASH_AFTER` set.
async fn crash_in(dir: &Path) {
    let inv = crate::inventory::load_str(Path::new("t.yaml"), INV).unwrap();
    let state = StateDir::open(&dir.join("state")).unwrap();
    let connect = ConnectSettings::default();
    let shell = Arc::new(Shell {
        locks: dir.join("host-locks"),
        refuse_changes: false,
        sent: Mutex::new(vec![]),
    });
    let steps = vec![
        touch(T::S1, &dir.join("a")),
        touch(T::S2, &dir.join("b")),
        touch(T::S3, &dir.join("c")),
    ];
    let mut op = Fake::new(shell, steps);
    let ctx = Context::new(&inv, &state, &connect);
    let _ = run(&mut op, &ctx, &yes()).await;
    panic!("HACTL_CRASH_AFTER did not crash the run");
}

/// The test runs itself again as a child process (`HACTL_MANAGER_TEST_DIR` set) that crashes
/// after S2, then resumes the run.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_crashed_resumes_where_the_hosts_say_it_stopped() {
    if let Ok(dir) = std::env::var("HACTL_MANAGER_TEST_DIR") {
        return crash_in(Path::new(&dir)).await;
    }
    let lab = Lab::new();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "operations::manager::tests::a_run_that_crashed_resumes_where_the_hosts_say_it_stopped",
            "--nocapture",
        ])
        .env("HACTL_MANAGER_TEST_DIR", lab.tmp.path())
        .env(crate::operations::journal::CRASH_AFTER_ENV, "S2")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(crate::operations::journal::CRASH_EXIT_CODE),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lab.file("b").exists() && !lab.file("c").exists());
    // The dead run left its lock, locally and on the host: it is this machine's and its process
    // is gone, so the resume takes both over.
    assert!(lab.local_lock().exists() && lab.host_lock().exists());
    let shell = lab.shell(false);
    let mut op = Fake::new(shell, three(&lab));
    op.resume = Some("fake-1".into());
    assert_eq!(run(&mut op, &lab.ctx(), &yes()).await.unwrap(), exit::OK);
    assert!(lab.file("c").exists());
    // Nothing acted twice: the postconditions skipped S1 and S2.
    assert_eq!(fs_err::read_to_string(lab.file("a.count")).unwrap(), "x\n");
    assert_eq!(fs_err::read_to_string(lab.file("b.count")).unwrap(), "x\n");
    let journal = crate::operations::journal::read_run(&lab.state, "fake-1").unwrap();
    assert!(journal
        .iter()
        .any(|e| e.step == "S2" && e.phase == StepState::Skipped));
    assert!(!lab.local_lock().exists() && !lab.host_lock().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_stops_between_steps_and_says_how_to_resume() {
    let lab = Lab::new();
    let stop = Arc::new(AtomicBool::new(false));
    let steps = vec![
        touch(T::S1, &lab.file("a")).local(Arc::new(CtrlC(stop.clone()))),
        touch(T::S2, &lab.file("b")),
        touch(T::S3, &lab.file("c")),
    ];
    let mut op = Fake::new(lab.shell(false), steps);
    let flags = Flags {
        stop: Some(stop.clone()),
        ..yes()
    };
    let e = run(&mut op, &lab.ctx(), &flags).await.unwrap_err();
    assert_eq!(exit::exit_code_of(&e), exit::FAILED_AFTER_CHANGES, "{e:#}");
    let m = format!("{e:#}");
    assert!(m.contains("fake interrupted before step S2"), "{m}");
    assert!(m.contains("continue with `hactl fake --resume fake-1`"), "{m}");
    assert!(lab.file("a").exists() && !lab.file("b").exists());
    assert!(
        !lab.local_lock().exists() && !lab.host_lock().exists(),
        "the lock is given back"
    );
    // Before any change: nothing to resume, exit 1.
    let lab = Lab::new();
    let stop = Arc::new(AtomicBool::new(true));
    let mut op = Fake::new(lab.shell(false), three(&lab));
    let e = run(
        &mut op,
        &lab.ctx(),
        &Flags {
            stop: Some(stop),
            ..yes()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(exit::exit_code_of(&e), exit::FAILED);
    assert!(format!("{e:#}").contains("nothing was changed"), "{e:#}");
    assert!(!lab.file("a").exists());
}

/// The steps of case `n` of [`each_way_a_run_stops_has_its_exit_code`] in `lab`, and the exit code
/// they end with; `None` past the last case.
fn exit_case(n: usize, lab: &Lab) -> Option<(Vec<JournaledStep>, i32)> {
    let step = |code: T| touch(code, &lab.file(code.code()));
    let fails = |code: T| JournaledStep::new(code, "fails", Some("h1")).run(RemoteCommand::new(["false"]));
    let gate = |code: T, c: i32| JournaledStep::new(code, "gate", None).local(Arc::new(Gate(c)));
    Some(match n {
        // A precheck that does not hold: refused (2), nothing changed.
        0 => (
            vec![step(T::S1).precheck(RemoteCommand::read_only(["false"]))],
            exit::REFUSED,
        ),
        // A step that only checks fails before any change: refused (2).
        1 => (vec![fails(T::S1).no_cluster_change()], exit::REFUSED),
        // A postcondition that cannot be read (no connection to the host): failed (1).
        2 => (
            vec![JournaledStep::new(T::S1, "elsewhere", Some("h9"))
                .done_when(RemoteCommand::read_only(["true"]))],
            exit::FAILED,
        ),
        // A safety gate before any change keeps its code.
        3 => (vec![gate(T::S1, exit::REFUSED)], exit::REFUSED),
        // A step that failed halfway through its act: failed after changes (4).
        4 => (vec![fails(T::S1)], exit::FAILED_AFTER_CHANGES),
        // After a change: failed after changes (4), also when a gate refuses.
        5 => (vec![step(T::S1), fails(T::S2)], exit::FAILED_AFTER_CHANGES),
        6 => (
            vec![step(T::S1), gate(T::S2, exit::REFUSED)],
            exit::FAILED_AFTER_CHANGES,
        ),
        // A step that needs the operator (an attestation) keeps 3, before or after changes.
        7 => (
            vec![step(T::S1), gate(T::S2, exit::NEEDS_INPUT)],
            exit::NEEDS_INPUT,
        ),
        8 => (vec![gate(T::S1, exit::NEEDS_INPUT)], exit::NEEDS_INPUT),
        // Every step done: 0.
        9 => (
            vec![step(T::S1).precheck(RemoteCommand::read_only(["true"]))],
            exit::OK,
        ),
        _ => return None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn each_way_a_run_stops_has_its_exit_code() {
    for n in 0.. {
        let lab = Lab::new();
        let Some((steps, want)) = exit_case(n, &lab) else {
            assert_eq!(n, 10);
            break;
        };
        let mut op = Fake::new(lab.shell(false), steps);
        let got = code_of(run(&mut op, &lab.ctx(), &yes()).await);
        assert_eq!(got, want, "case {n}");
        assert!(
            !lab.local_lock().exists() && !lab.host_lock().exists(),
            "case {n}"
        );
        if want != exit::OK && want != exit::FAILED_AFTER_CHANGES {
            assert!(!lab.file("S1").exists() || n == 7, "case {n} changed something");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn answering_no_changes_nothing_and_is_not_a_safety_refusal() {
    let lab = Lab::new();
    let shell = lab.shell(false);
    let mut op = Fake::new(shell.clone(), three(&lab));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let flags = Flags {
        ask: Some(Arc::new(move |q: &str| {
            seen.lock().unwrap().push(q.to_string());
            Err(exit::refuse(exit::DECLINED, "not confirmed: nothing was changed"))
        })),
        ..Flags::default()
    };
    let e = run(&mut op, &lab.ctx(), &flags).await.unwrap_err();
    assert_eq!(exit::exit_code_of(&e), exit::DECLINED);
    assert_ne!(exit::DECLINED, exit::REFUSED);
    assert_eq!(asked.lock().unwrap().as_slice(), ["the fake changes files"]);
    assert!(!lab.file("a").exists());
    assert!(
        !lab.state.path.join("runs").exists(),
        "a declined run left a journal"
    );
    assert!(!lab.local_lock().exists() && !lab.host_lock().exists());
    // --yes does not ask; a resumed run does not ask either.
    let mut op = Fake::new(shell, three(&lab));
    op.resume = Some("fake-2".into());
    assert_eq!(run(&mut op, &lab.ctx(), &flags).await.unwrap(), exit::OK);
    assert_eq!(asked.lock().unwrap().len(), 1);
}

/// `reset`'s confirmation: `--yes` skips the typed name; without it and without a terminal (as
/// under the test runner) the run needs input and changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_typed_name_unless_yes_is_skipped_by_yes_and_needs_input_without_a_terminal() {
    assert!(
        !std::io::IsTerminal::is_terminal(&std::io::stdin()),
        "this test needs stdin not to be a terminal"
    );
    let lab = Lab::new();
    let shell = lab.shell(false);
    let confirmation = Confirmation::TypeNameUnlessYes {
        what: "this removes the fake".into(),
        name: "fake".into(),
    };
    let mut op = Fake::new(shell.clone(), three(&lab));
    op.confirmation = confirmation.clone();
    let e = run(&mut op, &lab.ctx(), &Flags::default()).await.unwrap_err();
    assert_eq!(exit::exit_code_of(&e), exit::NEEDS_INPUT);
    let text = format!("{e:#}");
    assert!(
        text.contains("this removes the fake; no terminal to confirm on: run again with --yes"),
        "{text}"
    );
    assert!(!lab.file("a").exists());
    assert!(!lab.local_lock().exists() && !lab.host_lock().exists());
    let mut op = Fake::new(shell, three(&lab));
    op.confirmation = confirmation;
    assert_eq!(run(&mut op, &lab.ctx(), &yes()).await.unwrap(), exit::OK);
    assert!(lab.file("a").exists() && lab.file("c").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_held_elsewhere_refuses_naming_its_holder_and_changes_nothing() {
    let lab = Lab::new();
    // Another operator machine holds the lock on h1.
    let other = Owner {
        command: "replace cp3".into(),
        run: "replace-cp3-20261122-024217-ab12".into(),
        operator: "ops@laptop".into(),
        machine: "another-machine".into(),
        pid: 4242,
        since: "2026-11-22T02:42:17.000Z".into(),
    };
    fs_err::create_dir_all(lab.host_lock().parent().unwrap()).unwrap();
    fs_err::write(
        lab.host_lock(),
        format!("{}\n", serde_json::to_string(&other).unwrap()),
    )
    .unwrap();
    let shell = lab.shell(false);
    let mut op = Fake::new(shell.clone(), three(&lab));
    let e = run(&mut op, &lab.ctx(), &yes()).await.unwrap_err();
    assert_eq!(exit::exit_code_of(&e), exit::NEEDS_INPUT);
    let m = format!("{e:#}");
    for want in [
        "host h1",
        "`hactl replace cp3`",
        "run replace-cp3-20261122-024217-ab12",
        "ops@laptop",
        "since 2026-11-22T02:42:17",
        "wait",
        "--steal-lock replace-cp3-20261122-024217-ab12",
    ] {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert!(!lab.file("a").exists());
    assert!(!lab.state.path.join("runs").exists());
    assert!(!lab.local_lock().exists(), "the local half is given back");
    assert!(
        fs_err::read_to_string(lab.host_lock())
            .unwrap()
            .contains("ops@laptop"),
        "the holder keeps its lock"
    );
    // Named with --steal-lock, it is taken over, and given back at the end.
    let mut op = Fake::new(shell, three(&lab));
    let flags = Flags {
        steal_lock: Some(other.run.clone()),
        ..yes()
    };
    assert_eq!(run(&mut op, &lab.ctx(), &flags).await.unwrap(), exit::OK);
    assert!(lab.file("c").exists() && !lab.host_lock().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_holder_on_this_machine_is_never_taken_over() {
    let lab = Lab::new();
    // This process holds it (as another run): alive, so refused, even when named.
    let me = Owner::new("maintenance start h1", "maintenance-h1-1");
    fs_err::create_dir_all(lab.host_lock().parent().unwrap()).unwrap();
    fs_err::write(lab.host_lock(), serde_json::to_string(&me).unwrap()).unwrap();
    for steal in [None, Some(me.run.clone())] {
        let mut op = Fake::new(lab.shell(false), three(&lab));
        let flags = Flags {
            steal_lock: steal.clone(),
            ..yes()
        };
        let e = run(&mut op, &lab.ctx(), &flags).await.unwrap_err();
        assert_eq!(exit::exit_code_of(&e), exit::NEEDS_INPUT);
        let m = format!("{e:#}");
        assert!(m.contains("running on this machine"), "{m}");
        assert!(!m.contains("take the lock over with --steal-lock"), "{m}");
        assert!(!lab.file("a").exists());
    }
    // The same holder, its process gone: proven dead, taken over without asking.
    let mut dead = me;
    dead.pid = 4_194_305;
    fs_err::write(lab.host_lock(), serde_json::to_string(&dead).unwrap()).unwrap();
    let mut op = Fake::new(lab.shell(false), three(&lab));
    assert_eq!(run(&mut op, &lab.ctx(), &yes()).await.unwrap(), exit::OK);
}

#[test]
fn the_exit_code_table() {
    let f = |stage: Stage, changed: bool, check_only: bool, source: anyhow::Error| StepFailed {
        step: "S1".into(),
        code: "S1",
        host: None,
        stage,
        changed,
        check_only,
        rolled_back: None,
        source,
    };
    let plain = || anyhow::anyhow!("it failed");
    let refusal = |c| exit::refuse(c, "refused by R-x");
    let cases = [
        (f(Stage::Act, false, false, plain()), exit::FAILED),
        (f(Stage::Postcondition, false, false, plain()), exit::FAILED),
        (f(Stage::Precheck, false, false, plain()), exit::REFUSED),
        (f(Stage::Verify, false, true, plain()), exit::REFUSED),
        (f(Stage::Act, false, false, refusal(exit::REFUSED)), exit::REFUSED),
        (f(Stage::Act, true, false, plain()), exit::FAILED_AFTER_CHANGES),
        (
            f(Stage::Act, true, false, refusal(exit::REFUSED)),
            exit::FAILED_AFTER_CHANGES,
        ),
        (
            f(Stage::Act, true, false, refusal(exit::NEEDS_INPUT)),
            exit::NEEDS_INPUT,
        ),
        (
            f(Stage::Act, false, false, refusal(exit::NEEDS_INPUT)),
            exit::NEEDS_INPUT,
        ),
        (
            f(Stage::Interrupted, true, false, plain()),
            exit::FAILED_AFTER_CHANGES,
        ),
        (f(Stage::Interrupted, false, false, plain()), exit::FAILED),
    ];
    for (i, (failed, want)) in cases.iter().enumerate() {
        assert_eq!(exit_code(failed), *want, "case {i}: {failed:?}");
    }
}
