//! Leak checks: open descriptors of the process and live allocations of a simulated GPU.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use hipfile_hip::sim::SimRuntime;
use hipfile_hip::MemoryKind;

/// Number of open descriptors of this process (entries of `/proc/self/fd`), not counting the one
/// used to list them.
///
/// Other threads (other tests) open and close descriptors too; prefer [`open_fds_for`] where a
/// test owns a file of its own.
pub fn open_fd_count() -> io::Result<usize> {
    Ok(fs::read_dir("/proc/self/fd")?.count().saturating_sub(1))
}

/// Number of open descriptors of this process that refer to `path` (hipfile-rs reopens a
/// registered file through `/proc/self/fd/N`, so its descriptors all point at the same path).
/// Unaffected by what other threads do with other files.
pub fn open_fds_for(path: &Path) -> io::Result<usize> {
    let wanted = fs::canonicalize(path)?;
    let mut n = 0;
    for entry in fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        // A descriptor closed between the listing and the readlink is simply not counted.
        if let Ok(target) = fs::read_link(entry.path()) {
            if target == wanted {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// What may leak, counted at one moment: descriptors on a set of files, and the simulated GPU's
/// pinned host buffers, device and managed allocations and streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakSnapshot {
    /// Descriptors open on each watched path.
    pub fds: Vec<(PathBuf, usize)>,
    /// Live pinned host allocations.
    pub pinned: usize,
    /// Live device allocations.
    pub device: usize,
    /// Live managed allocations.
    pub managed: usize,
    /// Live streams.
    pub streams: usize,
}

impl LeakSnapshot {
    /// Count now, watching descriptors on `paths`.
    pub fn take(sim: &SimRuntime, paths: &[&Path]) -> io::Result<Self> {
        let mut fds = Vec::with_capacity(paths.len());
        for p in paths {
            fds.push((p.to_path_buf(), open_fds_for(p)?));
        }
        Ok(LeakSnapshot {
            fds,
            pinned: sim.live_allocations(MemoryKind::Host),
            device: sim.live_allocations(MemoryKind::Device),
            managed: sim.live_allocations(MemoryKind::Managed),
            streams: sim.live_streams(),
        })
    }

    /// Count again and describe every count that grew since this snapshot; `Ok` when none did.
    pub fn compare_now(&self, sim: &SimRuntime) -> Result<(), String> {
        let paths: Vec<&Path> = self.fds.iter().map(|(p, _)| p.as_path()).collect();
        let now = LeakSnapshot::take(sim, &paths)
            .map_err(|e| format!("cannot count open descriptors: {e}"))?;
        self.compare(&now)
    }

    /// Describe every count that grew from `self` to `later`; `Ok` when none did.
    pub fn compare(&self, later: &LeakSnapshot) -> Result<(), String> {
        let mut leaks = Vec::new();
        for ((path, before), (_, after)) in self.fds.iter().zip(&later.fds) {
            if after > before {
                leaks.push(format!(
                    "{} descriptors on {} (was {before})",
                    after,
                    path.display()
                ));
            }
        }
        let counts = [
            ("pinned host buffers", self.pinned, later.pinned),
            ("device allocations", self.device, later.device),
            ("managed allocations", self.managed, later.managed),
            ("streams", self.streams, later.streams),
        ];
        for (what, before, after) in counts {
            if after > before {
                leaks.push(format!("{after} {what} (was {before})"));
            }
        }
        if leaks.is_empty() {
            Ok(())
        } else {
            Err(format!("leaked: {}", leaks.join(", ")))
        }
    }
}
