//! The container images hactl ships to nodes instead of pulling them from a registry: a directory
//! of OCI image archives and the manifest that lists them (`images.json`, written last by
//! `scripts/node-images.sh`, which builds them from the Kubernetes binaries).
//!
//! Each entry names an image (`hactl.local/pause`), its tag, the full reference containerd gives it
//! on import, the digest of its manifest (what `ctr images ls` shows after the import, to be checked
//! on every node), and its archive file with that file's sha256 and size.
//!
//! Invariant: [`ImageSet::load`] accepts only a manifest whose every entry is well formed (a
//! `sha256:` digest of 64 hex digits, an archive that is a plain file name in the directory, no
//! image named twice); reading it opens no archive. [`ImageSet::verify_archives`] hashes them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The manifest's file name in an image directory.
pub const MANIFEST: &str = "images.json";
/// The only manifest format this build reads.
pub const FORMAT: u32 = 1;
/// The command that builds (or rebuilds) an image directory.
pub const BUILD_COMMAND: &str = "scripts/node-images.sh <version> (after scripts/kube-binaries.sh)";

#[derive(Debug, thiserror::Error)]
pub enum ImagesError {
    #[error("cannot read {}: {source}; build the images with `{BUILD_COMMAND}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not an image manifest: {source}; rebuild the images with `{BUILD_COMMAND}`", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: {message}; rebuild the images with `{BUILD_COMMAND}`", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{}: sha256 {found}, but {} says {want}: the archive changed since it was built; rebuild the images with `{BUILD_COMMAND}`", path.display(), MANIFEST)]
    ArchiveMismatch {
        path: PathBuf,
        found: String,
        want: String,
    },
}

/// `images.json` as written by the script.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    format: u32,
    kubernetes_version: String,
    images: Vec<Image>,
}

/// One image of a set.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Repository name, `hactl.local/pause`.
    pub name: String,
    /// `3.4`, `1.35.0`, `v1.20.2`.
    pub tag: String,
    /// `name:tag`, the name containerd gives the image on import.
    pub reference: String,
    /// `sha256:<64 hex>`, the digest of the image's manifest.
    pub digest: String,
    /// The archive's file name in the image directory.
    pub archive: String,
    /// The archive's own sha256 (hex), to check a copy before it is imported.
    pub archive_sha256: String,
    pub archive_size: u64,
}

/// A checked image directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSet {
    pub dir: PathBuf,
    /// The Kubernetes version whose binaries the images were made from (`v1.20.2`).
    pub kubernetes_version: String,
    /// In the manifest's order.
    pub images: Vec<Image>,
}

impl ImageSet {
    /// Reads and checks `<dir>/images.json`.
    pub fn load(dir: &Path) -> Result<ImageSet, ImagesError> {
        let path = dir.join(MANIFEST);
        let text = crate::bounded::read_to_string(&path, crate::bounded::TEXT).map_err(|source| {
            ImagesError::Read {
                path: path.clone(),
                source,
            }
        })?;
        Self::parse(dir, &text)
    }

    /// Checks the manifest `text` of the image directory `dir`.
    pub fn parse(dir: &Path, text: &str) -> Result<ImageSet, ImagesError> {
        let path = dir.join(MANIFEST);
        let raw: RawManifest = serde_json::from_str(text).map_err(|source| ImagesError::Parse {
            path: path.clone(),
            source,
        })?;
        let invalid = |message: String| ImagesError::Invalid {
            path: path.clone(),
            message,
        };
        if raw.format != FORMAT {
            return Err(invalid(format!(
                "format {} is not one this hactl reads (it reads {FORMAT})",
                raw.format
            )));
        }
        for (i, image) in raw.images.iter().enumerate() {
            let at = |what: String| invalid(format!("images[{i}] ({}): {what}", image.name));
            if image.name.is_empty() || image.tag.is_empty() {
                return Err(at("empty name or tag".into()));
            }
            if image.reference != format!("{}:{}", image.name, image.tag) {
                return Err(at(format!(
                    "reference {:?} is not {}:{}",
                    image.reference, image.name, image.tag
                )));
            }
            if !is_sha256_digest(&image.digest) {
                return Err(at(format!(
                    "digest {:?} is not sha256:<64 hex digits>",
                    image.digest
                )));
            }
            if !is_hex64(&image.archive_sha256) {
                return Err(at(format!(
                    "archiveSha256 {:?} is not 64 hex digits",
                    image.archive_sha256
                )));
            }
            let plain = Path::new(&image.archive)
                .file_name()
                .is_some_and(|f| f == image.archive.as_str());
            if !plain || image.archive.starts_with('.') {
                return Err(at(format!(
                    "archive {:?} is not a file name in the directory",
                    image.archive
                )));
            }
            if let Some(j) = raw.images[..i].iter().position(|o| o.name == image.name) {
                return Err(at(format!("the image is listed twice (also images[{j}])")));
            }
        }
        Ok(ImageSet {
            dir: dir.to_path_buf(),
            kubernetes_version: raw.kubernetes_version,
            images: raw.images,
        })
    }

    /// The image named `name` (`hactl.local/pause`).
    pub fn get(&self, name: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.name == name)
    }

    /// Where `image`'s archive is.
    pub fn archive_path(&self, image: &Image) -> PathBuf {
        self.dir.join(&image.archive)
    }

    /// Hashes every archive (through `digests`: once per change of the file) and compares it
    /// with the manifest; the archives as blobs, by archive file name.
    pub fn verify_archives(
        &self,
        digests: &crate::local_digests::LocalDigests,
    ) -> Result<std::collections::BTreeMap<String, crate::plan::Blob>, ImagesError> {
        let mut blobs = std::collections::BTreeMap::new();
        for image in &self.images {
            let path = self.archive_path(image);
            let blob = digests.blob(&path).map_err(|source| ImagesError::Read {
                path: path.clone(),
                source,
            })?;
            if blob.sha256 != image.archive_sha256 {
                return Err(ImagesError::ArchiveMismatch {
                    path,
                    found: blob.sha256,
                    want: image.archive_sha256.clone(),
                });
            }
            blobs.insert(image.archive.clone(), blob);
        }
        Ok(blobs)
    }
}

/// The reference and digest of each image in the output of `ctr images ls` (columns REF, TYPE,
/// DIGEST, …; the header line is skipped), in its order.
pub fn parse_ctr_images_ls(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with("REF "))
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let reference = cols.next()?;
            let _media_type = cols.next()?;
            let digest = cols.next()?;
            is_sha256_digest(digest).then(|| (reference.to_string(), digest.to_string()))
        })
        .collect()
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(is_hex64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "0ea7637e2d036379c26bab4f1ad5782f37e49bad6d95bc92a5a2fdfff95dcc7e";
    const D2: &str = "662fb326546d584b6b25163be9df9651006a0d8407389a01764ed7ed002b04cc";

    fn manifest(images: &str) -> String {
        format!("{{\n  \"format\": 1,\n  \"kubernetesVersion\": \"v1.20.2\",\n  \"images\": [\n{images}\n  ]\n}}\n")
    }

    fn entry(name: &str, tag: &str, digest: &str, archive: &str, archive_sha256: &str) -> String {
        format!(
            "    {{\"name\": \"{name}\", \"tag\": \"{tag}\", \"reference\": \"{name}:{tag}\", \"digest\": \"{digest}\", \
             \"archive\": \"{archive}\", \"archiveSha256\": \"{archive_sha256}\", \"archiveSize\": 348160, \
             \"sources\": {{\"pause\": \"{D2}\"}}}}"
        )
    }

    #[test]
    fn the_scripts_manifest_is_read() {
        let text = manifest(&format!(
            "{},\n{}",
            entry(
                "hactl.local/pause",
                "3.4",
                &format!("sha256:{D1}"),
                "pause.tar",
                D2
            ),
            entry(
                "hactl.local/busybox",
                "1.35.0",
                &format!("sha256:{D2}"),
                "busybox.tar",
                D1
            )
        ));
        let set = ImageSet::parse(Path::new("/cache/images/v1.20.2"), &text).unwrap();
        assert_eq!(set.kubernetes_version, "v1.20.2");
        let pause = set.get("hactl.local/pause").unwrap();
        assert_eq!(pause.reference, "hactl.local/pause:3.4");
        assert_eq!(pause.digest, format!("sha256:{D1}"));
        assert_eq!(pause.archive_size, 348160);
        assert_eq!(
            set.archive_path(pause),
            Path::new("/cache/images/v1.20.2/pause.tar")
        );
        let names: Vec<&str> = set.images.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["hactl.local/pause", "hactl.local/busybox"]);
        assert!(set.get("hactl.local/nope").is_none());
    }

    #[test]
    fn bad_entries_are_refused_with_their_place() {
        let d = format!("sha256:{D1}");
        let cases = [
            (
                entry("hactl.local/pause", "3.4", D1, "pause.tar", D2),
                "is not sha256:<64 hex digits>",
            ),
            (
                entry("hactl.local/pause", "3.4", &d, "../pause.tar", D2),
                "is not a file name",
            ),
            (
                entry("hactl.local/pause", "3.4", &d, "a/pause.tar", D2),
                "is not a file name",
            ),
            (
                entry("hactl.local/pause", "3.4", &d, "pause.tar", "abc"),
                "archiveSha256",
            ),
            (
                entry("hactl.local/pause", "", &d, "pause.tar", D2),
                "empty name or tag",
            ),
            (
                format!(
                    "{},\n{}",
                    entry("hactl.local/pause", "3.4", &d, "pause.tar", D2),
                    entry("hactl.local/pause", "3.4", &d, "p.tar", D2)
                ),
                "images[1] (hactl.local/pause): the image is listed twice (also images[0])",
            ),
        ];
        for (images, want) in cases {
            let err = ImageSet::parse(Path::new("/d"), &manifest(&images)).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(msg.starts_with("/d/images.json: "), "{msg}");
            assert!(msg.contains("scripts/node-images.sh"), "{msg}");
        }
        let err = ImageSet::parse(
            Path::new("/d"),
            "{\"format\": 2, \"kubernetesVersion\": \"v1\", \"images\": []}",
        )
        .unwrap_err();
        assert!(err.to_string().contains("format 2"), "{err}");
        assert!(ImageSet::parse(Path::new("/d"), "not json").is_err());
    }

    #[test]
    fn archives_are_checked_against_the_manifest() {
        use sha2::{Digest, Sha256};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pause.tar"), b"archive").unwrap();
        let sum = hex::encode(Sha256::digest(b"archive"));
        let text = manifest(&entry(
            "hactl.local/pause",
            "3.4",
            &format!("sha256:{D1}"),
            "pause.tar",
            &sum,
        ));
        std::fs::write(dir.path().join(MANIFEST), &text).unwrap();
        let set = ImageSet::load(dir.path()).unwrap();
        set.verify_archives(&crate::local_digests::LocalDigests::none())
            .unwrap();
        std::fs::write(dir.path().join("pause.tar"), b"changed").unwrap();
        let err = set
            .verify_archives(&crate::local_digests::LocalDigests::none())
            .unwrap_err();
        assert!(matches!(err, ImagesError::ArchiveMismatch { .. }), "{err}");
        let missing = ImageSet::load(&dir.path().join("nope")).unwrap_err();
        assert!(
            missing.to_string().contains("scripts/node-images.sh"),
            "{missing}"
        );
    }

    #[test]
    fn ctr_images_ls_gives_references_and_digests() {
        let text = format!(
            "REF                   TYPE                                       DIGEST        SIZE      PLATFORMS   LABELS\n\
             hactl.local/pause:3.4 application/vnd.oci.image.manifest.v1+json sha256:{D1} 324.1 KiB linux/amd64 -\n\
             sha256:{D2} application/vnd.oci.image.manifest.v1+json sha256:{D2} 1.0 MiB linux/amd64 -\n"
        );
        let got = parse_ctr_images_ls(&text);
        assert_eq!(
            got,
            [
                ("hactl.local/pause:3.4".to_string(), format!("sha256:{D1}")),
                (format!("sha256:{D2}"), format!("sha256:{D2}")),
            ]
        );
        assert!(parse_ctr_images_ls("REF TYPE DIGEST SIZE PLATFORMS LABELS\n").is_empty());
    }
}
