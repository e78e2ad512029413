//! Plans as data: phases produce [`Step`]s for hosts; `exec` runs them (Live) or prints them (DryRun).
//!
//! Invariants:
//! - nothing in this module or in `phases/` opens a connection or touches a file;
//! - the text printed for a [`RemoteCommand`] is the exact line `Live` sends over SSH
//!   (both come from [`crate::quote::command_line`]);
//! - an [`Upload`] prints path, mode, owner, size and sha256, never its content.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::quote;

/// One change or check on one host. Built by phases; run or recorded by `exec`.
#[derive(Debug, Clone)]
pub enum Step {
    /// Write a file; skipped when the remote sha256 already matches.
    Upload(Upload),
    /// Run a command.
    Run(RemoteCommand),
    /// Poll a read-only probe until it holds or its deadline passes.
    Wait(Check),
    /// A request to the Kubernetes API, sent from the operator machine with hactl's admin
    /// credential (the host names the object it is about; `exec` needs an [`ApiSender`]).
    Api(ApiRequest),
}

/// A request to the Kubernetes API, as data: what a dry run prints is what a run sends.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    /// `PATCH`, `DELETE`, …
    pub method: String,
    /// `/api/v1/nodes/cp1`.
    pub path: String,
    /// The body's media type (`application/merge-patch+json`); empty without a body.
    pub content_type: String,
    pub body: Option<serde_json::Value>,
}

impl ApiRequest {
    /// A JSON merge patch of the object at `path`.
    pub fn merge_patch(path: impl Into<String>, body: serde_json::Value) -> ApiRequest {
        ApiRequest {
            method: "PATCH".into(),
            path: path.into(),
            content_type: "application/merge-patch+json".into(),
            body: Some(body),
        }
    }
}

impl fmt::Display for ApiRequest {
    /// `PATCH /api/v1/nodes/cp1 {"metadata":…}`: the method, the path and the body as sent.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if let Some(body) = &self.body {
            write!(f, " {body}")?;
        }
        Ok(())
    }
}

/// Sends [`ApiRequest`]s for `exec` (implemented above the executor, by whoever holds the
/// credentials: bring-up's admin client through a control-plane host).
#[async_trait::async_trait]
pub trait ApiSender: Send + Sync {
    async fn send(&self, request: &ApiRequest) -> anyhow::Result<()>;
}

impl Step {
    /// The step as data, commands as a host with this `sudo` setting is sent them: what `plan -o
    /// json` and `recover --dry-run -o json` print. `kind` is `upload`, `run` or `wait`.
    pub fn to_json(&self, sudo: bool) -> serde_json::Value {
        match self {
            Step::Upload(u) => u.to_json(),
            Step::Run(c) => serde_json::json!({
                "kind": "run",
                "command": c.line(sudo),
                "readOnly": c.read_only,
                "timeoutSecs": c.timeout.as_secs(),
            }),
            Step::Wait(c) => c.to_json(sudo),
            Step::Api(r) => serde_json::json!({
                "kind": "api",
                "method": r.method,
                "path": r.path,
                "body": r.body,
            }),
        }
    }
}

/// A command given as an exact argv; quoted once, in [`quote`], when it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCommand {
    pub argv: Vec<String>,
    /// True when the command only reads (facts, probes). A dry run may send read-only commands.
    pub read_only: bool,
    /// Give up after this long; the command's channel is closed.
    pub timeout: Duration,
    /// The most bytes of stdout, and of stderr, kept in memory; past it the command is ended and
    /// its run fails naming the command and the limit ([`crate::bounded::COMMAND_OUTPUT`]
    /// unless set with [`RemoteCommand::with_output_limit`]).
    pub output_limit: u64,
}

impl RemoteCommand {
    /// A command that changes the host.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RemoteCommand {
            argv: argv.into_iter().map(Into::into).collect(),
            read_only: false,
            timeout: Duration::from_secs(120),
            output_limit: crate::bounded::COMMAND_OUTPUT,
        }
    }
    /// A command that only reads.
    pub fn read_only<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RemoteCommand {
            read_only: true,
            ..Self::new(argv)
        }
    }
    /// A shell script run with `sh -c` (for pipelines that must run on the host in one round trip).
    pub fn script(script: impl Into<String>) -> Self {
        Self::new(["sh".to_string(), "-c".to_string(), script.into()])
    }
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    /// A command whose output is larger than most (a snapshot read with `cat`).
    pub fn with_output_limit(mut self, bytes: u64) -> Self {
        self.output_limit = bytes;
        self
    }
    /// The exact line sent over SSH for a host with or without sudo.
    pub fn line(&self, sudo: bool) -> String {
        quote::command_line(&self.argv, sudo)
    }
    /// Tests: runs the exact line (without sudo) in a local `shell` (`sh`: dash here, as on the
    /// hosts; `bash`).
    #[cfg(test)]
    pub fn run_in(&self, shell: &str) -> std::process::Output {
        std::process::Command::new(shell)
            .arg("-c")
            .arg(self.line(false))
            .output()
            .unwrap()
    }
}

impl fmt::Display for RemoteCommand {
    /// Without sudo; `exec` prints [`RemoteCommand::line`] with the host's sudo setting.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line(false))
    }
}

/// What an [`Upload`] writes: bytes held in memory (rendered files, keys), or a file on the
/// operator machine (a binary, an image archive) that is read only when it is sent, streamed,
/// and checked against the upload's sha256 on the way: a file that changed after it was
/// planned is refused, never placed.
#[derive(Clone, PartialEq, Eq)]
pub enum Content {
    Bytes(Arc<Vec<u8>>),
    File {
        local: Arc<std::path::PathBuf>,
        size: u64,
    },
}

impl Content {
    pub fn len(&self) -> u64 {
        match self {
            Content::Bytes(b) => b.len() as u64,
            Content::File { size, .. } => *size,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, when they are held in memory.
    pub fn in_memory(&self) -> Option<&[u8]> {
        match self {
            Content::Bytes(b) => Some(b),
            Content::File { .. } => None,
        }
    }
}

/// A file's content with its sha256 (hex), as binaries and image archives are handed to the
/// phases: the digest of a file on the operator machine comes from
/// [`crate::local_digests`], so it is not read again on every run.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    pub content: Content,
    pub sha256: String,
}

impl Blob {
    /// Bytes in memory, hashed here.
    pub fn bytes(content: Vec<u8>) -> Self {
        Blob {
            sha256: hex::encode(Sha256::digest(&content)),
            content: Content::Bytes(Arc::new(content)),
        }
    }
    /// A file on this machine whose size and sha256 the caller has read.
    pub fn file(local: impl Into<std::path::PathBuf>, size: u64, sha256: impl Into<String>) -> Self {
        Blob {
            content: Content::File {
                local: Arc::new(local.into()),
                size,
            },
            sha256: sha256.into(),
        }
    }
}

impl fmt::Debug for Blob {
    /// Never prints content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.content {
            Content::Bytes(b) => write!(f, "Blob({} bytes, sha256={})", b.len(), self.sha256),
            Content::File { local, size } => {
                write!(
                    f,
                    "Blob({}, {size} bytes, sha256={})",
                    local.display(),
                    self.sha256
                )
            }
        }
    }
}

/// A file to place on a host: written to `<dir>/.<name>.hactl-tmp` (a name the kubelet's static-pod
/// directory and other directory readers skip), then renamed, mode and owner set.
#[derive(Clone, PartialEq, Eq)]
pub struct Upload {
    pub path: String,
    pub mode: u32,
    pub owner: String,
    pub group: String,
    pub content: Content,
    /// Hex sha256 of `content`.
    pub sha256: String,
    /// The content holds a short secret (see [`Upload::short_secret`]): its hash is not printed.
    pub short_secret: bool,
}

impl Upload {
    pub fn new(path: impl Into<String>, mode: u32, owner: &str, group: &str, content: Vec<u8>) -> Self {
        Self::of(path, mode, owner, group, &Blob::bytes(content))
    }
    /// A [`Blob`] (its digest already known: nothing is read or hashed here).
    pub fn of(path: impl Into<String>, mode: u32, owner: &str, group: &str, blob: &Blob) -> Self {
        Upload {
            path: path.into(),
            mode,
            owner: owner.to_string(),
            group: group.to_string(),
            content: blob.content.clone(),
            sha256: blob.sha256.clone(),
            short_secret: false,
        }
    }
    /// Marks the content as holding a short secret (the VRRP password: 8 characters at most).
    /// Its sha256 would let anyone who reads a plan try every password offline against the
    /// rendered template, so plans print `sha256=withheld` for it (long keys need no such care).
    pub fn short_secret(mut self) -> Self {
        self.short_secret = true;
        self
    }
    pub fn size(&self) -> u64 {
        self.content.len()
    }
    /// The content as a [`Blob`].
    pub fn blob(&self) -> Blob {
        Blob {
            content: self.content.clone(),
            sha256: self.sha256.clone(),
        }
    }
}

impl fmt::Debug for Upload {
    /// Never prints content: keys stay out of logs and snapshots.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Upload({self})")
    }
}

impl Upload {
    /// Path, mode, owner, group, size and sha256 as data, never the content; `sha256` is null
    /// where the text says "withheld" (a short secret's hash could be reversed by trying values).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "upload",
            "path": self.path,
            "mode": format!("{:04o}", self.mode),
            "owner": self.owner,
            "group": self.group,
            "size": self.size(),
            "sha256": (!self.short_secret).then_some(&self.sha256),
        })
    }
}

impl fmt::Display for Upload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sha256 = if self.short_secret {
            "withheld (the file holds a short secret)"
        } else {
            &self.sha256
        };
        write!(
            f,
            "{} mode={:04o} owner={}:{} size={} sha256={sha256}",
            self.path,
            self.mode,
            self.owner,
            self.group,
            self.size(),
        )
    }
}

/// A read-only probe polled until it holds.
#[derive(Debug, Clone)]
pub struct Check {
    /// What holding means, for people: `etcd member cp1 is healthy`.
    pub description: String,
    pub probe: Probe,
    pub timeout: Duration,
    /// Run when the check times out; its output goes into the error (e.g. a journal tail).
    pub diagnose: Option<RemoteCommand>,
}

impl Check {
    /// Holds when `cmd` (made read-only here) exits 0 within `timeout`.
    pub fn command(description: impl Into<String>, cmd: RemoteCommand, timeout: Duration) -> Check {
        Check {
            description: description.into(),
            probe: Probe::Command(RemoteCommand {
                read_only: true,
                ..cmd
            }),
            timeout,
            diagnose: None,
        }
    }
    /// `wait up to Ns: <description> (<probe as sent with this sudo setting>)`.
    pub fn line(&self, sudo: bool) -> String {
        match &self.probe {
            Probe::Command(c) => format!(
                "wait up to {}s: {} ({})",
                self.timeout.as_secs(),
                self.description,
                c.line(sudo)
            ),
        }
    }
    /// The check as data: `{"kind": "wait", "description", "command", "timeoutSecs"}`.
    pub fn to_json(&self, sudo: bool) -> serde_json::Value {
        match &self.probe {
            Probe::Command(cmd) => serde_json::json!({
                "kind": "wait",
                "description": self.description,
                "command": cmd.line(sudo),
                "timeoutSecs": self.timeout.as_secs(),
            }),
        }
    }
    pub fn diagnose_with(mut self, cmd: RemoteCommand) -> Check {
        self.diagnose = Some(RemoteCommand {
            read_only: true,
            ..cmd
        });
        self
    }
}

#[derive(Debug, Clone)]
pub enum Probe {
    /// Holds when the command exits 0.
    Command(RemoteCommand),
}

impl fmt::Display for Check {
    /// Without sudo, like [`RemoteCommand`]'s Display; see [`Check::line`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.line(false))
    }
}

/// How a phase spreads over its hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// Every host at once (within `--concurrency`).
    All,
    /// One host after the other, each finishing before the next starts: quorum members.
    OneAtATime,
}

/// One phase of a plan with the steps for each of its hosts, hosts in inventory order.
#[derive(Debug, Clone)]
pub struct PlannedPhase {
    pub title: String,
    pub parallelism: Parallelism,
    /// Restarts or stops something that serves (asks for confirmation on a terminal).
    pub disruptive: bool,
    pub hosts: Vec<HostSteps>,
}

#[derive(Debug, Clone)]
pub struct HostSteps {
    pub host: String,
    /// Whether commands on this host are sent through `sudo -n --`.
    pub sudo: bool,
    pub steps: Vec<Step>,
}

/// A whole plan: phases in order. Empty phases are dropped when the plan is built.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub phases: Vec<PlannedPhase>,
}

impl Plan {
    /// Whether any phase restarts or stops something that serves.
    pub fn is_disruptive(&self) -> bool {
        self.phases.iter().any(|p| p.disruptive)
    }
    pub fn is_empty(&self) -> bool {
        self.phases
            .iter()
            .all(|p| p.hosts.iter().all(|h| h.steps.is_empty()))
    }
    /// Adds a phase, dropping hosts with no steps and the phase itself when nothing is left.
    pub fn push(&mut self, phase: PlannedPhase) {
        let hosts: Vec<HostSteps> = phase.hosts.into_iter().filter(|h| !h.steps.is_empty()).collect();
        if !hosts.is_empty() {
            self.phases.push(PlannedPhase { hosts, ..phase });
        }
    }
}

/// The `kind` of `hactl plan -o json`'s document (and of `certs renew --dry-run -o json`).
pub const JSON_KIND: &str = "Plan";

impl Plan {
    /// The plan as data, for `hactl plan -o json`: the same phases, hosts and lines as the text
    /// (commands as sent, with the host's sudo prefix), uploads without their content.
    pub fn to_json(&self) -> serde_json::Value {
        let phases: Vec<serde_json::Value> = self
            .phases
            .iter()
            .map(|phase| {
                let hosts: Vec<serde_json::Value> = phase
                    .hosts
                    .iter()
                    .map(|h| {
                        let steps: Vec<serde_json::Value> =
                            h.steps.iter().map(|step| step.to_json(h.sudo)).collect();
                        serde_json::json!({ "host": h.host, "steps": steps })
                    })
                    .collect();
                serde_json::json!({
                    "title": phase.title,
                    "parallelism": match phase.parallelism {
                        Parallelism::All => "all",
                        Parallelism::OneAtATime => "one-at-a-time",
                    },
                    "disruptive": phase.disruptive,
                    "hosts": hosts,
                })
            })
            .collect();
        serde_json::json!({ "changes": !self.is_empty(), "phases": phases })
    }
}

impl fmt::Display for Plan {
    /// The text `hactl plan` prints: per phase, per host in inventory order, the exact lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "no changes");
        }
        for phase in &self.phases {
            let how = match phase.parallelism {
                Parallelism::All => "",
                Parallelism::OneAtATime => " (one host at a time)",
            };
            writeln!(f, "== {}{}", phase.title, how)?;
            for h in &phase.hosts {
                for step in &h.steps {
                    match step {
                        Step::Upload(u) => writeln!(f, "{}: write {}", h.host, u)?,
                        Step::Run(c) => writeln!(f, "{}: run {}", h.host, c.line(h.sudo))?,
                        Step::Wait(c) => match &c.probe {
                            Probe::Command(cmd) => writeln!(
                                f,
                                "{}: wait up to {}s: {} ({})",
                                h.host,
                                c.timeout.as_secs(),
                                c.description,
                                cmd.line(h.sudo)
                            )?,
                        },
                        Step::Api(r) => writeln!(f, "{}: api {r}", h.host)?,
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_plan_has_the_texts_lines_and_no_file_content() {
        let mut plan = Plan::default();
        plan.push(PlannedPhase {
            title: "Start etcd".into(),
            parallelism: Parallelism::OneAtATime,
            disruptive: true,
            hosts: vec![HostSteps {
                host: "cp1".into(),
                sudo: true,
                steps: vec![
                    Step::Upload(Upload::new(
                        "/etc/hactl/key.pem",
                        0o600,
                        "etcd",
                        "etcd",
                        b"SECRET".to_vec(),
                    )),
                    Step::Run(RemoteCommand::new(["systemctl", "restart", "etcd"])),
                    Step::Wait(Check::command(
                        "etcd is healthy",
                        RemoteCommand::new(["true"]),
                        Duration::from_secs(30),
                    )),
                ],
            }],
        });
        let json = plan.to_json();
        let text = json.to_string();
        assert!(!text.contains("SECRET"), "{text}");
        assert_eq!(json["changes"], true);
        let phase = &json["phases"][0];
        assert_eq!(phase["title"], "Start etcd");
        assert_eq!(phase["parallelism"], "one-at-a-time");
        assert_eq!(phase["disruptive"], true);
        let steps = &phase["hosts"][0]["steps"];
        assert_eq!(steps[0]["kind"], "upload");
        assert_eq!(steps[0]["mode"], "0600");
        assert_eq!(steps[0]["size"], 6);
        assert_eq!(steps[1]["kind"], "run");
        // The same line the text plan prints and `Live` sends: with the host's sudo prefix.
        let line = RemoteCommand::new(["systemctl", "restart", "etcd"]).line(true);
        assert_eq!(steps[1]["command"], line.as_str());
        assert!(plan.to_string().contains(&format!("cp1: run {line}")));
        assert_eq!(steps[2]["kind"], "wait");
        assert_eq!(steps[2]["timeoutSecs"], 30);
        assert_eq!(
            Plan::default().to_json(),
            serde_json::json!({"changes": false, "phases": []})
        );
    }

    #[test]
    fn a_short_secrets_hash_is_withheld_in_json_as_in_text() {
        let u = Upload::new("/etc/keepalived/pass", 0o600, "root", "root", b"pw".to_vec()).short_secret();
        assert_eq!(u.to_json()["sha256"], serde_json::Value::Null);
        assert!(!u.to_string().contains(&u.sha256));
        let plain = Upload::new("/etc/a", 0o644, "root", "root", b"pw".to_vec());
        assert_eq!(plain.to_json()["sha256"], plain.sha256.as_str());
    }
}
