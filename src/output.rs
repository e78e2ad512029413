//! Logs and progress on stderr; data on stdout.
//!
//! Invariant: nothing here prints to stdout, so `-o json` output stays parseable.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tracing_subscriber::EnvFilter;

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
        .with_writer(std::io::stderr)
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
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar.set_message(message);
            Progress { bar: Some(bar) }
        } else {
            eprintln!("{message}");
            Progress { bar: None }
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
}

impl Transfer {
    pub fn new(label: impl Into<String>, total: Option<u64>) -> Transfer {
        let label = label.into();
        let bar = if std::io::stderr().is_terminal() {
            let (bar, template) = match total {
                Some(n) => (
                    ProgressBar::new(n),
                    "{msg} {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                ),
                None => (
                    ProgressBar::new_spinner(),
                    "{spinner} {msg} {bytes} {binary_bytes_per_sec}",
                ),
            };
            bar.set_style(
                ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_message(label.clone());
            Some(bar)
        } else {
            eprintln!("{label}");
            None
        };
        Transfer {
            bar,
            label,
            started: std::time::Instant::now(),
            bytes: 0,
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
        eprintln!(
            "{}",
            transfer_summary(&self.label, self.bytes, self.started.elapsed())
        );
    }
}

/// `<label>: 12.3 MiB in 4.5 s (2.7 MiB/s)`.
pub fn transfer_summary(label: &str, bytes: u64, elapsed: Duration) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { mib / secs } else { 0.0 };
    format!("{label}: {mib:.1} MiB in {secs:.1} s ({rate:.1} MiB/s)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour_allowed(true, None));
        assert!(colour_allowed(true, Some(OsStr::new(""))));
        assert!(!colour_allowed(true, Some(OsStr::new("1"))));
        assert!(!colour_allowed(false, None));
        assert!(!colour_allowed(false, Some(OsStr::new("1"))));
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
