//! The ceilings a figure of ours is judged against, measured in the same run: the pinned
//! host-to-device copy bandwidth, and how fast the CPU alone reads the file into host memory
//! (page cache with every core, O_DIRECT with every core). Also the plain single-thread baseline
//! of upstream hipFile, the small-read ceiling of the storage (random O_DIRECT reads from many
//! threads, as fio's `randread` measures it), and the page-cache controls (drop, warm).

use hipfile_hip::{HipResult, PinnedBuffer};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::measure::{together, Span, Timed};

/// Bytes each reader thread asks for per `pread`.
const READ_CHUNK: usize = 4 << 20;
/// The alignment O_DIRECT wants of offsets, lengths and addresses (the common DIO alignment).
const DIO_ALIGN: usize = 4096;

/// Drop the page cache: `sync`, then `3` into `/proc/sys/vm/drop_caches`. Fails unless root (or
/// where `/proc/sys` is read-only); the caller says so and skips cold figures.
pub fn drop_caches() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not running as root".into());
    }
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", b"3")
        .map_err(|e| format!("/proc/sys/vm/drop_caches: {e}"))
}

/// Time a synchronous copy of `host` from pinned host memory to device memory (what
/// `cudaMemcpy` from `cudaHostAlloc` memory measures), made by `copy_to_device(offset, bytes)`:
/// the device buffer's `write_at`, wherever the buffer is held. The asynchronous entry points of
/// the runtime are `unsafe`, and this crate forbids `unsafe`; a synchronous copy of pinned memory
/// runs at the same DMA rate.
pub fn pinned_h2d(
    host: &PinnedBuffer,
    copy_to_device: impl FnOnce(usize, &[u8]) -> HipResult<()>,
) -> Result<Timed, String> {
    let span = Span::start();
    copy_to_device(0, host.as_slice()).map_err(|e| format!("pinned host-to-device copy: {e}"))?;
    Ok(span.finish())
}

/// A host buffer of `len` bytes whose start is aligned for O_DIRECT, carved out of a `Vec`.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + DIO_ALIGN];
        let start = storage.as_ptr().align_offset(DIO_ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn slice_mut(&mut self, len: usize) -> &mut [u8] {
        &mut self.storage[self.start..self.start + len.min(self.len)]
    }
}

/// Read `[0, size)` of `path` into anonymous host memory with `threads` threads, each reading one
/// contiguous share in 4 MiB `pread`s; `direct` opens the file with O_DIRECT. Returns the time
/// and the bytes read.
pub fn parallel_read(
    path: &Path,
    size: u64,
    threads: usize,
    direct: bool,
) -> Result<(Timed, u64), String> {
    let mut options = OpenOptions::new();
    options.read(true);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    let file = options.open(path).map_err(|e| {
        format!(
            "{}{}: {e}",
            path.display(),
            if direct { " (O_DIRECT)" } else { "" }
        )
    })?;
    let threads = threads.max(1) as u64;
    let share = size.div_ceil(threads).div_ceil(READ_CHUNK as u64) * READ_CHUNK as u64;
    let span = Span::start();
    let results: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let file = &file;
                scope.spawn(move || {
                    let start = (i * share).min(size);
                    let end = ((i + 1) * share).min(size);
                    read_range(file, start, end)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a reader panicked".into())))
            .collect()
    });
    let timed = span.finish();
    let mut total = 0;
    for r in results {
        total += r?;
    }
    Ok((timed, total))
}

fn read_range(file: &File, start: u64, end: u64) -> Result<u64, String> {
    let mut buf = AlignedBuf::new(READ_CHUNK);
    let mut at = start;
    while at < end {
        // O_DIRECT wants an aligned length; past the end of the file the read is short.
        let want = ((end - at) as usize)
            .min(READ_CHUNK)
            .next_multiple_of(DIO_ALIGN);
        let n = file
            .read_at(buf.slice_mut(want), at)
            .map_err(|e| format!("pread at {at}: {e}"))?;
        if n == 0 {
            break;
        }
        at += n as u64;
    }
    Ok(at.min(end) - start)
}

/// Reads of `bytes` at each of `offsets` (multiples of 4096) from `path` opened with O_DIRECT,
/// into aligned host memory, shared among `threads` threads started together, one `pread` at a
/// time each (fio's `randread` with `psync` and `numjobs = threads`). Returns the time and each
/// read's microseconds.
pub fn random_direct_reads(
    path: &Path,
    offsets: &[u64],
    bytes: usize,
    threads: usize,
) -> Result<(Timed, Vec<f64>), String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| format!("{} (O_DIRECT): {e}", path.display()))?;
    let threads = threads.max(1);
    let n = offsets.len();
    let shares: Vec<&[u64]> = (0..threads)
        .map(|t| &offsets[t * n / threads..(t + 1) * n / threads])
        .filter(|share| !share.is_empty())
        .collect();
    let file = &file;
    let (timed, per_thread) = together(shares, |share| {
        let mut buf = AlignedBuf::new(bytes);
        let mut samples = Vec::with_capacity(share.len());
        for &at in share {
            let start = std::time::Instant::now();
            let got = file
                .read_at(buf.slice_mut(bytes), at)
                .map_err(|e| format!("O_DIRECT pread of {bytes} at {at}: {e}"))?;
            samples.push(start.elapsed().as_secs_f64() * 1e6);
            if got != bytes {
                return Err(format!("O_DIRECT pread of {bytes} at {at}: {got} bytes"));
            }
        }
        Ok(samples)
    })?;
    Ok((timed, per_thread.concat()))
}

/// Read the file once through the page cache with every core, so the next read is hot.
pub fn warm(path: &Path, size: u64) -> Result<(), String> {
    parallel_read(path, size, available_threads(), false).map(|_| ())
}

/// Upstream hipFile's fallback: one thread, a 16 MiB pageable bounce buffer, `pread` then a
/// synchronous copy to the device (`copy_to_device(offset, bytes)`, the device buffer's
/// `write_at`), chunk after chunk, no overlap.
pub fn single_thread_bounce(
    file: &File,
    size: u64,
    mut copy_to_device: impl FnMut(usize, &[u8]) -> HipResult<()>,
) -> Result<Timed, String> {
    const BOUNCE: usize = 16 << 20;
    let mut bounce = vec![0u8; BOUNCE];
    let span = Span::start();
    let mut at = 0u64;
    while at < size {
        let want = ((size - at) as usize).min(BOUNCE);
        let n = file
            .read_at(&mut bounce[..want], at)
            .map_err(|e| format!("pread at {at}: {e}"))?;
        if n == 0 {
            return Err(format!("unexpected end of file at {at}"));
        }
        copy_to_device(at as usize, &bounce[..n]).map_err(|e| format!("copy to device: {e}"))?;
        at += n as u64;
    }
    Ok(span.finish())
}

/// The threads the CPU ceilings use: every core the process may run on.
pub fn available_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_reads_cover_the_file_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; (9 << 20) + 123]).unwrap();
        for threads in [1, 3, 16] {
            let (_, n) = parallel_read(&path, (9 << 20) + 123, threads, false).unwrap();
            assert_eq!(n, (9 << 20) + 123);
        }
        let (_, n) = parallel_read(&path, 5 << 20, 2, false).unwrap();
        assert_eq!(n, 5 << 20);
    }

    #[test]
    fn random_direct_reads_time_every_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![3u8; 1 << 20]).unwrap();
        let offsets: Vec<u64> = (0..50).map(|i| (i * 7 % 256) * 4096).collect();
        match random_direct_reads(&path, &offsets, 4096, 32) {
            Ok((t, samples)) => {
                assert_eq!(samples.len(), 50);
                assert!(samples.iter().all(|us| *us > 0.0));
                assert!(t.seconds > 0.0);
            }
            // A filesystem without O_DIRECT (tmpfs) says so in the error, which the bench reports.
            Err(why) => assert!(why.contains("O_DIRECT"), "{why}"),
        }
        // Past the end of the file a read is short: an error, not a figure.
        let why = random_direct_reads(&path, &[1 << 20], 4096, 1).unwrap_err();
        assert!(why.contains("0 bytes") || why.contains("O_DIRECT"), "{why}");
    }
}
