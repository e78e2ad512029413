//! The layer rule, enforced: every `crate::…` path in `src/**/*.rs` is checked against the list of
//! layers in ARCHITECTURE.md (section "Layers"), which this test parses, so the document and the
//! code cannot drift apart.
//!
//! A module may import modules of its own layer and of the layers below it; a module beside the
//! stack imports only the layers its line names and is imported only by the layers its line
//! names. Besides upward edges the check fails on a loop between modules, on a module the list
//! names that does not exist, on a module of `src/` the list does not name, and on a temporary
//! exception whose edge no longer occurs (so each is deleted once its edge is cut).
//!
//! Needs nothing but the source tree: no host, no network.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The section of ARCHITECTURE.md the rules are read from.
const SECTION: &str = "## Layers";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Layer {
    name: String,
    modules: Vec<String>,
}

/// A module beside the stack: what it may import and who may import it (layer names).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Beside {
    module: String,
    imports: Vec<String>,
    imported_by: Vec<String>,
}

/// A named, temporary upward edge.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Exception {
    from: String,
    to: String,
    reason: String,
}

#[derive(Debug, Default)]
struct Rules {
    layers: Vec<Layer>,
    beside: Vec<Beside>,
    exceptions: Vec<Exception>,
}

/// The names between backticks in `text`, in order.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// Parses the "Layers" section:
/// - `N. **name**: `a`, `b`` is layer N (bottom first);
/// - `- beside: `m` imports **x**, **y**; imported by **z**` is a module beside the stack;
/// - `- exception: `a -> b`: reason` is a temporary exception.
fn parse_rules(markdown: &str) -> Result<Rules, String> {
    let start = markdown
        .lines()
        .position(|l| l.trim() == SECTION)
        .ok_or_else(|| format!("ARCHITECTURE.md has no `{SECTION}` section"))?;
    let mut rules = Rules::default();
    for (i, line) in markdown.lines().enumerate().skip(start + 1) {
        let line = line.trim();
        if line.starts_with("## ") {
            break;
        }
        let place = format!("ARCHITECTURE.md:{}", i + 1);
        let bold = |text: &str| -> Vec<String> {
            text.split("**")
                .enumerate()
                .filter(|(i, _)| i % 2 == 1)
                .map(|(_, s)| s.to_string())
                .collect()
        };
        if let Some((number, rest)) = line.split_once(". **") {
            if !number.chars().all(|c| c.is_ascii_digit()) || number.is_empty() {
                continue;
            }
            let (name, modules) = rest
                .split_once("**:")
                .ok_or_else(|| format!("{place}: a layer line is `N. **name**: `module`, …`"))?;
            if number.parse::<usize>() != Ok(rules.layers.len() + 1) {
                return Err(format!(
                    "{place}: layer {number} is out of order (layers are numbered from 1, bottom first)"
                ));
            }
            rules.layers.push(Layer {
                name: name.to_string(),
                modules: backticked(modules),
            });
        } else if let Some(rest) = line.strip_prefix("- beside: ") {
            let (head, by) = rest
                .split_once("; imported by ")
                .ok_or_else(|| format!("{place}: a beside line is `- beside: `m` imports **layer**, …; imported by **layer**, …`"))?;
            let module = backticked(head)
                .into_iter()
                .next()
                .ok_or_else(|| format!("{place}: no module named"))?;
            rules.beside.push(Beside {
                module,
                imports: bold(head),
                imported_by: bold(by),
            });
        } else if let Some(rest) = line.strip_prefix("- exception: ") {
            let edge = backticked(rest).into_iter().next().ok_or_else(|| {
                format!("{place}: an exception line is `- exception: `from -> to`: reason`")
            })?;
            let (from, to) = edge
                .split_once(" -> ")
                .ok_or_else(|| format!("{place}: an exception names its edge as `from -> to`"))?;
            let reason = rest.split_once("`:").map(|(_, r)| r.trim()).unwrap_or("");
            if reason.is_empty() {
                return Err(format!("{place}: exception {edge} gives no reason"));
            }
            rules.exceptions.push(Exception {
                from: from.to_string(),
                to: to.to_string(),
                reason: reason.to_string(),
            });
        }
    }
    if rules.layers.is_empty() {
        return Err(format!("ARCHITECTURE.md's `{SECTION}` section lists no layer"));
    }
    let layer_names: BTreeSet<&str> = rules.layers.iter().map(|l| l.name.as_str()).collect();
    for b in &rules.beside {
        for name in b.imports.iter().chain(&b.imported_by) {
            if !layer_names.contains(name.as_str()) {
                return Err(format!(
                    "beside module `{}` names layer **{name}**, which is not a layer",
                    b.module
                ));
            }
        }
    }
    Ok(rules)
}

/// Where a unit (a listed module) sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Layer(usize),
    Beside(usize),
}

impl Rules {
    /// Every listed module and where it sits.
    fn units(&self) -> Result<BTreeMap<String, Place>, String> {
        let mut units = BTreeMap::new();
        let listed = self
            .layers
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.modules.iter().map(move |m| (m.clone(), Place::Layer(i))))
            .chain(
                self.beside
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (b.module.clone(), Place::Beside(i))),
            );
        for (m, place) in listed {
            if units.insert(m.clone(), place).is_some() {
                return Err(format!("`{m}` is listed twice in ARCHITECTURE.md's `{SECTION}`"));
            }
        }
        Ok(units)
    }

    fn describe(&self, place: Place) -> String {
        match place {
            Place::Layer(i) => format!("layer {} **{}**", i + 1, self.layers[i].name),
            Place::Beside(_) => "no layer (beside the stack)".to_string(),
        }
    }

    /// Why `from` may not import `to`, or `None` when it may.
    fn refusal(&self, from: Place, to: Place) -> Option<String> {
        match (from, to) {
            (Place::Beside(b), Place::Layer(l)) => {
                let allowed = &self.beside[b].imports;
                (!allowed.contains(&self.layers[l].name)).then(|| {
                    format!(
                        "`{}` is beside the stack and imports only {}",
                        self.beside[b].module,
                        allowed.iter().map(|n| format!("**{n}**")).collect::<Vec<_>>().join(", ")
                    )
                })
            }
            (Place::Layer(l), Place::Beside(b)) => {
                let by = &self.beside[b].imported_by;
                (!by.contains(&self.layers[l].name)).then(|| {
                    format!(
                        "`{}` is beside the stack and only {} import it",
                        self.beside[b].module,
                        by.iter().map(|n| format!("**{n}**")).collect::<Vec<_>>().join(", ")
                    )
                })
            }
            (Place::Beside(a), Place::Beside(b)) => (a != b).then(|| "two modules beside the stack do not import each other".to_string()),
            (Place::Layer(a), Place::Layer(b)) => (b > a).then(|| {
                "a module imports only its own layer and those below it: move the code down, or pass what it needs in from above".to_string()
            }),
        }
    }
}

/// One `crate::…` path in a source file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CratePath {
    line: usize,
    segments: Vec<String>,
}

/// `source` with comments, string and character literals blanked out (newlines kept), so only
/// code is searched.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev_ident = i > 0 && ident(chars[i - 1]);
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c == 'r' || (c == 'b' && chars.get(i + 1) == Some(&'r'))) && {
            let mut j = i + if c == 'b' { 2 } else { 1 };
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            chars.get(j) == Some(&'"')
        } {
            // A raw string: r"…", r#"…"#, br#"…"#.
            let mut j = i + if c == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while chars[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &chars[i..j.min(chars.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' && (chars.get(i + 1) == Some(&'\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\''); a lifetime ('a) is code.
            let mut j = i + 1;
            if chars[j] == '\\' {
                j += 2;
            } else {
                j += 1;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            for &ch in &chars[i..=j.min(chars.len() - 1)] {
                blank(&mut out, ch);
            }
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every `crate::…` path in `source`, with `use crate::{a, b::{c, d}}` groups expanded.
fn crate_paths(source: &str) -> Vec<CratePath> {
    let code = code_only(source);
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at;
        from = start + "crate::".len();
        if start > 0 && (ident(bytes[start - 1]) || matches!(bytes[start - 1], b':' | b'$')) {
            continue; // `$crate::`, `hactl::crate_x::`, or a longer path's tail.
        }
        let line = code[..start].matches('\n').count() + 1;
        let (paths, _) = path_tree(&code, from);
        for segments in paths {
            if !segments.is_empty() {
                found.push(CratePath { line, segments });
            }
        }
    }
    found
}

/// Parses a path tree at `at` (after `crate::`): `a::b`, `a::{b, c::d}`, `{a, b}`, `a::*`.
/// Returns the leaf paths and where parsing stopped.
fn path_tree(code: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut prefix = Vec::new();
    loop {
        at = skip_ws(at);
        if at < bytes.len() && bytes[at] == b'{' {
            let mut leaves = Vec::new();
            at += 1;
            loop {
                at = skip_ws(at);
                if at >= bytes.len() {
                    return (leaves, at);
                }
                if bytes[at] == b'}' {
                    at += 1;
                    break;
                }
                if bytes[at] == b',' {
                    at += 1;
                    continue;
                }
                let (inner, next) = path_tree(code, at);
                if next == at {
                    at += 1; // Not a path: step over it.
                    continue;
                }
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p);
                    leaves.push(full);
                }
                at = next;
                // `x as y`: the alias names nothing to check.
                let after = skip_ws(at);
                if code[after..].starts_with("as ") {
                    at = after + 3;
                    at = skip_ws(at);
                    while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
                        at += 1;
                    }
                }
            }
            return (leaves, at);
        }
        let start = at;
        while at < bytes.len()
            && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_' || bytes[at] == b'*')
        {
            at += 1;
        }
        if at == start {
            return (vec![prefix], at);
        }
        let segment = &code[start..at];
        if segment != "self" && segment != "*" {
            prefix.push(segment.to_string());
        }
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            return (vec![prefix], at);
        }
    }
}

/// The module path of a file under `src/`: `exec/journaled.rs` → `exec::journaled`,
/// `exec/mod.rs` → `exec`; `None` for the crate root and the binary.
fn module_of(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// The listed unit a module path belongs to: the longest listed prefix.
fn unit_of<'a>(units: &'a BTreeMap<String, Place>, path: &[String]) -> Option<(&'a str, Place)> {
    (1..=path.len()).rev().find_map(|n| {
        units
            .get_key_value(&path[..n].join("::"))
            .map(|(k, p)| (k.as_str(), *p))
    })
}

/// Checks `files` (path relative to the crate, source text) against `rules`; returns one
/// message per problem, empty when the floor holds.
fn check(rules: &Rules, files: &[(PathBuf, String)]) -> Vec<String> {
    let units = match rules.units() {
        Ok(u) => u,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    let mut used_exceptions = BTreeSet::new();
    // Unit edges with one place each, for the loop check.
    let mut edges: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut seen_units = BTreeSet::new();
    let mut top_level = BTreeSet::new();
    for (path, source) in files {
        let Ok(relative) = path.strip_prefix("src") else {
            continue;
        };
        let Some(module) = module_of(relative) else {
            continue;
        };
        top_level.insert(module[0].clone());
        let Some((from, from_place)) = unit_of(&units, &module) else {
            continue; // Reported below as a module listed nowhere.
        };
        seen_units.insert(from.to_string());
        for p in crate_paths(source) {
            let Some((to, to_place)) = unit_of(&units, &p.segments) else {
                continue; // An item of the crate root, or a module reported below.
            };
            if to == from {
                continue;
            }
            let place = format!("{}:{}", path.display(), p.line);
            edges
                .entry((from.to_string(), to.to_string()))
                .or_insert(place.clone());
            let Some(why) = rules.refusal(from_place, to_place) else {
                continue;
            };
            if let Some(e) = rules.exceptions.iter().find(|e| e.from == from && e.to == to) {
                used_exceptions.insert((e.from.clone(), e.to.clone()));
                continue;
            }
            problems.push(format!(
                "{place}: upward edge {from} -> {to} (`crate::{}`): `{from}` is in {}, `{to}` in {}; {why} (ARCHITECTURE.md, `{SECTION}`)",
                p.segments.join("::"),
                rules.describe(from_place),
                rules.describe(to_place),
            ));
        }
    }
    for e in &rules.exceptions {
        if !used_exceptions.contains(&(e.from.clone(), e.to.clone())) {
            problems.push(format!(
                "ARCHITECTURE.md: exception {} -> {} no longer occurs (or is not upward): delete its line",
                e.from, e.to
            ));
        }
    }
    for m in units.keys() {
        if !seen_units.contains(m) {
            problems.push(format!(
                "ARCHITECTURE.md lists `{m}` in `{SECTION}`, but src/ has no such module: fix the list"
            ));
        }
    }
    for m in &top_level {
        if unit_of(&units, std::slice::from_ref(m)).is_none() {
            problems.push(format!(
                "src/{m}: module `{m}` is in no layer of ARCHITECTURE.md's `{SECTION}`: add it to the layer it belongs to"
            ));
        }
    }
    problems.extend(loops(&edges));
    problems
}

/// Every loop between units (a strongly connected set of more than one), each with the place of
/// one import per edge inside it.
fn loops(edges: &BTreeMap<(String, String), String>) -> Vec<String> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    // Tarjan's algorithm, iterative enough for a graph of a few dozen nodes.
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        components: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &graph[v] {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        components: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, &graph, &mut s);
        }
    }
    s.components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|mut c| {
            c.sort();
            let inside: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| c.contains(&a.as_str()) && c.contains(&b.as_str()))
                .map(|((a, b), place)| format!("{a} -> {b} at {place}"))
                .collect();
            format!(
                "a loop between {}: {}; modules import each other in one direction only (ARCHITECTURE.md, `{SECTION}`)",
                c.join(", "),
                inside.join("; ")
            )
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_import_in_src_keeps_to_the_layers_of_architecture_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let rules = parse_rules(&markdown).unwrap_or_else(|e| panic!("{e}"));
    let mut paths = Vec::new();
    rust_files(&root.join("src"), &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.strip_prefix(root).unwrap().to_path_buf(), text)
        })
        .collect();
    assert!(files.len() > 100, "found only {} files under src/", files.len());
    let mut problems = check(&rules, &files);
    // src/lib.rs's `//!` diagram names every module of the list too, so it stays in step.
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let diagram: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    for m in rules.units().unwrap().keys() {
        let named = diagram
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .any(|w| w.trim_matches(':') == m);
        if !named {
            problems.push(format!(
                "src/lib.rs: its `//!` layer diagram does not name `{m}`: keep it in step with ARCHITECTURE.md"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the layer rule is broken:\n{}",
        problems.join("\n")
    );
}

/// The checker itself, on made-up trees: it must be able to fail.
mod checker {
    use super::*;

    const RULES: &str = "# x\n\n## Layers\n\n1. **low**: `a`, `c`\n2. **high**: `b`, `b::sub`\n\n- beside: `tool` imports **low**; imported by **high**\n\n## Next\n\n3. **ignored**: `z`\n";

    fn file(path: &str, text: &str) -> (PathBuf, String) {
        (PathBuf::from(path), text.to_string())
    }

    fn tree(extra: &[(PathBuf, String)]) -> Vec<(PathBuf, String)> {
        let mut files = vec![
            file("src/lib.rs", "pub mod a;\n"),
            file("src/a.rs", "pub fn f() {}\n"),
            file("src/c.rs", "pub fn g() {}\n"),
            file("src/b/mod.rs", "pub mod sub;\nuse crate::a::f;\n"),
            file("src/b/sub.rs", "use crate::b::x;\n"),
            file("src/tool.rs", "use crate::a::f;\n"),
        ];
        for (path, text) in extra {
            match files.iter_mut().find(|(p, _)| p == path) {
                Some(f) => f.1 = text.clone(),
                None => files.push((path.clone(), text.clone())),
            }
        }
        files
    }

    #[test]
    fn the_rules_are_read_from_the_layers_section_only() {
        let rules = parse_rules(RULES).unwrap();
        assert_eq!(rules.layers.len(), 2);
        assert_eq!(rules.layers[1].modules, ["b", "b::sub"]);
        assert_eq!(
            rules.beside,
            [Beside {
                module: "tool".into(),
                imports: vec!["low".into()],
                imported_by: vec!["high".into()],
            }]
        );
        assert!(parse_rules("# no section\n1. **low**: `a`\n").is_err());
        assert!(
            parse_rules("## Layers\n2. **low**: `a`\n").is_err(),
            "numbered from 1"
        );
        assert!(
            parse_rules("## Layers\n1. **low**: `a`\n- exception: `a -> b`:\n").is_err(),
            "no reason"
        );
    }

    #[test]
    fn a_clean_tree_passes() {
        let rules = parse_rules(RULES).unwrap();
        assert_eq!(check(&rules, &tree(&[])), Vec::<String>::new());
    }

    #[test]
    fn a_made_up_upward_edge_fails_naming_file_line_edge_and_rule() {
        let rules = parse_rules(RULES).unwrap();
        let files = tree(&[file(
            "src/c.rs",
            "//! uses crate::b in a comment only\nuse std::fmt;\nuse crate::{a::f, b::sub::Thing};\n",
        )]);
        let problems = check(&rules, &files);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        let p = &problems[0];
        assert!(
            p.starts_with("src/c.rs:3: upward edge c -> b::sub (`crate::b::sub::Thing`)"),
            "{p}"
        );
        assert!(
            p.contains("`c` is in layer 1 **low**, `b::sub` in layer 2 **high**"),
            "{p}"
        );
        assert!(
            p.contains("a module imports only its own layer and those below it"),
            "{p}"
        );
    }

    #[test]
    fn a_named_exception_allows_its_edge_and_fails_once_the_edge_is_gone() {
        let with = RULES.replace(
            "- beside:",
            "- exception: `c -> b`: the other engineer cuts it\n- beside:",
        );
        let rules = parse_rules(&with).unwrap();
        assert_eq!(rules.exceptions[0].reason, "the other engineer cuts it");
        let upward = tree(&[file("src/c.rs", "fn g() { crate::b::h() }\n")]);
        assert_eq!(check(&rules, &upward), Vec::<String>::new());
        let stale = check(&rules, &tree(&[]));
        assert_eq!(stale.len(), 1, "{stale:#?}");
        assert!(
            stale[0].contains("exception c -> b no longer occurs"),
            "{}",
            stale[0]
        );
    }

    #[test]
    fn beside_the_stack_imports_and_is_imported_only_as_its_line_says() {
        let rules = parse_rules(RULES).unwrap();
        let problems = check(
            &rules,
            &tree(&[
                file("src/c.rs", "use crate::tool::T;\n"),
                file("src/tool.rs", "use crate::b::x;\n"),
            ]),
        );
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems[0].contains("`tool` is beside the stack and only **high** import it"),
            "{}",
            problems[0]
        );
        assert!(
            problems[1].contains("`tool` is beside the stack and imports only **low**"),
            "{}",
            problems[1]
        );
    }

    #[test]
    fn a_loop_inside_a_layer_fails_with_the_place_of_each_edge() {
        let rules = parse_rules(RULES).unwrap();
        let problems = check(
            &rules,
            &tree(&[
                file("src/a.rs", "use crate::c::g;\n"),
                file("src/c.rs", "\n\nfn g() { crate::a::f() }\n"),
            ]),
        );
        assert_eq!(
            problems,
            ["a loop between a, c: a -> c at src/a.rs:1; c -> a at src/c.rs:3; modules import each other in one direction only (ARCHITECTURE.md, `## Layers`)"]
        );
    }

    #[test]
    fn modules_missing_from_either_side_are_named() {
        let rules = parse_rules(RULES).unwrap();
        let mut files = tree(&[file("src/d.rs", "fn d() {}\n")]);
        files.retain(|(p, _)| p != Path::new("src/c.rs"));
        let problems = check(&rules, &files);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].contains("lists `c`"), "{}", problems[0]);
        assert!(
            problems[1].starts_with("src/d: module `d` is in no layer"),
            "{}",
            problems[1]
        );
    }

    #[test]
    fn paths_in_strings_comments_and_groups_are_told_apart() {
        let src = concat!(
            "use crate::{\n    a::{self, f as g},\n    b::*,\n};\n",
            "/* crate::z::x */ let s = \"crate::y::x\"; let r = r#\"crate::w\"#; let c = '\"';\n",
            "fn f<'a>(x: &'a str) -> crate::c::T { $crate::q::r; hactl::crate_v::x }\n",
        );
        let got: Vec<(usize, String)> = crate_paths(src)
            .into_iter()
            .map(|p| (p.line, p.segments.join("::")))
            .collect();
        assert_eq!(
            got,
            [
                (1, "a".into()),
                (1, "a::f".into()),
                (1, "b".into()),
                (6, "c::T".into())
            ]
        );
    }
}
