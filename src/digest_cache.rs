//! The digests of large files hactl placed on a host, kept beside them so that reading the host's
//! facts need not hash them again.
//!
//! Every `plan` and `up` reads the sha256 of each file hactl manages on each host (the facts
//! probe). For the certificates and configuration files that costs nothing; the Kubernetes and
//! etcd binaries are tens to hundreds of MiB each, and hashing them on every host was most of a
//! no-op `up`'s time on the hosts. So when hactl writes a file of at least [`MIN_SIZE`] bytes, the
//! upload also records, in [`DIR`], the digest it wrote with the file's inode, size and change
//! time (ctime, in nanoseconds). The probe takes the recorded digest only while all three still
//! match: any write, rename, truncation, `chmod` or `chown` of the file sets its ctime to the
//! current time, which no program can set back, so a file changed by anyone after hactl wrote it
//! is hashed again. (The kernel moves file times in clock ticks of a few milliseconds: a change
//! of the same size within the tick of hactl's own rename would go unseen; nothing writes hactl's
//! binaries in that instant.) A missing, unreadable or stale record is hashed too: the cache only ever saves
//! work. Recording is best effort (a failure there does not fail the upload) and reading is
//! read-only, so `plan` stays read-only.
//!
//! A record is one line, `<inode>:<size>:<ctime> <sha256>`, in a file named after the sha256 of
//! the path (the first 40 hex digits). The ctime is `stat`'s `%z` with its spaces made colons.

/// Where the records live on a host.
pub const DIR: &str = "/var/lib/hactl/digests";

/// Files smaller than this are hashed every time (cheaper than the record's bookkeeping).
pub const MIN_SIZE: usize = 1 << 20;

/// Shell function `hactl_digest_key PATH`: the record's key for PATH as it is now.
const KEY_FN: &str = r#"hactl_digest_key() { stat -c '%i:%s:%z' -- "$1" | tr ' ' :; }
hactl_digest_name() { printf '%s' "$1" | sha256sum | cut -c1-40; }
"#;

/// The name of PATH's record in [`DIR`], as `hactl_digest_name` makes it on a host: the first 40
/// hex digits of the path's sha256. The facts probe is handed these names for every file it
/// reads, so that it need not start a `sha256sum` per file to find the records.
pub fn record_name(path: &str) -> String {
    use sha2::Digest;
    let mut name = hex::encode(sha2::Sha256::digest(path.as_bytes()));
    name.truncate(40);
    name
}

/// Shell functions: `hactl_digest_record DIR PATH SHA256` records (best effort, exit 0 always),
/// and `hactl_recorded_list DIR LIST` reads the records of many files in a few processes (LIST:
/// `<record name> <path>` lines, the names from [`record_name`]; prints `<sha256> <path>` for
/// each file whose record matches it as it is now). Hashing what has no record, and leaving the
/// small files to that, is the reader's part (the facts probe).
pub fn shell_functions() -> String {
    format!(
        r#"{KEY_FN}hactl_digest_record() {{
  k=$(hactl_digest_key "$2") && n=$(hactl_digest_name "$2") && mkdir -p -- "$1" &&
    printf '%s %s\n' "$k" "$3" > "$1/.$n.tmp" && mv -f -- "$1/.$n.tmp" "$1/$n" || rm -f -- "$1/.$n.tmp" 2>/dev/null
  return 0
}}
hactl_recorded_list() {{
  [ -n "$2" ] || return 0
  rst=$(printf '%s\n' "$2" | cut -d' ' -f2- | tr '\n' '\0' | xargs -0 stat -c '%i:%s:%z %n' 2>/dev/null)
  [ -n "$rst" ] || return 0
  # `%z` is three words (date, time, zone): the key is the first three words joined by colons,
  # as hactl_digest_key makes it.
  printf '%s\n--\n%s\n' "$2" "$rst" | awk -v dir="$1" '
    $0 == "--" {{ s = 1; next }}
    !s {{ if (NF > 1) {{ n = $1; sub(/^[^ ]* /, ""); name[$0] = n }}; next }}
    {{ k = $1 ":" $2 ":" $3; p = $0; sub(/^[^ ]* [^ ]* [^ ]* /, "", p)
      if (!(p in name)) next
      f = dir "/" name[p]
      if ((getline r < f) > 0 && split(r, w, " ") == 2 && w[1] == k && length(w[2]) == 64) print w[2], p
      close(f) }}'
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `script` with the records' shell functions defined, in a real shell.
    fn sh(script: &str, args: &[&str]) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{}{script}", shell_functions()))
            .arg("hactl-test")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// The operator machine names a record as the host's shell does.
    #[test]
    fn a_records_name_is_the_same_on_both_sides() {
        for path in ["/usr/local/bin/kube-apiserver", "/etc/a b", "/x"] {
            assert_eq!(sh(r#"hactl_digest_name "$1""#, &[path]), record_name(path));
        }
    }

    /// A recorded digest is read while the file is as written (shown by recording a digest that
    /// is not the content's), and given up as soon as anything touches the file: a rewrite of the
    /// same size, a chmod, a size that moved. A file that is not there, or has no record, has
    /// none; many files are read in one call.
    #[test]
    fn a_record_is_used_only_while_the_file_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("digests");
        let (cache, file) = (cache.to_str().unwrap(), dir.path().join("bin"));
        let path = file.to_str().unwrap();
        let big = vec![7u8; MIN_SIZE];
        std::fs::write(&file, &big).unwrap();
        let recorded = "a".repeat(64);
        let list = |paths: &[&str]| {
            paths
                .iter()
                .map(|p| format!("{} {p}\n", record_name(p)))
                .collect::<String>()
        };
        let read = |paths: &[&str]| sh(r#"hactl_recorded_list "$1" "$2""#, &[cache, &list(paths)]);
        let record = |p: &str| sh(r#"hactl_digest_record "$1" "$2" "$3""#, &[cache, p, &recorded]);

        assert_eq!(read(&[path]), "", "no record");
        record(path);
        assert_eq!(
            read(&[path]),
            format!("{recorded} {path}"),
            "an untouched file: the record"
        );

        // Same size, other content: the ctime moved, so the record no longer counts. (File times
        // move in clock ticks of a few ms: the pause keeps both writes out of one tick.)
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut other = big.clone();
        other[0] = 8;
        std::fs::write(&file, &other).unwrap();
        assert_eq!(read(&[path]), "", "rewritten since its record");

        record(path);
        assert_eq!(read(&[path]), format!("{recorded} {path}"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::process::Command::new("chmod")
            .args(["0700", path])
            .status()
            .unwrap();
        assert_eq!(read(&[path]), "", "a chmod moves the ctime too");

        // Many files at once: the one whose record matches, none for a file whose size moved
        // since its record, none for a file that is not there.
        record(path);
        let small = dir.path().join("small");
        std::fs::write(&small, b"x").unwrap();
        let small = small.to_str().unwrap();
        record(small);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(small, b"xy").unwrap();
        let missing = dir.path().join("missing");
        let missing = missing.to_str().unwrap();
        assert_eq!(read(&[small, missing, path]), format!("{recorded} {path}"));
        assert_eq!(read(&[]), "", "nothing asked");

        // A record that cannot be written does not fail (the cache dir is a file here).
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, b"").unwrap();
        sh(
            r#"hactl_digest_record "$1" "$2" "$3""#,
            &[blocked.to_str().unwrap(), path, &recorded],
        );
    }
}
