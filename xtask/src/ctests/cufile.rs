//! The cuFile C ABI (`libcufile.so.0` from `hipfile-cufile`), tested the way C programs use it:
//! every `*.c` in [`PROGRAM_DIR`] is compiled against `hipfile-cufile/include/cufile.h` (no CUDA
//! headers) and `tests/c/support/` (the few CUDA runtime calls the programs make, declared there),
//! linked with `libcufile.so` and `libsimcuda.so`, and run on the NVIDIA platform over the
//! simulated CUDA library ([`platform_env`]), under each of [`VARIANTS`]. Programs and `*_cases`
//! programs follow the same conventions as the hipFile ones (see the parent module).
//!
//! Before the programs run, [`check_exports`] reads the built library's dynamic section and
//! symbol table (`readelf`, from binutils beside the C compiler) and compares them with
//! [`SYMBOLS_FILE`]: exactly the listed functions defined (no hipFile entry point, no Rust
//! symbol), none of them versioned, and the SONAME `libcufile.so.0`, as NVIDIA's library has;
//! and [`check_status_texts`] holds the header's `static inline cufileop_status_error` to the
//! crate's table of texts ([`STATUS_TEXTS_FILE`]), so the two cannot drift apart.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::{Env, Runs};

/// Where the cuFile C programs live, with the tag that names their binaries.
pub(super) const PROGRAM_DIR: (&str, &str) = ("hipfile-cufile/tests/c", "cufile");

/// The header the programs include, and the test-support header folder beside the programs.
pub(super) const INCLUDE_DIRS: &[&str] = &[
    "hipfile-cufile/include",
    "hipfile-cufile/tests/c/support",
    "hipfile/tests/c",
];

/// The libraries the programs link: the cuFile ABI and the simulated CUDA runtime.
pub(super) const LIBS: &[&str] = &["-lcufile", "-lsimcuda"];

/// The functions `libcufile.so.0` must export, one per line (`#` starts a comment line).
pub(super) const SYMBOLS_FILE: &str = "hipfile-cufile/symbols.txt";

/// The SONAME the library must carry, as NVIDIA's does.
pub(super) const SONAME: &str = "libcufile.so.0";

/// The runs of each cuFile binary: the engine's default, and everything staged.
pub(super) const VARIANTS: &[(&str, Env, Runs)] = &[
    ("nvidia-sim", &[], Runs::All),
    (
        "nvidia-sim-force-compat",
        &[("HIPFILE_FORCE_COMPAT_MODE", "true")],
        Runs::All,
    ),
];

/// The environment that puts the library on the NVIDIA platform over `sim` (`libsimcuda.so`).
pub(super) fn platform_env(sim: &Path) -> Vec<(&'static str, String)> {
    let sim = sim.display().to_string();
    vec![
        ("HIPFILE_PLATFORM", "nvidia".to_string()),
        ("HIPFILE_CUDART_LIBRARY", sim.clone()),
        ("HIPFILE_CUDA_LIBRARY", sim),
    ]
}

/// One defined dynamic symbol: its name and the version it carries, if any.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Export {
    pub(super) name: String,
    pub(super) version: Option<String>,
}

/// The names [`SYMBOLS_FILE`]'s text lists: every line that is neither blank nor a comment.
pub(super) fn listed(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The defined symbols of `readelf -W --dyn-syms` output, `name@VERSION` / `name@@VERSION` split.
pub(super) fn defined_exports(readelf_dyn_syms: &str) -> Vec<Export> {
    let mut exports = Vec::new();
    for line in readelf_dyn_syms.lines() {
        // `Num: Value Size Type Bind Vis Ndx Name`
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || !fields[0].ends_with(':') || fields[0] == "Num:" {
            continue;
        }
        let (kind, ndx, name) = (fields[3], fields[6], fields[7]);
        if ndx == "UND" || kind == "SECTION" || kind == "FILE" || name.is_empty() {
            continue;
        }
        let (name, version) = match name.split_once('@') {
            Some((name, version)) => (name, Some(version.trim_start_matches('@').to_string())),
            None => (name, None),
        };
        exports.push(Export {
            name: name.to_string(),
            version,
        });
    }
    exports.sort();
    exports.dedup();
    exports
}

/// The SONAME in `readelf -d` output.
pub(super) fn soname(readelf_dynamic: &str) -> Option<String> {
    readelf_dynamic
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
}

/// What is wrong with the exports against the list, one line each: names missing, names that
/// should not be there, names that carry a version. Empty when all is well.
pub(super) fn export_problems(want: &BTreeSet<String>, got: &[Export]) -> Vec<String> {
    let got_names: BTreeSet<&str> = got.iter().map(|e| e.name.as_str()).collect();
    let mut problems = Vec::new();
    for name in want {
        if !got_names.contains(name.as_str()) {
            problems.push(format!("- {name} (listed, not exported)"));
        }
    }
    for name in &got_names {
        if !want.contains(*name) {
            problems.push(format!("+ {name} (exported, not listed)"));
        }
    }
    for export in got {
        if let Some(version) = &export.version {
            problems.push(format!(
                "  {}@{version} (versioned; NVIDIA's exports carry no version)",
                export.name
            ));
        }
    }
    problems
}

fn readelf(args: &[&str], library: &Path) -> Result<String, String> {
    let output = Command::new("readelf")
        .args(args)
        .arg(library)
        .output()
        .map_err(|e| format!("cannot run readelf (binutils): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "readelf {} {} failed ({}): {}",
            args.join(" "),
            library.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The three checks of the built library against `list_path`: its exports, that none carries a
/// version, its SONAME. Each is `(name, Ok | Err(why))`.
pub(super) fn check_exports(
    library: &Path,
    list_path: &Path,
) -> Vec<(&'static str, Result<(), String>)> {
    let want = match std::fs::read_to_string(list_path) {
        Ok(text) => listed(&text),
        Err(e) => {
            let why = format!("{}: {e}", list_path.display());
            return vec![("exports", Err(why))];
        }
    };
    let exports = readelf(&["-W", "--dyn-syms"], library).map(|t| defined_exports(&t));
    let dynamic = readelf(&["-W", "-d"], library);
    let mut checks = Vec::new();
    match exports {
        Err(why) => checks.push(("exports", Err(why))),
        Ok(exports) => {
            let unversioned: Vec<Export> = exports
                .iter()
                .map(|e| Export {
                    version: None,
                    ..e.clone()
                })
                .collect();
            let listing = export_problems(&want, &unversioned);
            checks.push((
                "exports",
                if listing.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} does not export exactly {}:\n      {}",
                        library.display(),
                        list_path.display(),
                        listing.join("\n      ")
                    ))
                },
            ));
            let versioned: Vec<String> = exports
                .iter()
                .filter_map(|e| Some(format!("{}@{}", e.name, e.version.as_ref()?)))
                .collect();
            checks.push((
                "unversioned",
                if versioned.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "versioned exports (NVIDIA's carry none): {}",
                        versioned.join(", ")
                    ))
                },
            ));
        }
    }
    checks.push((
        "soname",
        match dynamic.map(|d| soname(&d)) {
            Err(why) => Err(why),
            Ok(Some(name)) if name == SONAME => Ok(()),
            Ok(Some(name)) => Err(format!("SONAME is {name}, want {SONAME}")),
            Ok(None) => Err(format!("no SONAME, want {SONAME}")),
        },
    ));
    checks
}

/// The crate's table of status texts, which the header's `cufileop_status_error` must repeat.
pub(super) const STATUS_TEXTS_FILE: &str = "hipfile-cufile/src/status.rs";

/// The header that declares the cuFile ABI.
pub(super) const HEADER: &str = "hipfile-cufile/include/cufile.h";

/// The string literals of `text`, in order (no escapes in the texts compared here).
fn string_literals(text: &str) -> Vec<&str> {
    text.split('"').skip(1).step_by(2).collect()
}

/// `(enumerator, text)` of each `case NAME: return "TEXT";` of the header's
/// `cufileop_status_error`, and `("default", TEXT)` for its default.
pub(super) fn header_status_texts(header: &str) -> Vec<(String, String)> {
    header
        .lines()
        .map(str::trim)
        .filter_map(|line| {
            let (label, rest) = line.split_once(": return ")?;
            let name = label.strip_prefix("case ").unwrap_or(label);
            let text = string_literals(rest).first()?.to_string();
            (name.starts_with("CU_FILE_") || name == "default").then(|| (name.to_string(), text))
        })
        .collect()
}

/// The same pairs from the crate's `STATUS_TEXTS` (enumerator and text literals in turn) and
/// `UNKNOWN_STATUS_TEXT` (as `default`).
pub(super) fn crate_status_texts(status_rs: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    if let Some(start) = status_rs.find("pub const STATUS_TEXTS") {
        let table = &status_rs[start..];
        let table = &table[..table.find("];").unwrap_or(table.len())];
        let literals = string_literals(table);
        for pair in literals.chunks(2) {
            if let [name, text] = pair {
                pairs.push((name.to_string(), text.to_string()));
            }
        }
    }
    if let Some(line) = status_rs
        .lines()
        .find(|l| l.contains("pub const UNKNOWN_STATUS_TEXT"))
    {
        if let Some(text) = string_literals(line).first() {
            pairs.push(("default".to_string(), text.to_string()));
        }
    }
    pairs
}

/// The check that the header's texts are the crate's, entry for entry.
pub(super) fn check_status_texts(header: &Path, status_rs: &Path) -> Result<(), String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let in_header = header_status_texts(&read(header)?);
    let in_crate = crate_status_texts(&read(status_rs)?);
    if in_crate.is_empty() {
        return Err(format!(
            "{} has no STATUS_TEXTS table to compare",
            status_rs.display()
        ));
    }
    if in_header == in_crate {
        return Ok(());
    }
    let lines: Vec<String> = in_crate
        .iter()
        .filter(|e| !in_header.contains(e))
        .map(|(n, t)| format!("- {n}: {t:?} (crate, not header)"))
        .chain(
            in_header
                .iter()
                .filter(|e| !in_crate.contains(e))
                .map(|(n, t)| format!("+ {n}: {t:?} (header, not crate)")),
        )
        .collect();
    Err(format!(
        "cufileop_status_error in {} differs from {}:\n      {}",
        header.display(),
        status_rs.display(),
        if lines.is_empty() {
            "the same entries in another order".to_string()
        } else {
            lines.join("\n      ")
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DYN_SYMS: &str = "\
Symbol table '.dynsym' contains 6 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     0: 0000000000000000     0 NOTYPE  LOCAL  DEFAULT  UND 
     1: 0000000000000000     0 FUNC    GLOBAL DEFAULT  UND memcpy@GLIBC_2.14 (2)
     2: 0000000000012340    42 FUNC    GLOBAL DEFAULT   12 cuFileRead
     3: 0000000000012380    42 FUNC    GLOBAL DEFAULT   12 cuFileWrite@@CUFILE_1
     4: 00000000000123c0    42 FUNC    GLOBAL DEFAULT   12 hipFileRead
     5: 0000000000012400    42 FUNC    GLOBAL DEFAULT   12 _ZN4core3fmt5write17h0123456789abcdefE
";

    #[test]
    fn defined_exports_skip_imports_and_split_versions() {
        let exports = defined_exports(DYN_SYMS);
        let names: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "_ZN4core3fmt5write17h0123456789abcdefE",
                "cuFileRead",
                "cuFileWrite",
                "hipFileRead"
            ]
        );
        let write = exports.iter().find(|e| e.name == "cuFileWrite").unwrap();
        assert_eq!(write.version.as_deref(), Some("CUFILE_1"));
    }

    #[test]
    fn the_list_must_match_exactly_and_nothing_may_carry_a_version() {
        let want = listed("# comment\ncuFileRead\n\ncuFileWrite\ncuFileGetVersion\n");
        assert_eq!(want.len(), 3);
        let problems = export_problems(&want, &defined_exports(DYN_SYMS));
        assert_eq!(
            problems,
            [
                "- cuFileGetVersion (listed, not exported)",
                "+ _ZN4core3fmt5write17h0123456789abcdefE (exported, not listed)",
                "+ hipFileRead (exported, not listed)",
                "  cuFileWrite@CUFILE_1 (versioned; NVIDIA's exports carry no version)",
            ]
        );
        let exact = [
            Export {
                name: "cuFileRead".into(),
                version: None,
            },
            Export {
                name: "cuFileWrite".into(),
                version: None,
            },
            Export {
                name: "cuFileGetVersion".into(),
                version: None,
            },
        ];
        assert!(export_problems(&want, &exact).is_empty());
    }

    #[test]
    fn the_soname_is_read_from_the_dynamic_section() {
        let dynamic = "\
Dynamic section at offset 0x2d0e0 contains 27 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [libcufile.so.0]
";
        assert_eq!(soname(dynamic).as_deref(), Some("libcufile.so.0"));
        assert_eq!(soname("0x1 (NEEDED) Shared library: [libc.so.6]"), None);
    }

    /// The list and the header name the same functions: each listed one is declared, and each
    /// declared one is listed.
    #[test]
    fn the_list_names_the_functions_the_header_declares() {
        let root = crate::workspace::root();
        let list = std::fs::read_to_string(root.join(SYMBOLS_FILE)).expect("symbols.txt");
        let header = std::fs::read_to_string(root.join("hipfile-cufile/include/cufile.h"))
            .expect("cufile.h");
        // The identifier right before each `(`: a function declared (or a macro's parameters).
        let declared: BTreeSet<String> = header
            .split('(')
            .filter_map(|before| {
                let start = before
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                Some(&before[start..]).filter(|name| name.starts_with("cuFile"))
            })
            .map(str::to_string)
            .collect();
        assert_eq!(listed(&list), declared);
    }

    #[test]
    fn status_texts_are_read_from_the_header_and_the_crate_alike() {
        let header =
            "    switch (status) {\n        case CU_FILE_SUCCESS: return \"success\";\n        \
                      case CU_FILE_INVALID_VALUE: return \"invalid argument\";\n        \
                      default: return \"unknown cuFile error\";\n    }\n";
        let crate_rs = "pub const STATUS_TEXTS: &[(i32, &str, &str)] = &[\n    (0, \"CU_FILE_SUCCESS\", \"success\"),\n    (\n        5022,\n        \"CU_FILE_INVALID_VALUE\",\n        \"invalid argument\",\n    ),\n];\npub const UNKNOWN_STATUS_TEXT: &str = \"unknown cuFile error\";\n";
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let want = pairs(&[
            ("CU_FILE_SUCCESS", "success"),
            ("CU_FILE_INVALID_VALUE", "invalid argument"),
            ("default", "unknown cuFile error"),
        ]);
        assert_eq!(header_status_texts(header), want);
        assert_eq!(crate_status_texts(crate_rs), want);
        let drifted = crate_rs.replace("\"invalid argument\"", "\"bad argument\"");
        assert_ne!(crate_status_texts(&drifted), want);
    }

    #[test]
    fn the_header_repeats_the_crates_status_texts() {
        let root = crate::workspace::root();
        check_status_texts(&root.join(HEADER), &root.join(STATUS_TEXTS_FILE)).unwrap();
    }
}
