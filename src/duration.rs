//! The one duration grammar of hactl, shared by inventory fields (`spec.heal.*`, `spec.backup.interval`)
//! and command-line flags (`--drain-timeout`, `--accept-data-loss-window`).
//!
//! A duration is one or more `<number><unit>` terms, units in descending order, each at most once:
//! `d` (days), `h`, `m`, `s`, `ms`. So `30s`, `10m`, `1h30m`, `2d`, `1d12h`, `500ms`, `1s500ms`. A bare number is seconds
//! (`90`), as the inventory has always accepted. Invariant: pure; the same text gives the same
//! duration (or the same error) wherever it is written.
//!
//! Also the one reading of the timeout variables (`HACTL_*_TIMEOUT_SECS`: whole seconds, in a
//! range, a bad value an error naming the variable): [`env_seconds`] is pure, and
//! [`env_seconds_from_env`], the only function here that reads anything, reads the process's
//! environment.

use std::time::Duration;

/// What is wrong with a duration's text; the message says the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration: use e.g. 30s, 10m, 1h30m or 2d")]
    Syntax(String),
    #[error("{text:?}: unit {unit:?} is not one of d, h, m, s, ms (e.g. 30s, 10m, 1h30m, 2d, 500ms)")]
    Unit { text: String, unit: String },
    #[error("{0:?}: write the units largest first, each once (e.g. 1h30m, not 30m1h)")]
    Order(String),
    #[error("{0:?} is too long a duration")]
    Overflow(String),
}

/// Parses `30s`, `10m`, `1h30m`, `2d`, `500ms`, or a bare number of seconds.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Syntax(text.to_string()));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| DurationError::Overflow(text.to_string()));
    }
    let mut rest = s;
    // Milliseconds.
    let mut total: u64 = 0;
    // Index into UNITS of the last unit seen: the next must come after it.
    let mut last: Option<usize> = None;
    const UNITS: [(&str, u64); 5] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(DurationError::Syntax(text.to_string()));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.find(|c: char| c.is_ascii_digit()).unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        if unit.is_empty() {
            // A number after a term with no unit of its own: `1h30`.
            return Err(DurationError::Syntax(text.to_string()));
        }
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(DurationError::Unit {
                text: text.to_string(),
                unit: unit.to_string(),
            });
        };
        if last.is_some_and(|l| index <= l) {
            return Err(DurationError::Order(text.to_string()));
        }
        last = Some(index);
        let n: u64 = number
            .parse()
            .map_err(|_| DurationError::Overflow(text.to_string()))?;
        total = n
            .checked_mul(UNITS[index].1)
            .and_then(|millis| total.checked_add(millis))
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        rest = next;
    }
    Ok(Duration::from_millis(total))
}

/// The shortest text `parse` reads back as `d` (whole seconds): `1h30m`, `2d`, `0s`.
pub fn format(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// Like [`format`], with a millisecond remainder: `1s500ms`, `300ms`, `10s`.
pub fn format_millis(d: Duration) -> String {
    let millis = d.subsec_millis();
    match (d.as_secs(), millis) {
        (_, 0) => format(d),
        (0, ms) => format!("{ms}ms"),
        (_, ms) => format!("{}{ms}ms", format(Duration::from_secs(d.as_secs()))),
    }
}

/// A timeout in whole seconds that an environment variable may set (docs/reference/environment.md):
/// unset or empty gives `default`; a value from 1 to `max` (surrounding blanks allowed) is taken;
/// anything else is an [`EnvSecondsError`] naming the variable, so a typo is never silently
/// replaced by the default.
pub fn env_seconds(
    var: &'static str,
    value: Option<&str>,
    default: u64,
    max: u64,
) -> Result<Duration, EnvSecondsError> {
    let value = value.map(str::trim).unwrap_or_default();
    if value.is_empty() {
        return Ok(Duration::from_secs(default));
    }
    match value.parse::<u64>() {
        Ok(secs) if (1..=max).contains(&secs) => Ok(Duration::from_secs(secs)),
        _ => Err(EnvSecondsError {
            var,
            value: value.to_string(),
            max,
            default,
        }),
    }
}

/// [`env_seconds`] of this process's environment (a value that is not UTF-8 counts as bad).
pub fn env_seconds_from_env(var: &'static str, default: u64, max: u64) -> Result<Duration, EnvSecondsError> {
    match std::env::var(var) {
        Ok(v) => env_seconds(var, Some(&v), default, max),
        Err(std::env::VarError::NotPresent) => env_seconds(var, None, default, max),
        Err(std::env::VarError::NotUnicode(v)) => Err(EnvSecondsError {
            var,
            value: v.to_string_lossy().into_owned(),
            max,
            default,
        }),
    }
}

/// A timeout variable holding something other than a whole number of seconds in its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is not a whole number of seconds from 1 to {max}: set it to one, or unset it for the default ({default})")]
pub struct EnvSecondsError {
    pub var: &'static str,
    pub value: String,
    pub max: u64,
    pub default: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_table() {
        let ok: &[(&str, u64)] = &[
            ("0", 0),
            ("0s", 0),
            ("90", 90),
            ("30s", 30),
            ("10m", 600),
            ("1h", 3_600),
            ("1h30m", 5_400),
            ("2d", 172_800),
            ("1d12h", 129_600),
            ("1d2h3m4s", 93_784),
            (" 6h ", 21_600),
            ("90m", 5_400),
        ];
        for (text, secs) in ok {
            assert_eq!(parse(text), Ok(Duration::from_secs(*secs)), "{text}");
        }
        let millis: &[(&str, u64)] = &[("500ms", 500), ("1s500ms", 1_500), ("0ms", 0), ("1m5ms", 60_005)];
        for (text, ms) in millis {
            let d = Duration::from_millis(*ms);
            assert_eq!(parse(text), Ok(d), "{text}");
            assert_eq!(parse(&format_millis(d)), Ok(d), "{text}");
        }
        assert_eq!(format_millis(Duration::from_millis(1_500)), "1s500ms");
        assert_eq!(format_millis(Duration::from_millis(300)), "300ms");
        assert_eq!(format_millis(Duration::from_secs(60)), "1m");
        let bad: &[(&str, &str)] = &[
            ("", "not a duration"),
            ("h", "not a duration"),
            ("1h30", "not a duration"),
            ("1.5h", "unit \".\""),
            ("-1h", "not a duration"),
            ("10 m", "unit \" m\""),
            ("3w", "unit \"w\""),
            ("1us", "unit \"us\""),
            ("500ms1s", "largest first"),
            ("30m1h", "largest first"),
            ("1h1h", "largest first"),
            ("99999999999999999999d", "too long"),
            ("300000000000000d", "too long"),
        ];
        for (text, says) in bad {
            let err = parse(text).expect_err(text).to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn format_reads_back() {
        for secs in [0, 1, 59, 60, 61, 3_600, 5_400, 86_400, 90_061, 1_000_000] {
            let d = Duration::from_secs(secs);
            assert_eq!(parse(&format(d)), Ok(d), "{}", format(d));
        }
        assert_eq!(format(Duration::from_secs(5_400)), "1h30m");
        assert_eq!(format(Duration::from_secs(172_800)), "2d");
    }

    #[test]
    fn an_environment_timeout_is_its_default_or_a_sane_number_of_seconds_never_a_silent_default() {
        const VAR: &str = "HACTL_TEST_TIMEOUT_SECS";
        let env = |v| env_seconds(VAR, v, 180, 86_400);
        assert_eq!(env(None), Ok(Duration::from_secs(180)));
        assert_eq!(env(Some("")), Ok(Duration::from_secs(180)));
        assert_eq!(env(Some("  ")), Ok(Duration::from_secs(180)));
        assert_eq!(env(Some(" 30 ")), Ok(Duration::from_secs(30)));
        assert_eq!(env(Some("1")), Ok(Duration::from_secs(1)));
        assert_eq!(env(Some("86400")), Ok(Duration::from_secs(86_400)));
        for bad in [
            "0",
            "-5",
            "30s",
            "1.5",
            "86401",
            "ninety",
            "99999999999999999999999",
        ] {
            let text = env(Some(bad)).unwrap_err().to_string();
            assert_eq!(
                text,
                format!("{VAR}={bad:?} is not a whole number of seconds from 1 to 86400: set it to one, or unset it for the default (180)")
            );
        }
    }
}
