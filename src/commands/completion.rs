//! `hactl completion SHELL` and `hactl man`: generated from the clap definitions in `cli.rs`, so
//! they never drift from the real flags.

use std::io::Write;
use std::path::Path;

use crate::cli::CompletionShell;
use anyhow::Context;

/// Prints the completion script for `shell` to stdout.
pub fn completion(shell: CompletionShell) -> anyhow::Result<i32> {
    let generator = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut cmd = crate::cli::command();
    let mut script = Vec::new();
    clap_complete::generate(generator, &mut cmd, "hactl", &mut script);
    write_stdout(&script)?;
    Ok(super::exit::OK)
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("failed to write to stdout"),
        _ => Ok(()),
    }
}

/// Writes `hactl.1` and one page per subcommand (`hactl-up.1`, `hactl-etcd-snapshot-save.1`, …)
/// into `out`, or prints `hactl.1` to stdout.
pub fn man(out: Option<&Path>) -> anyhow::Result<i32> {
    let cmd = crate::cli::man_command();
    match out {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd)
                .source(format!("hactl {}", env!("HACTL_VERSION")))
                .render(&mut page)
                .context("failed to render the man page")?;
            write_stdout(&page)?;
        }
        Some(dir) => {
            fs_err::create_dir_all(dir)?;
            let written = write_pages(cmd, dir)?;
            eprintln!("wrote {written} man pages to {}", dir.display());
        }
    }
    Ok(super::exit::OK)
}

/// One page for `cmd` and, recursively, each subcommand (named `parent-child`); returns the count.
fn write_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<usize> {
    let mut cmd = cmd;
    // Builds the subcommands' full names (`hactl etcd snapshot`) and help.
    cmd.build();
    write_page(&cmd, dir)
}

fn write_page(cmd: &clap::Command, dir: &Path) -> anyhow::Result<usize> {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
    let mut text = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .title(name.clone())
        .source(format!("hactl {}", env!("HACTL_VERSION")))
        .render(&mut text)
        .with_context(|| format!("failed to render the man page of {name}"))?;
    fs_err::write(dir.join(format!("{name}.1")), text)?;
    let mut count = 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        count += write_page(sub, dir)?;
    }
    Ok(count)
}
