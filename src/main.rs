//! Entry point: parse arguments, run, print the error chain once, exit with its code.

fn main() {
    // Before anything opens a file: a closed stdout or stderr gets /dev/null (output.rs).
    hactl::output::keep_standard_streams_open();
    let cli = match hactl::cli::parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are not errors: clap prints them to stdout.
            // A usage error (e.g. `hactl completion tcsh`) is 64, not 2 ("refused by a safety
            // rule"): `hactl::exit::USAGE`.
            let code = if err.use_stderr() { hactl::exit::USAGE } else { 0 };
            let _ = err.print();
            std::process::exit(code);
        }
    };
    hactl::output::init_logging(cli.verbose, cli.quiet);
    // One TLS stack: aws-lc-rs everywhere. rustls picks a provider by itself only when exactly one
    // is in the dependency graph, so it is installed explicitly first.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            hactl::output::print_stderr(
                format_args!("error: failed to start the async runtime: {e}"),
                true,
            );
            std::process::exit(1);
        }
    };
    let code = match runtime.block_on(hactl::commands::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            hactl::output::print_stderr(format_args!("error: {err:#}"), true);
            hactl::exit::exit_code_of(&err)
        }
    };
    std::process::exit(code);
}
