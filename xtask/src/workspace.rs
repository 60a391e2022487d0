//! What xtask knows about the workspace: its root, the `cargo` to call, and the members with their
//! targets and path dependencies, read from `cargo metadata --no-deps` (no resolution, no network).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::json::{self, Value};

/// The workspace root: xtask lives one level below it.
pub fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A `cargo` command in the workspace root, using the cargo that launched xtask when there is one.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(program);
    command.current_dir(root());
    command
}

/// Runs `cargo args` in the workspace root, shown first (`$ cargo ...`), to its end.
pub fn run_cargo(args: &[&str]) -> Result<(), String> {
    let shown = format!("cargo {}", args.join(" "));
    println!("$ {shown}");
    run_to_end(cargo().args(args), "cargo", &shown)
}

/// Runs `command` to its end. The error says that `program` could not be started, or that
/// `shown` (the command line as the user reads it) failed, with its exit status.
pub fn run_to_end(command: &mut Command, program: &str, shown: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// The `*.c` files of a folder, sorted; a missing folder has none.
pub fn c_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    files.sort();
    Ok(files)
}

/// The error of `cargo args` that ended with `status`.
pub fn cargo_failed(args: &[&str], status: std::process::ExitStatus) -> String {
    format!("cargo {} failed ({status})", args.join(" "))
}

/// How a dependency is used. Dev-dependencies may point anywhere except into a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepKind {
    Normal,
    Build,
    Dev,
}

/// A dependency of a member on another crate given by path.
#[derive(Debug, Clone)]
pub struct PathDep {
    pub name: String,
    pub kind: DepKind,
}

/// A compilation target: its kinds (`lib`, `bin`, `cdylib`, `test`, ...) and its root file.
#[derive(Debug, Clone)]
pub struct Target {
    pub kinds: Vec<String>,
    pub src_path: PathBuf,
}

impl Target {
    /// True for the targets that are crate roots of the package itself: libraries and binaries,
    /// not tests, examples, benches or build scripts.
    pub fn is_crate_root(&self) -> bool {
        self.kinds.iter().any(|k| {
            matches!(
                k.as_str(),
                "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" | "bin"
            )
        })
    }
}

/// A workspace member.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    /// The directory of its `Cargo.toml`.
    pub manifest_dir: PathBuf,
    pub targets: Vec<Target>,
    pub path_deps: Vec<PathDep>,
}

/// The workspace as `cargo metadata --no-deps` describes it.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub target_dir: PathBuf,
    pub members: Vec<Member>,
}

impl Workspace {
    /// Runs `cargo metadata --format-version 1 --no-deps` and reads its answer.
    pub fn load() -> Result<Workspace, String> {
        let output = cargo()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "cargo metadata failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let text = String::from_utf8(output.stdout)
            .map_err(|_| "cargo metadata printed non-UTF-8 output".to_string())?;
        Workspace::from_metadata(&json::parse(&text)?)
    }

    fn from_metadata(doc: &Value) -> Result<Workspace, String> {
        let target_dir = required(doc, "target_directory", "no target_directory")?;
        let members = doc
            .get("packages")
            .ok_or("cargo metadata: no packages")?
            .items()
            .iter()
            .map(member_from_metadata)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Workspace {
            target_dir: PathBuf::from(target_dir),
            members,
        })
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }
}

/// The string at `key`, or the error that says it is `missing`.
fn required<'a>(value: &'a Value, key: &str, missing: &str) -> Result<&'a str, String> {
    value
        .str_at(key)
        .ok_or_else(|| format!("cargo metadata: {missing}"))
}

fn member_from_metadata(package: &Value) -> Result<Member, String> {
    let name = required(package, "name", "package without name")?;
    let manifest_path = required(package, "manifest_path", "package without manifest_path")?;
    let manifest_dir = Path::new(manifest_path)
        .parent()
        .unwrap_or(Path::new(manifest_path))
        .to_path_buf();
    let targets = package
        .items_at("targets")
        .iter()
        .filter_map(|t| {
            Some(Target {
                kinds: t
                    .get("kind")?
                    .items()
                    .iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect(),
                src_path: PathBuf::from(t.str_at("src_path")?),
            })
        })
        .collect();
    let path_deps = package
        .items_at("dependencies")
        .iter()
        .filter(|d| d.str_at("path").is_some())
        .filter_map(|d| {
            let kind = match d.str_at("kind") {
                Some("dev") => DepKind::Dev,
                Some("build") => DepKind::Build,
                _ => DepKind::Normal,
            };
            Some(PathDep {
                name: d.str_at("name")?.to_string(),
                kind,
            })
        })
        .collect();
    Ok(Member {
        name: name.to_string(),
        manifest_dir,
        targets,
        path_deps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_members_targets_and_path_dependencies() {
        let doc = json::parse(
            r#"{"target_directory": "/w/target", "packages": [{
                "name": "hipfile-core",
                "manifest_path": "/w/hipfile-core/Cargo.toml",
                "targets": [{"kind": ["lib"], "src_path": "/w/hipfile-core/src/lib.rs"},
                            {"kind": ["test"], "src_path": "/w/hipfile-core/tests/it/main.rs"}],
                "dependencies": [
                    {"name": "hipfile-hip", "kind": null, "path": "/w/hipfile-hip"},
                    {"name": "hipfile-testkit", "kind": "dev", "path": "/w/hipfile-testkit"},
                    {"name": "libc", "kind": null}
                ]}]}"#,
        )
        .expect("valid JSON");
        let ws = Workspace::from_metadata(&doc).expect("valid metadata");
        let core = ws.member("hipfile-core").expect("member");
        assert_eq!(core.manifest_dir, Path::new("/w/hipfile-core"));
        assert_eq!(core.targets.iter().filter(|t| t.is_crate_root()).count(), 1);
        assert_eq!(core.path_deps.len(), 2);
        assert_eq!(core.path_deps[1].kind, DepKind::Dev);
    }
}
