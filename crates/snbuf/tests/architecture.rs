//! The workspace keeps the shape docs/DESIGN.md describes: within every crate no source file
//! imports another that imports it back (directly or round a longer loop), no file grows past
//! `MAX_LINES`, and every file says what it is for in a `//!` opening. A newcomer reads the
//! architecture from the folders; this keeps it true as the code changes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// About 600 lines: a file any reader can hold in their head.
const MAX_LINES: usize = 650;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A crate's source: module path (`a::b`) → file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            (parts.join("::"), f)
        })
        .collect()
}

/// The code of a file without comment lines and without `#[cfg(test)]` modules (a test module
/// may use its parent freely).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut skip_until: Option<usize> = None;
    let mut cfg_test = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("//") {
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        let (opens, closes) = (code.matches('{').count(), code.matches('}').count());
        if let Some(d) = skip_until {
            depth = (depth + opens).saturating_sub(closes);
            if depth <= d {
                skip_until = None;
            }
            continue;
        }
        if t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test") {
            cfg_test = true;
            continue;
        }
        if std::mem::take(&mut cfg_test) && t.starts_with("mod ") {
            if opens > closes {
                skip_until = Some(depth);
                depth += opens - closes;
            }
            continue;
        }
        depth = (depth + opens).saturating_sub(closes);
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The `use` statements of `code`, each as (is a re-export, the tree after `use`).
fn use_statements(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut current: Option<(bool, String)> = None;
    for line in code.lines() {
        let t = line.trim();
        match current.as_mut() {
            Some(c) => c.1.push_str(t),
            None => {
                let (reexport, rest) = if let Some(r) = t.strip_prefix("use ") {
                    (false, r)
                } else if let Some(r) = t.strip_prefix("pub use ") {
                    (true, r)
                } else if let Some(r) = t
                    .strip_prefix("pub(crate) use ")
                    .or_else(|| t.strip_prefix("pub(super) use "))
                {
                    (true, r)
                } else {
                    continue;
                };
                current = Some((reexport, rest.to_string()));
            }
        }
        if t.contains(';') {
            if let Some((r, mut s)) = current.take() {
                s.truncate(s.find(';').unwrap_or(s.len()));
                out.push((r, s));
            }
        }
    }
    out
}

/// Expands `use` trees (`a::{b, c::d}`) into paths.
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(prefix, head);
        let mut level = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => level += 1,
                '}' => level -= 1,
                ',' if level == 0 => {
                    expand_use(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&base, &inner[start..], out);
    } else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        if !path.is_empty() {
            out.push(join(prefix, path));
        }
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// Module paths a file refers to with `crate::` or `super::`, resolved to the longest module
/// that exists.
fn references(module: &str, code: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let mut paths = Vec::new();
    // `use` statements, trees expanded; `pub use` in a facade (a module with children) only
    // re-exports, which makes no dependency of its own.
    let has_children = known
        .keys()
        .any(|k| !k.is_empty() && (module.is_empty() || k.starts_with(&format!("{module}::"))));
    for (reexport, tree) in use_statements(code) {
        if reexport && has_children {
            continue;
        }
        expand_use("", &tree, &mut paths);
    }
    // Inline paths: `crate::a::b::f(...)`.
    for (i, _) in code.match_indices("crate::") {
        let rest: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        paths.push(rest);
    }
    let mut out = BTreeSet::new();
    for p in paths {
        let mut segs: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
        let mut base: Vec<String> = match segs.first() {
            Some(&"crate") => {
                segs.remove(0);
                vec![]
            }
            Some(&"super") => {
                let mut b: Vec<String> = module.split("::").map(String::from).collect();
                while segs.first() == Some(&"super") {
                    segs.remove(0);
                    b.pop();
                }
                b
            }
            Some(&"self") => {
                segs.remove(0);
                module.split("::").map(String::from).collect()
            }
            _ => continue,
        };
        base.retain(|s| !s.is_empty());
        let mut best = None;
        let mut cur = base.clone();
        if known.contains_key(&cur.join("::")) {
            best = Some(cur.join("::"));
        }
        for s in segs {
            cur.push(s.to_string());
            if known.contains_key(&cur.join("::")) {
                best = Some(cur.join("::"));
            }
        }
        if let Some(b) = best {
            // The crate root is a facade of re-exports: depending on it is not a loop.
            if b != module && !b.is_empty() && !module.starts_with(&format!("{b}::")) {
                out.insert(b);
            }
        }
    }
    out
}

/// A loop in `graph`, if any, as the modules round it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn crates() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(workspace().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    v.sort();
    assert!(v.len() >= 8, "the crates were found: {v:?}");
    v
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let mut loops = Vec::new();
    for c in crates() {
        let known = modules(&c.join("src"));
        let mut graph = BTreeMap::new();
        for (m, f) in &known {
            let code = code_of(&std::fs::read_to_string(f).unwrap());
            graph.insert(m.clone(), references(m, &code, &known));
        }
        if let Some(cycle) = find_cycle(&graph) {
            loops.push(format!("{}: {}", c.display(), cycle.join(" -> ")));
        }
    }
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(find_cycle(&g).unwrap(), vec!["a", "b", "c", "a"]);
    let known: BTreeMap<String, PathBuf> = ["", "x", "y", "y::z"]
        .into_iter()
        .map(|k| (k.to_string(), PathBuf::new()))
        .collect();
    let refs = references(
        "x",
        "use crate::{y::z::Thing, y::other};\nfn f() { crate::y::g(); }",
        &known,
    );
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        vec!["y".to_string(), "y::z".to_string()]
    );
    let code = code_of("use a;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\nuse b;\n");
    assert_eq!(code, "use a;\nuse b;\n");
}

#[test]
fn no_source_file_is_too_long_and_each_says_what_it_is_for() {
    let mut problems = Vec::new();
    for c in crates() {
        let mut files = Vec::new();
        rust_files(&c.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let lines = text.lines().count();
            if lines > MAX_LINES {
                problems.push(format!("{}: {lines} lines", f.display()));
            }
            if !text.starts_with("//!") {
                problems.push(format!("{}: no //! opening", f.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each crate's snbuf dependencies, from its Cargo.toml (`[dependencies]` only).
fn cargo_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for dir in crates() {
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let toml: toml::Table = text.parse().unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let deps = toml
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| {
                d.keys()
                    .filter_map(|k| k.strip_prefix("snbuf-"))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        graph.insert(name, deps);
    }
    graph
}

/// The crate graph docs/DESIGN.md draws, from its checked block.
fn design_graph() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(workspace().join("docs/DESIGN.md")).unwrap();
    let start = text
        .find("<!-- crate graph")
        .expect("DESIGN.md has its crate graph block");
    let end = text[start..].find("<!-- end crate graph -->").unwrap() + start;
    text[start..end]
        .lines()
        .filter_map(|l| l.split_once(" -> "))
        .map(|(name, deps)| {
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|d| *d != "-" && !d.is_empty())
                .map(String::from)
                .collect();
            (name.trim().to_string(), deps)
        })
        .collect()
}

#[test]
fn the_crate_graph_in_design_md_is_the_one_cargo_builds() {
    let (cargo, design) = (cargo_graph(), design_graph());
    assert!(cargo.len() > 10, "{cargo:?}");
    for (name, deps) in &cargo {
        assert_eq!(
            design.get(name),
            Some(deps),
            "docs/DESIGN.md's crate graph says {name} -> {:?}; its Cargo.toml says {deps:?}",
            design.get(name)
        );
    }
    assert_eq!(
        design.len(),
        cargo.len(),
        "DESIGN.md names crates Cargo does not build"
    );
}

/// The readout is where data enters; it knows nothing of storage (the platform crate gives it
/// memory, CRC and fences).
#[test]
fn readout_does_not_depend_on_persist() {
    let graph = cargo_graph();
    assert!(
        !graph["readout"].contains("persist"),
        "{:?}",
        graph["readout"]
    );
    let mut files = Vec::new();
    rust_files(&workspace().join("crates/readout"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("snbuf_persist"),
            "{} uses snbuf_persist",
            f.display()
        );
    }
}

/// The binary's commands parse and call; what two of them share lives in a library or a
/// module of its own, never in another command.
#[test]
fn no_command_imports_another() {
    let src = workspace().join("crates/snbuf/src");
    let mut bad = Vec::new();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("cmd_") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(e.path()).unwrap());
        for (_, tree) in use_statements(&code) {
            let mut paths = Vec::new();
            expand_use("", &tree, &mut paths);
            for path in paths.iter().filter(|p| p.starts_with("crate::cmd_")) {
                bad.push(format!("{name} uses {path}"));
            }
        }
        for (i, _) in code.match_indices("crate::cmd_") {
            let used: String = code[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            bad.push(format!("{name} calls {used}"));
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The longest a function may be without saying why it must be one piece.
const MAX_FN_LINES: usize = 100;

/// Every function of a `src/` file, outside test modules: (name, first line, lines, the doc
/// comment and attributes above it).
fn functions(text: &str) -> Vec<(String, usize, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if is_test_attribute(l) {
            i = end_of_item(&lines, i) + 1;
            continue;
        }
        let t = l.trim_start();
        let indent = &l[..l.len() - t.len()];
        let sig = ["pub(crate) ", "pub(super) ", "pub ", ""]
            .iter()
            .find_map(|p| t.strip_prefix(p))
            .map(|r| {
                r.trim_start_matches("async ")
                    .trim_start_matches("unsafe ")
                    .trim_start_matches("const ")
            });
        let Some(name) = sig.and_then(|r| r.strip_prefix("fn ")) else {
            i += 1;
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: from the signature to the closing brace at the signature's indent.
        let mut j = i;
        while j < lines.len() && !lines[j].trim_end().ends_with('{') {
            if lines[j].trim_end().ends_with(';') {
                break; // a declaration without a body
            }
            j += 1;
        }
        if j >= lines.len() || lines[j].trim_end().ends_with(';') {
            i = j + 1;
            continue;
        }
        let close = format!("{indent}}}");
        let end = (j + 1..lines.len())
            .find(|&k| lines[k].starts_with(&close))
            .unwrap_or(lines.len() - 1);
        let mut k = i;
        while k > 0 && {
            let p = lines[k - 1].trim_start();
            p.starts_with("///") || p.starts_with("#[") || p.starts_with("//")
        } {
            k -= 1;
        }
        out.push((name, i + 1, end - i + 1, lines[k..i].join("\n")));
        i = end + 1;
    }
    out
}

/// Whether `line` makes the item after it test code only.
fn is_test_attribute(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#[cfg(test)]") || t.starts_with("#[cfg(all(test")
}

/// The last line of the item whose attributes begin at line `at`: its `;`, or the closing
/// brace at its indent.
fn end_of_item(lines: &[&str], at: usize) -> usize {
    let mut i = at;
    while i < lines.len() && lines[i].trim_start().starts_with("#[") {
        i += 1;
    }
    let Some(item) = lines.get(i) else {
        return lines.len().saturating_sub(1);
    };
    if item.trim_end().ends_with(';') {
        return i;
    }
    let indent = &item[..item.len() - item.trim_start().len()];
    let close = format!("{indent}}}");
    (i + 1..lines.len())
        .find(|&k| lines[k].starts_with(&close))
        .unwrap_or(lines.len() - 1)
}

/// The files of `src` that hold only tests: modules declared under `#[cfg(test)]` in another
/// file (`mod tests;`, with or without `#[path = "..."]`), wherever they sit.
fn test_files(src: &Path) -> BTreeSet<PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut tests = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for i in (0..lines.len()).filter(|&i| is_test_attribute(lines[i])) {
            let end = end_of_item(&lines, i);
            let item = lines[end].trim();
            let Some(name) = item.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) else {
                continue;
            };
            let path_attr = lines[i..end]
                .iter()
                .find_map(|a| a.trim().strip_prefix("#[path = \"")?.strip_suffix("\"]"));
            let dir = f.parent().unwrap();
            let stem = f.file_stem().unwrap().to_string_lossy();
            let own_dir = match stem.as_ref() {
                "mod" | "lib" | "main" => dir.to_path_buf(),
                _ => dir.join(stem.as_ref()),
            };
            match path_attr {
                Some(p) => tests.insert(dir.join(p)),
                None if own_dir.join(format!("{name}.rs")).exists() => {
                    tests.insert(own_dir.join(format!("{name}.rs")))
                }
                None => tests.insert(own_dir.join(name).join("mod.rs")),
            };
        }
    }
    tests
}

/// Figures the tree may only improve on, each now at its target: at most 5 functions over
/// `MAX_FN_LINES`, a binary of at most 3,000 lines (it parses and calls), half an assertion a
/// function where data is persisted and accounted for, and at most 10 lookups of JSON by key
/// outside tests (each a deliberate reading of a message or file another program writes). A
/// change that makes one worse fails here, with the list to look at.
const MAX_LONG_FUNCTIONS: usize = 4;
/// TigerBeetle's limit on a function: those over it are counted, and the count only goes down
/// (lower it when a change makes it lower).
const TIGERBEETLE_FN_LINES: usize = 70;
const MAX_FUNCTIONS_OVER_TIGERBEETLE: usize = 38;
const MAX_BINARY_LINES: usize = 3000;
const MAX_KEY_LOOKUPS: usize = 10;
/// Assertions (`assert!`, `assert_eq!`, `debug_assert!`, ...) per function, outside tests, in
/// the crates that persist and account for the detector's data: in all, and of those the ones
/// that hold in release builds too (`assert!`: what a running unit checks), at least today's.
const RELEASE_FLOOR_PERSIST: f64 = 0.18;
const RELEASE_FLOOR_BURST: f64 = 0.20;
const RELEASE_FLOOR_UNIT: f64 = 0.23;
const RELEASE_FLOOR_READOUT: f64 = 0.32;
const MIN_ASSERTIONS_PER_FUNCTION: &[(&str, f64, f64)] = &[
    ("persist", 0.5, RELEASE_FLOOR_PERSIST),
    ("burst", 0.5, RELEASE_FLOOR_BURST),
    ("unit", 0.5, RELEASE_FLOOR_UNIT),
    ("readout", 0.5, RELEASE_FLOOR_READOUT),
];

/// Every `src/` file of `krate`, but for the files that hold only tests (`test_files`).
fn source_files(krate: &Path) -> Vec<PathBuf> {
    let src = krate.join("src");
    let tests = test_files(&src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.retain(|f| !tests.contains(f));
    files.sort();
    files
}

/// A file's text without its test items (`#[cfg(test)]` modules and functions), wherever they
/// sit.
fn before_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        if is_test_attribute(lines[i]) {
            i = end_of_item(&lines, i) + 1;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

#[test]
fn long_functions_are_few_and_get_fewer() {
    let (mut long, mut longish) = (Vec::new(), Vec::new());
    for dir in crates() {
        for f in source_files(&dir) {
            let text = std::fs::read_to_string(&f).unwrap();
            for (name, line, len, _) in functions(&text) {
                let at = format!(
                    "{}:{line}: {name} is {len} lines",
                    f.strip_prefix(workspace()).unwrap_or(&f).display()
                );
                if len > MAX_FN_LINES {
                    long.push(at.clone());
                }
                if len > TIGERBEETLE_FN_LINES {
                    longish.push(at);
                }
            }
        }
    }
    assert!(
        long.len() <= MAX_LONG_FUNCTIONS,
        "{} functions over {MAX_FN_LINES} lines, more than the {MAX_LONG_FUNCTIONS} allowed: split the new one\n{}",
        long.len(),
        long.join("\n")
    );
    assert!(
        longish.len() <= MAX_FUNCTIONS_OVER_TIGERBEETLE,
        "{} functions over {TIGERBEETLE_FN_LINES} lines, more than the {MAX_FUNCTIONS_OVER_TIGERBEETLE} of the last count: split one by what it does (never to fit)\n{}",
        longish.len(),
        longish.join("\n")
    );
}

#[test]
fn the_binary_parses_and_calls() {
    let lines: usize = source_files(&workspace().join("crates/snbuf"))
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
        .sum();
    assert!(
        lines <= MAX_BINARY_LINES,
        "crates/snbuf/src is {lines} lines, more than {MAX_BINARY_LINES}: what it gained belongs in a library"
    );
}

/// `x["key"]` or `x.get("key")` on JSON: a schema read by string, where a type would be checked.
fn key_lookups(code: &str) -> usize {
    let mut n = 0;
    for (i, _) in code.match_indices("\"") {
        let before = code[..i].trim_end();
        let after = &code[i + 1..];
        let Some(end) = after.find('"') else { continue };
        let key = &after[..end];
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = after[end + 1..].trim_start();
        if (before.ends_with('[') && rest.starts_with(']'))
            || (before.ends_with(".get(") && rest.starts_with(')'))
        {
            n += 1;
        }
    }
    n
}

#[test]
fn json_is_read_as_types() {
    let mut found = Vec::new();
    for dir in crates() {
        for f in source_files(&dir) {
            let text = std::fs::read_to_string(&f).unwrap();
            let n = key_lookups(&before_tests(&text));
            if n > 0 {
                found.push(format!(
                    "{}: {n}",
                    f.strip_prefix(workspace()).unwrap_or(&f).display()
                ));
            }
        }
    }
    let total: usize = found
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert!(
        total <= MAX_KEY_LOOKUPS,
        "{total} lookups of JSON by key outside tests, more than {MAX_KEY_LOOKUPS}: read a type\n{}",
        found.join("\n")
    );
}

/// Assertions in the functions of `text`: (functions, assertions).
fn assertions(text: &str) -> (usize, usize) {
    let (fns, release, debug) = assertions_by_kind(text);
    (fns, release + debug)
}

/// Assertions in the functions of `text`, by kind: (functions, in release builds too, in debug
/// builds only).
fn assertions_by_kind(text: &str) -> (usize, usize, usize) {
    let fns = functions(text);
    let lines: Vec<&str> = text.lines().collect();
    let (mut release, mut debug) = (0, 0);
    for (_, line, len, _) in &fns {
        for l in &lines[line - 1..(line - 1 + len).min(lines.len())] {
            for m in ["assert!(", "assert_eq!(", "assert_ne!("] {
                // `debug_assert!(` ends in `assert!(`: each counts once, as its kind.
                let all = l.matches(m).count();
                let in_debug = l.matches(&format!("debug_{m}")).count();
                release += all - in_debug;
                debug += in_debug;
            }
        }
    }
    (fns.len(), release, debug)
}

#[test]
fn where_data_is_persisted_functions_assert_what_they_rely_on() {
    let mut low = Vec::new();
    for (krate, floor, release_floor) in MIN_ASSERTIONS_PER_FUNCTION {
        let (mut fns, mut release, mut debug) = (0, 0, 0);
        for f in source_files(&workspace().join("crates").join(krate)) {
            let (n, r, d) = assertions_by_kind(&std::fs::read_to_string(&f).unwrap());
            fns += n;
            release += r;
            debug += d;
        }
        let per_fn = (release + debug) as f64 / fns.max(1) as f64;
        let release_per_fn = release as f64 / fns.max(1) as f64;
        if per_fn < *floor || release_per_fn < *release_floor {
            low.push(format!(
                "{krate}: {release} assertions in release builds and {debug} in debug ones, in {fns} functions ({per_fn:.2} a function, at least {floor}; {release_per_fn:.2} in release, at least {release_floor})"
            ));
        }
    }
    assert!(low.is_empty(), "{}", low.join("\n"));
}

#[test]
fn the_figures_are_measured_as_they_say() {
    assert_eq!(
        key_lookups(r#"v["a"]["b_c"] + w.get("d") + x["not a key"] + y.get( "e" )"#),
        4
    );
    assert_eq!(key_lookups(r#"let s = "a"; f("b"); m["x"].len()"#), 1);
    let text = "fn a() {\n    assert!(x);\n    debug_assert_eq!(y, 1);\n}\n\nfn b() {\n}\n";
    assert_eq!(assertions(text), (2, 2));
    assert_eq!(assertions_by_kind(text), (2, 1, 1));
    assert_eq!(before_tests("a\n#[cfg(test)]\nmod t {}"), "a\n");
    assert_eq!(
        before_tests("a\n#[cfg(test)]\nmod t {\n    x\n}\nb\n#[cfg(test)]\nfn c() {\n}\nd"),
        "a\nb\nd\n"
    );
    // Test modules in the middle of a file are not its functions either.
    let text = "fn a() {\n    assert!(x);\n}\n#[cfg(test)]\nmod t {\n    fn t() {\n    }\n}\nfn b() {\n}\n";
    assert_eq!(assertions(text), (2, 1));
}

#[test]
fn the_function_finder_measures_functions() {
    let text = "/// doc\n/// One piece: because.\npub fn a(x: u32) -> u32 {\n    x\n}\n\nfn b()\nwhere\n{\n    let v = {\n        1\n    };\n}\n";
    let f = functions(text);
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!((f[0].0.as_str(), f[0].1, f[0].2), ("a", 3, 3));
    assert!(f[0].3.contains("One piece"));
    assert_eq!((f[1].0.as_str(), f[1].2), ("b", 7));
}

/// The types a file defines at its top level (`struct`, `enum`, `type`, `trait`, public or not):
/// associated types and types local to a function are indented, so they are not counted.
fn top_level_types(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in code.lines() {
        let mut rest = line;
        if let Some(r) = rest.strip_prefix("pub") {
            rest = r.strip_prefix("(crate)").unwrap_or(r).trim_start();
        }
        for kind in ["struct ", "enum ", "type ", "trait "] {
            if let Some(r) = rest.strip_prefix(kind) {
                let name: String = r
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                    names.push(name);
                }
            }
        }
    }
    names
}

#[test]
fn a_type_name_means_one_thing() {
    assert_eq!(
        top_level_types(
            "pub struct A;\npub(crate) enum B {}\ntype C<R> = R;\n    type Err = ();\n"
        ),
        ["A", "B", "C"]
    );
    let mut defined: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for dir in crates() {
        let krate = dir.file_name().unwrap().to_string_lossy().to_string();
        for f in source_files(&dir) {
            if f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            for name in top_level_types(&before_tests(&text)) {
                defined.entry(name).or_default().insert(krate.clone());
            }
        }
    }
    let twice: Vec<String> = defined
        .iter()
        .filter(|(_, crates)| crates.len() > 1)
        .map(|(name, crates)| format!("{name}: {crates:?}"))
        .collect();
    assert!(
        twice.is_empty(),
        "type names defined in more than one crate (name each for what it is there):\n{}",
        twice.join("\n")
    );
}

/// The files a trigger passes through, from its source to the desk's decision.
const TRIGGER_PATH: &[&str] = &[
    "crates/unit/src/desk",
    "crates/unit/src/server/control.rs",
    "crates/fleet/src/trigger_handling.rs",
];

/// A decision made by comparing words: a message turned to text and compared, or searched.
fn compares_words(line: &str) -> bool {
    let compares = line.contains("==") || line.contains("!=");
    (compares && line.contains("to_string()"))
        || line.contains(".contains(\"")
        || line.contains(".starts_with(\"")
        || line.contains(".ends_with(\"")
}

#[test]
fn triggers_are_decided_by_type_and_the_fleet_talks_to_the_desk() {
    let mut found = Vec::new();
    for part in TRIGGER_PATH {
        let path = workspace().join(part);
        let mut files = Vec::new();
        match path.is_dir() {
            true => rust_files(&path, &mut files),
            false => files.push(path),
        }
        assert!(
            !files.is_empty(),
            "{part}: the trigger path is where it was"
        );
        for f in files {
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            for line in code.lines().filter(|l| compares_words(l)) {
                found.push(format!("{}: {}", f.display(), line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "decided by words:\n{}", found.join("\n"));
    let mut fleet = Vec::new();
    rust_files(&workspace().join("crates/fleet/src"), &mut fleet);
    for f in fleet {
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        assert!(
            !code.contains("snbuf_unit::server"),
            "{}: the fleet talks to the unit's desk (snbuf_unit::desk), not its socket server",
            f.display()
        );
    }
    assert!(compares_words(
        "if e.to_string() == WindowError::NothingBuffered.to_string() {"
    ));
}

/// Crates that may write to the terminal themselves: the binary, the console (the one way the
/// others do), and the tests' kit.
const PRINTING_CRATES: &[&str] = &["snbuf", "console", "testkit"];

/// Lines of `code` that print with `print!`, `println!`, `eprint!` or `eprintln!`.
fn printing_lines(code: &str) -> Vec<String> {
    let printing = |l: &str| {
        ["print!(", "println!(", "eprint!(", "eprintln!("]
            .iter()
            .any(|m| {
                l.match_indices(m).any(|(i, _)| {
                    // The macro itself, not a name that ends like it (`say_println!`).
                    !l[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
    };
    code.lines()
        .filter(|l| printing(l))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn library_crates_print_through_the_console() {
    assert_eq!(
        printing_lines("println!(\"a\");\nnote!(\"b\");\neprint!(\"c\");\nx.say_println!(d)"),
        vec!["println!(\"a\");", "eprint!(\"c\");"]
    );
    let mut found = Vec::new();
    for dir in crates() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if PRINTING_CRATES.contains(&name.as_str()) {
            continue;
        }
        for f in source_files(&dir) {
            let code = code_of(&before_tests(&std::fs::read_to_string(&f).unwrap()));
            for l in printing_lines(&code) {
                found.push(format!(
                    "{}: {l}",
                    f.strip_prefix(workspace()).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "library crates print through snbuf_console's say!/note! or log through tracing:\n{}",
        found.join("\n")
    );
}

/// A new export destination is one file of `export/src/destination/` and its line in `SCHEMES`:
/// every destination file is there, and nothing outside the directory names a destination's
/// type (the protocol sees only `ExportStore`).
#[test]
fn an_export_destination_is_one_file_and_one_line() {
    let dir = workspace().join("crates/export/src/destination");
    let module = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
    let table = module
        .lines()
        .find(|l| l.contains("const SCHEMES"))
        .expect("the table of destinations");
    let mut kinds = Vec::new();
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().replace(".rs", "");
        if name == "mod" {
            continue;
        }
        assert!(
            table.contains(&format!("{name}::open")),
            "destination/{name}.rs is not in SCHEMES: {table}"
        );
        let text = std::fs::read_to_string(f.path()).unwrap();
        kinds.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("impl ExportStore for "))
                .map(|t| t.trim_end_matches(" {").to_string()),
        );
    }
    assert!(kinds.len() >= 2, "the destinations were found: {kinds:?}");
    for krate in crates() {
        for f in source_files(&krate) {
            if f.starts_with(&dir) {
                continue;
            }
            let code = code_of(&before_tests(&std::fs::read_to_string(&f).unwrap()));
            for kind in &kinds {
                assert!(
                    !code.contains(kind.as_str()),
                    "{} names {kind}: it should see only ExportStore",
                    f.display()
                );
            }
        }
    }
}
