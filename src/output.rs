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
}
