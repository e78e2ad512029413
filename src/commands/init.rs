//! `hactl init`: write a commented example inventory to start from.
//!
//! Invariant: the example is `inventories/example.yaml`, embedded, so the file in the repository,
//! the one `init` writes and the one the tests validate are the same text. It uses `agent: true`,
//! so it validates on any machine.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};

/// The example inventory, every field present and explained by a comment.
pub fn example_inventory() -> &'static str {
    include_str!("../../inventories/example.yaml")
}

/// Writes the example to `path`. An existing file is kept unless `force`.
pub fn run(path: &Path, force: bool) -> anyhow::Result<()> {
    let mut options = fs_err::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        // `create_new` refuses an existing file atomically, without a check-then-write race.
        options.create_new(true);
    }
    let mut file = match options.open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} already exists; edit it, or run `hactl init --force` to replace it with the example",
            path.display()
        ),
        Err(err) => return Err(err).context("failed to write the example inventory"),
    };
    file.write_all(example_inventory().as_bytes())
        .context("failed to write the example inventory")?;
    eprintln!(
        "wrote {}: set the hosts, then check it with `hactl plan`",
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_validates_as_written_and_package_would_be_refused() {
        // `init` writes a Kubernetes source `plan` accepts (a release), so a new user meets no
        // refusal at the second step.
        let inventory = crate::inventory::load_str(Path::new("example.yaml"), example_inventory())
            .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(inventory.name, "example");
        assert_eq!(inventory.hosts.len(), 5);
        // The rule the comment explains still holds: no distribution packages the server binaries.
        let package: String = example_inventory().replacen(
            "    source: release\n    releaseUrl: https://dl.k8s.io/",
            "    source: package\n    # releaseUrl: https://dl.k8s.io/",
            1,
        );
        assert_ne!(package, example_inventory(), "the example names source: release");
        let err = crate::inventory::load_str(Path::new("example.yaml"), &package).unwrap_err();
        let problems: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("example.yaml: kubernetes.source: package is not available")),
            "{problems:?}"
        );
    }

    /// The example pins an etcd release that its Kubernetes version works with, on every OS
    /// (Debian 12's package etcd 3.4 would not); `validate` refuses a pinned etcd that does not
    /// fit, naming both versions and the fix.
    #[test]
    fn the_example_pins_an_etcd_its_kubernetes_works_with_and_validate_checks_the_pair() {
        let inventory = crate::inventory::load_str(Path::new("example.yaml"), example_inventory()).unwrap();
        let etcd = inventory.etcd.version.clone().expect("the example pins etcd");
        assert!(matches!(
            &inventory.etcd.source,
            crate::inventory::BinarySource::Release { url, sha256: None } if url.contains(&format!("/v{etcd}/etcd-v{etcd}-linux-amd64.tar.gz"))
        ));
        let kube = inventory.kubernetes.as_ref().unwrap();
        assert_eq!(
            crate::inventory::versions::etcd_problem(&kube.version, &etcd),
            None
        );
        let old = example_inventory().replacen("    version: 3.5.16\n", "    version: 3.4.23\n", 1);
        let err = crate::inventory::load_str(Path::new("example.yaml"), &old).unwrap_err();
        let problems: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
        assert!(
            problems.iter().any(|p| p.starts_with(
                "example.yaml: kubernetes.version: etcd 3.4.23 is not supported with Kubernetes 1.31.4"
            ) && p.contains("e.g. 3.5.16")),
            "{problems:?}"
        );
    }

    #[test]
    fn run_refuses_to_overwrite_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("cluster.yaml");
        run(&path, false).unwrap();
        assert_eq!(fs_err::read_to_string(&path).unwrap(), example_inventory());

        fs_err::write(&path, "mine").unwrap();
        let err = run(&path, false).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} already exists; edit it, or run `hactl init --force` to replace it with the example",
                path.display()
            )
        );
        assert_eq!(fs_err::read_to_string(&path).unwrap(), "mine");

        run(&path, true).unwrap();
        assert_eq!(fs_err::read_to_string(&path).unwrap(), example_inventory());
    }
}
