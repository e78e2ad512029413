//! The fence: the one way recover, replace, remove and maintenance keep a unit from starting.
//! It sits below the day-two wing because bring-up lifts fences too (`reset`, and replace's P8
//! phase in `phases::replace_control_plane`).
//!
//! A fenced unit has a drop-in, `/etc/systemd/system/<unit>.d/hactl-fence.conf`, whose `[Unit]`
//! section says `AssertPathExists=!<that same file>`. While the file exists every start of the
//! unit fails its assertion before any process is spawned: a start by hand, a `Restart=` and the
//! start at boot alike. Removing the file (and a `daemon-reload`) lifts the fence.
//!
//! The drop-in sits under `/etc`, so a fence survives a reboot: a host that was replaced or is in
//! maintenance and is power-cycled does not start etcd on its old data. Fences written by earlier
//! hactl versions sat under `/run/systemd/system`; they are still recognised and lifted.
//!
//! Why this mechanism and not the others:
//! - `systemctl mask` cannot override a unit file in `/etc/systemd/system`, which is where hactl
//!   installs its units;
//! - `ExecStartPre=/bin/false` spawns a process on every start attempt, runs after the unit's own
//!   `ExecStartPre=` lines, and needs `Restart=no` beside it so a `Restart=always` unit does not
//!   loop on the failure;
//! - a start assertion is checked before the unit's job runs at all, is independent of `Restart=`
//!   and of the unit's commands, and `systemctl status` names the failed assertion, so an
//!   operator sees why the unit does not start.
//!
//! Invariant: one constant ([`DROPIN_NAME`]) and one text; whether a unit is fenced is read from
//! the file's existence alone, so a fence left by any earlier hactl run (of any operation) is
//! recognised. The functions below return shell text; `unit` may be a literal unit name or a
//! shell word that expands to one (`$u`), always used inside double quotes.

/// The file name of the fence drop-in in a unit's drop-in directory.
pub const DROPIN_NAME: &str = "hactl-fence.conf";

/// Where fences live: kept across reboots.
const DIR: &str = "/etc/systemd/system";

/// Where fences of hactl versions before 0.2 lived (lost at reboot); recognised and lifted.
const LEGACY_DIR: &str = "/run/systemd/system";

/// The fence drop-in of `unit`.
pub fn dropin_path(unit: &str) -> String {
    format!("{DIR}/{unit}.d/{DROPIN_NAME}")
}

fn legacy_dropin_path(unit: &str) -> String {
    format!("{LEGACY_DIR}/{unit}.d/{DROPIN_NAME}")
}

/// Shell: writes the fence of `unit`, whose comment lines are `why` (each becomes `# <line>`).
/// Does not reload systemd or stop the unit: see [`fence_and_stop`].
pub fn write(unit: &str, why: &[&str]) -> String {
    let path = dropin_path(unit);
    let mut format = String::from("[Unit]\\n");
    for line in why {
        format.push_str("# ");
        format.push_str(&printf_literal(line));
        format.push_str("\\n");
    }
    format.push_str("AssertPathExists=!%s\\n");
    format!("mkdir -p \"{DIR}/{unit}.d\" && printf '{format}' \"{path}\" > \"{path}\"")
}

/// Shell: fences every unit in `units`, reloads systemd, and stops them (in the order given).
pub fn fence_and_stop(units: &[&str], why: &[&str]) -> String {
    let mut script = String::new();
    for unit in units {
        script.push_str(&write(unit, why));
        script.push('\n');
    }
    script.push_str(&format!(
        "systemctl daemon-reload && systemctl stop {}",
        units.join(" ")
    ));
    script
}

/// Shell: removes the fence of `unit` (the current and the legacy place); sets the shell variable
/// `hactl_lifted=1` when a file was removed, so a caller reloads systemd only then.
pub fn lift(unit: &str) -> String {
    let path = dropin_path(unit);
    let legacy = legacy_dropin_path(unit);
    format!(
        "for f in \"{path}\" \"{legacy}\"; do if [ -e \"$f\" ]; then rm -f \"$f\" && hactl_lifted=1; fi; done"
    )
}

/// Shell: lifts the fences of `units` and reloads systemd when one was there.
pub fn lift_all(units: &[&str]) -> String {
    let mut script = String::new();
    for unit in units {
        script.push_str(&lift(unit));
        script.push('\n');
    }
    script.push_str("if [ -n \"${hactl_lifted:-}\" ]; then systemctl daemon-reload; fi");
    script
}

/// Shell test: true when `unit` is fenced (either place).
pub fn is_fenced(unit: &str) -> String {
    format!(
        "{{ [ -e \"{}\" ] || [ -e \"{}\" ]; }}",
        dropin_path(unit),
        legacy_dropin_path(unit)
    )
}

/// Shell test: true when `unit` has no fence in either place.
pub fn is_unfenced(unit: &str) -> String {
    format!(
        "{{ [ ! -e \"{}\" ] && [ ! -e \"{}\" ]; }}",
        dropin_path(unit),
        legacy_dropin_path(unit)
    )
}

/// `text` as literal text inside a single-quoted printf format.
fn printf_literal(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "%%")
        .replace('\'', "'\\''")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dropin_lives_under_etc_so_it_survives_a_reboot() {
        assert_eq!(
            dropin_path("etcd.service"),
            "/etc/systemd/system/etcd.service.d/hactl-fence.conf"
        );
    }

    #[test]
    fn the_dropin_asserts_its_own_absence() {
        let got = write("etcd.service", &["Written by hactl: 50% fenced, it's 'so'."]);
        assert_eq!(
            got,
            "mkdir -p \"/etc/systemd/system/etcd.service.d\" && printf '[Unit]\\n# Written by hactl: 50%% fenced, it'\\''s '\\''so'\\''.\\nAssertPathExists=!%s\\n' \"/etc/systemd/system/etcd.service.d/hactl-fence.conf\" > \"/etc/systemd/system/etcd.service.d/hactl-fence.conf\""
        );
    }

    #[test]
    fn the_written_file_is_what_systemd_reads() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        // The same script with its directory moved under a scratch root.
        let script = write("$u", &["why 100%"]).replace(DIR, root);
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("u=x.service; {script}")])
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(dir.path().join("x.service.d").join(DROPIN_NAME)).unwrap();
        assert_eq!(
            text,
            format!("[Unit]\n# why 100%\nAssertPathExists=!{root}/x.service.d/hactl-fence.conf\n")
        );
    }

    #[test]
    fn lifting_removes_both_places_and_reloads_only_when_something_was_there() {
        let got = lift_all(&["etcd.service"]);
        assert!(got.contains("\"/etc/systemd/system/etcd.service.d/hactl-fence.conf\" \"/run/systemd/system/etcd.service.d/hactl-fence.conf\""), "{got}");
        assert!(
            got.ends_with("if [ -n \"${hactl_lifted:-}\" ]; then systemctl daemon-reload; fi"),
            "{got}"
        );
    }

    #[test]
    fn fencing_reloads_then_stops_in_order() {
        let got = fence_and_stop(&["a.service", "b.service"], &["x"]);
        assert!(
            got.ends_with("systemctl daemon-reload && systemctl stop a.service b.service"),
            "{got}"
        );
        assert_eq!(got.matches("AssertPathExists").count(), 2, "{got}");
    }

    #[test]
    fn a_legacy_runtime_fence_still_counts() {
        let got = is_fenced("etcd.service");
        assert!(
            got.contains("/run/systemd/system/etcd.service.d/hactl-fence.conf"),
            "{got}"
        );
        assert!(is_unfenced("etcd.service")
            .contains("[ ! -e \"/etc/systemd/system/etcd.service.d/hactl-fence.conf\" ]"));
    }
}
