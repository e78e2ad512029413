//! Logs and progress on stderr; data on stdout.
//!
//! Invariants: nothing here prints to stdout, so `-o json` output stays parseable. Progress bars
//! exist only when stderr is a terminal; everywhere else (files, pipes, CI logs, journald) no bar
//! is created, so stderr carries the plain log lines alone, byte for byte as without bars, and no
//! escape code. On a terminal every bar belongs to one [`MultiProgress`] and each log line is
//! written with the bars hidden, so a line never lands inside a bar.
//!
//! Output to a closed stream ends quietly: the crate's `print!`/`println!`/`eprint!`/`eprintln!`
//! (defined in lib.rs over [`print_stdout`] and [`print_stderr`]) drop what a closed pipe cannot
//! take instead of panicking as std's do, so `hactl status | head -1` runs to its end and exits
//! with the command's own code; [`keep_standard_streams_open`] puts `/dev/null` on a closed fd
//! 0, 1 or 2 (`2>&-`), so no file hactl opens later can land on it and receive its output.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing_subscriber::EnvFilter;

/// A bar or spinner for counted work: `⠋  12s <message>` where the message comes from
/// [`counter_line`].
pub const COUNTER_TEMPLATE: &str = "{spinner} {elapsed:>4} {wide_msg}";
/// A byte transfer of known size.
pub const TRANSFER_TEMPLATE: &str = "{msg} {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}";
/// A byte transfer of unknown size (an etcd snapshot stream).
pub const STREAM_TEMPLATE: &str = "{spinner} {msg} {bytes} {binary_bytes_per_sec} {elapsed}";

/// `print!`/`println!` of the crate (lib.rs): writes `args` (and a newline) to stdout; a
/// reader that went away (`| head`) drops the output, and nothing panics.
pub fn print_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = write_ignoring_closed(&mut std::io::stdout().lock(), args, newline);
}

/// `eprint!`/`eprintln!` of the crate (lib.rs): as [`print_stdout`], on stderr.
pub fn print_stderr(args: std::fmt::Arguments<'_>, newline: bool) {
    let _ = write_ignoring_closed(&mut std::io::stderr().lock(), args, newline);
}

/// Writes `args` (and a newline); a closed pipe is `Ok` (the output is dropped), any other error
/// is returned (the print macros drop it too: there is no better place to say it).
pub fn write_ignoring_closed(
    out: &mut dyn Write,
    args: std::fmt::Arguments<'_>,
    newline: bool,
) -> std::io::Result<()> {
    let written = out
        .write_fmt(args)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) });
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Opens `/dev/null` on whichever of fds 0, 1 and 2 is closed (`hactl ... 2>&-`), for the life
/// of the process: otherwise the next file or socket hactl opens would get that number, and
/// everything printed to the closed stream would be written into it. Called first in `main`.
pub fn keep_standard_streams_open() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    // open(2) returns the lowest free number: while that is 0, 1 or 2, a standard stream was
    // closed and now reads and writes /dev/null.
    while let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        if f.as_raw_fd() > 2 {
            break;
        }
        let _ = f.into_raw_fd();
    }
}

/// Whether progress bars are drawn: only when stderr is a terminal.
pub fn bars_allowed() -> bool {
    std::io::stderr().is_terminal()
}

/// The one set of bars on a terminal; `None` elsewhere.
fn bars() -> Option<&'static MultiProgress> {
    static BARS: OnceLock<Option<MultiProgress>> = OnceLock::new();
    BARS.get_or_init(|| bars_allowed().then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())))
        .as_ref()
}

/// Adds a bar to the set with its template; `None` off a terminal.
fn new_bar(bar: ProgressBar, template: &str) -> Option<ProgressBar> {
    let bars = bars()?;
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    Some(bars.add(bar))
}

/// `<prefix> [pos/len] <what>`: the message of a counted bar (a host's steps in `up`, a
/// recover's steps, the phases of a plan). `pos` is the step under way, counted from 1.
pub fn counter_line(prefix: &str, pos: u64, len: u64, what: &str) -> String {
    let width = len.to_string().len();
    let head = format!("[{pos:>width$}/{len}] {what}");
    if prefix.is_empty() {
        head
    } else {
        format!("{prefix} {head}")
    }
}

/// Counted work on a terminal: a spinner with the elapsed time and `<prefix> [n/len] <what>`.
/// Off a terminal it does nothing at all (the log lines say the same). Cheap to clone: clones
/// share the bar.
#[derive(Clone)]
pub struct Counter {
    bar: Option<ProgressBar>,
    prefix: String,
    len: u64,
}

impl Counter {
    pub fn new(prefix: impl Into<String>, len: usize) -> Counter {
        let len = len as u64;
        let prefix = prefix.into();
        let bar = new_bar(ProgressBar::new(len), COUNTER_TEMPLATE);
        if let Some(bar) = &bar {
            bar.enable_steady_tick(Duration::from_millis(120));
            bar.set_message(counter_line(&prefix, 0, len, "waiting"));
        }
        Counter { bar, prefix, len }
    }
    /// Shows `what` as the step under way (the next one after those finished).
    pub fn start(&self, what: &str) {
        if let Some(bar) = &self.bar {
            let pos = (bar.position() + 1).min(self.len);
            bar.set_message(counter_line(&self.prefix, pos, self.len, what));
        }
    }
    /// Whether a bar is drawn (stderr is a terminal and colour/progress are not switched off).
    pub fn drawn(&self) -> bool {
        self.bar.is_some()
    }
    /// One step finished.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }
    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            if let Some(bars) = bars() {
                bars.remove(bar);
            }
        }
    }
}

/// The log's writer: stderr, with the bars hidden while a line is written on a terminal. A
/// line stderr cannot take (a closed pipe) counts as written: there is nowhere else to say so,
/// and tracing-subscriber reports a failed write with std's `eprintln!`, which would panic on
/// that very stream.
struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = match bars() {
            Some(bars) => bars.suspend(|| std::io::stderr().write_all(buf)),
            None => std::io::stderr().write_all(buf),
        };
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Whether stderr may carry colour and other escape codes: only on a terminal, and never when
/// `NO_COLOR` is set to anything non-empty (no-color.org). Files, pipes, CI logs and journald
/// (`contrib/hactl-heal.service`) get plain text.
pub fn stderr_colour() -> bool {
    colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The rule of `stderr_colour`, apart from the environment it reads.
pub fn colour_allowed(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// `-v` → debug, `-vv` → trace, `-q` → errors only; `RUST_LOG` wins when set.
pub fn init_logging(verbose: u8, quiet: bool) {
    let level = if quiet {
        "error"
    } else {
        match verbose {
            0 => "info",
            1 => "debug",
            _ => "trace",
        }
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("hactl={level},warn")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_ansi(stderr_colour())
        .with_target(false)
        .without_time()
        .try_init();
}

/// A spinner on a terminal, plain lines otherwise (CI logs, pipes).
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new(message: impl Into<String>) -> Progress {
        let message = message.into();
        match new_bar(ProgressBar::new_spinner(), "{spinner} {elapsed:>4} {msg}") {
            Some(bar) => {
                bar.enable_steady_tick(Duration::from_millis(120));
                bar.set_message(message);
                Progress { bar: Some(bar) }
            }
            None => {
                eprintln!("{message}");
                Progress { bar: None }
            }
        }
    }
    /// A line above the spinner (or a plain line).
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(bar) => bar.println(line.as_ref()),
            None => eprintln!("{}", line.as_ref()),
        }
    }
    pub fn set_message(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.bar {
            Some(bar) => bar.set_message(message),
            None => eprintln!("{message}"),
        }
    }
    pub fn finish(self, line: impl AsRef<str>) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
        eprintln!("{}", line.as_ref());
    }
}

/// Progress of a byte transfer (a download): on a terminal a bar with bytes and rate, otherwise one
/// line when it starts and one with size, time and rate when it ends.
pub struct Transfer {
    bar: Option<ProgressBar>,
    label: String,
    started: std::time::Instant,
    bytes: u64,
    /// Print the summary line at the end (false for [`Transfer::bar_only`]).
    summary: bool,
}

impl Transfer {
    /// Prints `label` off a terminal, and its summary at [`Transfer::finish`].
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Transfer {
        let mut t = Transfer::bar_only(label, total);
        t.summary = true;
        if t.bar.is_none() {
            eprintln!("{}", t.label);
        }
        t
    }
    /// A bar on a terminal and nothing at all elsewhere, not even at [`Transfer::finish`] (for
    /// callers that log the transfer themselves: `etcd snapshot save`).
    pub fn bar_only(label: impl Into<String>, total: Option<u64>) -> Transfer {
        let label = label.into();
        let bar = match total {
            Some(n) => new_bar(ProgressBar::new(n), TRANSFER_TEMPLATE),
            None => new_bar(ProgressBar::new_spinner(), STREAM_TEMPLATE),
        };
        if let Some(bar) = &bar {
            bar.set_message(label.clone());
            if total.is_none() {
                bar.enable_steady_tick(Duration::from_millis(120));
            }
        }
        Transfer {
            bar,
            label,
            started: std::time::Instant::now(),
            bytes: 0,
            summary: false,
        }
    }
    pub fn inc(&mut self, n: u64) {
        self.bytes += n;
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }
    /// Clears the bar and prints `<label>: <size> in <time> (<rate>)`.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.summary {
            eprintln!(
                "{}",
                transfer_summary(&self.label, self.bytes, self.started.elapsed())
            );
        }
    }
}

/// `<label>: 12.3 MiB in 4.5 s (2.7 MiB/s)`.
pub fn transfer_summary(label: &str, bytes: u64, elapsed: Duration) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { mib / secs } else { 0.0 };
    format!("{label}: {mib:.1} MiB in {secs:.1} s ({rate:.1} MiB/s)")
}

/// Asks on the terminal before a disruptive plan; refuses without a terminal.
pub fn confirm(what: &str) -> anyhow::Result<()> {
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::NEEDS_INPUT,
            message: format!("{what}; no terminal to confirm on: run again with --yes to proceed"),
        }));
    }
    eprint!("{what}. Proceed? [y/N] ");
    std::io::Write::flush(&mut std::io::stderr()).ok();
    let answer = crate::bounded::read_answer(std::io::stdin().lock())?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(anyhow::Error::new(crate::exit::Refusal {
            code: crate::exit::DECLINED,
            message: "not confirmed: nothing was changed".into(),
        }))
    }
}

/// The `apiVersion` of every JSON document hactl prints (`-o json`), as kubeadm's and
/// kubectl's documents carry theirs: a reader checks it before trusting the fields.
pub const API_VERSION: &str = "hactl.io/v1alpha1";

/// One `-o json` document: `apiVersion` and `kind` first, then the body's own fields in their
/// order (docs/reference/json.md lists every kind).
#[derive(serde::Serialize)]
pub struct Document<'a, T: serde::Serialize> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

/// The document of `kind` around `body` (an object: a struct or a JSON map).
pub fn document<'a, T: serde::Serialize>(kind: &'a str, body: &'a T) -> Document<'a, T> {
    Document {
        api_version: API_VERSION,
        kind,
        body,
    }
}

/// Prints the document of `kind` around `body` on stdout, pretty, with a final newline.
pub fn print_document<T: serde::Serialize>(kind: &str, body: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(&document(kind, body))?);
    Ok(())
}

/// `serialize_with` for a text that is empty when unknown: `null` then, never `""`.
pub fn empty_as_null<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(v)
    }
}

/// `serialize_with` for a number that is 0 when unknown (a raft term, a revision, a size no
/// member reported): `null` then, never `0`.
pub fn zero_as_null<S: serde::Serializer, N>(v: &N, s: S) -> Result<S::Ok, S::Error>
where
    N: serde::Serialize + Default + PartialEq,
{
    if *v == N::default() {
        s.serialize_none()
    } else {
        v.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_closed_pipe_drops_the_output_and_other_errors_are_returned() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        drop(reader);
        assert!(write_ignoring_closed(&mut writer, format_args!("{}", "x"), true).is_ok());
        let mut v = Vec::new();
        write_ignoring_closed(&mut v, format_args!("a{}", 1), true).unwrap();
        write_ignoring_closed(&mut v, format_args!("b"), false).unwrap();
        assert_eq!(v, b"a1\nb");
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(write_ignoring_closed(&mut Full, format_args!("x"), false).is_err());
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
        assert!(!colour_allowed(false, Some(OsStr::new("1"))));
    }

    #[test]
    fn a_counter_line_names_the_step_under_way_of_how_many() {
        assert_eq!(
            counter_line("cp1", 3, 12, "run systemctl restart etcd"),
            "cp1 [ 3/12] run systemctl restart etcd"
        );
        assert_eq!(
            counter_line("", 2, 7, "phase Start etcd"),
            "[2/7] phase Start etcd"
        );
        assert_eq!(
            counter_line("recover", 0, 140, "waiting"),
            "recover [  0/140] waiting"
        );
    }

    #[test]
    fn the_bar_templates_parse() {
        for t in [COUNTER_TEMPLATE, TRANSFER_TEMPLATE, STREAM_TEMPLATE] {
            assert!(ProgressStyle::with_template(t).is_ok(), "{t}");
        }
    }

    #[test]
    fn off_a_terminal_a_counter_and_a_bar_only_transfer_draw_nothing() {
        // `cargo test` captures stderr through a pipe: no terminal.
        if bars_allowed() {
            println!("SKIPPED off_a_terminal_...: stderr is a terminal here");
            return;
        }
        let c = Counter::new("cp1", 3);
        c.start("x");
        c.inc();
        c.finish();
        assert!(c.bar.is_none());
        let mut t = Transfer::bar_only("snapshot", None);
        t.inc(10);
        assert!(t.bar.is_none() && !t.summary);
    }

    #[test]
    fn a_transfer_summary_names_size_time_and_rate() {
        assert_eq!(
            transfer_summary("downloading x", 3 * 1024 * 1024, Duration::from_millis(1500)),
            "downloading x: 3.0 MiB in 1.5 s (2.0 MiB/s)"
        );
        assert_eq!(
            transfer_summary("y", 0, Duration::ZERO),
            "y: 0.0 MiB in 0.0 s (0.0 MiB/s)"
        );
    }
}
