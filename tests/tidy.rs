//! House rules checked as a test: every Rust file says what it is in a `//!`
//! first line, every compile-fail case has its locked `.stderr`, the crate
//! and module graphs are the documented ones without cycles, no library
//! code fails with a bare `String`, and every invariant ARCHITECTURE.md
//! states names an existing test that keeps it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name != "target" && name != "ui" && name != "ui-pass" && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_starts_with_a_module_doc_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        "src", "crates", "macros", "examples", "benches", "xtask", "tests",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 30, "found only {} files", files.len());
    let missing: Vec<_> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap_or_default()
                .starts_with("//!")
        })
        .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` first line: {missing:?}"
    );
}

#[test]
fn every_compile_fail_case_has_its_stderr() {
    let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let entries = std::fs::read_dir(&ui).unwrap();
    let cases: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    assert!(cases.len() >= 8);
    for case in cases {
        assert!(
            case.with_extension("stderr").exists(),
            "{} has no .stderr",
            case.display()
        );
    }
}

/// The `streamwork*` crates a manifest's `[dependencies]` name (not its dev-
/// or build-dependencies).
fn streamwork_dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if name == "streamwork" || name.starts_with("streamwork-") {
            found.push(name);
        }
    }
    found.sort();
    found
}

/// The crate graph as ARCHITECTURE.md documents it: the lines of its
/// `crate-graph` block, `crate -> dependency, dependency`.
fn documented_crate_graph(root: &Path) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let start = text
        .find("```crate-graph\n")
        .expect("ARCHITECTURE.md documents the crate graph in a ```crate-graph block");
    let block = &text[start + "```crate-graph\n".len()..];
    let block = &block[..block.find("```").expect("the block ends")];
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (name, deps) = line.split_once("->").expect("`crate -> deps` lines");
            let mut deps: Vec<String> = deps
                .split(',')
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty())
                .collect();
            deps.sort();
            (name.trim().to_string(), deps)
        })
        .collect()
}

/// Every manifest of the workspace, by package name.
fn manifests(root: &Path) -> Vec<(String, PathBuf)> {
    let mut found = vec![("streamwork".to_string(), root.join("Cargo.toml"))];
    for dir in ["crates", "."] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let manifest = entry.path().join("Cargo.toml");
            if !manifest.exists() {
                continue;
            }
            let text = std::fs::read_to_string(&manifest).unwrap();
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("name = \""))
                .and_then(|rest| rest.strip_suffix('"'))
                .map(str::to_string);
            if let Some(name) = name
                && (name.starts_with("streamwork") || name == "xtask")
            {
                found.push((name, manifest));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_crate_graph_is_exactly_the_documented_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let documented = documented_crate_graph(root);
    let actual: Vec<(String, Vec<String>)> = manifests(root)
        .into_iter()
        .map(|(name, manifest)| {
            let deps = streamwork_dependencies(&manifest);
            (name, deps)
        })
        .collect();
    let mut problems = Vec::new();
    for (name, deps) in &actual {
        match documented.iter().find(|(n, _)| n == name) {
            None => problems.push(format!("`{name}` is not in ARCHITECTURE.md's crate graph")),
            Some((_, expected)) if expected != deps => problems.push(format!(
                "`{name}` depends on {deps:?}, ARCHITECTURE.md says {expected:?}: keep the layering (core at the bottom; state, window, join, connectors on core; the runtime above them; web and scale-out above the runtime; the facade on top) or change the documented graph with a reason"
            )),
            Some(_) => {}
        }
    }
    for (name, _) in &documented {
        if !actual.iter().any(|(n, _)| n == name) {
            problems.push(format!(
                "ARCHITECTURE.md documents `{name}`, which does not exist"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The lines of crate `dir`'s code (unit tests aside: they may use what
/// they like) that name one of `words`, as `FILE:LINE: WORD`; `read` makes
/// of each line what is searched (`None`: skip it).
fn lines_naming(dir: &str, words: &[&str], read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join(dir), &mut files);
    assert!(files.len() > 10, "{dir} holds the crate's code");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let Some(line) = read(line) else { continue };
            for word in words {
                if line.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    found
}

#[test]
fn core_names_no_engine_code() {
    // The vocabulary has no threads, sleeps, thread-locals, channels or I/O,
    // and never names the engine.
    let forbidden = [
        "streamwork_runtime",
        "thread_local!",
        "std::thread",
        "thread::sleep",
        "crossbeam",
        "std::fs",
        "std::net",
        "JobBuilder",
        // A record on a cut edge is the engine's (`runtime::cut`).
        "Envelope",
        // A source's input is divided into splits; partitions and logs are
        // what a connector or a runner makes of them.
        "partitioned_log",
        "assigned_partitions",
        // Routing and the scatter into per-target batches are the record
        // path's (`runtime::route`, `runtime::dispatch`); so are the inputs
        // that make an edge's route (`runtime::builder::input`).
        "Route<",
        "Partition<",
        "RouteMaker",
        "fn key_by",
    ];
    let found = lines_naming("crates/streamwork-core/src", &forbidden, |line| {
        let line = line.trim_start();
        (!line.starts_with("//")).then(|| line.to_string())
    });
    assert!(
        found.is_empty(),
        "engine code in core:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_engine_names_no_topic_and_plans_no_stages() {
    // Where a job is cut to run across processes, and what carries the cut
    // (topics), is scale-out's: the engine only makes a part of a graph.
    let forbidden = ["topic", "repartition", "stageplan", "stage_plan", "kafka"];
    // Hints that name a connector a user can pick are words to the user,
    // not the engine naming a topic.
    let allowed = ["`kafkasource`", "`kafkasink::transactional"];
    let found = lines_naming("crates/streamwork-runtime/src", &forbidden, |line| {
        let mut line = line.to_lowercase();
        for ok in allowed {
            line = line.replace(ok, "");
        }
        Some(line)
    });
    assert!(
        found.is_empty(),
        "the engine names scale-out's words:\n{}",
        found.join("\n")
    );
}

#[test]
fn there_is_one_operator_trait() {
    // A join, a union and a three-way operator are the same kind of thing:
    // an `Operator` whose input is one of its ports' records. No second
    // hierarchy (a two-input trait and its adapter) comes back.
    let mut declared = Vec::new();
    for dir in ["crates", "src", "macros"] {
        let mut files = Vec::new();
        rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for line in text.lines() {
                let code = line.trim_start();
                if code.starts_with("//") {
                    continue;
                }
                let Some(at) = code.find("trait ") else {
                    continue;
                };
                let name: String = code[at + 6..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.ends_with("Operator") {
                    declared.push(format!("{}: {name}", file.display()));
                }
            }
        }
    }
    assert_eq!(declared.len(), 1, "operator traits: {declared:?}");
    assert!(
        declared[0].ends_with("streamwork-core/src/component.rs: Operator"),
        "{declared:?}"
    );
}

/// A crate's modules, by path from the crate root (`[]` is `lib.rs`), and
/// the file of each.
fn modules_of(src: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .filter_map(|file| {
            let relative = file.strip_prefix(src).ok()?;
            let mut path: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            let last = path.pop()?;
            match last.as_str() {
                "lib.rs" | "mod.rs" => {}
                "main.rs" => return None,
                name => path.push(name.trim_end_matches(".rs").to_string()),
            }
            // `src/bin` and the like are programs, not modules of the crate.
            if path.first().is_some_and(|p| p == "bin") {
                return None;
            }
            Some((path, file))
        })
        .collect()
}

/// `text` without comments, string and character literals (so that a
/// path in a doc comment or a message is not read as an import).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&chars, i)
        {
            // A raw string: r"..." or r#"..."#.
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < chars.len() {
                if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// Every path a file's code names through `crate::`, `super::` or
/// `self::` (groups `{a, b::c}` expanded), as module paths from the crate
/// root; and whether it was named in a `pub use` (a re-export).
fn named_paths(module: &[String], code: &str) -> Vec<(Vec<String>, bool)> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if prev_is_ident(&chars, i) || (i > 1 && chars[i - 1] == ':' && chars[i - 2] == ':') {
            i += 1;
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 7)].iter().collect();
        let start = if rest.starts_with("crate::") {
            Some((Vec::new(), i + 7))
        } else if rest.starts_with("super::") {
            let mut base = module.to_vec();
            let mut j = i;
            while chars[j..].iter().take(7).collect::<String>() == "super::" {
                base.pop();
                j += 7;
            }
            Some((base, j))
        } else if rest.starts_with("self::") {
            Some((module.to_vec(), i + 6))
        } else {
            None
        };
        let Some((base, at)) = start else {
            i += 1;
            continue;
        };
        // A `pub use` (any visibility) re-exports.
        let line_start = chars[..i]
            .iter()
            .rposition(|&c| c == '\n' || c == ';' || c == '{' || c == '}')
            .map_or(0, |p| p + 1);
        let before: String = chars[line_start..i].iter().collect();
        let before = before.trim();
        let reexport = before.starts_with("pub") && before.ends_with("use");
        let mut paths = Vec::new();
        let end = expand(&chars, at, base, &mut paths);
        found.extend(paths.into_iter().map(|p| (p, reexport)));
        i = end.max(i + 1);
    }
    found
}

/// Reads `a::b::{c, d::e}` from `at`, pushing each full path; returns
/// where it ended.
fn expand(
    chars: &[char],
    mut at: usize,
    mut base: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        while chars.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        if chars.get(at) == Some(&'{') {
            at += 1;
            loop {
                at = expand(chars, at, base.clone(), out);
                while chars.get(at).is_some_and(|c| c.is_whitespace()) {
                    at += 1;
                }
                match chars.get(at) {
                    Some(',') => at += 1,
                    Some('}') => return at + 1,
                    _ => return at,
                }
                while chars.get(at).is_some_and(|c| c.is_whitespace()) {
                    at += 1;
                }
                if chars.get(at) == Some(&'}') {
                    return at + 1;
                }
            }
        }
        let from = at;
        while chars
            .get(at)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            at += 1;
        }
        if from == at {
            out.push(base);
            return at;
        }
        let segment: String = chars[from..at].iter().collect();
        if segment == "self" {
            // `a::{self, b}`: the module itself.
        } else {
            base.push(segment);
        }
        if chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':') {
            at += 2;
        } else {
            out.push(base);
            return at;
        }
    }
}

/// The import graph of a crate's modules: file → the files it names.
/// A parent's `pub use` of its own children (its façade) and `mod`
/// declarations are not arrows; everything else a file names is, to the
/// deepest module of the path that is a file.
fn module_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules = modules_of(src);
    let file_of: BTreeMap<Vec<String>, PathBuf> = modules.iter().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let code = code_only(text.split("#[cfg(test)]").next().unwrap_or(""));
        let arrows: &mut BTreeSet<PathBuf> = graph.entry(file.clone()).or_default();
        for (path, reexport) in named_paths(module, &code) {
            let Some(target) = (0..=path.len())
                .rev()
                .find_map(|n| file_of.get(&path[..n]).map(|f| (n, f)))
            else {
                continue;
            };
            let (depth, target) = target;
            let is_descendant = depth > module.len() && path[..module.len()] == module[..];
            if target == file || (reexport && is_descendant) {
                continue;
            }
            arrows.insert(target.clone());
        }
    }
    graph
}

/// The strongly connected components of more than one file (Tarjan).
fn cycles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, (usize, usize)>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g PathBuf) {
            self.index.insert(node, (self.next, self.next));
            self.next += 1;
            self.stack.push(node);
            self.on_stack.insert(node);
            for to in self.graph.get(node).into_iter().flatten() {
                if !self.index.contains_key(to) {
                    self.visit(to);
                    let low = self.index[to].1.min(self.index[node].1);
                    self.index.get_mut(node).unwrap().1 = low;
                } else if self.on_stack.contains(to) {
                    let low = self.index[to].0.min(self.index[node].1);
                    self.index.get_mut(node).unwrap().1 = low;
                }
            }
            if self.index[node].0 == self.index[node].1 {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.clone());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .collect();
    sources.push(root.join("macros/src"));
    sources.push(root.join("src"));
    let mut report = Vec::new();
    for src in &sources {
        let graph = module_graph(src);
        for cycle in cycles(&graph) {
            let members: BTreeSet<&PathBuf> = cycle.iter().collect();
            let mut lines = vec![format!("a cycle of {} files:", cycle.len())];
            for file in &cycle {
                for to in graph[file].iter().filter(|t| members.contains(t)) {
                    lines.push(format!(
                        "  {} -> {}",
                        file.strip_prefix(root).unwrap_or(file).display(),
                        to.strip_prefix(root).unwrap_or(to).display()
                    ));
                }
            }
            report.push(lines.join("\n"));
        }
    }
    assert!(sources.len() > 8);
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_module_graph_reader_sees_a_cycle() {
    // The reader itself, on a crate made up here: a -> b by `use`, b -> a
    // by an inline path; c names a in a doc comment and a string only.
    let dir = std::env::temp_dir().join(format!("tidy-graph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "//! x\nmod a;\nmod b;\nmod c;\npub use a::A;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a.rs"),
        "//! a\nuse crate::b::{inner::{self, X}, B};\npub struct A;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b/mod.rs"),
        "//! b\npub mod inner;\npub use inner::X;\npub struct B;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b/inner.rs"),
        "//! i\npub struct X(pub super::super::a::A);\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "//! see crate::a::A\nconst S: &str = \"crate::a::A\";\n",
    )
    .unwrap();
    let graph = module_graph(&src);
    let found = cycles(&graph);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{graph:#?}");
    assert_eq!(found[0], vec![src.join("a.rs"), src.join("b/inner.rs")]);
    assert!(graph[&src.join("c.rs")].is_empty());
    // A parent's re-export of its child is no arrow back.
    assert!(!graph[&src.join("b/mod.rs")].contains(&src.join("b/inner.rs")));
}

/// The last top-level type argument of each `Result<...>` in `code`.
fn result_error_types(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("Result<") {
        let start = at + "Result<".len();
        let bytes = rest.as_bytes();
        let (mut depth, mut end, mut last_comma) = (1usize, start, start);
        while end < bytes.len() && depth > 0 {
            match bytes[end] {
                b'<' | b'(' | b'[' => depth += 1,
                b'>' if end > 0 && bytes[end - 1] == b'-' => {}
                b'>' | b')' | b']' => depth -= 1,
                b',' if depth == 1 => last_comma = end + 1,
                _ => {}
            }
            end += 1;
        }
        if depth == 0 && last_comma > start {
            found.push(rest[last_comma..end - 1].trim().to_string());
        }
        rest = &rest[start..];
    }
    found
}

/// Failures are typed values: no library function fails with a bare
/// `String` (a record that cannot be read or written is a `FormatError`).
#[test]
fn no_library_code_fails_with_a_bare_string() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "macros/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let library: Vec<&PathBuf> = files
        .iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "tests"))
        .collect();
    assert!(library.len() > 30, "found only {} files", library.len());
    let mut bare = Vec::new();
    for file in library {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        for error in result_error_types(&code_only(text)) {
            if error == "String" {
                bare.push(
                    file.strip_prefix(root)
                        .unwrap_or(file)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        bare.is_empty(),
        "`Result<_, String>` in library code (return a typed error, such as `FormatError`): {bare:?}"
    );
}

#[test]
fn the_bare_string_finder_reads_nested_generics() {
    assert_eq!(
        result_error_types(
            "fn f() -> Result<(Vec<u8>, u32), String>; fn g() -> Result<T, Box<dyn Fn(u8) -> X>>"
        ),
        vec!["String".to_string(), "Box<dyn Fn(u8) -> X>".to_string()]
    );
    assert_eq!(result_error_types("io::Result<()>"), Vec::<String>::new());
}

/// Each **Invariants.** paragraph of ARCHITECTURE.md names a test that
/// keeps it true, and every test file the document names exists.
#[test]
fn every_invariant_names_the_test_that_keeps_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let named = |paragraph: &str| -> Vec<String> {
        paragraph
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| {
                name.ends_with(".rs") && (name.starts_with("tests/") || name.contains("/tests/"))
            })
            .map(str::to_string)
            .collect()
    };
    let paragraphs: Vec<&str> = text.split("\n\n").collect();
    let invariants: Vec<&&str> = paragraphs
        .iter()
        .filter(|p| p.contains("**Invariants.**"))
        .collect();
    assert!(invariants.len() >= 8, "found {}", invariants.len());
    for paragraph in invariants {
        assert!(
            !named(paragraph).is_empty(),
            "an invariant names no test that keeps it:\n{paragraph}"
        );
    }
    for name in paragraphs.iter().flat_map(|p| named(p)) {
        assert!(
            root.join(&name).exists(),
            "ARCHITECTURE.md names `{name}`, which does not exist"
        );
    }
}
