//! The house's shape, checked rather than kept by hand (docs/layout.md, "The
//! size budget" and "Layers"):
//!
//! * the size budget: no file in `src/`, `tests/` or `benches/` over 800
//!   lines, and no function in `src/` over 100, except the ones
//!   docs/layout.md lists with a reason;
//! * the layers: a module of `src/` imports only from the layers below its
//!   own (the order `src/lib.rs` states), and the modules' imports have no
//!   cycle. Test modules (`#[cfg(test)]`) are left out: a unit test may
//!   use a concrete entity from above.
//!
//! The source is read with a small lexer (comments, strings and character
//! literals blanked out), not a parser: enough to find `fn` items and their
//! braces and `crate::` and `super::` paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 100;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // tests/dependent is a crate of its own (a team's), not this one.
            if !path.ends_with("tests/dependent") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `source` with comments, string and character literals replaced by spaces
/// (newlines kept, so line numbers hold).
fn blank(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = bytes.to_vec();
    let blank_range = |out: &mut Vec<u8>, from: usize, to: usize| {
        for b in &mut out[from..to.min(bytes.len())] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
    };
    let ident = |i: usize| i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(bytes.len(), |p| i + p);
            blank_range(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < bytes.len() && depth > 0 {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank_range(&mut out, i, j);
            i = j;
        } else if let Some(hashes) = raw_string_start(rest).filter(|_| !ident(i)) {
            let open = rest.iter().position(|&b| b == b'"').unwrap_or(0) + 1;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = &bytes[i + open..];
            let end = body
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(bytes.len(), |p| i + open + p + close.len());
            blank_range(&mut out, i, end);
            i = end;
        } else if (rest[0] == b'"' || rest.starts_with(b"b\"")) && !(rest[0] == b'b' && ident(i)) {
            let mut j = i + if rest[0] == b'b' { 2 } else { 1 };
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            blank_range(&mut out, i, j + 1);
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('a', '\n', '\u{1F600}'), not a lifetime.
            let len = char_literal_len(rest);
            blank_range(&mut out, i, i + len.unwrap_or(1));
            i += len.unwrap_or(1);
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn raw_string_start(rest: &[u8]) -> Option<usize> {
    let rest = rest.strip_prefix(b"b").unwrap_or(rest);
    let rest = rest.strip_prefix(b"r")?;
    let hashes = rest.iter().take_while(|&&b| b == b'#').count();
    (rest.get(hashes) == Some(&b'"')).then_some(hashes)
}

fn char_literal_len(rest: &[u8]) -> Option<usize> {
    if rest.get(1) == Some(&b'\\') {
        let close = rest[2..].iter().take(10).position(|&b| b == b'\'')?;
        return Some(close + 3);
    }
    let text = std::str::from_utf8(&rest[1..rest.len().min(6)])
        .ok()
        .or_else(|| {
            // A multi-byte character cut at the window's end.
            (2..6)
                .rev()
                .find_map(|n| std::str::from_utf8(&rest[1..rest.len().min(n)]).ok())
        })?;
    let c = text.chars().next()?;
    (rest.get(1 + c.len_utf8()) == Some(&b'\'')).then_some(c.len_utf8() + 2)
}

/// The byte offset of the `}` that closes the `{` at `open` (in blanked
/// source: no brace in a comment or a literal).
fn matching_brace(blanked: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, b) in blanked.bytes().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// Each `fn` item with a body: its name, first line and length in lines.
fn functions(blanked: &str) -> Vec<(String, usize, usize)> {
    let bytes = blanked.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(p) = blanked[at..].find("fn ") {
        let start = at + p;
        at = start + 3;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let name: String = blanked[start + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` in a type
        }
        let Some(open) = blanked[start..].find(['{', ';']).map(|p| start + p) else {
            continue;
        };
        if bytes[open] == b';' {
            continue; // a declaration without a body
        }
        let close = matching_brace(blanked, open).unwrap_or(blanked.len());
        let first = blanked[..start].matches('\n').count() + 1;
        let last = blanked[..close].matches('\n').count() + 1;
        found.push((name, first, last - first + 1));
    }
    found
}

/// The exceptions docs/layout.md lists under "The size budget": lines
/// `- \`PATH\` (file): reason` or `- \`PATH\` fn \`NAME\`: reason`.
fn exceptions() -> BTreeSet<String> {
    let layout = std::fs::read_to_string(root().join("docs/layout.md")).expect("docs/layout.md");
    let Some(section) = layout.split("## The size budget").nth(1) else {
        return BTreeSet::new();
    };
    let section = section.split("\n## ").next().unwrap_or("");
    let mut listed = BTreeSet::new();
    for line in section.lines().filter_map(|l| l.trim().strip_prefix("- `")) {
        let Some((path, rest)) = line.split_once('`') else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("(file)") {
            listed.insert(path.to_string());
        } else if let Some(name) = rest.strip_prefix("fn `").and_then(|r| r.split('`').next()) {
            listed.insert(format!("{path} fn {name}"));
        }
    }
    listed
}

#[test]
fn no_file_or_function_is_over_the_size_budget_unless_listed() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    let listed = exceptions();
    let mut over = Vec::new();
    let mut used = BTreeSet::new();
    for file in &files {
        let path = relative(file);
        let source = std::fs::read_to_string(file).expect("a source file");
        let lines = source.lines().count();
        if lines > MAX_FILE_LINES {
            if listed.contains(&path) {
                used.insert(path.clone());
            } else {
                over.push(format!("{path}: {lines} lines (at most {MAX_FILE_LINES})"));
            }
        }
        if !path.starts_with("src/") {
            continue; // a test or bench function reads as its scenario
        }
        for (name, first, length) in functions(&blank(&source)) {
            let key = format!("{path} fn {name}");
            if length > MAX_FN_LINES {
                if listed.contains(&key) {
                    used.insert(key);
                } else {
                    over.push(format!(
                        "{path}:{first}: fn {name} is {length} lines (at most {MAX_FN_LINES})"
                    ));
                }
            }
        }
    }
    let stale: Vec<_> = listed.difference(&used).collect();
    assert!(
        over.is_empty(),
        "over the size budget, and not listed with a reason in docs/layout.md (\"The size budget\"):\n  {}",
        over.join("\n  ")
    );
    assert!(
        stale.is_empty(),
        "docs/layout.md lists exceptions to the size budget that are no longer over it: {stale:?}"
    );
}

/// The layers, top to bottom, as `src/lib.rs` states them; the modules at
/// the root are utilities below every layer, `testkit` re-exports from any.
fn layer(module: &str) -> Option<usize> {
    let order: &[&[&str]] = &[
        &["testkit"],
        &["ops"],
        &["domains"],
        &["processor"],
        &["observe"],
        &["engine"],
        &["kafka", "registry"],
        &["config"],
        &["partitioner", "error_chain", "allocator", "program"],
    ];
    let top = module.split("::").next()?;
    order
        .iter()
        .position(|layer| layer.contains(&top))
        .map(|rank| order.len() - rank)
}

/// `src/processor/partition/live.rs` -> `processor::partition::live`.
fn module_of(path: &str) -> String {
    let inner = path.trim_start_matches("src/").trim_end_matches(".rs");
    let inner = inner.strip_suffix("/mod").unwrap_or(inner);
    inner.replace('/', "::")
}

/// The source without its `#[cfg(test)]` items (a test module, inline or
/// declared, and test-only functions).
fn without_tests(blanked: &str) -> String {
    let mut out = String::with_capacity(blanked.len());
    let mut rest = blanked;
    while let Some(p) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..p]);
        let after = &rest[p..];
        let end = match (after.find('{'), after.find(';')) {
            (Some(brace), semi) if semi.is_none_or(|s| brace < s) => {
                matching_brace(after, brace).map_or(after.len(), |close| close + 1)
            }
            (_, Some(semi)) => semi + 1,
            _ => after.len(),
        };
        out.extend(blanked_span(&after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `span` with every character but its newlines blanked (line numbers hold).
fn blanked_span(span: &str) -> impl Iterator<Item = char> + '_ {
    span.chars().map(|c| if c == '\n' { '\n' } else { ' ' })
}

/// The source without its re-exports (`pub use`, `pub(crate) use`, ...): a
/// module that re-exports its children's items is their facade, not a user
/// of them. What a child takes through the facade counts as the child's
/// import of its parent.
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(p) = rest.find("pub") {
        let after = &rest[p..];
        let head = after.split_once("use ").map(|(h, _)| h.trim());
        let is_reexport = matches!(head, Some("pub") | Some("pub(crate)") | Some("pub(super)"))
            && (p == 0 || !rest.as_bytes()[p - 1].is_ascii_alphanumeric());
        if !is_reexport {
            out.push_str(&rest[..p + 3]);
            rest = &rest[p + 3..];
            continue;
        }
        out.push_str(&rest[..p]);
        let end = after.find(';').map_or(after.len(), |e| e + 1);
        out.extend(blanked_span(&after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The modules a module's code names: `crate::a::b` and `super::x` paths,
/// resolved to the longest module that exists.
fn imports(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let is_file = |m: &str| modules.contains(m);
    let parent = |m: &str| {
        m.rsplit_once("::")
            .map_or(String::new(), |(p, _)| p.to_string())
    };
    let mut found = BTreeSet::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{'))
        .collect();
    for word in words {
        let path = word.split('{').next().unwrap_or("");
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let child = |name: &str| {
            let candidate = if module.is_empty() {
                name.to_string()
            } else {
                format!("{module}::{name}")
            };
            is_file(&candidate).then_some(candidate)
        };
        let absolute: Vec<String> = match segments.first() {
            Some(&"crate") => segments[1..].iter().map(|s| s.to_string()).collect(),
            // A child module named from its parent: `use flusher::X`,
            // `self::flusher::X`, `flusher::run(..)`.
            Some(&"self") if segments.len() > 1 && child(segments[1]).is_some() => module
                .split("::")
                .chain(segments[1..].iter().copied())
                .map(str::to_string)
                .collect(),
            Some(first) if path.contains("::") && child(first).is_some() => module
                .split("::")
                .chain(segments.iter().copied())
                .map(str::to_string)
                .collect(),
            Some(&"super") if path.contains("::") => {
                // `super` of a file's module is its parent; `super::super`...
                let mut base = parent(module);
                let mut rest = &segments[..];
                while rest.first() == Some(&"super") {
                    rest = &rest[1..];
                    if rest.first() == Some(&"super") {
                        base = parent(&base);
                    }
                }
                base.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .chain(rest.iter().map(|s| s.to_string()))
                    .collect()
            }
            _ => continue,
        };
        for n in (1..=absolute.len()).rev() {
            let candidate = absolute[..n].join("::");
            if is_file(&candidate) {
                if candidate != module {
                    found.insert(candidate);
                }
                break;
            }
        }
    }
    found
}

/// The modules a file declares under `#[cfg(test)]` (`mod tests;`).
fn test_modules(blanked: &str) -> Vec<String> {
    blanked
        .match_indices("#[cfg(test)]")
        .filter_map(|(at, marker)| {
            let rest = blanked[at + marker.len()..].trim_start();
            let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
            let rest = rest.strip_prefix("pub(super) ").unwrap_or(rest);
            let name = rest.strip_prefix("mod ")?.split(';').next()?.trim();
            (!name.contains(['{', ' ', '\n'])).then(|| name.to_string())
        })
        .collect()
}

fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let sources: BTreeMap<String, String> = files
        .iter()
        .map(|f| {
            let path = relative(f);
            let source = std::fs::read_to_string(f).expect("a source file");
            (path, source)
        })
        .filter(|(path, _)| path != "src/lib.rs" && path != "src/main.rs")
        .collect();
    let modules: BTreeSet<String> = sources.keys().map(|p| module_of(p)).collect();
    // Files that are test modules (`#[cfg(test)] mod tests;` in their
    // parent), and everything below them, are left out as inline test
    // modules are.
    let tests: Vec<String> = sources
        .iter()
        .flat_map(|(path, source)| {
            let module = module_of(path);
            test_modules(&blank(source))
                .into_iter()
                .map(move |name| format!("{module}::{name}"))
        })
        .collect();
    let is_test = |m: &str| {
        tests
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    };
    sources
        .iter()
        .filter(|(path, _)| !is_test(&module_of(path)))
        .map(|(path, source)| {
            let module = module_of(path);
            let code = without_reexports(&without_tests(&blank(source)));
            let named = imports(&module, &code, &modules);
            (module, named)
        })
        .collect()
}

#[test]
fn no_module_imports_from_a_layer_above_its_own() {
    let graph = module_graph();
    let mut upward = Vec::new();
    for (module, named) in &graph {
        let (Some(own), top) = (layer(module), module.split("::").next().unwrap_or("")) else {
            upward.push(format!(
                "{module}: in no layer (add it to src/lib.rs's map and this test)"
            ));
            continue;
        };
        for other in named {
            let same_layer_other_folder =
                layer(other) == Some(own) && other.split("::").next() != Some(top);
            if layer(other).is_some_and(|theirs| theirs > own) || same_layer_other_folder {
                upward.push(format!("{module} -> {other}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a layer above (or beside) the importer's own (src/lib.rs's order):\n  {}",
        upward.join("\n  ")
    );
    let engine_up: Vec<_> = graph
        .iter()
        .filter(|(m, _)| m.starts_with("engine"))
        .flat_map(|(m, named)| {
            named
                .iter()
                .filter(|o| o.starts_with("config") || o.starts_with("domains"))
                .map(move |o| format!("{m} -> {o}"))
        })
        .collect();
    assert!(
        engine_up.is_empty(),
        "the engine imports config or a domain: {engine_up:?}"
    );
}

#[test]
fn the_modules_imports_have_no_cycle() {
    let graph = module_graph();
    // Tarjan's strongly connected components, iteratively simple enough for
    // a few hundred modules: a cycle is a component of more than one.
    let names: Vec<&String> = graph.keys().collect();
    let index_of: BTreeMap<&String, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> = names
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|o| index_of.get(o).copied())
                .collect()
        })
        .collect();
    let mut cycles = Vec::new();
    let mut state = Tarjan {
        index: vec![None; names.len()],
        low: vec![0; names.len()],
        on_stack: vec![false; names.len()],
        stack: Vec::new(),
        next: 0,
    };
    for v in 0..names.len() {
        if state.index[v].is_none() {
            state.visit(v, &edges, &mut |component| {
                if component.len() > 1 {
                    // Each member with the members it imports.
                    let mut members: Vec<String> = component
                        .iter()
                        .map(|&i| {
                            let within: Vec<&str> = edges[i]
                                .iter()
                                .filter(|w| component.contains(w))
                                .map(|&w| names[w].as_str())
                                .collect();
                            format!("{} -> {}", names[i], within.join(", "))
                        })
                        .collect();
                    members.sort_unstable();
                    cycles.push(members.join("\n    "));
                }
            });
        }
    }
    assert!(
        cycles.is_empty(),
        "modules that import each other (a cycle):\n  {}",
        cycles.join("\n  ")
    );
}

struct Tarjan {
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
}

impl Tarjan {
    fn visit(&mut self, v: usize, edges: &[Vec<usize>], found: &mut impl FnMut(Vec<usize>)) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &edges[v] {
            match self.index[w] {
                None => {
                    self.visit(w, edges, found);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            found(component);
        }
    }
}

#[test]
fn the_lexer_skips_braces_in_literals_and_comments_and_tests() {
    let source = "fn a<'x>(v: &'x str) {\n    let s = \"}\";\n    // }\n    let c = '}';\n    let r = r#\"}\"#;\n}\n\
                  /* fn hidden() { */\npub(crate) async fn b() {}\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
    let blanked = blank(source);
    let found: Vec<(String, usize, usize)> = functions(&blanked);
    let names: Vec<_> = found
        .iter()
        .map(|(n, first, len)| (n.as_str(), *first, *len))
        .collect();
    assert_eq!(names, [("a", 1, 6), ("b", 8, 1), ("t", 11, 1)]);
    let code = without_tests(&blanked);
    assert!(!code.contains("fn t"), "{code}");
    assert!(code.contains("fn b"));
    let mut modules = BTreeSet::new();
    modules.insert("processor".to_string());
    modules.insert("processor::flusher".to_string());
    modules.insert("processor::partition".to_string());
    modules.insert("processor::partition::live".to_string());
    let named = imports(
        "processor::partition::live",
        "use super::super::flusher::X; pub(super) fn f() { crate::processor::partition::run(); }",
        &modules,
    );
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["processor::flusher", "processor::partition"]
    );
    let facade = without_reexports("pub(crate) use flusher::X;\nuse flusher::Y;");
    assert!(!facade.contains('X') && facade.contains('Y'));
}
