//! Classifies etcd error text (the error classes of docs/recovery.md, "When a member is unhealthy") into what hactl does next.
//!
//! Invariant: pure; the strings are etcd's own (3.4 and 3.5), matched as substrings, so a message
//! wrapped by etcdctl or the journal still classifies.

/// What an error means for the operation that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry after the health gate (`unhealthy cluster`, learner not in sync).
    RetryAfterHealthGate,
    /// A membership change is under way (a learner exists, the peer URL is taken).
    TransitionInProgress,
    /// The member is already gone: treat as success.
    AlreadyRemoved,
    /// The member's data dir is unusable: replace it (restarting is pointless).
    DataDirInvalid,
    /// `--initial-cluster` does not match the real member set.
    ConfigError,
    /// A snapshot file or restore target problem.
    Snapshot,
    /// No leader: quorum is lost.
    NoQuorum,
    /// A linearizable request was sent to a learner.
    LearnerEndpoint,
    /// Cluster-wide, not a member failure (NOSPACE): maintenance, never replacement.
    ClusterWideNoSpace,
    /// Data corruption (CORRUPT alarm).
    DataCorruption,
    /// None of the above.
    Unknown,
}

/// The table of Appendix B, in the order it is checked (first match wins).
const TABLE: &[(ErrorClass, &[&str])] = &[
    (
        ErrorClass::DataDirInvalid,
        &[
            "has already been bootstrapped",
            "the member has been permanently removed from the cluster",
            "tocommit(",
            "cluster ID mismatch",
        ],
    ),
    (
        ErrorClass::RetryAfterHealthGate,
        &[
            "etcdserver: unhealthy cluster",
            "can only promote a learner member which is in sync with leader",
        ],
    ),
    (
        ErrorClass::TransitionInProgress,
        &[
            "too many learner members in cluster",
            "Peer URLs already exists",
            "ErrPeerURLExist",
        ],
    ),
    (
        ErrorClass::AlreadyRemoved,
        &["member not found", "membership: ID not found"],
    ),
    (
        ErrorClass::ConfigError,
        &[
            "unmatched member while checking PeerURLs",
            "the member count is unequal",
        ],
    ),
    (
        ErrorClass::Snapshot,
        &[
            "snapshot missing hash but --skip-hash-check=false",
            "expected sha256",
            "not empty or could not be read",
            "unknown flag: --bump-revision",
        ],
    ),
    (ErrorClass::LearnerEndpoint, &["rpc not supported for learner"]),
    (
        ErrorClass::ClusterWideNoSpace,
        &["mvcc: database space exceeded", "alarm:NOSPACE", "NOSPACE"],
    ),
    (ErrorClass::DataCorruption, &["alarm:CORRUPT", "CORRUPT"]),
    (ErrorClass::NoQuorum, &["etcdserver: no leader"]),
];

/// The class of `text` (an error message, a journal tail).
pub fn classify(text: &str) -> ErrorClass {
    for (class, needles) in TABLE {
        if needles.iter().any(|n| text.contains(n)) {
            return *class;
        }
    }
    if text.contains("data-dir") && text.contains("exists") {
        return ErrorClass::Snapshot;
    }
    if text.contains("context deadline exceeded") {
        return ErrorClass::NoQuorum;
    }
    ErrorClass::Unknown
}

/// The fatal identity error in a member's journal, if any: the line that shows its data dir is
/// unusable (a restart will not help; the member must be replaced).
pub fn identity_error(journal: &str) -> Option<&str> {
    journal
        .lines()
        .find(|l| classify(l) == ErrorClass::DataDirInvalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appendix_b_strings_classify() {
        let cases: &[(&str, ErrorClass)] = &[
            ("Error: etcdserver: unhealthy cluster", ErrorClass::RetryAfterHealthGate),
            (
                "Error: etcdserver: can only promote a learner member which is in sync with leader",
                ErrorClass::RetryAfterHealthGate,
            ),
            (
                "Error: etcdserver: too many learner members in cluster",
                ErrorClass::TransitionInProgress,
            ),
            ("Error: etcdserver: Peer URLs already exists", ErrorClass::TransitionInProgress),
            ("Error: etcdserver: member not found", ErrorClass::AlreadyRemoved),
            ("membership: ID not found", ErrorClass::AlreadyRemoved),
            (
                r#"{"level":"fatal","msg":"discovery failed","error":"member bfc05a039adf45c6 has already been bootstrapped"}"#,
                ErrorClass::DataDirInvalid,
            ),
            (
                "panic: tocommit(16) is out of range [lastIndex(0)]. Was the raft log corrupted, truncated, or lost?",
                ErrorClass::DataDirInvalid,
            ),
            (
                "the member has been permanently removed from the cluster",
                ErrorClass::DataDirInvalid,
            ),
            ("request cluster ID mismatch", ErrorClass::DataDirInvalid),
            ("unmatched member while checking PeerURLs", ErrorClass::ConfigError),
            ("the member count is unequal", ErrorClass::ConfigError),
            ("Error: snapshot missing hash but --skip-hash-check=false", ErrorClass::Snapshot),
            ("Error: expected sha256 [1 2], got [3 4]", ErrorClass::Snapshot),
            (r#"Error: data-dir "restore/exists" exists"#, ErrorClass::Snapshot),
            ("Error: unknown flag: --bump-revision", ErrorClass::Snapshot),
            ("etcdserver: no leader", ErrorClass::NoQuorum),
            ("Error: context deadline exceeded", ErrorClass::NoQuorum),
            ("etcdserver: rpc not supported for learner", ErrorClass::LearnerEndpoint),
            (
                "Error: etcdserver: mvcc: database space exceeded",
                ErrorClass::ClusterWideNoSpace,
            ),
            ("memberID:1234 alarm:NOSPACE", ErrorClass::ClusterWideNoSpace),
            ("memberID:1234 alarm:CORRUPT", ErrorClass::DataCorruption),
            ("connection refused", ErrorClass::Unknown),
        ];
        for (text, class) in cases {
            assert_eq!(classify(text), *class, "{text}");
        }
    }

    #[test]
    fn finds_the_identity_error_in_a_journal_tail() {
        let journal = "starting etcd\nlistening for peers\n\
{\"level\":\"fatal\",\"msg\":\"discovery failed\",\"error\":\"member 921b590400393280 has already been bootstrapped\"}\n";
        assert!(identity_error(journal)
            .unwrap()
            .contains("already been bootstrapped"));
        assert_eq!(identity_error("etcd serving\n"), None);
    }
}
