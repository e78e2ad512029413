//! argv → the exact shell line sent over SSH. The one place where quoting happens.
//!
//! Invariant: `sh -c "$(command_line(argv, false))"` on the host runs exactly `argv`.

/// Quotes one word for a POSIX shell: bare when it is made only of safe characters, else in
/// single quotes with embedded single quotes written as `'\''`.
pub fn word(w: &str) -> String {
    let safe = !w.is_empty()
        && w.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'.' | b'/' | b':' | b'=' | b',' | b'@' | b'+' | b'%'
                )
        });
    if safe {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// The line for `argv`, prefixed with `sudo -n --` when `sudo` (never prompts: a missing
/// NOPASSWD rule fails at once instead of hanging).
pub fn command_line(argv: &[String], sudo: bool) -> String {
    let mut line = String::new();
    if sudo {
        line.push_str("sudo -n -- ");
    }
    let words: Vec<String> = argv.iter().map(|w| word(w)).collect();
    line.push_str(&words.join(" "));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_words_stay_bare_and_others_are_single_quoted() {
        assert_eq!(word("systemctl"), "systemctl");
        assert_eq!(word("/etc/hactl/etcd.env"), "/etc/hactl/etcd.env");
        assert_eq!(word("a b"), "'a b'");
        assert_eq!(word(""), "''");
        assert_eq!(word("it's"), r"'it'\''s'");
        assert_eq!(word("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn sudo_prefix_never_prompts() {
        let argv = vec!["systemctl".to_string(), "restart".to_string(), "etcd".to_string()];
        assert_eq!(command_line(&argv, true), "sudo -n -- systemctl restart etcd");
        assert_eq!(command_line(&argv, false), "systemctl restart etcd");
    }

    #[test]
    fn a_real_shell_sees_the_original_argv() {
        let argv: Vec<String> = ["printf", "%s|", "a b", "it's", "$HOME", "*", "x\ny"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(command_line(&argv, false))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "a b|it's|$HOME|*|x\ny|");
    }
}
