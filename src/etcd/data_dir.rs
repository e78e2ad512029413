//! The data-directory rule on the hosts: hactl creates, chmods or moves etcd's data dir only when
//! it is missing, empty (a fresh file system's `lost+found` aside) or holds etcd's `member/`.
//! Anything else is a directory of the host's own (an `etcd.dataDir` that names `/srv` or a
//! home directory): `install -d -o etcd -m 0700` would hand it to the etcd user, and a move
//! aside would take it from whatever uses it.
//!
//! Invariant: every remote script that creates, chmods or moves the data dir (`up`'s install,
//! `reset`, `recover`'s R1.4 and R2.5, `replace`'s move aside) runs the one shell function
//! [`guard`] defines on it first; its text is written only here.

/// The shell function [`guard`] defines.
pub const GUARD_FN: &str = "hactl_data_dir_guard";

/// Shell text defining `hactl_data_dir_guard DIR ACTION AGAIN`: it returns when DIR is missing,
/// empty (`lost+found` aside) or holds `member/`; otherwise it prints the refusal (the rule,
/// what it saw in DIR, what to do and `AGAIN`, the command to run after) on stderr and exits
/// the script with 2, the refusal code. `ACTION` completes "refusing to …" and names DIR.
pub fn guard() -> String {
    format!(
        r#"{GUARD_FN}() {{
  rule="rule: hactl creates, chmods or moves a data dir only when it is missing, empty or holds etcd's member/"
  if [ -L "$1" ] || {{ [ -e "$1" ] && [ ! -d "$1" ]; }}; then
    echo "hactl: refusing to $2: it exists and is not a plain directory ($rule); move it away or set etcd.dataDir to a directory of etcd's own, then run $3 again" >&2
    exit 2
  fi
  if [ -d "$1" ] && [ ! -d "$1/member" ]; then
    other=$(ls -A "$1" | grep -vx 'lost+found' | head -n 3 | tr '\n' ' ')
    if [ -n "$other" ]; then
      echo "hactl: refusing to $2: it holds files but no etcd member/ (${{other% }}) ($rule); empty it or set etcd.dataDir to a directory of etcd's own, then run $3 again" >&2
      exit 2
    fi
  fi
}}
"#
    )
}

/// A script taking the data dir as `$1`: the guard for `action` (which may name `$1`), then
/// `then`. `again` is the command the refusal tells the operator to run once it is fixed.
pub fn guarded(action: &str, again: &str, then: &str) -> String {
    format!("{}{GUARD_FN} \"$1\" \"{action}\" '{again}'\n{then}", guard())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Runs [`guarded`] (move `$1` aside) with `sh` on `dir`: exit code and stderr.
    fn run(dir: &std::path::Path) -> (i32, String) {
        let script = guarded("move $1 aside", "hactl reset", "echo passed");
        let out = Command::new("sh")
            .args(["-c", &script, "test"])
            .arg(dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code() == Some(0), stdout == "passed\n", "{stdout}");
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn the_guard_defines_one_function_with_the_three_checks() {
        let g = guard();
        assert!(g.starts_with("hactl_data_dir_guard() {\n"), "{g}");
        assert!(g.contains(r#"[ -L "$1" ]"#), "symlinks are refused: {g}");
        assert!(g.contains(r#"[ ! -d "$1/member" ]"#), "{g}");
        assert!(g.contains("grep -vx 'lost+found'"), "{g}");
        assert_eq!(g.matches("exit 2").count(), 2, "{g}");
        let s = guarded("take $1 as etcd's data dir", "hactl up", "install -d \"$1\"");
        assert!(
            s.ends_with(
                "hactl_data_dir_guard \"$1\" \"take $1 as etcd's data dir\" 'hactl up'\ninstall -d \"$1\""
            ),
            "{s}"
        );
    }

    #[test]
    fn the_guard_passes_missing_empty_and_member_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(run(&tmp.path().join("missing")).0, 0);
        let empty = tmp.path().join("empty");
        std::fs::create_dir_all(empty.join("lost+found")).unwrap();
        assert_eq!(run(&empty).0, 0, "lost+found alone is empty");
        let member = tmp.path().join("member");
        std::fs::create_dir_all(member.join("member/wal")).unwrap();
        std::fs::write(member.join("other"), "x").unwrap();
        assert_eq!(run(&member).0, 0);
    }

    #[test]
    fn the_guard_refuses_a_dir_of_the_hosts_own_and_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let own = tmp.path().join("srv");
        std::fs::create_dir(&own).unwrap();
        std::fs::write(own.join("precious"), "keep").unwrap();
        let (code, err) = run(&own);
        assert_eq!(code, 2);
        assert_eq!(
            err.trim_end(),
            format!(
                "hactl: refusing to move {} aside: it holds files but no etcd member/ (precious) \
                 (rule: hactl creates, chmods or moves a data dir only when it is missing, empty or \
                 holds etcd's member/); empty it or set etcd.dataDir to a directory of etcd's own, \
                 then run hactl reset again",
                own.display()
            )
        );
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let (code, err) = run(&file);
        assert_eq!(code, 2);
        assert!(err.contains("it exists and is not a plain directory"), "{err}");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("missing"), &link).unwrap();
        assert_eq!(
            run(&link).0,
            2,
            "a symlink is refused even when its target is missing"
        );
    }
}
