//! Reads with a limit. Every file hactl reads whole goes through here, with the limit of its
//! kind: a wrong path (`hactl validate -i /dev/zero`, a FIFO, a multi-gigabyte file named by
//! mistake) fails at the limit with an error naming the file, instead of filling the memory
//! first. The output of a remote command is capped the same way in `ssh::Session`
//! (`RemoteCommand::output_limit`), and an HTTP body here ([`http_body`]).
//!
//! Invariant: at most `limit + 1` bytes are read from any source, whatever it claims its size is
//! (`/dev/zero` and pipes claim 0).

use std::io::Read;
use std::path::Path;

/// Inventories, certificates and keys (PEM), JSON records (journals, locks, sidecars,
/// `latest.json`, the high-water mark), known_hosts, identities, tokens: the largest of them
/// (a journal of a long run) is well under a MiB.
pub const TEXT: u64 = 16 << 20;
/// A component binary (etcd, kube-apiserver, …) from a bundle directory or a release tarball:
/// the largest Kubernetes server binary is under 200 MiB.
pub const BINARY: u64 = 1 << 30;
/// An etcd snapshot: the database of the largest backend quota the inventory allows (8 GiB) and
/// the room a database may take past its quota.
pub const SNAPSHOT: u64 = 10 << 30;
/// What a remote command may print on stdout, or on stderr, unless it says otherwise (facts,
/// probes, journals: a few KiB to a few MiB).
pub const COMMAND_OUTPUT: u64 = 64 << 20;

/// An answer typed at a prompt (a cluster name, `y`).
pub const ANSWER: u64 = 4096;

/// One line of `reader` (an answer on stdin), at most [`ANSWER`] bytes of it: a longer line (or
/// an endless stdin, `< /dev/zero`) is cut there, and matches no answer.
pub fn read_answer(reader: impl std::io::BufRead) -> std::io::Result<String> {
    let mut answer = String::new();
    std::io::BufRead::read_line(&mut reader.take(ANSWER), &mut answer)?;
    Ok(answer)
}

/// The error of a source past its limit: `what` names it (a path, a command and its host).
pub fn too_large(what: &str, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{what} is larger than {}, the most hactl reads from it: is it the right file?",
            human(limit)
        ),
    )
}

/// `16 MiB`, `1 GiB`, `512 KiB`, `100 bytes`: whole units where the limit is one.
pub fn human(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// Reads all of `reader`, at most `limit` bytes; past it, [`too_large`] naming `what`.
pub fn read_to_end(reader: impl Read, limit: u64, what: &str) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.take(limit.saturating_add(1)).read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(too_large(what, limit));
    }
    Ok(out)
}

/// Why an HTTP body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Read(reqwest::Error),
    #[error(transparent)]
    TooLarge(std::io::Error),
}

/// An HTTP response's body, at most `limit` bytes (an apiserver's JSON, a published sha256);
/// past it, [`too_large`] naming `what`.
pub async fn http_body(
    mut response: reqwest::Response,
    limit: u64,
    what: &str,
) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if out.len() as u64 + chunk.len() as u64 > limit {
            return Err(BodyError::TooLarge(too_large(what, limit)));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `fs::read` with a limit; errors name the path.
pub fn read(path: impl AsRef<Path>, limit: u64) -> std::io::Result<Vec<u8>> {
    let path = path.as_ref();
    let file = fs_err::File::open(path)?;
    read_to_end(file, limit, &format!("`{}`", path.display()))
}

/// `fs::read_to_string` with a limit; errors name the path.
pub fn read_to_string(path: impl AsRef<Path>, limit: u64) -> std::io::Result<String> {
    let path = path.as_ref();
    let bytes = read(path, limit)?;
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("`{}` is not UTF-8 text", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_source_fails_at_the_limit_naming_it() {
        // /dev/zero claims a size of 0 and never ends: the limit, not the size, stops the read.
        let err = read(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/dev/zero` is larger than 1 MiB, the most hactl reads from it: is it the right file?"
        );
        let err = read_to_string(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(err.to_string().contains("larger than 10 bytes"), "{err}");
    }

    #[test]
    fn a_file_up_to_the_limit_reads_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f");
        fs_err::write(&p, b"0123456789").unwrap();
        assert_eq!(read(&p, 10).unwrap(), b"0123456789");
        assert!(read(&p, 9).is_err());
        assert_eq!(read_to_string(&p, 100).unwrap(), "0123456789");
        fs_err::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_to_string(&p, 100)
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
        let missing = read(tmp.path().join("missing"), 10).unwrap_err();
        assert!(missing.to_string().contains("missing"), "{missing}");
    }

    #[test]
    fn an_answer_is_one_line_and_never_more_than_its_limit() {
        assert_eq!(read_answer(&b"prod\nmore\n"[..]).unwrap(), "prod\n");
        let endless = std::io::BufReader::new(std::io::repeat(b'x'));
        assert_eq!(read_answer(endless).unwrap().len() as u64, ANSWER);
    }

    #[test]
    fn limits_print_in_whole_units() {
        assert_eq!(human(TEXT), "16 MiB");
        assert_eq!(human(BINARY), "1 GiB");
        assert_eq!(human(SNAPSHOT), "10 GiB");
        assert_eq!(human(1536), "1536 bytes");
        assert_eq!(human(2048), "2 KiB");
    }
}
