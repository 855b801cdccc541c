//! House rules checked as a test: every Rust file says what it is in a `//!`
//! first line, and every compile-fail case has its locked `.stderr`.

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

#[test]
fn core_names_no_engine_code() {
    // The vocabulary has no threads, sleeps, thread-locals, channels or I/O,
    // and never names the engine.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("crates/streamwork-core/src"), &mut files);
    assert!(files.len() > 10);
    let forbidden = [
        "streamwork_runtime",
        "thread_local!",
        "std::thread",
        "thread::sleep",
        "crossbeam",
        "std::fs",
        "std::net",
        "JobBuilder",
    ];
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // Unit tests may use what they like.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for word in forbidden {
                if line.contains(word) {
                    found.push(format!("{}:{}: {word}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "engine code in core:\n{}",
        found.join("\n")
    );
}
