//! Every `hactl …` command the docs show must still parse: README.md and every `docs/**/*.md` are
//! read, each command line in a fenced block and each inline-code span starting with `hactl` is
//! taken out, and the current CLI (`hactl::cli::Cli`, clap's `try_parse_from`) parses it. A renamed
//! or removed flag, subcommand or value then fails this test with the file, the line and clap's
//! error. No host is needed.
//!
//! Two shapes are recognised:
//! - a command line (`hactl up -i cluster.yaml --yes`): placeholders `<…>` become a dummy value,
//!   shell syntax ends it (`|`, `>`, `&&`, `;`, `#`), and clap must accept the whole line;
//! - a synopsis (`hactl maintenance plan|start|complete HOST [--dry-run] [-o json]`, or one with
//!   `…`, `(a | b)`): it cannot be run as written, so its subcommand path is resolved (each
//!   alternative of `a|b`) and every flag it names must exist there.
//!
//! `cargo run --release -- ARGS` counts as `hactl ARGS` (the README's set-up command).

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use hactl::cli::Cli;

/// What stands in for a `<placeholder>`: a word every argument of hactl takes (a name, a path,
/// a run id, a number).
const DUMMY: &str = "1";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// Parsed whole by clap.
    Line,
    /// Only the subcommand path and the flags are checked.
    Synopsis,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    line: usize,
    /// The arguments after `hactl`, placeholders substituted.
    args: Vec<String>,
    shape: Shape,
    /// In prose (inline code) rather than a code block: a mention such as `hactl remove` may
    /// leave out the command's required arguments.
    in_prose: bool,
    /// The text as the doc has it, for messages.
    text: String,
}

/// The command lines and synopses in one Markdown text, with their 1-based line numbers.
fn extract(markdown: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut in_block = false;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let code = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            for segment in segments(code) {
                found.extend(command_in(&segment, i + 1, false));
            }
        } else {
            for span in inline_code(line) {
                for segment in segments(&span) {
                    found.extend(command_in(&segment, i + 1, true));
                }
            }
        }
    }
    found
}

/// The `` `…` `` spans of one line of prose (double backticks included).
fn inline_code(line: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let fence = "`".repeat(ticks);
        let Some(end) = after.find(&fence) else {
            break;
        };
        // In a Markdown table a bar inside code is written `\|`.
        spans.push(after[..end].trim().replace("\\|", "|"));
        rest = &after[end + ticks..];
    }
    spans
}

/// One shell line cut into the commands it chains (`&&`, `||`, `;`), a comment removed. A pipe or
/// a redirection ends a command's arguments (handled in [`words`]).
fn segments(code: &str) -> Vec<String> {
    let code = match code.find(" #") {
        Some(i) => &code[..i],
        None if code.starts_with('#') => "",
        None => code,
    };
    code.split("&&")
        .flat_map(|s| s.split("||"))
        .flat_map(|s| s.split(';'))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Shell words up to the first pipe or redirection; quotes removed. `None` when the segment uses
/// what a plain split cannot read (command substitution, variables).
fn words(segment: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    // Inside a synopsis' `(a | b)` or `[a | b]` a bar is an alternative, not a pipe.
    let mut depth = 0usize;
    for c in segment.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '$' | '`') => return None,
            (None, '(' | '[') => {
                depth += 1;
                word.push(c);
                in_word = true;
            }
            (None, ')' | ']') => {
                depth = depth.saturating_sub(1);
                word.push(c);
                in_word = true;
            }
            (None, '|') if !in_word && depth == 0 => break,
            (None, '>' | '<') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    // `2>` and `>file` glued to a word end the arguments too.
    if let Some(i) = out
        .iter()
        .position(|w| w.starts_with('>') || w.starts_with("2>") || w.starts_with("&>"))
    {
        out.truncate(i);
    }
    Some(out)
}

/// The hactl command in one segment, if it is one: `hactl ARGS`, `…/hactl ARGS`, `sudo hactl
/// ARGS`, `VAR=value hactl ARGS` or `cargo run [--release] -- ARGS`.
fn command_in(segment: &str, line: usize, in_prose: bool) -> Option<Found> {
    // Placeholders first: `<run-id>` and `backups/<cluster>-<time>.db` hold no shell redirection.
    let substituted = substitute_placeholders(segment);
    let mut w = words(&substituted)?;
    while w.first().is_some_and(|x| x == "sudo" || is_assignment(x)) {
        w.remove(0);
    }
    let args: Vec<String> = if w.first().is_some_and(|x| x == "hactl" || x.ends_with("/hactl")) {
        w[1..].to_vec()
    } else if w.first().is_some_and(|x| x == "cargo") && w.get(1).is_some_and(|x| x == "run") {
        let dashes = w.iter().position(|x| x == "--")?;
        w[dashes + 1..].to_vec()
    } else {
        return None;
    };
    // `hactl` alone, or followed by prose (`hactl's`), is no command.
    let first = args.first()?;
    if !first.starts_with('-') && !first.chars().all(|c| c.is_ascii_lowercase() || "-|/".contains(c)) {
        return None;
    }
    let synopsis = args.iter().any(|a| {
        a.contains('[')
            || a.contains('(')
            || a.contains('…')
            || a.contains("...")
            || a == "|"
            || (a.contains('|') && !a.starts_with('-'))
            || (a.contains('/')
                && !a.starts_with('-')
                && a.chars().all(|c| c.is_ascii_lowercase() || "-/".contains(c)))
    });
    Some(Found {
        line,
        args,
        shape: if synopsis { Shape::Synopsis } else { Shape::Line },
        in_prose,
        text: segment.to_string(),
    })
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// `<anything>` → [`DUMMY`].
fn substitute_placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        match rest[start..].find('>') {
            Some(len) if len > 1 && !rest[start + 1..start + len].contains(' ') => {
                out.push_str(&rest[..start]);
                out.push_str(DUMMY);
                rest = &rest[start + len + 1..];
            }
            _ => {
                out.push_str(&rest[..=start]);
                rest = &rest[start + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Checks one command; the error is clap's (a command line) or names the missing flag (a synopsis).
fn check(found: &Found) -> Result<(), String> {
    match found.shape {
        Shape::Line => {
            let parse = |args: &[String]| {
                Cli::try_parse_from(std::iter::once("hactl".to_string()).chain(args.iter().cloned()))
            };
            let mut result = parse(&found.args);
            // Prose names a flag without its value (`hactl recover --from-snapshot`): give it one.
            if result.is_err() && found.in_prose && found.args.last().is_some_and(|a| a.starts_with('-')) {
                let mut with_value = found.args.clone();
                with_value.push(DUMMY.to_string());
                if parse(&with_value).is_ok() {
                    result = parse(&with_value);
                }
            }
            match result {
                Ok(_) => Ok(()),
                // `--help` and `--version` are not errors.
                Err(e) if !e.use_stderr() => Ok(()),
                // Prose names a command (`hactl remove`, `hactl certs`) without its operands.
                Err(e)
                    if found.in_prose
                        && matches!(
                            e.kind(),
                            clap::error::ErrorKind::MissingRequiredArgument
                                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                        ) =>
                {
                    Ok(())
                }
                Err(e) => Err(e.render().to_string()),
            }
        }
        Shape::Synopsis => check_synopsis(&found.args),
    }
}

/// The subcommand paths a synopsis names (`maintenance plan|start|complete` gives three), and
/// every flag it shows must exist on each.
fn check_synopsis(args: &[String]) -> Result<(), String> {
    let root = Cli::command();
    let mut commands: Vec<clap::Command> = vec![root];
    let mut rest = args;
    // Walk the words that name subcommands (alternatives split on `|` and `/`).
    while let Some(word) = rest.first() {
        let alternatives: Vec<&str> = word.split(['|', '/']).filter(|a| !a.is_empty()).collect();
        let has_subcommands = commands.iter().all(|c| c.get_subcommands().next().is_some());
        let names_a_command = word.starts_with(|c: char| c.is_ascii_lowercase());
        if !has_subcommands || !names_a_command || alternatives.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for c in &commands {
            for alt in &alternatives {
                match c.find_subcommand(alt) {
                    Some(sub) => next.push(sub.clone()),
                    None => {
                        return Err(format!(
                            "`{}` has no subcommand {alt:?} (it has: {})",
                            c.get_name(),
                            c.get_subcommands()
                                .map(|s| s.get_name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    }
                }
            }
        }
        commands = next;
        rest = &rest[1..];
    }
    for word in rest {
        for flag in flags_in(word) {
            for c in &commands {
                if !has_flag(c, &flag) {
                    return Err(format!("`{}` has no flag {flag}", c.get_name()));
                }
            }
        }
    }
    Ok(())
}

/// The flags one synopsis word shows: `[--dry-run`, `--host`, `-o`, `(--reuse-host`,
/// `--bump-revision=N` (the value dropped).
fn flags_in(word: &str) -> Vec<String> {
    word.split(['[', ']', '(', ')', '|'])
        .filter(|p| p.starts_with('-') && p.len() > 1 && *p != "--")
        .map(|p| p.split('=').next().unwrap_or(p).to_string())
        .filter(|p| {
            p.chars()
                .skip_while(|&c| c == '-')
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .collect()
}

fn has_flag(cmd: &clap::Command, flag: &str) -> bool {
    if matches!(flag, "--help" | "-h") {
        return true;
    }
    let global = Cli::command();
    let args = cmd.get_arguments().chain(global.get_arguments());
    for a in args {
        if let Some(long) = flag.strip_prefix("--") {
            if a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long)) {
                return true;
            }
        } else if let Some(short) = flag.strip_prefix('-').and_then(|s| s.chars().next()) {
            if flag.len() == 2 && a.get_short() == Some(short) {
                return true;
            }
            // `-vv`
            if a.get_short() == Some(short) && flag[1..].chars().all(|c| c == short) {
                return true;
            }
        }
    }
    false
}

/// README.md and every Markdown file under docs/, sorted.
fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `file:line: text: error` for every command of `markdown` that does not parse.
fn failures(file: &str, markdown: &str) -> (Vec<Found>, Vec<String>) {
    let found = extract(markdown);
    let failed = found
        .iter()
        .filter_map(|f| {
            check(f)
                .err()
                .map(|e| format!("{file}:{}: `{}`:\n{}", f.line, f.text, e.trim_end()))
        })
        .collect();
    (found, failed)
}

#[test]
fn every_hactl_command_in_the_readme_and_the_docs_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut all_failed = Vec::new();
    let mut lines = 0;
    let mut synopses = 0;
    let mut readme_lines = 0;
    for path in doc_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(root).unwrap().display().to_string();
        let (found, failed) = failures(&name, &text);
        let n = found.iter().filter(|f| f.shape == Shape::Line).count();
        lines += n;
        synopses += found.len() - n;
        if name == "README.md" {
            readme_lines += n;
        }
        all_failed.extend(failed);
    }
    eprintln!("doc commands: {lines} command lines and {synopses} synopses checked");
    assert!(
        all_failed.is_empty(),
        "{} command(s) in the docs do not parse against the current CLI (fix the doc, or the CLI):\n\n{}",
        all_failed.len(),
        all_failed.join("\n\n")
    );
    // The walk must have found the docs' commands: an extractor that finds nothing passes nothing.
    assert!(
        readme_lines >= 10,
        "only {readme_lines} command lines found in README.md"
    );
    assert!(lines >= 100, "only {lines} command lines found in the docs");
    assert!(synopses >= 10, "only {synopses} synopses found in the docs");
}

#[test]
fn a_made_up_flag_is_caught_with_its_file_and_line() {
    let doc = "# x\n\nRun `hactl up -i c.yaml --made-up-flag` first.\n\n```sh\nhactl status -i c.yaml\nhactl plan -i c.yaml --yes-please   # comment\n```\n";
    let (found, failed) = failures("x.md", doc);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(failed.len(), 2, "{failed:#?}");
    assert!(
        failed[0].starts_with("x.md:3: `hactl up -i c.yaml --made-up-flag`"),
        "{}",
        failed[0]
    );
    assert!(
        failed[0].contains("--made-up-flag"),
        "clap's error: {}",
        failed[0]
    );
    assert!(failed[1].starts_with("x.md:7: "), "{}", failed[1]);
    assert!(failed[1].contains("--yes-please"), "{}", failed[1]);
}

#[test]
fn a_made_up_flag_or_subcommand_in_a_synopsis_is_caught() {
    let good = "`hactl maintenance start|complete HOST [--max-unavailable N] [--dry-run] [-y] [-o json]`";
    assert_eq!(failures("x.md", good).1, Vec::<String>::new());
    // `maintenance plan` prints a plan and has no `--dry-run`: one of the subcommands lacking it
    // is enough.
    let (found, failed) = failures("x.md", "`hactl maintenance plan|start HOST [--dry-run]`");
    assert_eq!(found[0].shape, Shape::Synopsis);
    assert!(failed[0].contains("has no flag --dry-run"), "{failed:?}");
    let (_, failed) = failures("x.md", "`hactl certs renew|revoke NAME...`");
    assert!(failed[0].contains("no subcommand \"revoke\""), "{failed:?}");
    let (_, failed) = failures("x.md", "`hactl replace MEMBER (--reuse-host | --new-host NEW)`");
    assert!(failed[0].contains("has no flag --new-host"), "{failed:?}");
}

#[test]
fn placeholders_shell_syntax_and_prose_are_read_as_a_shell_would() {
    let doc = "```\n$ sudo HACTL_X=1 hactl recover -i inv.yaml --from-snapshot backups/<cluster>-<time>.db --steal-lock <run-id>\ncd .. && hactl check -i a.yaml && hactl up -i a.yaml\nhactl kubeconfig -i c.yaml > admin.kubeconfig\nscripts/install-deps.sh && cargo run --release -- lab up --apply --out lab.yaml\n# hactl up --commented-out\n```\nNot commands: `hactl-haproxy state x`, `hactl.io/maintenance-stage`, `hactl`.\n";
    let found = extract(doc);
    let args: Vec<Vec<&str>> = found
        .iter()
        .map(|f| f.args.iter().map(String::as_str).collect())
        .collect();
    assert_eq!(
        args,
        vec![
            vec![
                "recover",
                "-i",
                "inv.yaml",
                "--from-snapshot",
                "backups/1-1.db",
                "--steal-lock",
                "1"
            ],
            vec!["check", "-i", "a.yaml"],
            vec!["up", "-i", "a.yaml"],
            vec!["kubeconfig", "-i", "c.yaml"],
            vec!["lab", "up", "--apply", "--out", "lab.yaml"],
        ]
    );
    assert!(
        found.iter().all(|f| f.shape == Shape::Line && check(f).is_ok()),
        "{found:#?}"
    );
    assert_eq!(found[1].line, 3);
}

/// Every field of the inventory file has an entry in docs/reference/inventory.md. The inventory
/// below sets every field of `hactl::inventory::raw` (a struct literal without `..`, so a new
/// field does not compile until it is added here, and then fails until it is documented).
#[test]
fn every_inventory_field_has_an_entry_in_the_reference() {
    use hactl::inventory::raw::*;
    let ssh = || RawSsh {
        user: Some("u".into()),
        port: Some(22),
        key_file: Some("k".into()),
        agent: Some(false),
        sudo: Some(true),
        bastion: Some(RawBastion {
            address: "10.0.0.5".into(),
            port: Some(22),
            user: Some("u".into()),
            key_file: Some("k".into()),
            agent: Some(false),
        }),
        connect_timeout: Some(10),
    };
    let inventory = RawInventory {
        api_version: "hactl.io/v1alpha1".into(),
        kind: "Cluster".into(),
        metadata: RawMetadata { name: "c".into() },
        spec: RawSpec {
            ssh: ssh(),
            hosts: vec![RawHost {
                name: "cp1".into(),
                address: "10.0.0.11".into(),
                prefix_length: Some(24),
                roles: vec!["etcd".into()],
                interface: Some("eth0".into()),
                ssh: ssh(),
            }],
            vip: Some(RawVip {
                address: "10.0.0.100".into(),
                router_id: Some(51),
                advert_interval: Some("300ms".into()),
            }),
            load_balancer: RawLoadBalancer {
                check_interval: Some("1s".into()),
                fall: Some(2),
                rise: Some(2),
                connect_timeout: Some("1s".into()),
                check_timeout: Some("3s".into()),
            },
            etcd: RawEtcd {
                version: Some("3.5.16".into()),
                source: RawSourceKind::Release,
                release_url: Some("https://x".into()),
                sha256: Some("0".into()),
                bundle_dir: Some("b".into()),
                data_dir: Some("/var/lib/etcd".into()),
                client_port: Some(2379),
                peer_port: Some(2380),
                heartbeat_interval: Some(100),
                election_timeout: Some(1000),
                quota_backend_bytes: Some(1),
                auto_compaction_retention: Some("8h".into()),
                extra_args: vec![],
            },
            kubernetes: Some(RawKubernetes {
                version: Some("1.31.4".into()),
                source: RawSourceKind::Release,
                release_url: Some("https://x".into()),
                sha256: Some("0".into()),
                bundle_dir: Some("b".into()),
                service_cidr: Some("10.96.0.0/12".into()),
                pod_cidr: Some("10.244.0.0/16".into()),
                mode: Some("systemd".into()),
                images: Some(RawImages {
                    dir: Some("i".into()),
                    registry: Some("registry.k8s.io".into()),
                }),
                containerd: RawContainerd {
                    source: RawSourceKind::Release,
                    release_url: Some("https://x".into()),
                    sha256: Some("0".into()),
                    bundle_dir: Some("b".into()),
                },
                cgroup_driver: Some("systemd".into()),
                eviction_hard: Some(Default::default()),
                dns: Some(RawDns {
                    image: Some("registry.k8s.io/coredns/coredns:v1.8.0".into()),
                    cluster_ip: Some("10.96.0.10".into()),
                    domain: Some("cluster.local".into()),
                    replicas: Some(2),
                }),
            }),
            pki: RawPki {
                key_type: Some("ecdsa-p256".into()),
                ca_validity_days: Some(3650),
                cert_validity_days: Some(365),
                renew_before_days: Some(30),
            },
            state_dir: Some("s".into()),
            allow_single_member: false,
            heal: RawHeal {
                max_unhealthy: Some(1),
                max_retry: Some(3),
                retry_period: Some("10m".into()),
                min_healthy_period: Some("1h".into()),
                unhealthy_timeout: Some("5m".into()),
            },
            backup: RawBackup {
                enabled: Some(true),
                interval: Some("1h".into()),
                retention: Some(24),
                dir: Some("/var/lib/etcd-backups".into()),
                remote: Some(RawBackupRemote {
                    address: "10.0.0.50".into(),
                    port: Some(22),
                    user: Some("u".into()),
                    key_file: Some("k".into()),
                    path: "/srv/b".into(),
                    retention: Some(24),
                }),
            },
        },
    };
    fn paths(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.push(p.clone());
                    paths(&p, v, out);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items.iter().filter(|i| i.is_object()) {
                    paths(&format!("{prefix}[]"), item, out);
                }
            }
            _ => {}
        }
    }
    let mut fields = Vec::new();
    paths("", &serde_json::to_value(&inventory).unwrap(), &mut fields);
    let per_host_ssh = |f: &String| f.starts_with("spec.hosts[].ssh.");
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/inventory.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !["spec", "metadata"].contains(&f.as_str()) && !per_host_ssh(f))
        .filter(|f| !doc.contains(&format!("| `{f}` |")) && !doc.contains(&format!("## `{f}`")))
        .collect();
    assert!(fields.len() > 50, "only {} fields seen: {fields:?}", fields.len());
    assert!(
        missing.is_empty(),
        "{} has no entry (a table row starting with | `FIELD` |, or a heading ## `FIELD` for a section) for: {missing:?}",
        doc_path.display()
    );
}
