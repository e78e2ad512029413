//! Reads an etcd snapshot file (a bbolt database, optionally followed by etcd's 32-byte sha256)
//! for the facts `etcdutl snapshot status` reports: the crc32c hash over every bucket's name,
//! keys and values, the revision (the last key of bucket `key`), the number of keys and the
//! size. `hactl etcd snapshot save` uses it so those facts cost no second transfer of the file.
//!
//! The format (bbolt, little-endian on the hosts etcd ships for): pages of `page_size` bytes,
//! each with a 16-byte header `{id u64, flags u16, count u16, overflow u32}`; two meta pages at
//! 0 and 1 (magic, version, page size, root bucket, freelist, page count, txid, FNV-1a
//! checksum; the valid one with the higher txid wins); branch elements `{pos u32, ksize u32,
//! pgid u64}`; leaf elements `{flags u32, pos u32, ksize u32, vsize u32}`, the key at `pos`
//! from the element and the value after it. A bucket's value is `{root u64, sequence u64}`,
//! followed by the bucket's page itself when `root` is 0 (an inline bucket).
//!
//! Invariant: read-only, and nothing is guessed: a page out of range or of the wrong kind, a
//! page reached twice, keys out of order or a page neither reachable nor free is an error (the
//! checks of bbolt's `tx.Check()` that matter for a file that arrived whole).

use fs_err::os::unix::fs::FileExt;
use std::path::Path;

use crate::snapshot::Status;

const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
const HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const FREELIST: u16 = 0x10;
const BUCKET_LEAF: u32 = 0x01;
/// `meta.freelist` when the freelist is not stored (bbolt's `NoFreelistSync`).
const NO_FREELIST: u64 = u64::MAX;

#[derive(Debug, thiserror::Error)]
pub enum BoltError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("neither meta page is valid (magic, version, checksum): not a bbolt file")]
    NoMeta,
    #[error("page {page}: {what}")]
    Corrupt { page: u64, what: String },
}

fn corrupt(page: u64, what: impl Into<String>) -> BoltError {
    BoltError::Corrupt {
        page,
        what: what.into(),
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The fields of a meta page hactl uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    page_size: u64,
    root: u64,
    freelist: u64,
    /// Pages in use (the file's high-water mark).
    pgid: u64,
    txid: u64,
}

/// Parses the meta page at the start of `page`; `None` when its magic, version, flags or
/// checksum (FNV-1a 64 over the fields before it) do not hold.
fn meta(page: &[u8]) -> Option<Meta> {
    if page.len() < HEADER + 64 || u16_at(page, 8) & META == 0 {
        return None;
    }
    let m = &page[HEADER..HEADER + 64];
    let mut fnv: u64 = 0xcbf2_9ce4_8422_2325;
    for b in &m[..56] {
        fnv ^= u64::from(*b);
        fnv = fnv.wrapping_mul(0x0000_0100_0000_01b3);
    }
    if u32_at(m, 0) != MAGIC || u32_at(m, 4) != VERSION || u64_at(m, 56) != fnv {
        return None;
    }
    Some(Meta {
        page_size: u64::from(u32_at(m, 8)),
        root: u64_at(m, 16),
        freelist: u64_at(m, 32),
        pgid: u64_at(m, 40),
        txid: u64_at(m, 48),
    })
}

/// Called with each leaf element's key, value and flags.
type Visit<'a> = dyn FnMut(&[u8], &[u8], u32) -> Result<(), BoltError> + 'a;

struct Reader {
    file: fs_err::File,
    page_size: u64,
    pgid: u64,
    /// Pages reached so far (by the walk or the freelist).
    seen: Vec<bool>,
}

impl Reader {
    /// Reads page `id` with its overflow pages, marking them seen.
    fn page(&mut self, id: u64, want: u16) -> Result<Vec<u8>, BoltError> {
        if id < 2 || id >= self.pgid {
            return Err(corrupt(id, format!("out of range (2..{})", self.pgid)));
        }
        let mut header = [0u8; HEADER];
        self.file.read_exact_at(&mut header, id * self.page_size)?;
        let overflow = u64::from(u32_at(&header, 12));
        if u64_at(&header, 0) != id {
            return Err(corrupt(id, format!("header names page {}", u64_at(&header, 0))));
        }
        if u16_at(&header, 8) & want == 0 {
            return Err(corrupt(
                id,
                format!("flags {:#x}, expected {want:#x}", u16_at(&header, 8)),
            ));
        }
        if id + overflow >= self.pgid {
            return Err(corrupt(id, format!("overflow {overflow} runs past the end")));
        }
        for p in id..=id + overflow {
            if std::mem::replace(&mut self.seen[p as usize], true) {
                return Err(corrupt(p, "reached twice"));
            }
        }
        let mut buf = vec![0u8; ((overflow + 1) * self.page_size) as usize];
        self.file.read_exact_at(&mut buf, id * self.page_size)?;
        Ok(buf)
    }

    /// Calls `f(key, value, flags)` for every leaf element under `page` (a page read from the
    /// file, or an inline bucket's page), in key order.
    fn walk(&mut self, id: u64, page: &[u8], f: &mut Visit<'_>) -> Result<(), BoltError> {
        if page.len() < HEADER {
            return Err(corrupt(id, "shorter than a page header"));
        }
        let count = usize::from(u16_at(page, 10));
        let element = |i: usize| -> Result<usize, BoltError> {
            let at = HEADER + i * ELEMENT;
            if at + ELEMENT > page.len() {
                return Err(corrupt(id, format!("element {i} lies past the page")));
            }
            Ok(at)
        };
        match u16_at(page, 8) {
            BRANCH => {
                for i in 0..count {
                    let child = u64_at(page, element(i)? + 8);
                    let p = self.page(child, BRANCH | LEAF)?;
                    self.walk(child, &p, f)?;
                }
            }
            LEAF => {
                for i in 0..count {
                    let at = element(i)?;
                    let flags = u32_at(page, at);
                    let start = at + u32_at(page, at + 4) as usize;
                    let ksize = u32_at(page, at + 8) as usize;
                    let vsize = u32_at(page, at + 12) as usize;
                    if start + ksize + vsize > page.len() {
                        return Err(corrupt(
                            id,
                            format!("element {i}'s key or value lies past the page"),
                        ));
                    }
                    f(
                        &page[start..start + ksize],
                        &page[start + ksize..start + ksize + vsize],
                        flags,
                    )?;
                }
            }
            other => return Err(corrupt(id, format!("flags {other:#x}: neither branch nor leaf"))),
        }
        Ok(())
    }

    /// Walks the bucket whose header (and, inline, page) is `value`.
    fn walk_bucket(&mut self, name: &[u8], value: &[u8], f: &mut Visit<'_>) -> Result<(), BoltError> {
        if value.len() < 16 {
            return Err(corrupt(
                0,
                format!("bucket {}: header too short", String::from_utf8_lossy(name)),
            ));
        }
        match u64_at(value, 0) {
            0 => self.walk(0, &value[16..], f),
            root => {
                let p = self.page(root, BRANCH | LEAF)?;
                self.walk(root, &p, f)
            }
        }
    }

    /// Marks the pages the freelist names (and the freelist's own pages) as seen.
    fn freelist(&mut self, id: u64) -> Result<(), BoltError> {
        let page = self.page(id, FREELIST)?;
        let (mut count, mut at) = (u64::from(u16_at(&page, 10)), HEADER);
        if count == 0xFFFF {
            count = u64_at(&page, HEADER);
            at += 8;
        }
        if at as u64 + count * 8 > page.len() as u64 {
            return Err(corrupt(id, format!("{count} free pages do not fit")));
        }
        for i in 0..count as usize {
            let free = u64_at(&page, at + i * 8);
            if free < 2 || free >= self.pgid {
                return Err(corrupt(id, format!("free page {free} out of range")));
            }
            if std::mem::replace(&mut self.seen[free as usize], true) {
                return Err(corrupt(free, "both free and in use"));
            }
        }
        Ok(())
    }
}

/// What `etcdutl snapshot status -w json` reports for the snapshot at `path`.
pub fn status(path: &Path) -> Result<Status, BoltError> {
    read(path).map(|(status, _)| status)
}

/// The status, and which pages the walk (or the freelist) reached.
fn read(path: &Path) -> Result<(Status, Vec<bool>), BoltError> {
    let file = fs_err::File::open(path)?;
    let len = file.metadata()?.len();
    let mut first = vec![0u8; 4096.min(len as usize)];
    file.read_exact_at(&mut first, 0)?;
    let m0 = meta(&first);
    let page_size = m0.map(|m| m.page_size).unwrap_or(4096);
    if !(512..=1 << 20).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(BoltError::NoMeta);
    }
    let mut second = vec![0u8; page_size as usize];
    let m1 = match file.read_exact_at(&mut second, page_size) {
        Ok(()) => meta(&second),
        Err(_) => None,
    };
    let meta = match (m0, m1) {
        (Some(a), Some(b)) => {
            if b.txid > a.txid {
                b
            } else {
                a
            }
        }
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return Err(BoltError::NoMeta),
    };
    let total_size = meta.pgid * meta.page_size;
    if meta.pgid < 4 || total_size > len {
        return Err(corrupt(
            meta.pgid,
            format!(
                "the meta page counts {} pages of {} bytes but the file has {len} bytes",
                meta.pgid, meta.page_size
            ),
        ));
    }
    let mut r = Reader {
        file,
        page_size: meta.page_size,
        pgid: meta.pgid,
        seen: vec![false; meta.pgid as usize],
    };
    r.seen[0] = true;
    r.seen[1] = true;
    // The root bucket: one entry per top-level bucket, in name order.
    let mut buckets: Vec<(Vec<u8>, Vec<u8>, u32)> = Vec::new();
    let root = r.page(meta.root, BRANCH | LEAF)?;
    r.walk(meta.root, &root, &mut |k, v, flags| {
        buckets.push((k.to_vec(), v.to_vec(), flags));
        Ok(())
    })?;
    let mut hash = 0u32;
    let mut revision = 0i64;
    let mut total_key = 0u64;
    let mut previous_name: Option<Vec<u8>> = None;
    for (name, value, flags) in &buckets {
        if flags & BUCKET_LEAF == 0 {
            return Err(corrupt(
                meta.root,
                format!("top-level key {} is not a bucket", String::from_utf8_lossy(name)),
            ));
        }
        if previous_name.as_deref().is_some_and(|p| p >= name.as_slice()) {
            return Err(corrupt(meta.root, "bucket names out of order"));
        }
        previous_name = Some(name.clone());
        hash = crc32c::crc32c_append(hash, name);
        let is_key = name.as_slice() == b"key";
        let mut previous: Vec<u8> = Vec::new();
        let mut first = true;
        r.walk_bucket(name, value, &mut |k, v, flags| {
            if !first && previous.as_slice() >= k {
                return Err(corrupt(
                    0,
                    format!("bucket {}: keys out of order", String::from_utf8_lossy(name)),
                ));
            }
            first = false;
            previous.clear();
            previous.extend_from_slice(k);
            hash = crc32c::crc32c_append(hash, k);
            // A nested bucket's value reads as nil in bbolt's ForEach.
            if flags & BUCKET_LEAF == 0 {
                hash = crc32c::crc32c_append(hash, v);
            }
            if is_key {
                let main: [u8; 8] = k.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| {
                    corrupt(0, format!("bucket key: a {}-byte key is not a revision", k.len()))
                })?;
                revision = i64::from_be_bytes(main);
            }
            total_key += 1;
            Ok(())
        })?;
    }
    if meta.freelist != NO_FREELIST {
        r.freelist(meta.freelist)?;
        if let Some(lost) = r.seen.iter().position(|s| !s) {
            return Err(corrupt(lost as u64, "neither reachable nor free"));
        }
    }
    let status = Status {
        hash: u64::from(hash),
        revision,
        total_key,
        total_size,
    };
    Ok((status, r.seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot taken with `hactl etcd snapshot save` from a lab cluster (etcd 3.5.16), and
    /// what `etcdutl snapshot status -w json` printed for that very file.
    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/snapshot/lab-3.5.16.db"
    );
    const FIXTURE_STATUS: &str = include_str!("../../tests/fixtures/snapshot/lab-3.5.16.status.json");

    #[test]
    fn a_lab_snapshot_reads_as_etcdutl_reported_it() {
        let want: Status = serde_json::from_str(FIXTURE_STATUS).unwrap();
        assert_eq!(status(Path::new(FIXTURE)).unwrap(), want);
    }

    #[test]
    fn damage_is_an_error_not_a_guess() {
        let tmp = tempfile::tempdir().unwrap();
        let good = fs_err::read(FIXTURE).unwrap();
        let m = meta(&good).unwrap();
        let ps = m.page_size as usize;
        let p = tmp.path().join("s.db");
        // Both meta pages broken: not a bbolt file.
        let mut bad = good.clone();
        bad[HEADER] ^= 0xff;
        bad[ps + HEADER] ^= 0xff;
        fs_err::write(&p, &bad).unwrap();
        assert!(matches!(status(&p), Err(BoltError::NoMeta)), "{:?}", status(&p));
        // One meta page broken: the other one serves.
        let mut one = good.clone();
        one[HEADER + 20] ^= 0xff;
        fs_err::write(&p, &one).unwrap();
        assert!(status(&p).is_ok());
        // The root page's header names another page.
        let mut bad = good.clone();
        let root = m.root as usize * ps;
        bad[root] ^= 0x01;
        fs_err::write(&p, &bad).unwrap();
        assert!(
            matches!(status(&p), Err(BoltError::Corrupt { .. })),
            "{:?}",
            status(&p)
        );
        // Cut short: the pages the meta page counts are not all there.
        fs_err::write(&p, &good[..good.len() / 2]).unwrap();
        assert!(
            matches!(status(&p), Err(BoltError::Corrupt { .. })),
            "{:?}",
            status(&p)
        );
        // A leaf element's key moved out of order changes what is read: the hash or an error,
        // never the fixture's status.
        let want: Status = serde_json::from_str(FIXTURE_STATUS).unwrap();
        // Free pages may look like leaves: only pages the walk reached count.
        let (_, reached) = read(Path::new(FIXTURE)).unwrap();
        let mut flipped = 0;
        for (page, _) in reached.iter().enumerate().skip(2).filter(|(_, r)| **r) {
            let at = page * ps;
            if u16_at(&good, at + 8) == LEAF && u16_at(&good, at + 10) > 1 {
                let mut bad = good.clone();
                let e = at + HEADER;
                let start = e + u32_at(&bad, e + 4) as usize;
                bad[start] ^= 0x80;
                fs_err::write(&p, &bad).unwrap();
                assert_ne!(status(&p).ok(), Some(want.clone()), "page {page}");
                flipped += 1;
            }
        }
        assert!(flipped > 0, "the fixture has no leaf page with two keys");
    }

    #[test]
    fn the_meta_checksum_is_fnv1a_over_the_fields_before_it() {
        let good = fs_err::read(FIXTURE).unwrap();
        let m = meta(&good).unwrap();
        assert_eq!(m.page_size, 4096);
        assert!(m.pgid * m.page_size + 32 == good.len() as u64);
    }
}
