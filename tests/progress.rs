//! Progress on long work, on the terminal side: `up` on a terminal (script(1) gives it one)
//! shows the phase under way of how many and each host's step of how many. The other side (no
//! escape code on a pipe) is checked for every hactl run of every test by `support/cli.rs`.
//!
//! Needs root for the lab; without it prints `SKIPPED`.

#[path = "support/cli.rs"]
mod cli_support;
#[path = "support/lab.rs"]
mod lab_support;

use cli_support::text;
use lab_support::TestLab;

#[test]
fn up_on_a_terminal_shows_phase_and_host_counters_and_a_pipe_gets_plain_lines() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("SKIPPED up_on_a_terminal_shows_phase_and_host_counters_and_a_pipe_gets_plain_lines: script(1) is missing (apt-get install bsdutils)");
        return;
    }
    let Some(lab) = TestLab::up("up_on_a_terminal", 3, 0, 0, "trixie") else {
        return;
    };
    let line = format!(
        "{} up --yes -i {}",
        env!("CARGO_BIN_EXE_hactl"),
        lab.inventory().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("NO_COLOR")
        .output()
        .expect("script");
    // script(1) puts the command's stdout and stderr, both on the terminal, on its stdout.
    let screen = String::from_utf8_lossy(&out.stdout);
    eprintln!("the terminal showed:\n{screen}");
    assert!(out.status.success(), "{}", text(&out));
    assert!(screen.contains("up: done in"), "{screen}");
    assert!(screen.contains('\u{1b}'), "no bar drawn on a terminal: {screen}");
    // The phase counter ("[1/N] <first phase>") and a host's step counter ("  cp1 [ 1/M] …").
    assert!(screen.contains("[1/"), "no phase counter: {screen}");
    assert!(
        ["cp1", "cp2", "cp3"]
            .iter()
            .any(|h| screen.contains(&format!("  {h} ["))),
        "no host counter: {screen}"
    );
    // The log lines are there too, whole, above the bars.
    assert!(screen.contains("== "), "{screen}");

    // On a pipe the same command prints plain lines (support/cli.rs fails on any escape code).
    let out = cli_support::run(Some(lab.inventory()), &["up", "--yes"], &[], None);
    assert!(out.status.success(), "{}", text(&out));
}
