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
    fn the_exit_code_comes_from_the_refusal_anywhere_in_the_chain() {
        let e = refuse(NEEDS_INPUT, "held").context("replace failed");
        assert_eq!(exit_code_of(&e), NEEDS_INPUT);
        assert_eq!(exit_code_of(&anyhow::anyhow!("plain")), FAILED);
    }
}
