//! Entry point: parse arguments, run, print the error chain once, exit with its code.

use clap::Parser;

fn main() {
    let cli = hactl::cli::Cli::parse();
    hactl::output::init_logging(cli.verbose, cli.quiet);
    // One TLS stack: aws-lc-rs everywhere (see ../shared/CRATES.md).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(hactl::commands::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            hactl::exit::exit_code_of(&err)
        }
    };
    std::process::exit(code);
}
