//! The fence: the one way recover, replace and maintenance keep a unit from starting.
//!
//! A fenced unit has a runtime drop-in, `/run/systemd/system/<unit>.d/hactl-fence.conf`, whose
//! `[Unit]` section says `AssertPathExists=!<that same file>`. While the file exists every start of
//! the unit fails its assertion before any process is spawned; removing the file (and a
//! `daemon-reload`) lifts the fence, and a reboot lifts it too, since `/run` is not kept.
//!
//! Why this mechanism and not the others:
//! - `systemctl mask --runtime` cannot override a unit file in `/etc/systemd/system`, which is
//!   where hactl installs its units;
//! - `ExecStartPre=/bin/false` (recover's former fence) spawns a process on every start attempt,
//!   runs after the unit's own `ExecStartPre=` lines, and needs `Restart=no` beside it so a
//!   `Restart=always` unit does not loop on the failure;
//! - a start assertion is checked before the unit's job runs at all, is independent of `Restart=`
//!   and of the unit's commands, and `systemctl status` names the failed assertion, so an
//!   operator sees why the unit does not start.
//!
//! Invariant: one constant ([`DROPIN_NAME`]) and one text ([`dropin_text`]); whether a unit is
//! fenced is read from the file's existence alone, so a fence left by any earlier hactl run (of any
//! operation) is recognised.

/// The file name of the fence drop-in in a unit's runtime drop-in directory.
pub const DROPIN_NAME: &str = "hactl-fence.conf";

/// The fence drop-in of `unit`.
pub fn dropin_path(unit: &str) -> String {
    format!("/run/systemd/system/{unit}.d/{DROPIN_NAME}")
}

/// The fence drop-in's text for the file at `path`: a `[Unit]` section, the comment lines in
/// `why` (each becomes `# <line>`), and the assertion that fails while `path` exists.
pub fn dropin_text(path: &str, why: &[&str]) -> String {
    let mut text = String::from("[Unit]\n");
    for line in why {
        text.push_str("# ");
        text.push_str(line);
        text.push('\n');
    }
    text.push_str("AssertPathExists=!");
    text.push_str(path);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dropin_asserts_its_own_absence() {
        let p = dropin_path("etcd.service");
        assert_eq!(p, "/run/systemd/system/etcd.service.d/hactl-fence.conf");
        assert_eq!(
            dropin_text(&p, &["Written by hactl: fenced."]),
            "[Unit]\n# Written by hactl: fenced.\nAssertPathExists=!/run/systemd/system/etcd.service.d/hactl-fence.conf\n"
        );
    }
}
