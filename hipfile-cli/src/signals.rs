//! What a terminating signal must not leave behind: `cp`'s temporary copy, `bench`'s scratch
//! file and the file or directory it makes to read.
//!
//! SIGINT (Ctrl-C), SIGTERM and SIGHUP still end the process, and the parent still sees it
//! killed by that signal (a shell's `$?` is 128 + its number), but the paths registered as a
//! [`Removal`] are removed first. A thread of its own waits for the signals (signal-hook's
//! self-pipe: the handler itself only writes to a pipe), removes every registered path under
//! the registry's lock, and then re-raises the signal with its default action. The step that
//! turns a temporary into a result ([`Removal::keep_with`], `cp`'s rename) holds the same lock:
//! a signal never removes what has just become DST, and nothing is renamed after a signal's
//! clean-up began. SIGKILL cannot be caught and still leaves them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The signals that remove the registered paths before the process ends.
pub const ENDING: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The registered paths, each with the id of its [`Removal`].
static PATHS: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

fn paths() -> MutexGuard<'static, Vec<(u64, PathBuf)>> {
    PATHS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Take over [`ENDING`] for the rest of the process (once; later calls return the first
/// answer). Until this is called the signals end the process at once, removing nothing.
pub fn install() -> Result<(), String> {
    INSTALLED
        .get_or_init(|| {
            // A signal the process was started with ignored (SIGHUP under nohup) stays ignored:
            // handling it would end a copy its caller asked to survive the terminal.
            let handled: Vec<i32> = ENDING
                .iter()
                .copied()
                .filter(|&s| !hipfile_hip::os::signal_ignored(s))
                .collect();
            let mut signals = Signals::new(&handled)
                .map_err(|e| format!("handling SIGINT/SIGTERM/SIGHUP: {e}"))?;
            std::thread::Builder::new()
                .name("hipfile-signals".into())
                .spawn(move || {
                    if let Some(signal) = signals.forever().next() {
                        end_on(signal);
                    }
                })
                .map_err(|e| format!("a thread for signals: {e}"))?;
            Ok(())
        })
        .clone()
}

/// Remove every registered path, then end the process as `signal` would have. The lock is held
/// to the end, so no [`Removal::keep_with`] runs after the paths went.
fn end_on(signal: i32) -> ! {
    let held = paths();
    for (_, path) in held.iter() {
        remove(path);
    }
    // Returns only where the default action could not be had; exit as a shell reports it.
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    std::process::exit(128 + signal)
}

/// Remove a file, or a directory with what is in it; a path that is gone already is fine.
fn remove(path: &Path) {
    let _ = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    };
}

/// The removal of a path this process made: when the `Removal` is dropped (an error, the end
/// of a run), or before the process ends on one of [`ENDING`], whichever comes first.
#[derive(Debug)]
pub struct Removal {
    id: u64,
}

impl Removal {
    /// From now on `path` (a file, or a directory and everything in it) goes when this is
    /// dropped or on a signal.
    pub fn arm(path: &Path) -> Removal {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        paths().push((id, path.to_path_buf()));
        Removal { id }
    }

    /// Keep the path after all: run `f` (which may rename it) where no signal's clean-up can
    /// come between, and forget the path.
    pub fn keep_with<T>(self, f: impl FnOnce() -> T) -> T {
        let mut held = paths();
        let out = f();
        held.retain(|(id, _)| *id != self.id);
        drop(held);
        std::mem::forget(self);
        out
    }

    /// Whether `path` is registered for removal.
    #[cfg(test)]
    pub fn armed(path: &Path) -> bool {
        paths().iter().any(|(_, p)| p == path)
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        let mut held = paths();
        if let Some(i) = held.iter().position(|(id, _)| *id == self.id) {
            let (_, path) = held.remove(i);
            remove(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_removal_removes_its_path_and_a_kept_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        let tree = dir.path().join("d");
        std::fs::write(&file, b"x").unwrap();
        std::fs::create_dir(&tree).unwrap();
        std::fs::write(tree.join("inner"), b"y").unwrap();
        let (a, b) = (Removal::arm(&file), Removal::arm(&tree));
        assert!(Removal::armed(&file) && Removal::armed(&tree));
        drop(a);
        drop(b);
        assert!(!file.exists() && !tree.exists());
        assert!(!Removal::armed(&file) && !Removal::armed(&tree));

        std::fs::write(&file, b"x").unwrap();
        let renamed = dir.path().join("g");
        Removal::arm(&file)
            .keep_with(|| std::fs::rename(&file, &renamed))
            .unwrap();
        assert!(!Removal::armed(&file));
        assert_eq!(std::fs::read(&renamed).unwrap(), b"x");
    }
}
