//! Names the commit in `hactl --version`: `0.1.0 (commit 1a2b3c4d5e6f, 2026-11-22)`.
//!
//! Read from git when the source is a git checkout; `HACTL_BUILD_COMMIT` (e.g. set by a packager
//! building from a tarball) wins; otherwise the version says the commit is unknown. Never fails
//! the build: a missing git or a copy without `.git` only changes the text.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=HACTL_BUILD_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = match std::env::var("HACTL_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => Some(c.trim().to_string()),
        _ => from_git(),
    };
    let text = match commit {
        Some(c) => format!("{version} (commit {c})"),
        None => format!("{version} (commit unknown: not built from a git checkout)"),
    };
    println!("cargo:rustc-env=HACTL_VERSION={text}");
}

/// `<short hash>, <commit date>`; rebuilt when HEAD or the branch it names moves.
fn from_git() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    // Only this repository's own git tree: not one the source happens to sit inside.
    let top = git(&["-C", manifest.to_str()?, "rev-parse", "--show-toplevel"])?;
    if Path::new(&top).canonicalize().ok()? != manifest.canonicalize().ok()? {
        return None;
    }
    let at = |args: &[&str]| {
        let mut all = vec!["-C", manifest.to_str()?];
        all.extend_from_slice(args);
        git(&all)
    };
    let git_dir = PathBuf::from(at(&["rev-parse", "--absolute-git-dir"])?);
    let common = at(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .map(PathBuf::from)
        .unwrap_or_else(|| git_dir.clone());
    // Only files that exist: cargo runs a build script again every time for a missing one.
    let mut watched = vec![git_dir.join("HEAD"), common.join("packed-refs")];
    if let Some(reference) = at(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common.join(reference));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let hash = at(&["rev-parse", "--short=12", "HEAD"])?;
    let date = at(&["show", "-s", "--format=%cs", "HEAD"]);
    Some(match date {
        Some(d) => format!("{hash}, {d}"),
        None => hash,
    })
}
