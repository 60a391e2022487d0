//! `cargo xtask tidy`: the house rules, each a named check. Every check runs and reports; the
//! command fails when any check found something. The same checks run as a `#[test]`, so
//! `cargo test -p xtask` enforces them too.
//!
//! Patterns that the checks look for are assembled with `concat!` so that this file does not
//! trip its own checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::counts::{Counts, Report};
use crate::sources::{block_end, code_only, Repo};
use crate::structure;
use crate::workspace::{DepKind, Member, Workspace};

/// A named house rule: it returns one line per violation.
pub struct Check {
    pub name: &'static str,
    pub run: fn(&Repo) -> Vec<String>,
}

pub const CHECKS: &[Check] = &[
    Check {
        name: "crate-seams",
        run: crate_seams,
    },
    Check {
        name: "no-ignored-or-should-panic-tests",
        run: no_skipped_tests,
    },
    Check {
        name: "crate-roots-have-docs",
        run: crate_roots_have_docs,
    },
    Check {
        name: "forbid-unsafe-code",
        run: forbid_unsafe_code,
    },
    Check {
        name: "unsafe-only-at-the-boundary",
        run: unsafe_only_at_the_boundary,
    },
    Check {
        name: "no-unfinished-code",
        run: no_unfinished_code,
    },
    Check {
        name: "no-vague-names",
        run: no_vague_names,
    },
    Check {
        name: "c-abi-catches-panics",
        run: c_abi_catches_panics,
    },
    Check {
        name: "no-module-cycles",
        run: structure::no_module_cycles,
    },
    Check {
        name: "source-files-stay-small",
        run: structure::source_files_stay_small,
    },
];

/// Runs every check on `repo`: `(check name, violations)` in table order.
pub fn findings(repo: &Repo) -> Vec<(&'static str, Vec<String>)> {
    CHECKS
        .iter()
        .map(|check| (check.name, (check.run)(repo)))
        .collect()
}

/// `cargo xtask tidy`: prints one line per check and every violation, fails if any check failed;
/// counts one per check.
pub fn run() -> Report {
    let repo = match Repo::load() {
        Ok(repo) => repo,
        Err(why) => return Report::failed(why),
    };
    let results = findings(&repo);
    let failed = results.iter().filter(|(_, v)| !v.is_empty()).count();
    for (name, violations) in &results {
        let verdict = if violations.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!("tidy: {name:<36} {verdict}");
        for violation in violations {
            println!("    {violation}");
        }
    }
    println!(
        "tidy: {} checks passed, {failed} failed",
        results.len() - failed
    );
    let counts = Counts {
        passed: results.len() - failed,
        skipped: 0,
        failed,
    };
    let result = if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} tidy check(s) failed"))
    };
    Report::new(counts, result)
}

// ---------------------------------------------------------------------------------------------
// (1) crate seams

/// The hipfile crates a crate may depend on (normal and build dependencies). Crates not listed
/// here are only bound by the backend rule below.
const SEAMS: &[(&str, &[&str])] = &[
    ("hipfile-hip", &[]),
    ("hipfile-core", &["hipfile-hip"]),
    ("hipfile-fallback", &["hipfile-hip", "hipfile-core"]),
    ("hipfile-fastpath", &["hipfile-hip", "hipfile-core"]),
    ("hipfile-testkit", &["hipfile-hip", "hipfile-core"]),
    // The sim HIP library may reuse testkit's fault injection; testkit itself sits on hip + core.
    (
        "hipfile-simhip",
        &["hipfile-hip", "hipfile-core", "hipfile-testkit"],
    ),
    (
        "hipfile-simcuda",
        &["hipfile-hip", "hipfile-core", "hipfile-testkit"],
    ),
    // cuFile's C ABI: a front door over the facade's C ABI bodies, never a backend crate of its
    // own (the facade's `backends()` picks them).
    (
        "hipfile-cufile",
        &["hipfile", "hipfile-core", "hipfile-hip"],
    ),
    // Remote objects: a reader/writer beside the session, on the facade's types and the staged
    // engine's pinned lanes; the facade never depends on it.
    (
        "hipfile-remote",
        &["hipfile", "hipfile-core", "hipfile-hip", "hipfile-fallback"],
    ),
];

const BACKEND_CRATES: &[&str] = &["hipfile-fallback", "hipfile-fastpath"];

/// The only crates that may name a backend crate: the facade force-links them, and the tools built
/// on the facade may pick one explicitly.
const BACKEND_USERS: &[&str] = &[
    "hipfile",
    "hipfile-cli",
    "hipfile-examples",
    // For the staged engine's staging pool, not its backend.
    "hipfile-remote",
];

fn crate_seams(repo: &Repo) -> Vec<String> {
    let mut violations = Vec::new();
    for member in &repo.workspace.members {
        for dep in member.path_deps.iter().filter(|d| d.kind != DepKind::Dev) {
            if let Some((_, allowed)) = SEAMS.iter().find(|(name, _)| *name == member.name) {
                if dep.name.starts_with("hipfile") && !allowed.contains(&dep.name.as_str()) {
                    violations.push(format!(
                        "{} depends on {} (allowed hipfile crates: {})",
                        member.name,
                        dep.name,
                        if allowed.is_empty() {
                            "none".to_string()
                        } else {
                            allowed.join(", ")
                        }
                    ));
                    continue;
                }
            }
            if BACKEND_CRATES.contains(&dep.name.as_str())
                && !BACKEND_USERS.contains(&member.name.as_str())
            {
                violations.push(format!(
                    "{} names backend crate {}; only {} may",
                    member.name,
                    dep.name,
                    BACKEND_USERS.join(", ")
                ));
            }
        }
    }
    violations.extend(dev_dependency_cycles(&repo.workspace));
    violations
}

/// A dev-dependency A -> B is a cycle when B reaches A through normal or build dependencies: the
/// test build of A would then link two copies of A.
fn dev_dependency_cycles(ws: &Workspace) -> Vec<String> {
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for member in &ws.members {
        for dep in member.path_deps.iter().filter(|d| d.kind != DepKind::Dev) {
            edges.entry(&member.name).or_default().insert(&dep.name);
        }
    }
    let mut violations = Vec::new();
    for member in &ws.members {
        for dep in member.path_deps.iter().filter(|d| d.kind == DepKind::Dev) {
            if let Some(path) = find_path(&edges, &dep.name, &member.name) {
                violations.push(format!(
                    "dev-dependency cycle: {} -(dev)-> {}",
                    member.name,
                    path.join(" -> ")
                ));
            }
        }
    }
    violations
}

fn find_path<'a>(
    edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    from: &'a str,
    to: &str,
) -> Option<Vec<&'a str>> {
    let mut stack = vec![vec![from]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = *path.last()?;
        if last == to {
            return Some(path);
        }
        if !seen.insert(last) {
            continue;
        }
        for next in edges.get(last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next);
            stack.push(longer);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// (2) no skipped tests

const SKIPPING_ATTRIBUTES: &[&str] = &[concat!("#[", "ignore"), concat!("#[", "should_panic")];

/// Words that make a test print that it skipped and then pass (the test ledger's `skip` says so
/// to the runners instead).
const PRINTED_SKIPS: &[&str] = &[
    concat!("println!(\"", "skipped"),
    concat!("eprintln!(\"", "skipped"),
    concat!("println!(\"", "skipping"),
    concat!("eprintln!(\"", "skipping"),
];

fn no_skipped_tests(repo: &Repo) -> Vec<String> {
    scan_lines(repo, |line| {
        let code = line.trim_start();
        if code.starts_with("//") {
            return None;
        }
        if let Some(attr) = SKIPPING_ATTRIBUTES.iter().find(|attr| code.contains(*attr)) {
            return Some(format!(
                "{attr}] skips or weakens a test; make the test real instead"
            ));
        }
        // A `cfg_attr` that adds `ignore` (or `should_panic`) skips as surely as the plain attribute.
        if code.contains(concat!("cfg_", "attr(")) {
            let words = ["ignore", "should_panic"];
            if let Some(word) = words.iter().find(|w| code.contains(*w)) {
                return Some(format!(
                    "cfg_attr(.., {word}) skips or weakens a test; make the test real instead"
                ));
            }
        }
        PRINTED_SKIPS.iter().find(|p| code.contains(*p)).map(|_| {
            "a test that prints that it skipped passes as run: record the skip with \
                 hipfile_testkit::ledger::skip so runners count it"
                .to_string()
        })
    })
}

// ---------------------------------------------------------------------------------------------
// (3) crate roots start with a //! essay, (4) forbid(unsafe_code) where promised, and no
// `unsafe` outside the boundary crates

fn crate_roots_have_docs(repo: &Repo) -> Vec<String> {
    let mut violations = Vec::new();
    for member in &repo.workspace.members {
        for target in member.targets.iter().filter(|t| t.is_crate_root()) {
            let rel = repo.rel(&target.src_path);
            match std::fs::read_to_string(&target.src_path) {
                Ok(text) if text.trim_start().starts_with("//!") => {}
                Ok(_) => violations.push(format!(
                    "{}: crate root of {} does not start with a `//!` doc comment",
                    rel.display(),
                    member.name
                )),
                Err(e) => violations.push(format!("{}: {e}", rel.display())),
            }
        }
    }
    violations
}

/// Crates that promise `#![forbid(unsafe_code)]` at every crate root by name. Every backend
/// crate promises it as well, wherever it lives (a third party's example under `examples/`
/// included): see [`is_backend_crate`].
const FORBID_UNSAFE_CRATES: &[&str] = &[
    "hipfile-core",
    "hipfile-fallback",
    "hipfile-fastpath",
    "hipfile-testkit",
    "hipfile-cli",
    "hipfile-remote",
];

fn forbid_unsafe_code(repo: &Repo) -> Vec<String> {
    let mut violations = Vec::new();
    for member in &repo.workspace.members {
        let why = if FORBID_UNSAFE_CRATES.contains(&member.name.as_str()) {
            "it is one of the crates without unsafe code"
        } else if is_backend_crate(repo, member) {
            "it is a backend crate"
        } else {
            continue;
        };
        for target in member.targets.iter().filter(|t| t.is_crate_root()) {
            let text = std::fs::read_to_string(&target.src_path).unwrap_or_default();
            let forbids = code_only(&text).lines().any(|line| {
                let line: String = line.split_whitespace().collect();
                line.starts_with("#![forbid(") && line.contains("unsafe_code")
            });
            if !forbids {
                violations.push(format!(
                    "{}: crate root of {} lacks #![forbid(unsafe_code)] ({why})",
                    repo.rel(&target.src_path).display(),
                    member.name
                ));
            }
        }
    }
    violations
}

/// Whether `member`'s own sources (under its `src/`; tests, benches and examples do not count)
/// define a backend: `impl Backend for ..` (by any path to the trait) or a `BackendDescriptor`
/// submitted with `inventory::submit!`.
fn is_backend_crate(repo: &Repo, member: &Member) -> bool {
    let src = repo.rel(&member.manifest_dir).join("src");
    let code: Vec<String> = repo
        .sources
        .iter()
        .filter(|(path, _)| path.starts_with(&src))
        .map(|(_, text)| code_only(text))
        .collect();
    let implements = code.iter().any(|c| implements_backend(c));
    let submits = code.iter().any(|c| c.contains(concat!("submit", "!")))
        && code.iter().any(|c| c.contains("BackendDescriptor"));
    implements || submits
}

/// Whether `code` holds `impl Backend for` or `impl some::path::Backend for`.
fn implements_backend(code: &str) -> bool {
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
        .collect();
    words.windows(3).any(|w| {
        w[0] == "impl" && (w[1] == "Backend" || w[1].ends_with("::Backend")) && w[2] == "for"
    })
}

/// Where `unsafe` may be written: the GPU runtime boundary, the facade's C ABI, the simulated
/// runtime libraries, and the facade's integration tests, which call the C ABI and the
/// raw-pointer constructors of device memory as C callers and frameworks do.
const UNSAFE_ALLOWED: &[&str] = &[
    "hipfile-hip",
    "hipfile/src/capi",
    // cuFile's C ABI (libcufile.so.0): a second front door of the same kind as the facade's.
    "hipfile-cufile/src",
    "hipfile-cufile/tests",
    "hipfile-testkit/simhip",
    "hipfile-testkit/simcuda",
    "hipfile/tests",
    // The Python binding's one FFI boundary: addresses from `__cuda_array_interface__`, DLPack
    // and stream handles become the facade's views there, and DLPack's C structs are read and
    // written there. A language binding is an FFI boundary like the C ABI.
    "hipfile-py/src/foreign.rs",
];

fn unsafe_only_at_the_boundary(repo: &Repo) -> Vec<String> {
    let mut violations = Vec::new();
    for (path, text) in &repo.sources {
        if UNSAFE_ALLOWED.iter().any(|dir| path.starts_with(dir)) {
            continue;
        }
        for (index, line) in code_only(text).lines().enumerate() {
            if contains_word(line, "unsafe") {
                violations.push(format!(
                    "{}:{}: `unsafe` outside {}; go through a safe API of hipfile-hip instead",
                    path.display(),
                    index + 1,
                    UNSAFE_ALLOWED.join(", ")
                ));
            }
        }
    }
    violations
}

/// Whether `word` occurs in `line` as a whole word (not inside `unsafe_code` or `is_unsafe`).
fn contains_word(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

// ---------------------------------------------------------------------------------------------
// (5) no unfinished code, (6) no vague names

const UNFINISHED_MARKERS: &[&str] = &[
    concat!("to", "do!("),
    concat!("unimple", "mented!("),
    concat!("TO", "DO"),
    concat!("FIX", "ME"),
    concat!("db", "g!("),
];

fn no_unfinished_code(repo: &Repo) -> Vec<String> {
    scan_lines(repo, |line| {
        UNFINISHED_MARKERS
            .iter()
            .find(|marker| line.contains(*marker))
            .map(|marker| format!("`{marker}` left in the code"))
    })
}

/// Words that name no responsibility. Types are split at CamelCase humps and modules at `_`, so
/// `GpuUtilization` passes while `BufferManager` and `mod util` do not.
const VAGUE_WORDS: &[&str] = &[
    "manager",
    "managers",
    "helper",
    "helpers",
    "util",
    "utils",
    "utility",
    "utilities",
];

fn no_vague_names(repo: &Repo) -> Vec<String> {
    scan_lines(repo, |line| {
        let (keyword, name) = declared_item(line)?;
        let words: Vec<String> = if keyword == "mod" {
            name.split('_').map(str::to_ascii_lowercase).collect()
        } else {
            camel_words(name)
        };
        let vague = words.iter().find(|w| VAGUE_WORDS.contains(&w.as_str()))?;
        Some(format!(
            "{keyword} `{name}`: `{vague}` names no responsibility; say what it does"
        ))
    })
}

/// The keyword and name of a `struct`/`enum`/`trait`/`mod`/`union`/`type` declaration on `line`.
fn declared_item(line: &str) -> Option<(&'static str, &str)> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.trim_start().strip_prefix('(') {
            Some(scoped) => scoped.split_once(')')?.1,
            None if after.starts_with(char::is_whitespace) => after,
            None => return None,
        }
        .trim_start();
    }
    for qualifier in ["unsafe ", "auto "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest).trim_start();
    }
    for keyword in ["struct", "enum", "trait", "mod", "union", "type"] {
        if let Some(after) = rest.strip_prefix(keyword) {
            if !after.starts_with(char::is_whitespace) {
                continue;
            }
            let after = after.trim_start();
            let end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            return (end > 0).then(|| (keyword, &after[..end]));
        }
    }
    None
}

fn camel_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    for c in name.chars() {
        if (c.is_uppercase() || c == '_') && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        if c != '_' {
            current.push(c.to_ascii_lowercase());
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

// ---------------------------------------------------------------------------------------------
// (7) no panic crosses the C ABI

/// The C ABIs: the facade's (`libhipfile.so`) and cuFile's (`libcufile.so.0`), whose entry
/// points call the facade's guards.
const CAPI_DIRS: &[&str] = &["hipfile/src/capi", "hipfile-cufile/src"];

/// The one file of the C ABI that may catch panics: it holds the panic guards.
const CAPI_GUARDS: &str = "hipfile/src/capi/conventions.rs";

/// Every `extern "C"` function of the C ABI is one call of a panic guard and nothing else, so no
/// code of an entry point runs outside it. The guards are the functions of [`CAPI_GUARDS`] that
/// call `catch_unwind`, or are themselves one call of such a guard (`guarded_pair` of `guarded`).
/// No other function of the C ABI calls `catch_unwind`: a hand-written guard elsewhere would
/// escape this review.
fn c_abi_catches_panics(repo: &Repo) -> Vec<String> {
    let extern_fn = concat!("extern \"C\"", " fn");
    let catch = concat!("catch_", "unwind");
    let capi: Vec<(&PathBuf, Vec<FnBody<'_>>)> = repo
        .sources
        .iter()
        .filter(|(path, _)| CAPI_DIRS.iter().any(|dir| path.starts_with(dir)))
        .map(|(path, text)| (path, function_bodies(text)))
        .collect();
    let guard_file: Vec<&FnBody<'_>> = capi
        .iter()
        .filter(|(path, _)| path.as_path() == Path::new(CAPI_GUARDS))
        .flat_map(|(_, fns)| fns)
        .filter(|body| !body.is_extern_c)
        .collect();
    let mut guards: BTreeSet<&str> = BTreeSet::new();
    loop {
        let before = guards.len();
        for body in &guard_file {
            let wraps_a_guard = sole_call(body.text)
                .is_some_and(|callee| callee != body.name && guards.contains(callee));
            if body.text.contains(catch) || wraps_a_guard {
                guards.insert(body.name);
            }
        }
        if guards.len() == before {
            break;
        }
    }
    let known = if guards.is_empty() {
        format!("none found in {CAPI_GUARDS}")
    } else {
        guards.iter().copied().collect::<Vec<_>>().join(", ")
    };
    let mut violations = Vec::new();
    for (path, fns) in &capi {
        for body in fns {
            if path.as_path() != Path::new(CAPI_GUARDS) && body.text.contains(catch) {
                violations.push(format!(
                    "{}: `fn {}` calls {catch} itself; only the panic guards of {CAPI_GUARDS} \
                     catch panics",
                    path.display(),
                    body.name
                ));
            }
            if body.is_extern_c && !sole_call(body.text).is_some_and(|c| guards.contains(c)) {
                violations.push(format!(
                    "{}: `{extern_fn} {}` is not one call of a panic guard ({known}) and nothing \
                     else; no panic may cross the C ABI",
                    path.display(),
                    body.name
                ));
            }
        }
    }
    violations
}

/// The name a function body (braces included) calls when the body is exactly one call
/// `name(..)` or `path::name(..)`, with an optional `;`, and nothing else but comments.
fn sole_call(body: &str) -> Option<&str> {
    let inner = body.trim().strip_prefix('{')?.strip_suffix('}')?;
    let code = skip_space_and_comments(inner);
    let path_len = code
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(code.len());
    let name = code[..path_len].rsplit("::").next()?;
    if name.is_empty() {
        return None;
    }
    let args = code[path_len..].strip_prefix('(')?;
    let close = closing_paren(args)?;
    let after = skip_space_and_comments(&args[close + 1..]);
    let after = skip_space_and_comments(after.strip_prefix(';').unwrap_or(after));
    after.is_empty().then_some(name)
}

/// `s` without leading whitespace and comments.
fn skip_space_and_comments(mut s: &str) -> &str {
    loop {
        s = s.trim_start();
        if s.starts_with("//") {
            s = s.find('\n').map_or("", |i| &s[i + 1..]);
        } else if s.starts_with("/*") {
            s = s.find("*/").map_or("", |i| &s[i + 2..]);
        } else {
            return s;
        }
    }
}

/// The index of the `)` that closes a `(` just before `s`, skipping string literals and line
/// comments.
fn closing_paren(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// One function of a source file: its name, whether it is `extern "C"`, and its body.
struct FnBody<'a> {
    name: &'a str,
    is_extern_c: bool,
    text: &'a str,
}

/// Every `fn NAME ... { body }` of a file, bodies found by brace matching (string and char
/// literals with braces are not expected in the C ABI files; comments are skipped).
fn function_bodies(text: &str) -> Vec<FnBody<'_>> {
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("fn ") {
        let at = search + found;
        search = at + 3;
        let prefix_ok = at == 0
            || text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_whitespace());
        if !prefix_ok {
            continue;
        }
        let rest = &text[at + 3..];
        let name_len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if name_len == 0 {
            continue;
        }
        let name = &rest[..name_len];
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        if text[line_start..at].trim_start().starts_with("//") {
            continue;
        }
        let is_extern_c = text[line_start..at].contains(concat!("extern \"", "C\""));
        // The body opens at the first `{` after the signature (or the item ends at `;`).
        let Some(open_rel) = rest.find(['{', ';']) else {
            break;
        };
        if rest.as_bytes()[open_rel] == b';' {
            continue;
        }
        let open = at + 3 + open_rel;
        let end = block_end(text, open);
        out.push(FnBody {
            name,
            is_extern_c,
            text: &text[open..end],
        });
        search = open + 1;
    }
    out
}

// ---------------------------------------------------------------------------------------------

/// Applies `rule` to every line of every source file: `path:line: message` per hit.
fn scan_lines(repo: &Repo, rule: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut violations = Vec::new();
    for (path, text) in &repo.sources {
        for (index, line) in text.lines().enumerate() {
            if let Some(message) = rule(line) {
                violations.push(format!("{}:{}: {message}", path.display(), index + 1));
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::{PathDep, Target};

    fn member(name: &str, deps: &[(&str, DepKind)]) -> Member {
        Member {
            name: name.to_string(),
            manifest_dir: PathBuf::from("/nonexistent").join(name),
            targets: Vec::new(),
            path_deps: deps
                .iter()
                .map(|(dep, kind)| PathDep {
                    name: dep.to_string(),
                    kind: *kind,
                })
                .collect(),
        }
    }

    fn repo(members: Vec<Member>, sources: &[(&str, &str)]) -> Repo {
        Repo {
            root: PathBuf::from("/nonexistent"),
            workspace: Workspace {
                target_dir: PathBuf::from("/nonexistent/target"),
                members,
            },
            sources: sources
                .iter()
                .map(|(p, t)| (PathBuf::from(p), t.to_string()))
                .collect(),
        }
    }

    #[test]
    fn seams_accept_the_designed_direction() {
        use DepKind::*;
        let ok = repo(
            vec![
                member("hipfile-hip", &[]),
                member("hipfile-core", &[("hipfile-hip", Normal)]),
                member(
                    "hipfile-fallback",
                    &[
                        ("hipfile-core", Normal),
                        ("hipfile-hip", Normal),
                        ("hipfile-testkit", Dev),
                    ],
                ),
                member(
                    "hipfile-testkit",
                    &[("hipfile-core", Normal), ("hipfile-hip", Normal)],
                ),
                member(
                    "hipfile",
                    &[("hipfile-fallback", Normal), ("hipfile-core", Normal)],
                ),
                member("hipfile-cli", &[("hipfile", Normal)]),
            ],
            &[],
        );
        assert_eq!(crate_seams(&ok), Vec::<String>::new());
    }

    #[test]
    fn seams_reject_upward_and_backend_dependencies_and_dev_cycles() {
        use DepKind::*;
        let bad = repo(
            vec![
                member("hipfile-hip", &[("hipfile-core", Build)]),
                member(
                    "hipfile-core",
                    &[("hipfile-fallback", Normal), ("hipfile-hip", Dev)],
                ),
                member("hipfile-fallback", &[("hipfile-core", Normal)]),
                member("hipfile-testkit", &[("hipfile", Normal)]),
                member("hipfile-newthing", &[("hipfile-fastpath", Normal)]),
            ],
            &[],
        );
        let found = crate_seams(&bad);
        assert_eq!(found.len(), 5, "{found:#?}");
        assert!(found
            .iter()
            .any(|v| v.starts_with("hipfile-newthing names backend")));
        assert!(found
            .iter()
            .any(|v| v.starts_with("dev-dependency cycle: hipfile-core")));
    }

    #[test]
    fn source_rules_flag_what_they_promise() {
        let skipped = format!(
            "#[{}]\nfn t() {{}}\n// #[{}] in a comment",
            "ignore", "ignore"
        );
        let unfinished = format!(
            "fn f() {{ {}!() }}\n// {}: later",
            "todo",
            "FIX".to_owned() + "ME"
        );
        // Each item sits inside a string literal, never at the start of a source line, so tidy does
        // not flag this file itself.
        let vague = [
            "pub(crate) struct BufferManager;",
            "mod util;",
            "struct GpuUtilization;",
            "pub enum Helpers {}",
            "type Plain = u8;",
        ]
        .join("\n");
        let capi_guards = concat!(
            "fn guarded<T>(on_panic: T, f: impl FnOnce() -> T) -> T {\n",
            "    std::panic::catch_",
            "unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(on_panic)\n}\n",
            "fn guarded_pair(f: impl FnOnce() -> i32) -> i32 { guarded(5030, f) }\n",
            "fn risky_in_guards() -> i32 { let n = 1; guarded(n, || n) }\n",
            "pub extern \"C\"",
            " fn text() -> i32 { guarded(-1, || 0) }\n",
        );
        let capi_bad = concat!("pub extern \"C\"", " fn hipFileDriverOpen() -> i32 { 0 }");
        // cuFile's entry points are held to the facade's guards too.
        let cufile_bad = concat!("pub extern \"C\"", " fn cuFileDriverOpen() -> i32 { 0 }");
        let cufile_good = concat!(
            "pub extern \"C\"",
            " fn cuFileRead() -> i32 { hipfile::capi::guarded_pair(|| 0) }\n",
        );
        // Comments, a `;`, a path and parentheses inside strings and comments do not hide the
        // single guard call.
        let capi_good = concat!(
            "fn io(x: i32) -> i32 { x }\n",
            "pub extern \"C\"",
            " fn g(x: i32) -> i32 {\n    // SAFETY: (none needed\n",
            "    conventions::guarded_pair(|| { let s = \")\"; io(x) })\n}\n",
            "pub unsafe extern \"C\"",
            " fn v() { guarded_pair(|| 0); }\n",
        );
        // Hand-written guards, guards reached through another function, and code before or after
        // the guard call: each entry point is flagged.
        let capi_half = concat!(
            "fn own_guard(f: impl FnOnce() -> i32) -> i32 { std::panic::catch_",
            "unwind(f).unwrap_or(1) }\n",
            "pub extern \"C\"",
            " fn a() -> i32 { std::panic::catch_",
            "unwind(|| 0).unwrap_or(1) }\n",
            "pub extern \"C\"",
            " fn b() -> i32 { own_guard(|| 0) }\n",
            "pub extern \"C\"",
            " fn c() -> i32 { let n = risky(); guarded_pair(|| n) }\n",
            "pub extern \"C\"",
            " fn d() -> i32 { guarded_pair(|| 0); risky() }\n",
            "fn wrapper() -> i32 { guarded_pair(|| 0) }\n",
            "pub extern \"C\"",
            " fn e() -> i32 { wrapper() }\n",
            "pub extern \"C\"",
            " fn f() -> i32 { risky_in_guards() }\n",
        );
        let skips = [
            concat!("#[cfg_", "attr(not(gpu), ignore)]"),
            concat!("    println!(\"", "skipped: no device\");"),
        ]
        .join("\n");
        let r = repo(
            Vec::new(),
            &[
                ("a/skipped.rs", &skipped),
                ("a/unfinished.rs", &unfinished),
                ("a/vague.rs", &vague),
                ("hipfile/src/capi/conventions.rs", capi_guards),
                ("hipfile/src/capi/driver.rs", capi_bad),
                ("hipfile/src/capi/ok.rs", capi_good),
                ("hipfile/src/capi/half.rs", capi_half),
                ("hipfile-cufile/src/driver.rs", cufile_bad),
                ("hipfile-cufile/src/io.rs", cufile_good),
                ("b/skips.rs", &skips),
            ],
        );
        assert_eq!(no_skipped_tests(&r).len(), 3, "{:#?}", no_skipped_tests(&r));
        assert_eq!(no_unfinished_code(&r).len(), 2);
        let names = no_vague_names(&r);
        assert_eq!(names.len(), 3, "{names:#?}");
        let capi = c_abi_catches_panics(&r);
        let flagged: Vec<(&str, &str)> = capi
            .iter()
            .filter_map(|v| {
                let (path, rest) = v.split_once(": ")?;
                let name = rest.split('`').nth(1)?.rsplit(' ').next()?;
                Some((path.rsplit('/').next()?, name))
            })
            .collect();
        assert_eq!(
            flagged,
            [
                ("driver.rs", "hipFileDriverOpen"),
                ("half.rs", "own_guard"),
                ("half.rs", "a"),
                ("half.rs", "a"),
                ("half.rs", "b"),
                ("half.rs", "c"),
                ("half.rs", "d"),
                ("half.rs", "e"),
                ("half.rs", "f"),
                ("driver.rs", "cuFileDriverOpen"),
            ],
            "{capi:#?}"
        );
        assert!(capi[0].contains("guarded, guarded_pair)"), "{capi:#?}");
    }

    #[test]
    fn crate_root_rules_read_the_root_files() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let good = dir.join("good.rs");
        let bad = dir.join("bad.rs");
        std::fs::write(&good, "//! Docs.\n#![forbid(unsafe_code)]\n").expect("write");
        std::fs::write(&bad, "#![deny(missing_docs)]\n").expect("write");
        let with_root = |name: &str, path: &Path| Member {
            targets: vec![Target {
                kinds: vec!["lib".into()],
                src_path: path.to_path_buf(),
            }],
            ..member(name, &[])
        };
        let r = repo(
            vec![
                with_root("hipfile-core", &good),
                with_root("hipfile-cli", &bad),
            ],
            &[],
        );
        let docs = crate_roots_have_docs(&r);
        let forbid = forbid_unsafe_code(&r);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(docs.len(), 1);
        assert_eq!(forbid.len(), 1);
        assert!(forbid[0].contains("hipfile-cli"));
    }

    #[test]
    fn code_only_blanks_comments_and_literals() {
        let text = [
            "// unsafe in a line comment",
            "/* unsafe /* nested unsafe */ still unsafe */ let a = 1;",
            r#"let s = "unsafe \" unsafe"; let c = '"'; let q = '\''; let b = b'u';"#,
            r##"let r = r#"unsafe " unsafe"#; fn f<'a>(x: &'a u8) {}"##,
            "#![forbid(unsafe_code)] let is_unsafe = 1;",
            "    unsafe { g() }",
        ]
        .join("\n");
        let code = code_only(&text);
        assert_eq!(code.lines().count(), 6, "newlines are kept:\n{code}");
        let flagged: Vec<usize> = code
            .lines()
            .enumerate()
            .filter(|(_, line)| contains_word(line, "unsafe"))
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(flagged, [6], "{code}");
        assert!(
            code.contains("fn f<'a>(x: &'a u8)"),
            "lifetimes are code: {code}"
        );
        assert!(code.contains("let b = b"), "{code}");
    }

    #[test]
    fn unsafe_is_flagged_outside_the_boundary_crates_only() {
        let block = "fn f() {\n    unsafe { g() }\n}\n";
        let quiet = "//! No unsafe here.\n#![forbid(unsafe_code)]\nconst S: &str = \"unsafe\";\n";
        let r = repo(
            Vec::new(),
            &[
                ("hipfile-core/src/lib.rs", block),
                ("hipfile/src/lib.rs", "unsafe impl Send for X {}\n"),
                ("hipfile-testkit/tests/it/faults.rs", block),
                ("examples/thirdparty/src/lib.rs", quiet),
                ("hipfile-hip/src/runtime.rs", block),
                ("hipfile-hip/tests/it/raw.rs", block),
                ("hipfile/src/capi/driver.rs", block),
                ("hipfile/tests/capi_model.rs", block),
                ("hipfile-testkit/simhip/src/lib.rs", block),
                ("hipfile-testkit/simcuda/src/lib.rs", block),
                ("hipfile-hipster/src/lib.rs", block),
            ],
        );
        let found: Vec<String> = unsafe_only_at_the_boundary(&r)
            .iter()
            .map(|v| v.split(": ").next().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "hipfile-core/src/lib.rs:2",
                "hipfile/src/lib.rs:1",
                "hipfile-testkit/tests/it/faults.rs:2",
                "hipfile-hipster/src/lib.rs:2",
            ]
        );
    }

    #[test]
    fn backend_crates_forbid_unsafe_code_wherever_they_live() {
        let root = std::env::temp_dir().join(format!("xtask-tidy-backends-{}", std::process::id()));
        let crates: &[(&str, &str)] = &[
            // A third party's backend under examples/, by a path to the trait, without the attribute.
            (
                "examples/thirdparty",
                "//! A backend.\nstruct Mine;\nimpl hipfile_core::Backend for Mine {}\n",
            ),
            // One that only submits its descriptor, without the attribute.
            (
                "examples/submitter",
                "//! A backend.\nconst D: BackendDescriptor = make();\n\
                 hipfile_core::inventory::submit! { D }\n",
            ),
            // One that has it.
            (
                "examples/careful",
                "//! A backend.\n#![forbid( unsafe_code )]\nimpl Backend for Mine {}\n",
            ),
            // Not a backend: it only mentions one in its docs.
            (
                "examples/plain",
                "//! `impl Backend for X` and `inventory::submit!` a BackendDescriptor.\n",
            ),
            // Listed by name, without the attribute.
            ("hipfile-fastpath", "//! The direct backend.\n"),
        ];
        let mut members = Vec::new();
        let mut sources = Vec::new();
        for (dir, text) in crates {
            let lib = root.join(dir).join("src/lib.rs");
            std::fs::create_dir_all(lib.parent().expect("src")).expect("temp dir");
            std::fs::write(&lib, text).expect("write");
            members.push(Member {
                name: dir.rsplit('/').next().unwrap_or(dir).to_string(),
                manifest_dir: root.join(dir),
                targets: vec![Target {
                    kinds: vec!["lib".into()],
                    src_path: lib,
                }],
                path_deps: Vec::new(),
            });
            sources.push((PathBuf::from(dir).join("src/lib.rs"), text.to_string()));
        }
        let r = Repo {
            root: root.clone(),
            workspace: Workspace {
                target_dir: root.join("target"),
                members,
            },
            sources,
        };
        let found = forbid_unsafe_code(&r);
        let _ = std::fs::remove_dir_all(&root);
        let flagged: Vec<&str> = found.iter().filter_map(|v| v.split(": ").next()).collect();
        assert_eq!(
            flagged,
            [
                "examples/thirdparty/src/lib.rs",
                "examples/submitter/src/lib.rs",
                "hipfile-fastpath/src/lib.rs",
            ],
            "{found:#?}"
        );
        assert!(found[0].contains("it is a backend crate"), "{found:#?}");
    }
}
