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
