//! The GPU platform a command runs on, and how a missing one is told.
//!
//! Detection tries AMD, then NVIDIA, each under several library names; on a machine without a
//! GPU runtime every name is refused, and the loader's answers repeat the same sentence for each.
//! The report says one line per platform instead ("AMD: no ROCm runtime found
//! (libamdhip64.so.5-7, libamdhip64.so)"); a runtime that is there but does not load, a missing
//! CUDA driver or a runtime without devices get a line that says so; `--verbose` adds the
//! loader's answer for every name tried.

use std::sync::Arc;

use hipfile_core::Environment;
use hipfile_hip::{sim::SimRuntime, GpuRuntime, HipError, LoadRefusal, PassedOver, Platform};

/// The runtime a command runs on and how it was chosen.
pub struct Pick {
    /// The runtime.
    pub gpu: Arc<dyn GpuRuntime>,
    /// One line: the platform, and whether it was asked for, detected, or the simulated GPU
    /// for want of one.
    pub how: String,
    /// When no GPU was found: why each platform was passed over (see [`why_missing`]).
    pub passed_over: Vec<String>,
}

/// The platform named by `platform`, else the GPU the machine has, else the simulated GPU.
/// A platform asked for that does not open is an error (its lines from [`why_missing`]).
pub fn pick_runtime(platform: Option<&str>, verbose: bool) -> Result<Pick, String> {
    match platform {
        Some(name) => {
            let p = hipfile_hip::parse_platform(name).map_err(|e| e.to_string())?;
            let gpu = hipfile_hip::open_platform(p, &Environment::process().platform)
                .map_err(|e| why_missing(&e, Some(p), verbose).join("\n  "))?;
            Ok(Pick {
                gpu,
                how: format!("platform {p} (as asked)"),
                passed_over: Vec::new(),
            })
        }
        None => match hipfile_hip::open_default(&Environment::process().platform) {
            Ok(gpu) => {
                let info = gpu.info();
                Ok(Pick {
                    how: format!("platform {} (detected: {})", info.platform, info.library),
                    gpu,
                    passed_over: Vec::new(),
                })
            }
            Err(e) => Ok(Pick {
                gpu: Arc::new(SimRuntime::default()),
                how: format!(
                    "no GPU found; running on the simulated GPU ({})",
                    Platform::Sim
                ),
                passed_over: why_missing(&e, None, verbose),
            }),
        },
    }
}

/// The runtime of `platform`, else the one the library would pick (never the simulated GPU
/// unless asked for); the lines of [`why_missing`] when there is none.
pub fn open_runtime(
    platform: Option<&str>,
    verbose: bool,
) -> Result<Arc<dyn GpuRuntime>, Vec<String>> {
    let env = &Environment::process().platform;
    match platform {
        Some(name) => {
            let p = hipfile_hip::parse_platform(name).map_err(|e| vec![e.to_string()])?;
            hipfile_hip::open_platform(p, env).map_err(|e| why_missing(&e, Some(p), verbose))
        }
        None => hipfile_hip::open_default(env).map_err(|e| why_missing(&e, None, verbose)),
    }
}

/// Why no runtime opened, one line per platform (`asked`: the platform `err` comes from when
/// it was opened by name). With `verbose`, each platform's line is followed by the loader's
/// answer for every library name tried, indented by two blanks.
pub fn why_missing(err: &HipError, asked: Option<Platform>, verbose: bool) -> Vec<String> {
    match (err, asked) {
        (HipError::NotDetected(misses), _) => misses
            .iter()
            .flat_map(|(p, why)| match why {
                PassedOver::Failed(e) => platform_lines(*p, e, verbose),
                _ => vec![format!(
                    "{}: {} found, but it reports no device",
                    label(*p),
                    runtime(*p)
                )],
            })
            .collect(),
        (e, Some(p)) => platform_lines(p, e, verbose),
        (e, None) => vec![e.to_string()],
    }
}

fn label(p: Platform) -> &'static str {
    match p {
        Platform::Amd => "AMD",
        Platform::Nvidia => "NVIDIA",
        Platform::Sim => "sim",
    }
}

fn runtime(p: Platform) -> &'static str {
    match p {
        Platform::Amd => "ROCm runtime",
        Platform::Nvidia => "CUDA runtime",
        Platform::Sim => "simulated runtime",
    }
}

fn platform_lines(p: Platform, err: &HipError, verbose: bool) -> Vec<String> {
    let tried: Vec<LoadRefusal> = match err {
        HipError::NoLibrary { tried } => tried.clone(),
        HipError::Load { library, reason } => vec![LoadRefusal {
            library: library.clone(),
            reason: reason.clone(),
        }],
        other => return vec![format!("{}: {other}", label(p))],
    };
    let head = match tried.iter().find(|t| !t.not_found()) {
        Some(t) => format!(
            "{}: {} is there but does not load: {}",
            label(p),
            t.library,
            t.detail()
        ),
        None if matches!(err, HipError::NoLibrary { .. }) => {
            let names: Vec<&str> = tried.iter().map(|t| t.library.as_str()).collect();
            format!(
                "{}: no {} found ({})",
                label(p),
                runtime(p),
                compact_names(&names)
            )
        }
        None => format!("{}: {} not found", label(p), tried[0].library),
    };
    let mut lines = vec![head];
    if verbose {
        lines.extend(
            tried
                .iter()
                .map(|t| format!("  {}: {}", t.library, t.detail())),
        );
    }
    lines
}

/// `libx.so.7, libx.so.6, libx.so.5, libx.so` as `libx.so.5-7, libx.so`: names that differ
/// only in a trailing version number are written once, with their versions as a range when
/// they run without a gap and as a set (`libx.so.{11,13}`) otherwise; the rest as they are.
pub fn compact_names(names: &[&str]) -> String {
    let mut groups: Vec<(&str, Vec<u32>)> = Vec::new();
    let mut plain: Vec<&str> = Vec::new();
    for name in names {
        let versioned = name
            .rsplit_once('.')
            .filter(|(_, v)| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(stem, v)| v.parse::<u32>().ok().map(|v| (stem, v)));
        match versioned {
            Some((stem, v)) => match groups.iter_mut().find(|(s, _)| *s == stem) {
                Some((_, versions)) => versions.push(v),
                None => groups.push((stem, vec![v])),
            },
            None => plain.push(name),
        }
    }
    let mut parts: Vec<String> = groups
        .into_iter()
        .map(|(stem, mut versions)| {
            versions.sort_unstable();
            versions.dedup();
            let (lo, hi) = (versions[0], versions[versions.len() - 1]);
            if versions.len() == 1 {
                format!("{stem}.{lo}")
            } else if (hi - lo) as usize + 1 == versions.len() {
                format!("{stem}.{lo}-{hi}")
            } else {
                let set: Vec<String> = versions.iter().map(u32::to_string).collect();
                format!("{stem}.{{{}}}", set.join(","))
            }
        })
        .collect();
    parts.extend(plain.into_iter().map(str::to_string));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(library: &str) -> LoadRefusal {
        LoadRefusal {
            library: library.into(),
            reason: format!("{library}: cannot open shared object file: No such file or directory"),
        }
    }

    /// What detection gives on a machine with neither runtime installed.
    fn nothing_installed() -> HipError {
        HipError::NotDetected(vec![
            (
                Platform::Amd,
                PassedOver::Failed(HipError::NoLibrary {
                    tried: hipfile_hip::amd::DEFAULT_LIBRARIES
                        .iter()
                        .map(|n| missing(n))
                        .collect(),
                }),
            ),
            (
                Platform::Nvidia,
                PassedOver::Failed(HipError::NoLibrary {
                    tried: hipfile_hip::nvidia::DEFAULT_RUNTIME_LIBRARIES
                        .iter()
                        .map(|n| missing(n))
                        .collect(),
                }),
            ),
        ])
    }

    #[test]
    fn names_differing_in_a_version_are_written_once() {
        assert_eq!(
            compact_names(&[
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
                "libamdhip64.so"
            ]),
            "libamdhip64.so.5-7, libamdhip64.so"
        );
        assert_eq!(
            compact_names(&["libcudart.so.13", "libcudart.so.12"]),
            "libcudart.so.12-13"
        );
        assert_eq!(
            compact_names(&["libcudart.so.13", "libcudart.so.11"]),
            "libcudart.so.{11,13}"
        );
        assert_eq!(compact_names(&["libcuda.so.1"]), "libcuda.so.1");
        assert_eq!(
            compact_names(&["/opt/x/libamdhip64.so", "libfoo.so.1a"]),
            "/opt/x/libamdhip64.so, libfoo.so.1a"
        );
    }

    #[test]
    fn no_runtime_installed_is_one_short_line_per_platform() {
        let lines = why_missing(&nothing_installed(), None, false);
        assert_eq!(
            lines,
            [
                "AMD: no ROCm runtime found (libamdhip64.so.5-7, libamdhip64.so)",
                "NVIDIA: no CUDA runtime found (libcudart.so.12-13)",
            ]
        );
        // The full error, which the lines replace, repeats the loader's sentence per name.
        assert!(nothing_installed().to_string().len() > 4 * lines.concat().len());
    }

    #[test]
    fn verbose_adds_the_answer_for_every_name_tried() {
        let lines = why_missing(&nothing_installed(), None, true);
        assert_eq!(lines.len(), 2 + 4 + 2, "{lines:#?}");
        assert_eq!(
            lines[0],
            "AMD: no ROCm runtime found (libamdhip64.so.5-7, libamdhip64.so)"
        );
        assert_eq!(
            lines[1],
            "  libamdhip64.so.7: cannot open shared object file: No such file or directory"
        );
        assert_eq!(
            lines[5],
            "NVIDIA: no CUDA runtime found (libcudart.so.12-13)"
        );
        assert_eq!(
            lines[7],
            "  libcudart.so.12: cannot open shared object file: No such file or directory"
        );
    }

    #[test]
    fn a_runtime_that_is_there_but_broken_is_named_with_the_loaders_answer() {
        let err = HipError::NotDetected(vec![
            (
                Platform::Amd,
                PassedOver::Failed(HipError::NoLibrary {
                    tried: vec![
                        missing("libamdhip64.so.7"),
                        LoadRefusal {
                            library: "libamdhip64.so.6".into(),
                            reason: "libhsa-runtime64.so.1: cannot open shared object file: \
                                     No such file or directory"
                                .into(),
                        },
                    ],
                }),
            ),
            (Platform::Nvidia, PassedOver::NoDevice),
        ]);
        assert_eq!(
            why_missing(&err, None, false),
            [
                "AMD: libamdhip64.so.6 is there but does not load: libhsa-runtime64.so.1: \
                 cannot open shared object file: No such file or directory",
                "NVIDIA: CUDA runtime found, but it reports no device",
            ]
        );
    }

    #[test]
    fn a_platform_asked_for_by_name_gets_its_own_line() {
        let cuda_driver = HipError::Load {
            library: "libcuda.so.1".into(),
            reason: "libcuda.so.1: cannot open shared object file: No such file or directory"
                .into(),
        };
        assert_eq!(
            why_missing(&cuda_driver, Some(Platform::Nvidia), false),
            ["NVIDIA: libcuda.so.1 not found"]
        );
        let symbol = HipError::MissingSymbol {
            library: "libamdhip64.so.6".into(),
            symbol: "hipMalloc",
        };
        assert_eq!(
            why_missing(&symbol, Some(Platform::Amd), true),
            ["AMD: libamdhip64.so.6 lacks the symbol hipMalloc"]
        );
        assert_eq!(
            why_missing(&symbol, None, false),
            ["libamdhip64.so.6 lacks the symbol hipMalloc"]
        );
    }
}
