//! The CI scripts' own decisions, run for real on small inputs: which skipped tests fail a run as
//! root (`scripts/check-skips.sh`), which command `scripts/readme-lab.sh` takes from the README
//! (the line CI runs verbatim), which Debian mirror the scripts fetch from
//! (`scripts/lib/debian-mirror.sh`, on made-up apt configurations), and the stages
//! `scripts/test.sh` knows. None needs root or changes the machine.

use std::path::Path;
use std::process::{Command, Output};

fn script(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name)
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `check-skips.sh LOG UID` on a log holding `lines`.
fn check_skips(lines: &str, uid: u32) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("test.log");
    std::fs::write(&log, lines).unwrap();
    Command::new(script("check-skips.sh"))
        .arg(&log)
        .arg(uid.to_string())
        .output()
        .unwrap()
}

const NEXTEST_LINES: &str = "        PASS [   1.2s] hactl::etcd_labs hosts::hosts_boot\n     Summary [ 10.0s] 3 tests run: 3 passed, 2 skipped\n";

#[test]
fn as_root_every_skip_fails_the_run_unless_the_machine_cannot_run_the_test() {
    // Nothing skipped (nextest's own "skipped" count is not a skip line).
    let out = check_skips(NEXTEST_LINES, 0);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));

    // Skips a script could have prevented: each is named and the run fails.
    let log = format!(
        "{NEXTEST_LINES}SKIPPED vagrant_lab: scripts/vagrant-deps.sh could not install Vagrant\n\
         SKIPPED kube_up: HACTL_KUBE_BIN_DIR is not set\n\
         SKIPPED hosts_boot: needs root\n"
    );
    let out = check_skips(&log, 0);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for name in ["vagrant_lab", "kube_up", "hosts_boot"] {
        assert!(stderr.contains(&format!("  SKIPPED {name}: ")), "{}", said(&out));
    }

    // One the machine itself cannot run: listed, and the run goes on.
    let machine = "SKIPPED vagrant_lab: this machine cannot run it: no /dev/net/tun\n";
    let out = check_skips(&format!("{NEXTEST_LINES}{machine}"), 0);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no /dev/net/tun"),
        "{}",
        said(&out)
    );

    // Both kinds: the other one still fails it.
    let out = check_skips(&format!("{machine}SKIPPED kube_up: no binaries\n"), 0);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
}

#[test]
fn not_root_skips_are_counted_and_allowed() {
    let out = check_skips(
        "SKIPPED hosts_boot: needs root\nSKIPPED recover: needs root\n",
        1000,
    );
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("2 skipped test(s), allowed because this run is not root"),
        "{}",
        said(&out)
    );
}

fn readme_command(readme: &Path) -> Output {
    Command::new(script("readme-lab.sh"))
        .arg("--print")
        .env("HACTL_README", readme)
        .output()
        .unwrap()
}

#[test]
fn the_readme_command_ci_runs_is_the_one_under_two_commands() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let command = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let text = std::fs::read_to_string(&readme).unwrap();
    assert!(
        text.lines().any(|l| l == command),
        "{command:?} is not a line of README.md"
    );
    assert!(command.contains(" lab up"), "{command}");

    // Only the block under that heading counts, and its first line that is not a comment.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("README.md");
    std::fs::write(
        &other,
        "# x\n```sh\nhactl lab up --name wrong\n```\n### Two commands\ntext\n```sh\n# 1. comment\n\nscripts/a.sh && hactl lab up --name right\nscripts/b.sh\n```\n",
    )
    .unwrap();
    let out = readme_command(&other);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "scripts/a.sh && hactl lab up --name right\n",
        "{}",
        said(&out)
    );
}

#[test]
fn a_readme_without_the_block_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let readme = dir.path().join("README.md");
    // The heading is there, but the block sits under another one.
    std::fs::write(
        &readme,
        "## Two commands\ntext\n## Later\n```sh\nhactl lab up\n```\n",
    )
    .unwrap();
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("has no shell block with a command under the heading \"Two commands\""),
        "{}",
        said(&out)
    );
    // A block whose first command brings up no lab is refused too: CI's check would mean nothing.
    std::fs::write(&readme, "## Two commands\n```sh\ncargo build\n```\n").unwrap();
    let out = readme_command(&readme);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not bring up a lab"),
        "{}",
        said(&out)
    );
}

/// The environment variables that name a mirror: none may leak into these tests from the caller.
const MIRROR_VARS: [&str; 4] = [
    "HACTL_DEBIAN_MIRROR",
    "HACTL_APT_MIRROR",
    "HACTL_FRESH_MIRROR",
    "HACTL_LAB_MIRROR",
];

/// `debian_mirror ETC`, sourced by `shell` (sh or bash), with `env` set: (exit code, stdout, stderr).
fn mirror_in(shell: &str, etc: &Path, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(shell);
    cmd.arg("-c")
        .arg(". \"$1\"; debian_mirror \"$2\"")
        .arg(shell)
        .arg(script("lib/debian-mirror.sh"))
        .arg(etc);
    for var in MIRROR_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// A made-up /etc: `files` under it (`apt/sources.list`, `apt/sources.list.d/x.sources`, `os-release`).
fn etc_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("apt/sources.list.d")).unwrap();
    for (path, text) in files {
        std::fs::write(dir.path().join(path), text).unwrap();
    }
    dir
}

const DEB822: &str = "\
Types: deb
URIs: http://off.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb-src
URIs: http://src.invalid/debian
Suites: bookworm
Components: main

Types: deb
# a comment inside a stanza
URIs: http://security.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 URIs: http://inside-a-key.invalid/debian
 -----END PGP PUBLIC KEY BLOCK-----

types: deb
uris: http://archive.invalid/debian http://second.invalid/debian
suites: bookworm bookworm-updates
components: main contrib
";

const ONE_LINE: &str = "\
# deb http://commented.invalid/debian bookworm main
deb-src http://src.invalid/debian bookworm main
deb http://security.invalid/debian-security bookworm-security main
deb http://updates.invalid/debian bookworm-updates main
deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] http://one-line.invalid/debian bookworm main non-free-firmware
";

#[test]
fn the_debian_mirror_comes_from_the_apt_sources_in_both_formats() {
    for shell in ["sh", "bash"] {
        // deb822: the disabled, deb-src and -security stanzas are passed over; a key's lines are
        // not fields; field names in any case; the first of several URIs.
        let etc = etc_with(&[("apt/sources.list.d/debian.sources", DEB822)]);
        let (code, mirror, err) = mirror_in(shell, etc.path(), &[]);
        assert_eq!(
            (code, mirror.as_str()),
            (Some(0), "http://archive.invalid/debian"),
            "{shell}: {err}"
        );

        // One-line: comments, deb-src, -security and -updates passed over; options in brackets.
        let etc = etc_with(&[("apt/sources.list", ONE_LINE)]);
        let (code, mirror, err) = mirror_in(shell, etc.path(), &[]);
        assert_eq!(
            (code, mirror.as_str()),
            (Some(0), "http://one-line.invalid/debian"),
            "{shell}: {err}"
        );

        // sources.list is read before sources.list.d, as apt reads them.
        let etc = etc_with(&[
            ("apt/sources.list", ONE_LINE),
            ("apt/sources.list.d/debian.sources", DEB822),
        ]);
        assert_eq!(
            mirror_in(shell, etc.path(), &[]).1,
            "http://one-line.invalid/debian",
            "{shell}"
        );
    }
}

#[test]
fn the_machines_own_release_wins_over_a_repository_listed_before_it() {
    let vendor = "deb https://vendor.invalid/apt stable main\ndeb https://other.invalid/apt stable extras\n";
    let files = [
        ("apt/sources.list.d/a-vendor.list", vendor),
        ("apt/sources.list.d/debian.sources", DEB822),
        (
            "os-release",
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\n",
        ),
    ];
    let etc = etc_with(&files);
    assert_eq!(
        mirror_in("sh", etc.path(), &[]).1,
        "http://archive.invalid/debian"
    );
    // Without the release's name, the first source of a plain suite with `main`.
    let etc = etc_with(&files[..2]);
    assert_eq!(mirror_in("sh", etc.path(), &[]).1, "https://vendor.invalid/apt");
}

#[test]
fn without_a_release_source_the_lookup_fails_and_names_the_variable() {
    let only_updates = "deb http://security.invalid/debian-security bookworm-security main\n\
                        deb http://updates.invalid/debian bookworm-updates main\n\
                        deb http://backports.invalid/debian bookworm-backports main\n\
                        deb http://contrib.invalid/debian bookworm contrib\n";
    let etc = etc_with(&[("apt/sources.list", only_updates)]);
    let (code, mirror, err) = mirror_in("sh", etc.path(), &[]);
    assert_eq!((code, mirror.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("set HACTL_DEBIAN_MIRROR"), "{err}");
    // A file that is neither .list nor .sources is not read (apt does not read it either).
    let etc = etc_with(&[("apt/sources.list.d/debian.sources.disabled", DEB822)]);
    assert_eq!(mirror_in("sh", etc.path(), &[]).0, Some(1));
}

#[test]
fn the_variable_overrides_the_sources_and_the_older_names_still_work() {
    let etc = etc_with(&[("apt/sources.list.d/debian.sources", DEB822)]);
    let set = |env: &[(&str, &str)]| mirror_in("sh", etc.path(), env).1;
    assert_eq!(
        set(&[("HACTL_DEBIAN_MIRROR", "http://set.invalid/debian")]),
        "http://set.invalid/debian"
    );
    for old in ["HACTL_APT_MIRROR", "HACTL_FRESH_MIRROR", "HACTL_LAB_MIRROR"] {
        assert_eq!(
            set(&[(old, "http://old.invalid/debian")]),
            "http://old.invalid/debian",
            "{old}"
        );
        // The documented name wins over an older one.
        assert_eq!(
            set(&[
                (old, "http://old.invalid/debian"),
                ("HACTL_DEBIAN_MIRROR", "http://new.invalid/debian")
            ]),
            "http://new.invalid/debian",
            "{old}"
        );
    }
    // An empty value is no value.
    assert_eq!(
        set(&[("HACTL_DEBIAN_MIRROR", "")]),
        "http://archive.invalid/debian"
    );
    // Run on its own, it prints the same.
    let out = Command::new(script("lib/debian-mirror.sh"))
        .arg(etc.path())
        .env("HACTL_DEBIAN_MIRROR", "http://set.invalid/debian")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "http://set.invalid/debian\n",
        "{}",
        said(&out)
    );
}

/// One lookup: the scripts that fetch from the Debian archive source the library, and none reads
/// the apt sources for a mirror, or an older variable name, itself.
#[test]
fn every_script_takes_the_mirror_from_the_one_lookup() {
    for name in [
        "kube-binaries.sh",
        "etcd-bundle.sh",
        "vagrant-box.sh",
        "vagrant-deps.sh",
        "lib/fresh-root.sh",
    ] {
        let text = std::fs::read_to_string(script(name)).unwrap();
        assert!(
            text.contains("debian-mirror.sh\""),
            "{name} does not source lib/debian-mirror.sh"
        );
        assert!(
            text.contains("$(debian_mirror)"),
            "{name} does not call debian_mirror"
        );
    }
    let mut files = vec![];
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if !path.ends_with("lib/debian-mirror.sh") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for needle in [
            "URIs:",
            "HACTL_APT_MIRROR",
            "HACTL_FRESH_MIRROR",
            "HACTL_LAB_MIRROR",
        ] {
            assert!(
                !text.contains(needle),
                "{} has {needle:?}: a mirror lookup of its own",
                path.display()
            );
        }
    }
}

#[test]
fn the_test_command_knows_its_stages_and_refuses_others() {
    let out = Command::new(script("test.sh")).arg("nope").output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown stage \"nope\""), "{}", said(&out));
    assert!(
        err.contains("lint unit lab fresh release vagrant"),
        "{}",
        said(&out)
    );
    // A known stage beside an unknown one: refused all the same, before anything runs.
    let out = Command::new(script("test.sh"))
        .args(["lint", "lab", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", said(&out));
    let out = Command::new(script("test.sh")).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("lint unit lab fresh release vagrant"));
}

/// The scripts run one another by path (`scripts/node-images.sh`, not `bash scripts/…`): every
/// script at the top of `scripts/` is executable in the checkout (a clean clone has git's modes).
#[test]
fn every_script_is_executable() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sh") {
            seen += 1;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert!(
                mode & 0o111 == 0o111,
                "{} is not executable (mode {mode:o}): `git update-index --chmod=+x` it",
                path.display()
            );
        }
    }
    assert!(seen > 10, "{seen} scripts");
}
