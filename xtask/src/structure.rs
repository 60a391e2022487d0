//! The structure drawing's two house rules, read from the sources as text (xtask uses only std):
//!
//! - **module cycles**: inside every crate of the workspace, for every module, the modules
//!   directly below it form a graph: an edge `a -> b` when code in `a` (or any module below `a`)
//!   names a path into `b` (or below it), through `use`, a `crate::`/`super::`/`self::` path, or a
//!   re-export (`pub use`) that leads there. A parent naming its children, or a child naming its
//!   ancestors, is composition, not an edge. Every strongly connected set of two or more siblings
//!   is a violation: the modules of a crate must be drawable as layers, as the crates are.
//!   Test modules (`#[cfg(test)]`) are left out: tests may look anywhere.
//! - **file size**: no source file of a crate root's module tree is longer than [`MAX_LINES`]
//!   lines, its trailing test module not counted; a file that is a table of data may be named in
//!   [`DATA_TABLES`] with the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::sources::{block_end, code_only, Repo};

/// The longest a source file may be, without its trailing `#[cfg(test)]` module.
pub const MAX_LINES: usize = 1000;

/// Files allowed past [`MAX_LINES`] because they are data, not logic: `(path, why)`.
pub const DATA_TABLES: &[(&str, &str)] = &[];

/// A module of a crate: its path from the crate root (`[]` for the root) and its file.
struct Module {
    path: Vec<String>,
    file: PathBuf,
    /// The file's code with comments, literals and test modules blanked.
    code: String,
}

/// Every module of the crate rooted at `root` (relative to the repo), read from `repo.sources`.
fn module_tree(repo: &Repo, root: &Path) -> Vec<Module> {
    let mut modules = Vec::new();
    let mut pending = vec![(Vec::new(), root.to_path_buf())];
    while let Some((path, file)) = pending.pop() {
        let Some(text) = source(repo, &file) else {
            continue;
        };
        let code = without_test_modules(&code_only(text));
        // A module's children live in the file's directory when the file is a crate root or a
        // `mod.rs`, else in a directory named after the file.
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = file.parent().unwrap_or(Path::new(""));
        let children_dir = if path.is_empty() || stem == "mod" {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        for child in declared_file_modules(&code) {
            let flat = children_dir.join(format!("{child}.rs"));
            let nested = children_dir.join(&child).join("mod.rs");
            let found = [flat, nested]
                .into_iter()
                .find(|candidate| source(repo, candidate).is_some());
            if let Some(child_file) = found {
                let mut child_path = path.clone();
                child_path.push(child);
                pending.push((child_path, child_file));
            }
        }
        modules.push(Module { path, file, code });
    }
    modules.sort_by(|a, b| a.path.cmp(&b.path));
    modules
}

fn source<'r>(repo: &'r Repo, file: &Path) -> Option<&'r str> {
    repo.sources
        .iter()
        .find(|(rel, _)| rel == file)
        .map(|(_, text)| text.as_str())
}

/// Tokens of code: identifiers (with `r#` dropped) and single punctuation characters, `::` as one.
fn tokens(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &code[start..i];
            if word == "r" && bytes.get(i) == Some(&b'#') {
                i += 1;
                continue;
            }
            out.push(word);
        } else if c == b':' && bytes.get(i + 1) == Some(&b':') {
            out.push("::");
            i += 2;
        } else if c.is_ascii_whitespace() || c.is_ascii_digit() || !c.is_ascii() {
            i += 1;
        } else {
            out.push(&code[i..i + 1]);
            i += 1;
        }
    }
    out
}

/// `code` with every item marked `#[cfg(test)]` blanked (a `mod x;` or a braced item).
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    let marker = "#[cfg(test)]";
    let mut search = 0;
    while let Some(found) = out[search..].find(marker) {
        let start = search + found;
        let after = start + marker.len();
        // The item ends at its `;` or at the brace that closes its first `{`.
        let rest = &out[after..];
        let end = match (rest.find('{'), rest.find(';')) {
            (Some(brace), semi) if semi.map_or(true, |s| brace < s) => {
                block_end(&out, after + brace)
            }
            (_, Some(semi)) => after + semi + 1,
            _ => out.len(),
        };
        let blanked: String = out[start..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(start..end, &blanked);
        search = start + blanked.len();
    }
    out
}

/// The names of `mod name;` declarations (modules in files of their own).
fn declared_file_modules(code: &str) -> Vec<String> {
    let toks = tokens(code);
    toks.windows(3)
        .filter(|w| w[0] == "mod" && w[2] == ";")
        .map(|w| w[1].to_string())
        .collect()
}

/// The paths of one `use` tree, braces expanded: `a::{b, c::{d, e as f}}` -> `a::b`, `a::c::d`,
/// `a::c::e`.
fn expand_use(tree: &[&str]) -> Vec<Vec<String>> {
    // Split at top-level commas.
    let mut parts: Vec<&[&str]> = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in tree.iter().enumerate() {
        match *t {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "," if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..]);
    let mut paths = Vec::new();
    for part in parts {
        let mut prefix = Vec::new();
        let mut i = 0;
        while i < part.len() {
            match part[i] {
                "{" => {
                    let inner_end = part.len() - usize::from(part.last() == Some(&"}"));
                    for tail in expand_use(&part[i + 1..inner_end]) {
                        let mut path = prefix.clone();
                        path.extend(tail);
                        paths.push(path);
                    }
                    prefix.clear();
                    break;
                }
                "::" => {}
                "as" => break,
                "*" => break,
                word => prefix.push(word.to_string()),
            }
            i += 1;
        }
        if !prefix.is_empty() {
            paths.push(prefix);
        }
    }
    paths
}

/// What a module's code names: `(paths of its use trees, of which public re-exports, inline
/// paths starting with crate/super/self)`.
struct Named {
    paths: Vec<Vec<String>>,
    reexports: Vec<Vec<String>>,
}

fn named_paths(code: &str) -> Named {
    let toks = tokens(code);
    let mut paths = Vec::new();
    let mut reexports = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == "use" && toks.get(i + 1) != Some(&"::") {
            let public = i > 0 && (toks[i - 1] == "pub" || toks[i - 1] == ")");
            let end = toks[i..]
                .iter()
                .position(|t| *t == ";")
                .map_or(toks.len(), |p| i + p);
            let expanded = expand_use(&toks[i + 1..end]);
            if public {
                reexports.extend(expanded.iter().cloned());
            }
            paths.extend(expanded);
            i = end;
            continue;
        }
        let starts_path = matches!(toks[i], "crate" | "super" | "self")
            && toks.get(i + 1) == Some(&"::")
            && (i == 0 || toks[i - 1] != "::");
        if starts_path {
            let mut path = vec![toks[i].to_string()];
            let mut j = i + 1;
            while toks.get(j) == Some(&"::") {
                match toks.get(j + 1) {
                    Some(word) if word.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                        path.push(word.to_string());
                        j += 2;
                    }
                    _ => break,
                }
            }
            paths.push(path);
            i = j;
            continue;
        }
        i += 1;
    }
    Named { paths, reexports }
}

struct Crate {
    modules: BTreeSet<Vec<String>>,
    /// Per module, the names it re-exports and the path each leads to.
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    /// The module that `path`, named in module `here`, leads into; `None` for paths outside the
    /// crate (other crates, the prelude, local items).
    fn resolve(&self, here: &[String], path: &[String], depth: usize) -> Option<Vec<String>> {
        let (mut current, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "super" | "self" => {
                let mut base = here.to_vec();
                let mut rest = path;
                if rest[0] == "self" {
                    rest = &rest[1..];
                }
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            first => {
                let mut child = here.to_vec();
                child.push(first.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
                (here.to_vec(), path)
            }
        };
        for segment in rest {
            let mut child = current.clone();
            child.push(segment.clone());
            if self.modules.contains(&child) {
                current = child;
                continue;
            }
            // An item of `current`: where it is defined, when `current` re-exports it.
            let target = self.reexports.get(&current).and_then(|r| r.get(segment));
            if let Some(target) = target.filter(|_| depth < 8) {
                if let Some(found) = self.resolve(&current, target, depth + 1) {
                    return Some(found);
                }
            }
            break;
        }
        Some(current)
    }
}

/// The module cycles of the crate rooted at `root`, one line each.
fn crate_cycles(repo: &Repo, name: &str, root: &Path) -> Vec<String> {
    let tree = module_tree(repo, root);
    let named: Vec<Named> = tree.iter().map(|m| named_paths(&m.code)).collect();
    let krate = Crate {
        modules: tree.iter().map(|m| m.path.clone()).collect(),
        reexports: tree
            .iter()
            .zip(&named)
            .map(|(m, n)| {
                let by_name = n
                    .reexports
                    .iter()
                    .filter_map(|p| Some((p.last()?.clone(), p.clone())))
                    .filter(|(last, _)| last != "self")
                    .collect();
                (m.path.clone(), by_name)
            })
            .collect(),
    };
    // Sibling edges, grouped by the parent the two siblings share.
    let mut edges: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, named) in tree.iter().zip(&named) {
        for path in &named.paths {
            let Some(target) = krate.resolve(&module.path, path, 0) else {
                continue;
            };
            let shared = module
                .path
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if shared == module.path.len() || shared == target.len() {
                continue;
            }
            edges
                .entry(module.path[..shared].to_vec())
                .or_default()
                .entry(module.path[shared].clone())
                .or_default()
                .insert(target[shared].clone());
        }
    }
    let mut cycles = Vec::new();
    for (parent, graph) in &edges {
        for component in strongly_connected(graph) {
            let members: BTreeSet<&String> = component.iter().collect();
            let links: Vec<String> = component
                .iter()
                .flat_map(|a| {
                    graph[a]
                        .iter()
                        .filter(|b| members.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            let place = if parent.is_empty() {
                String::new()
            } else {
                format!("::{}", parent.join("::"))
            };
            let file = tree
                .iter()
                .find(|m| &m.path == parent)
                .map_or_else(String::new, |m| format!(" ({})", m.file.display()));
            cycles.push(format!(
                "module cycle in {name}{place}{file}: {}",
                links.join(", ")
            ));
        }
    }
    cycles
}

/// Tarjan's strongly connected components with two or more members, each sorted.
fn strongly_connected(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.low[v].min(s.low[w.as_str()]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w.as_str()) {
                let low = s.low[v].min(s.index[w.as_str()]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

/// The crate roots of the workspace (libraries and binaries), relative to the repo, with their
/// package names; a root shared by two targets is read once.
fn crate_roots(repo: &Repo) -> Vec<(String, PathBuf)> {
    let mut seen = BTreeSet::new();
    let mut roots = Vec::new();
    for member in &repo.workspace.members {
        for target in member.targets.iter().filter(|t| t.is_crate_root()) {
            let rel = target
                .src_path
                .strip_prefix(&repo.root)
                .unwrap_or(&target.src_path)
                .to_path_buf();
            if seen.insert(rel.clone()) {
                roots.push((member.name.clone(), rel));
            }
        }
    }
    roots
}

/// The tidy check `no-module-cycles`.
pub fn no_module_cycles(repo: &Repo) -> Vec<String> {
    crate_roots(repo)
        .iter()
        .flat_map(|(name, root)| crate_cycles(repo, name, root))
        .collect()
}

/// The tidy check `source-files-stay-small`.
pub fn source_files_stay_small(repo: &Repo) -> Vec<String> {
    let mut violations = Vec::new();
    let mut seen = BTreeSet::new();
    for (_, root) in crate_roots(repo) {
        for module in module_tree(repo, &root) {
            if !seen.insert(module.file.clone()) {
                continue;
            }
            let text = source(repo, &module.file).unwrap_or("");
            let lines = lines_before_test_module(text);
            let exempt = DATA_TABLES
                .iter()
                .any(|(path, _)| module.file == Path::new(path));
            if lines > MAX_LINES && !exempt {
                violations.push(format!(
                    "{}: {lines} lines (its test module not counted); split it by what it owns \
                     (at most {MAX_LINES})",
                    module.file.display()
                ));
            }
        }
    }
    violations
}

/// The number of lines before a trailing `#[cfg(test)] mod NAME {` (all of them when none).
fn lines_before_test_module(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .position(|w| {
            let item = w[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            w[0].trim() == "#[cfg(test)]"
                && !w[1].starts_with(' ')
                && item.starts_with("mod ")
                && item.trim_end().ends_with('{')
        })
        .unwrap_or(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{Member, Target, Workspace};

    fn repo(sources: &[(&str, &str)]) -> Repo {
        Repo {
            root: PathBuf::from("/r"),
            workspace: Workspace {
                target_dir: PathBuf::from("/r/target"),
                members: vec![Member {
                    name: "demo".to_string(),
                    manifest_dir: PathBuf::from("/r/demo"),
                    targets: vec![Target {
                        kinds: vec!["lib".to_string()],
                        src_path: PathBuf::from("/r/demo/src/lib.rs"),
                    }],
                    path_deps: Vec::new(),
                }],
            },
            sources: sources
                .iter()
                .map(|(p, t)| (PathBuf::from(p), t.to_string()))
                .collect(),
        }
    }

    #[test]
    fn siblings_that_name_each_other_are_a_cycle_and_layers_are_not() {
        let lib = "mod a;\nmod b;\nmod c;\nmod d;\npub use a::Alpha;\n";
        let cyclic = repo(&[
            ("demo/src/lib.rs", lib),
            ("demo/src/a.rs", "use crate::b::Beta;\npub struct Alpha;\n"),
            ("demo/src/b.rs", "pub struct Beta(super::a::Alpha);\n"),
            // Through the root's re-export: c -> a, no cycle.
            ("demo/src/c.rs", "use crate::{Alpha, d::{self, Delta}};\n"),
            ("demo/src/d.rs", "pub struct Delta;\n"),
        ]);
        assert_eq!(
            no_module_cycles(&cyclic),
            vec!["module cycle in demo (demo/src/lib.rs): a -> b, b -> a".to_string()]
        );
        let layered = repo(&[
            ("demo/src/lib.rs", lib),
            ("demo/src/a.rs", "pub struct Alpha;\n"),
            ("demo/src/b.rs", "pub struct Beta(crate::Alpha);\n"),
            ("demo/src/c.rs", "use crate::{Alpha, d::{self, Delta}};\n"),
            ("demo/src/d.rs", "pub struct Delta;\n"),
        ]);
        assert!(no_module_cycles(&layered).is_empty());
    }

    #[test]
    fn nested_modules_comments_strings_and_tests_are_read_as_they_are() {
        let nested = repo(&[
            ("demo/src/lib.rs", "mod net;\nmod disk;\n"),
            // A child of `net` naming `disk` makes `net -> disk`.
            ("demo/src/net.rs", "mod wire;\n"),
            ("demo/src/net/wire.rs", "use crate::disk::Block;\n"),
            (
                "demo/src/disk.rs",
                concat!(
                    "pub struct Block;\n",
                    "// crate::net::wire in a comment\n",
                    "const S: &str = \"crate::net::wire\";\n",
                    "#[cfg(test)]\nmod tests { use crate::net::wire; }\n",
                ),
            ),
        ]);
        assert!(no_module_cycles(&nested).is_empty());
        let back = repo(&[
            ("demo/src/lib.rs", "mod net;\nmod disk;\n"),
            ("demo/src/net.rs", "mod wire;\n"),
            ("demo/src/net/wire.rs", "use crate::disk::Block;\n"),
            ("demo/src/disk.rs", "pub struct Block(crate::net::Wire);\n"),
        ]);
        assert_eq!(
            no_module_cycles(&back),
            vec!["module cycle in demo (demo/src/lib.rs): disk -> net, net -> disk".to_string()]
        );
    }

    #[test]
    fn long_files_are_flagged_without_their_test_module() {
        let long = "fn f() {}\n".repeat(MAX_LINES + 1);
        let fits = format!(
            "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
            "fn f() {}\n".repeat(MAX_LINES - 2),
            "fn t() {}\n".repeat(50)
        );
        let r = repo(&[
            ("demo/src/lib.rs", "mod long;\nmod fits;\n"),
            ("demo/src/long.rs", &long),
            ("demo/src/fits.rs", &fits),
        ]);
        let found = source_files_stay_small(&r);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("demo/src/long.rs: 1001 lines"));
    }
}
