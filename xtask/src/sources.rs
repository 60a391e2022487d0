//! What the house rules read: the workspace members and every Rust source file outside
//! `target/`, and the code of a file with its comments and literals blanked.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace::{self, Workspace};

/// What the checks look at: the workspace members and every Rust source file outside `target/`.
pub struct Repo {
    pub root: PathBuf,
    pub workspace: Workspace,
    /// `(path relative to root, contents)` of every `.rs` file git tracks or would track.
    pub sources: Vec<(PathBuf, String)>,
}

impl Repo {
    pub fn load() -> Result<Repo, String> {
        let root = workspace::root();
        let workspace = Workspace::load()?;
        let sources = rust_sources(&root)?
            .into_iter()
            .filter_map(|rel| {
                // A file listed by git but deleted in the working tree is simply not checked.
                let text = std::fs::read_to_string(root.join(&rel)).ok()?;
                Some((rel, text))
            })
            .collect();
        Ok(Repo {
            root,
            workspace,
            sources,
        })
    }

    pub fn rel<'p>(&self, path: &'p Path) -> &'p Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }
}

fn rust_sources(root: &Path) -> Result<Vec<PathBuf>, String> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            "*.rs",
        ])
        .current_dir(root)
        .output();
    let mut files: Vec<PathBuf> = match listed {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect(),
        // Not a git checkout (a source tarball): walk the tree instead.
        _ => {
            let mut found = Vec::new();
            walk_rust_files(root, root, &mut found)?;
            found
        }
    };
    files.retain(|p| !p.starts_with("target") && p.extension().is_some_and(|e| e == "rs"));
    files.sort();
    files.dedup();
    Ok(files)
}

fn walk_rust_files(root: &Path, dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || (dir == root && name == "target") {
            continue;
        }
        if path.is_dir() {
            walk_rust_files(root, &path, found)?;
        } else if name.ends_with(".rs") {
            found.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// `text` with its comments and the contents of its string and character literals blanked
/// (newlines kept, so line numbers still hold): what is left is code.
pub fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let at = |i: usize| chars.get(i).copied();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(c) = at(i) {
        let next = at(i + 1);
        if c == '/' && next == Some('/') {
            while at(i).is_some_and(|c| c != '\n') {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // Block comments nest.
            let mut depth = 0usize;
            while let Some(c) = at(i) {
                if c == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"..", r#".."#, br"..", cr"..": no escapes, closed by a quote and as many hashes.
            let body = i + 1 + hashes + 1;
            out.extend(std::iter::repeat(' ').take(body - i));
            i = body;
            let closes =
                |j: usize| at(j) == Some('"') && (1..=hashes).all(|k| at(j + k) == Some('#'));
            while at(i).is_some() && !closes(i) {
                out.push(blank(chars[i]));
                i += 1;
            }
            let end = (i + 1 + hashes).min(chars.len());
            out.extend(std::iter::repeat(' ').take(end - i));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while let Some(c) = at(i) {
                i += 1;
                if c == '"' {
                    break;
                }
                out.push(blank(c));
                if c == '\\' {
                    if let Some(escaped) = at(i) {
                        out.push(blank(escaped));
                        i += 1;
                    }
                }
            }
            out.push(' ');
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal ('\n', '\'', '\u{..}'): the quote, the backslash and
            // the escaped character, then up to the closing quote.
            let end = (i + 3).min(chars.len());
            out.extend(std::iter::repeat(' ').take(end - i));
            i = end;
            while let Some(c) = at(i) {
                out.push(' ');
                i += 1;
                if c == '\'' {
                    break;
                }
            }
        } else if c == '\'' && at(i + 2) == Some('\'') {
            out.push_str("   ");
            i += 3;
        } else {
            // Code, lifetimes and labels included.
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The number of `#`s of a raw string literal that starts at `i` (at its `r`, after an optional
/// `b` or `c` prefix), or `None` when none starts there (`r#ident` is a raw identifier).
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    let ident = |c: &char| c.is_alphanumeric() || *c == '_';
    if chars.get(i) != Some(&'r') {
        return None;
    }
    let starts_token = match i.checked_sub(1).map(|p| chars[p]) {
        None => true,
        Some('b' | 'c') => i.checked_sub(2).map_or(true, |p| !ident(&chars[p])),
        Some(prev) => !ident(&prev),
    };
    if !starts_token {
        return None;
    }
    let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some(hashes)
}

/// The index just past the `}` that closes the `{` at `open` in `code` (comments and literals
/// already blanked), or the end of `code` when it is never closed.
pub fn block_end(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}
