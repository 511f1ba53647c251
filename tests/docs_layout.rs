//! docs/layout.md is checked against the tree, not kept by hand: every
//! source file under `src/` is named there (a top-level module by its path,
//! a file in a module directory by its name under that directory's entry),
//! and every `src/...` path it names exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_layout_names_every_source_file_and_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layout = std::fs::read_to_string(root.join("docs/layout.md")).expect("docs/layout.md");
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    let mut unnamed = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(root).expect("under the crate");
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let named = match parts.as_slice() {
            [_, name] => layout.contains(&format!("src/{name}")),
            [_, dir, rest @ ..] => {
                let name = rest.join("/");
                layout.contains(&format!("{dir}/{name}"))
                    || layout.contains(&format!("src/{dir}/"))
                        && (name == "mod.rs"
                            || layout.contains(&name)
                            || layout.contains(rest.last().map(String::as_str).unwrap_or("")))
            }
            _ => true,
        };
        if !named {
            unnamed.insert(relative.display().to_string());
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/layout.md does not name: {unnamed:?}"
    );
    let mut missing = BTreeSet::new();
    for word in
        layout.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',' || c == '`')
    {
        let word = word.trim_end_matches([':', ';', '.']);
        if word.starts_with("src/")
            && (word.ends_with(".rs") || word.ends_with('/'))
            && !root.join(word).exists()
        {
            missing.insert(word.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/layout.md names paths that do not exist: {missing:?}"
    );
}
