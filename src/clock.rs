//! The one clock format of hactl: the UTC timestamps that journals, locks, the high-water mark
//! and snapshot sidecars write, and the compact stamp that names things.
//!
//! Invariant: pure formatting of a given instant; the `now` helpers only read the system clock.

/// `now` as journals, locks and sidecars write it: RFC 3339, UTC, milliseconds
/// (`2026-11-22T02:34:12.345Z`).
pub fn timestamp(now: time::OffsetDateTime) -> String {
    now.format(time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ))
    .unwrap_or_default()
}

/// [`timestamp`] of now.
pub fn now_rfc3339() -> String {
    timestamp(time::OffsetDateTime::now_utc())
}

/// A compact UTC stamp for names: `20261122t023412z` (lowercase: it may become part of a run id).
pub fn stamp() -> String {
    stamp_at(time::OffsetDateTime::now_utc())
}

/// [`stamp`] at `t`.
pub fn stamp_at(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}{:02}{:02}t{:02}{:02}{:02}z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_with_milliseconds_and_stamps_are_lowercase() {
        let t = time::macros::datetime!(2026-11-22 02:34:12.345678 UTC);
        assert_eq!(timestamp(t), "2026-11-22T02:34:12.345Z");
        assert_eq!(stamp_at(t), "20261122t023412z");
    }
}
