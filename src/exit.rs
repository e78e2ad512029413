//! Exit codes, refusals and the helpers that build them.
//!
//! A refusal is not a crash: a safety rule said no, nothing changed (or the code says what did),
//! and the message names the rule, what was seen and what to run instead. Every layer may refuse;
//! only `main` turns the error into a process exit code ([`exit_code_of`]).

/// Exit code 0: success.
pub const OK: i32 = 0;
/// A failure before any change (or checks that did not pass, a Ctrl-C before any change).
pub const FAILED: i32 = 1;
/// Refused by a safety rule (or a check a step makes first); nothing changed.
pub const REFUSED: i32 = 2;
/// Needs operator input: an attestation, `--yes` where there is no terminal to ask on, a lock
/// held by another run, a data-loss window to accept.
pub const NEEDS_INPUT: i32 = 3;
/// Failed (or interrupted with Ctrl-C) after changes; the message names the command that resumes.
pub const FAILED_AFTER_CHANGES: i32 = 4;
/// Done, but the verification afterwards found the cluster degraded.
pub const DEGRADED: i32 = 5;
/// The operator answered no at the prompt (or typed another name): nothing was changed.
pub const DECLINED: i32 = 6;
/// `status`: an etcd that is not of the current cluster runs on an inventory host (a zombie),
/// dials the members, or an old member attested dead answers again unfenced; the problem line
/// names the command that fences it (`hactl heal --once`). Takes precedence over 5.
pub const ZOMBIE: i32 = 7;

/// A usage error: an unknown command, flag or value, or `-o json` where the command prints no
/// document (sysexits' EX_USAGE; not 2, which means a safety rule said no). Nothing was run.
pub const USAGE: i32 = 64;

/// One row of the exit-code table: what every command follows.
pub struct Code {
    pub code: i32,
    /// The constant's name in this file.
    pub name: &'static str,
    /// What it means, in a few words.
    pub meaning: &'static str,
}

/// The exit codes, one table for every command: printed by `hactl --help` (and each
/// subcommand's), in the man pages, and in docs/reference/exit-codes.md (a test checks the three
/// agree).
pub const TABLE: &[Code] = &[
    Code {
        code: OK,
        name: "OK",
        meaning: "done (also --help, --version)",
    },
    Code {
        code: FAILED,
        name: "FAILED",
        meaning: "failed before changing anything, or checks that did not pass",
    },
    Code {
        code: REFUSED,
        name: "REFUSED",
        meaning: "refused by a safety rule; nothing changed; the message says what to run instead",
    },
    Code {
        code: NEEDS_INPUT,
        name: "NEEDS_INPUT",
        meaning: "needs operator input: --yes without a terminal, an attestation, a lock held elsewhere",
    },
    Code {
        code: FAILED_AFTER_CHANGES,
        name: "FAILED_AFTER_CHANGES",
        meaning: "failed (or Ctrl-C) after changing something; run the same command (or --resume) again",
    },
    Code {
        code: DEGRADED,
        name: "DEGRADED",
        meaning: "done or read, but the cluster is degraded (the problems are printed)",
    },
    Code {
        code: DECLINED,
        name: "DECLINED",
        meaning: "you answered no at the prompt; nothing changed",
    },
    Code {
        code: ZOMBIE,
        name: "ZOMBIE",
        meaning:
            "an etcd of another cluster runs on an inventory host or dials the members (`hactl heal --once`)",
    },
    Code {
        code: USAGE,
        name: "USAGE",
        meaning: "usage error: unknown command, flag or value; nothing was run",
    },
];

/// The table as `--help` and the man pages print it.
pub fn help() -> String {
    let mut out = String::from("Exit codes (every command; docs/reference/exit-codes.md):\n");
    for c in TABLE {
        out.push_str(&format!("  {:>2}  {}\n", c.code, c.meaning));
    }
    out
}

/// A refusal: a safety rule said no. Carries its exit code so `main` can return it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

/// The exit code for an error that reached `main`.
pub fn exit_code_of(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|e| e.downcast_ref::<Refusal>().map(|r| r.code))
        .unwrap_or(FAILED)
}

/// A refusal from a safety rule (such as an `etcd::safety::Refused`, whose text names the rule,
/// what was seen and what to run instead), as an error with exit code 2.
pub fn refusal(r: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Refusal {
        code: REFUSED,
        message: r.to_string(),
    })
}

/// A refusal with its own code and message.
pub fn refuse(code: i32, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Refusal {
        code,
        message: message.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_code_once_in_order() {
        let codes: Vec<i32> = TABLE.iter().map(|c| c.code).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 64]);
        let help = help();
        for c in TABLE {
            assert!(help.contains(&format!("{:>2}  {}", c.code, c.meaning)), "{help}");
        }
    }

    #[test]
    fn the_exit_code_comes_from_the_refusal_anywhere_in_the_chain() {
        let e = refuse(NEEDS_INPUT, "held").context("replace failed");
        assert_eq!(exit_code_of(&e), NEEDS_INPUT);
        assert_eq!(exit_code_of(&anyhow::anyhow!("plain")), FAILED);
    }
}
