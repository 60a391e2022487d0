//! The cases. Each returns `Err` with the parameters of the failing operation and what differed.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfile_core::{ErrorKind, FileIo, IoOp, OwnedRequest, PosixIo, Submitted, MAX_RW_COUNT};
use hipfile_hip::DeviceBuffer;

use crate::faults::{Errno, ScriptedIo};

use super::fixture::{describe, pattern, same_bytes, Fixture, SENTINEL};
use super::{Case, ConformanceConfig};

pub(super) static ALL: &[Case] = &[
    Case {
        name: "roundtrip",
        about: "write a multi-chunk pattern from device memory, read it back into another buffer",
        run: roundtrip,
        off: always_on,
    },
    Case {
        name: "matrix_read_registered",
        about:
            "reads at every offset/size/buffer-offset of the matrix, registered buffer, sentinels",
        run: |f| matrix(f, IoOp::Read, BufferMode::Registered),
        off: always_on,
    },
    Case {
        name: "matrix_read_unregistered",
        about: "the read matrix through an unregistered device pointer",
        run: |f| matrix(f, IoOp::Read, BufferMode::Unregistered),
        off: always_on,
    },
    Case {
        name: "matrix_read_interior",
        about: "the read matrix through an unregistered pointer into the middle of an allocation",
        run: |f| matrix(f, IoOp::Read, BufferMode::Interior),
        off: always_on,
    },
    Case {
        name: "matrix_write_registered",
        about:
            "writes at every offset/size/buffer-offset of the matrix, registered buffer, sentinels",
        run: |f| matrix(f, IoOp::Write, BufferMode::Registered),
        off: always_on,
    },
    Case {
        name: "matrix_write_unregistered",
        about: "the write matrix through an unregistered device pointer",
        run: |f| matrix(f, IoOp::Write, BufferMode::Unregistered),
        off: always_on,
    },
    Case {
        name: "matrix_write_interior",
        about: "the write matrix through an unregistered pointer into the middle of an allocation",
        run: |f| matrix(f, IoOp::Write, BufferMode::Interior),
        off: always_on,
    },
    Case {
        name: "eof_short_read",
        about: "a read past the end returns the bytes up to the end and leaves the rest untouched",
        run: eof_short_read,
        off: always_on,
    },
    Case {
        name: "write_past_eof",
        about: "a write past the end extends the file; the gap reads as zeros",
        run: write_past_eof,
        off: always_on,
    },
    Case {
        name: "holes_read_as_zeros",
        about: "reading a sparse file gives zeros in the holes",
        run: holes_read_as_zeros,
        off: always_on,
    },
    Case {
        name: "zero_size",
        about: "zero-byte reads and writes return 0 and change nothing",
        run: zero_size,
        off: always_on,
    },
    Case {
        name: "max_rw_count",
        about: "a request larger than MAX_RW_COUNT on a small file returns the short count",
        run: max_rw_count,
        off: |cfg| {
            (!cfg.check_max_rw_count).then_some("check_max_rw_count is off for this backend")
        },
    },
    Case {
        name: "parallel_requests",
        about: "requests from many threads on one file land in their own ranges",
        run: parallel_requests,
        off: always_on,
    },
    Case {
        name: "queued_out_of_order",
        about: "reads, then writes, submitted with Submit::Queue through the registry, several in \
                flight, finished out of order: exact counts (short at end of file), every byte",
        run: queued_out_of_order,
        off: always_on,
    },
    Case {
        name: "queued_progress",
        about: "a request submitted with Submit::Queue finishes with nobody waiting for it, its \
                bytes in place before it is finished",
        run: queued_progress,
        off: always_on,
    },
    Case {
        name: "queued_drop_waits",
        about: "dropping an unfinished queued request waits for it: its bytes are in place at \
                once and nothing moves later",
        run: queued_drop_waits,
        off: always_on,
    },
    Case {
        name: "faults_lose_no_byte",
        about: "EINTR and short preads/pwrites are retried and continued: every byte arrives",
        run: faults_lose_no_byte,
        off: without_file_io_faults,
    },
    Case {
        name: "eio_is_reported",
        about: "EIO from every pread/pwrite fails the request; nothing is written anywhere",
        run: eio_is_reported,
        off: without_file_io_faults,
    },
    Case {
        name: "enospc_is_reported",
        about: "ENOSPC in the middle of a write is an error, never a silent short count",
        run: enospc_is_reported,
        off: without_file_io_faults,
    },
];

/// How the matrix names its device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufferMode {
    /// The allocation's base, registered.
    Registered,
    /// The allocation's base, not registered.
    Unregistered,
    /// A pointer one page into the allocation, not registered.
    Interior,
}

/// Where the interior pointer of [`BufferMode::Interior`] points, from the allocation's base.
const INTERIOR: usize = 4096;
/// Slack after the last byte any request touches, so overruns hit sentinels, not the allocation end.
const SLACK: usize = 8192;

fn matrix(f: &Fixture, op: IoOp, mode: BufferMode) -> Result<(), String> {
    let multi = 3 * f.chunk() + if f.config().aligned_only { 4096 } else { 4097 };
    let points = [0usize, 1, 4095, 4096, 4097, multi];
    let buffer_offsets = [0usize, 1, 4095];
    let file_len = 2 * multi + SLACK;
    let background = pattern(1, 0, file_len);
    let file = f.file("matrix", &background)?;

    let view = if mode == BufferMode::Interior {
        INTERIOR
    } else {
        0
    };
    let dev_len = view + 4095 + multi + SLACK;
    let mut dev = f.device(dev_len)?;
    if mode == BufferMode::Registered {
        f.register(&dev, dev_len)
            .map_err(|e| format!("registering the device buffer: {e}"))?;
    }
    let mut ran = 0;
    for &foff in &points {
        for &size in &points {
            for &boff in &buffer_offsets {
                if !f.allowed(foff as u64, size, view + boff) {
                    continue;
                }
                ran += 1;
                let at = format!(
                    "{op:?} {mode:?} file offset {foff}, size {size}, buffer offset {boff}"
                );
                let start = view + boff;
                let mut expected_dev = vec![SENTINEL; dev_len];
                let mut expected_file = background.clone();
                dev.fill(SENTINEL).map_err(|e| format!("{at}: {e}"))?;
                match op {
                    IoOp::Read => {
                        expected_dev[start..start + size]
                            .copy_from_slice(&background[foff..foff + size]);
                    }
                    IoOp::Write => {
                        file.reset(&background)?;
                        let data = pattern(2, foff as u64, size);
                        dev.write_at(start, &data)
                            .map_err(|e| format!("{at}: {e}"))?;
                        expected_dev[start..start + size].copy_from_slice(&data);
                        expected_file[foff..foff + size].copy_from_slice(&data);
                    }
                }
                let n = f
                    .io(op, file.handle, dev.ptr() + view, size, foff as u64, boff)
                    .map_err(|e| format!("{at}: {e}"))?;
                if n != size {
                    return Err(format!("{at}: returned {n}, expected {size}"));
                }
                let actual_dev = dev.to_vec().map_err(|e| format!("{at}: {e}"))?;
                same_bytes(&format!("{at}: device buffer"), &expected_dev, &actual_dev)?;
                same_bytes(&format!("{at}: file"), &expected_file, &file.contents()?)?;
            }
        }
    }
    if mode == BufferMode::Registered {
        f.driver()
            .buf_deregister(dev.ptr())
            .map_err(|e| format!("deregistering the device buffer: {e}"))?;
    }
    if ran == 0 {
        return Err("the configuration left no request of the matrix to run".into());
    }
    Ok(())
}

fn roundtrip(f: &Fixture) -> Result<(), String> {
    let size = 5 * f.chunk() + if f.config().aligned_only { 0 } else { 1234 };
    let file = f.file("roundtrip", &[])?;
    let mut src = f.device(size)?;
    let data = pattern(3, 0, size);
    src.write_at(0, &data).map_err(|e| e.to_string())?;
    f.register(&src, size)
        .map_err(|e| format!("registering the source buffer: {e}"))?;
    let n = f.io(IoOp::Write, file.handle, src.ptr(), size, 0, 0)?;
    if n != size {
        return Err(format!("write returned {n}, expected {size}"));
    }
    same_bytes("file after the write", &data, &file.contents()?)?;
    let dst = f.device(size + SLACK)?;
    let n = f.io(IoOp::Read, file.handle, dst.ptr(), size, 0, 0)?;
    if n != size {
        return Err(format!("read returned {n}, expected {size}"));
    }
    let mut expected = data;
    expected.resize(size + SLACK, SENTINEL);
    same_bytes(
        "read-back buffer",
        &expected,
        &dst.to_vec().map_err(|e| e.to_string())?,
    )?;
    f.driver()
        .buf_deregister(src.ptr())
        .map_err(|e| format!("deregistering the source buffer: {e}"))
}

/// Read `size` at `foff` into a fresh sentinel buffer; check the count and every byte.
fn read_and_check(
    f: &Fixture,
    file: &super::TestFile,
    contents: &[u8],
    foff: usize,
    size: usize,
) -> Result<(), String> {
    let at = format!(
        "read of {size} bytes at {foff} from a {}-byte file",
        contents.len()
    );
    let dev = f.device(size + SLACK)?;
    let n = f.io(IoOp::Read, file.handle, dev.ptr(), size, foff as u64, 0)?;
    let avail = contents.len().saturating_sub(foff).min(size);
    if n != avail {
        return Err(format!("{at}: returned {n}, expected {avail}"));
    }
    let mut expected = vec![SENTINEL; size + SLACK];
    if avail > 0 {
        expected[..avail].copy_from_slice(&contents[foff..foff + avail]);
    }
    same_bytes(
        &format!("{at}: device buffer"),
        &expected,
        &dev.to_vec().map_err(|e| e.to_string())?,
    )?;
    same_bytes(&format!("{at}: file"), contents, &file.contents()?)
}

fn eof_short_read(f: &Fixture) -> Result<(), String> {
    let aligned = f.config().aligned_only;
    let len = 3 * 4096 + if aligned { 0 } else { 123 };
    let contents = pattern(4, 0, len);
    let file = f.file("eof", &contents)?;
    read_and_check(f, &file, &contents, 2 * 4096, 4 * 4096)?;
    read_and_check(f, &file, &contents, 3 * 4096, 4096)?;
    read_and_check(f, &file, &contents, 1 << 20, 4096)?;
    if !aligned {
        read_and_check(f, &file, &contents, len, 1)?;
        read_and_check(f, &file, &contents, len - 1, 4096)?;
    }
    let big_len = 2 * f.chunk() + if aligned { 4096 } else { 5000 };
    let big = pattern(5, 0, big_len);
    let big_file = f.file("eof-chunked", &big)?;
    read_and_check(f, &big_file, &big, 0, 4 * f.chunk())
}

fn write_past_eof(f: &Fixture) -> Result<(), String> {
    let head = pattern(6, 0, 4096);
    let file = f.file("extend", &head)?;
    let size = 2 * 4096;
    let foff = 3 * 4096;
    let mut dev = f.device(size)?;
    let data = pattern(7, 0, size);
    dev.write_at(0, &data).map_err(|e| e.to_string())?;
    let n = f.io(IoOp::Write, file.handle, dev.ptr(), size, foff as u64, 0)?;
    if n != size {
        return Err(format!("write past the end returned {n}, expected {size}"));
    }
    let mut expected = head;
    expected.resize(foff, 0);
    expected.extend_from_slice(&data);
    same_bytes("file extended by the write", &expected, &file.contents()?)?;
    read_and_check(f, &file, &expected, 0, expected.len() + 4096)
}

fn holes_read_as_zeros(f: &Fixture) -> Result<(), String> {
    let len = 16 * 4096;
    let file = f.file("sparse", &[])?;
    file.file
        .set_len(len as u64)
        .map_err(|e| format!("making a sparse file: {e}"))?;
    let data = pattern(8, 0, 4096);
    std::os::unix::fs::FileExt::write_all_at(&file.file, &data, 5 * 4096)
        .map_err(|e| format!("writing into the sparse file: {e}"))?;
    let mut contents = vec![0u8; len];
    contents[5 * 4096..6 * 4096].copy_from_slice(&data);
    read_and_check(f, &file, &contents, 0, len)?;
    read_and_check(f, &file, &contents, 8 * 4096, 4 * 4096)
}

fn zero_size(f: &Fixture) -> Result<(), String> {
    let contents = pattern(9, 0, 8192);
    let file = f.file("zero", &contents)?;
    let dev = f.device(8192)?;
    for op in [IoOp::Read, IoOp::Write] {
        for foff in [0u64, 4096, 8192, 1 << 20] {
            let n = f.io(op, file.handle, dev.ptr(), 0, foff, 0)?;
            if n != 0 {
                return Err(format!("{op:?} of 0 bytes at {foff} returned {n}"));
            }
            let at = format!("after a {op:?} of 0 bytes at {foff}");
            same_bytes(
                &format!("{at}: device buffer"),
                &vec![SENTINEL; 8192],
                &dev.to_vec().map_err(|e| e.to_string())?,
            )?;
            same_bytes(&format!("{at}: file"), &contents, &file.contents()?)?;
        }
    }
    Ok(())
}

fn max_rw_count(f: &Fixture) -> Result<(), String> {
    if !f.config().check_max_rw_count {
        return Ok(());
    }
    let contents = pattern(10, 0, 8192);
    let file = f.file("small", &contents)?;
    // The request is capped at MAX_RW_COUNT, and the capped request must fit the buffer.
    let mut dev = DeviceBuffer::new(f.runtime().clone(), MAX_RW_COUNT)
        .map_err(|e| format!("allocating {MAX_RW_COUNT} bytes of device memory: {e}"))?;
    // Only a window at the start is checked; the rest of the allocation stays untouched zeros.
    let window = 64 * 1024;
    for registered in [true, false] {
        dev.write_at(0, &vec![SENTINEL; window])
            .map_err(|e| e.to_string())?;
        if registered {
            f.driver()
                .buf_register(dev.ptr(), MAX_RW_COUNT, 0)
                .map_err(|e| format!("registering a {MAX_RW_COUNT}-byte buffer: {e}"))?;
        }
        let size = MAX_RW_COUNT + 4096;
        let n = f.io(IoOp::Read, file.handle, dev.ptr(), size, 0, 0)?;
        if n != contents.len() {
            return Err(format!(
                "a read of {size:#x} bytes from an 8192-byte file (registered: {registered}) returned {n}"
            ));
        }
        let mut expected = vec![SENTINEL; window];
        expected[..contents.len()].copy_from_slice(&contents);
        let mut actual = vec![0u8; window];
        dev.read_at(0, &mut actual).map_err(|e| e.to_string())?;
        same_bytes(
            &format!("device window after the capped read (registered: {registered})"),
            &expected,
            &actual,
        )?;
        if registered {
            f.driver()
                .buf_deregister(dev.ptr())
                .map_err(|e| format!("deregistering: {e}"))?;
        }
    }
    Ok(())
}

fn parallel_requests(f: &Fixture) -> Result<(), String> {
    const THREADS: usize = 8;
    let region = f.chunk() + 4096;
    let file = f.file("parallel", &vec![0u8; THREADS * region])?;
    let results: Vec<Result<(), String>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let file = &file;
                s.spawn(move || -> Result<(), String> {
                    let mut src = f.device(region)?;
                    let data = pattern(100 + t as u64, 0, region);
                    src.write_at(0, &data).map_err(|e| e.to_string())?;
                    let foff = (t * region) as u64;
                    let n = f.io(IoOp::Write, file.handle, src.ptr(), region, foff, 0)?;
                    if n != region {
                        return Err(format!("thread {t}: write returned {n}"));
                    }
                    let dst = f.device(region)?;
                    let n = f.io(IoOp::Read, file.handle, dst.ptr(), region, foff, 0)?;
                    if n != region {
                        return Err(format!("thread {t}: read returned {n}"));
                    }
                    same_bytes(
                        &format!("thread {t}: read-back"),
                        &data,
                        &dst.to_vec().map_err(|e| e.to_string())?,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    let mut expected = Vec::with_capacity(THREADS * region);
    for t in 0..THREADS {
        expected.extend_from_slice(&pattern(100 + t as u64, 0, region));
    }
    same_bytes(
        "file after the parallel writes",
        &expected,
        &file.contents()?,
    )
}

/// The sizes the `queued_*` cases work in: the alignment (every offset and size is a multiple
/// of it when the backend is `aligned_only`), the largest transfer rounded down to it, and the
/// odd byte added to offsets and taken from sizes when requests need not be aligned.
struct Units {
    align: usize,
    chunk: usize,
    odd: usize,
}

impl Units {
    fn of(f: &Fixture) -> Units {
        let align = f.config().alignment.max(1);
        Units {
            align,
            chunk: (f.chunk() / align).max(1) * align,
            odd: usize::from(!f.config().aligned_only),
        }
    }

    /// Device offsets for requests of `sizes`, one after the other, each `odd` bytes past a
    /// multiple of the alignment, with at least one alignment unit of sentinels before, between
    /// and after them; and the length of device memory they take.
    fn layout(&self, sizes: impl IntoIterator<Item = usize>) -> (Vec<usize>, usize) {
        let mut at = self.align;
        let offsets = sizes
            .into_iter()
            .map(|size| {
                let offset = at + self.odd;
                at += (size + self.odd).div_ceil(self.align) * self.align + self.align;
                offset
            })
            .collect();
        (offsets, at)
    }
}

fn queued_out_of_order(f: &Fixture) -> Result<(), String> {
    let Units {
        align: a,
        chunk,
        odd,
    } = Units::of(f);
    let file_len = 4 * chunk + 2 * a + 123 * odd;
    let background = pattern(20, 0, file_len);
    let file = f.file("queued", &background)?;
    let io = f.requests(file.handle)?;

    // Reads: (file offset, size). The file ranges of the second and third overlap (reads may);
    // the last runs past the end of the file and reads the last unit only.
    let reads = [
        (odd, a - odd),
        (a + odd, 2 * chunk + a + odd),
        (3 * a + 7 * odd, chunk - odd),
        (file_len - a, 3 * a),
    ];
    let (at, dev_len) = Units::of(f).layout(reads.iter().map(|r| r.1));
    let dev = f.device(dev_len)?;
    let ranges = reads
        .iter()
        .zip(&at)
        .map(|(&(_, size), &offset)| f.range(&dev, offset, size))
        .collect::<Result<Vec<_>, String>>()?;
    let requests: Vec<OwnedRequest> = reads
        .iter()
        .zip(&ranges)
        .map(|(&(foff, _), range)| io.request(IoOp::Read, range, foff as u64))
        .collect();
    let mut submitted = requests
        .iter()
        .map(|req| io.submit(req))
        .collect::<Result<Vec<_>, String>>()?;
    let mut expected = vec![SENTINEL; dev_len];
    // Finished last to first.
    for (i, req) in requests.iter().enumerate().rev() {
        let s = submitted.pop().expect("one submission per request");
        let (foff, size) = reads[i];
        let want = file_len.saturating_sub(foff).min(size);
        let done = io.finish(s, req)?;
        if done.bytes != want {
            return Err(format!(
                "{} from a {file_len}-byte file returned {}, expected {want}",
                describe(req),
                done.bytes
            ));
        }
        expected[at[i]..at[i] + want].copy_from_slice(&background[foff..foff + want]);
    }
    let actual = dev.to_vec().map_err(|e| e.to_string())?;
    // Past the count of the read at the end of file, inside its own range, zeros are allowed as
    // well as the untouched sentinels: an O_DIRECT read zero-fills the buffer past the end of
    // the file (the driver's `io` clips reads so that its callers never see this).
    let (foff, size) = reads[3];
    let past_count = at[3] + file_len.saturating_sub(foff).min(size)..at[3] + size;
    for i in past_count {
        if actual[i] == 0 {
            expected[i] = 0;
        }
    }
    same_bytes(
        "device memory after the queued reads (finished last to first)",
        &expected,
        &actual,
    )?;
    same_bytes(
        "file after the queued reads",
        &background,
        &file.contents()?,
    )?;

    // Writes from distinct device ranges to distinct file ranges; the last lands past the end of
    // the file, leaving a hole.
    let writes = [
        (odd, a - 2 * odd),
        (2 * a + odd, 2 * chunk + odd),
        (4 * a + 2 * chunk, chunk - odd),
        (file_len + a, a + 5 * odd),
    ];
    let (at, src_len) = Units::of(f).layout(writes.iter().map(|w| w.1));
    let mut src = f.device(src_len)?;
    let mut source = vec![SENTINEL; src_len];
    let mut model = background.clone();
    for (i, &(foff, size)) in writes.iter().enumerate() {
        let data = pattern(21 + i as u64, foff as u64, size);
        source[at[i]..at[i] + size].copy_from_slice(&data);
        if model.len() < foff + size {
            model.resize(foff + size, 0);
        }
        model[foff..foff + size].copy_from_slice(&data);
    }
    src.write_at(0, &source).map_err(|e| e.to_string())?;
    let ranges = writes
        .iter()
        .zip(&at)
        .map(|(&(_, size), &offset)| f.range(&src, offset, size))
        .collect::<Result<Vec<_>, String>>()?;
    let requests: Vec<OwnedRequest> = writes
        .iter()
        .zip(&ranges)
        .map(|(&(foff, _), range)| io.request(IoOp::Write, range, foff as u64))
        .collect();
    let mut submitted = requests
        .iter()
        .map(|req| io.submit(req).map(Some))
        .collect::<Result<Vec<Option<Submitted>>, String>>()?;
    for i in [2, 0, 3, 1] {
        let req = &requests[i];
        let s = submitted[i].take().expect("each request finishes once");
        let done = io.finish(s, req)?;
        if done.bytes != writes[i].1 {
            return Err(format!(
                "{} returned {}, expected {}",
                describe(req),
                done.bytes,
                writes[i].1
            ));
        }
    }
    same_bytes(
        "file after the queued writes (finished third, first, fourth, second)",
        &model,
        &file.contents()?,
    )?;
    same_bytes(
        "device memory the queued writes came from",
        &source,
        &src.to_vec().map_err(|e| e.to_string())?,
    )
}

/// Poll `submitted` until it has finished, for at most `deadline`, with nobody waiting for it.
fn finishes_unattended(
    submitted: &Submitted,
    req: &OwnedRequest,
    deadline: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    while !submitted.is_finished() {
        if start.elapsed() > deadline {
            return Err(format!(
                "{} had not finished {deadline:?} after it was submitted with Submit::Queue, \
                 with nobody waiting for it: a queued request must make progress on the \
                 backend's own threads (or finish inside submit)",
                describe(req)
            ));
        }
        thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn queued_progress(f: &Fixture) -> Result<(), String> {
    let Units {
        align: a,
        chunk,
        odd,
    } = Units::of(f);
    let deadline = f.config().progress_deadline;
    let size = 3 * chunk + a - odd;
    let foff = a + odd;
    let offset = a + odd;

    let contents = pattern(22, 0, foff + size + a);
    let file = f.file("progress-read", &contents)?;
    let io = f.requests(file.handle)?;
    let dev = f.device(offset + size + a)?;
    let range = f.range(&dev, offset, size)?;
    let read = io.request(IoOp::Read, &range, foff as u64);
    let submitted = io.submit(&read)?;
    finishes_unattended(&submitted, &read, deadline)?;
    let mut expected = vec![SENTINEL; offset + size + a];
    expected[offset..offset + size].copy_from_slice(&contents[foff..foff + size]);
    same_bytes(
        "device memory once the queued read reported finished, before finishing it",
        &expected,
        &dev.to_vec().map_err(|e| e.to_string())?,
    )?;
    let done = io.finish(submitted, &read)?;
    if done.bytes != size {
        return Err(format!(
            "{} returned {}, expected {size}",
            describe(&read),
            done.bytes
        ));
    }

    let background = pattern(23, 0, foff + size + a);
    let target = f.file("progress-write", &background)?;
    let io = f.requests(target.handle)?;
    let mut src = f.device(offset + size + a)?;
    let data = pattern(24, 0, size);
    src.write_at(offset, &data).map_err(|e| e.to_string())?;
    let range = f.range(&src, offset, size)?;
    let write = io.request(IoOp::Write, &range, foff as u64);
    let submitted = io.submit(&write)?;
    finishes_unattended(&submitted, &write, deadline)?;
    let mut model = background;
    model[foff..foff + size].copy_from_slice(&data);
    same_bytes(
        "file once the queued write reported finished, before finishing it",
        &model,
        &target.contents()?,
    )?;
    let done = io.finish(submitted, &write)?;
    if done.bytes != size {
        return Err(format!(
            "{} returned {}, expected {size}",
            describe(&write),
            done.bytes
        ));
    }
    Ok(())
}

/// How long the `queued_drop_waits` case watches for bytes that arrive after the drop.
const AFTERMATH: Duration = Duration::from_millis(50);

fn queued_drop_waits(f: &Fixture) -> Result<(), String> {
    let Units {
        align: a,
        chunk,
        odd,
    } = Units::of(f);
    let size = 3 * chunk + a - odd;
    let foff = odd;
    let offset = a + odd;
    let dev_len = offset + size + a;

    let contents = pattern(25, 0, foff + size + a);
    let file = f.file("dropped-read", &contents)?;
    let io = f.requests(file.handle)?;
    let mut dev = f.device(dev_len)?;
    let range = f.range(&dev, offset, size)?;
    let read = io.request(IoOp::Read, &range, foff as u64);
    drop(io.submit(&read)?);
    let mut expected = vec![SENTINEL; dev_len];
    expected[offset..offset + size].copy_from_slice(&contents[foff..foff + size]);
    same_bytes(
        "device memory right after dropping the unfinished queued read",
        &expected,
        &dev.to_vec().map_err(|e| e.to_string())?,
    )?;
    dev.fill(SENTINEL).map_err(|e| e.to_string())?;
    thread::sleep(AFTERMATH);
    same_bytes(
        &format!("device memory {AFTERMATH:?} after the dropped read, refilled with sentinels"),
        &vec![SENTINEL; dev_len],
        &dev.to_vec().map_err(|e| e.to_string())?,
    )?;

    let background = pattern(26, 0, foff + size + a);
    let target = f.file("dropped-write", &background)?;
    let io = f.requests(target.handle)?;
    let mut src = f.device(dev_len)?;
    let data = pattern(27, 0, size);
    src.write_at(offset, &data).map_err(|e| e.to_string())?;
    let range = f.range(&src, offset, size)?;
    let write = io.request(IoOp::Write, &range, foff as u64);
    drop(io.submit(&write)?);
    let mut model = background.clone();
    model[foff..foff + size].copy_from_slice(&data);
    same_bytes(
        "file right after dropping the unfinished queued write",
        &model,
        &target.contents()?,
    )?;
    target.reset(&background)?;
    src.fill(!SENTINEL).map_err(|e| e.to_string())?;
    thread::sleep(AFTERMATH);
    same_bytes(
        &format!("file {AFTERMATH:?} after the dropped write, put back as it was"),
        &background,
        &target.contents()?,
    )
}

/// A fixture whose driver runs `script` over the configured file IO, or `None` when the
/// backend does not go through the driver's file IO.
fn always_on(_: &ConformanceConfig) -> Option<&'static str> {
    None
}

fn without_file_io_faults(cfg: &ConformanceConfig) -> Option<&'static str> {
    (!cfg.file_io_faults)
        .then_some("file_io_faults is off: the backend moves no bytes through FileIo")
}

fn scripted(
    f: &Fixture,
    script: impl FnOnce(ScriptedIo) -> ScriptedIo,
) -> Result<Option<(Fixture, Arc<ScriptedIo>)>, String> {
    if !f.config().file_io_faults {
        return Ok(None);
    }
    let inner: Arc<dyn FileIo> = f.config().io.clone().unwrap_or_else(|| Arc::new(PosixIo));
    let io = Arc::new(script(ScriptedIo::wrapping(inner)));
    let g = Fixture::with_io(f.backend(), f.config(), Some(io.clone()))?;
    Ok(Some((g, io)))
}

fn expect_fired(io: &ScriptedIo, want: usize) -> Result<(), String> {
    let fired = io.fired();
    if fired.len() < want {
        return Err(format!(
            "only {} of the {want} scripted faults fired ({fired:?}): does the backend move \
             bytes through the driver's FileIo? If not, set file_io_faults: false",
            fired.len()
        ));
    }
    Ok(())
}

fn faults_lose_no_byte(f: &Fixture) -> Result<(), String> {
    let Some((g, io)) = scripted(f, |s| {
        s.interrupt_pread(1)
            .interrupt_pwrite(1)
            .short_pread(2, 1)
            .short_pwrite(2, 4095)
            .short_pread(4, 4097)
            .short_pwrite(4, 1)
    })?
    else {
        return Ok(());
    };
    let size = 3 * g.chunk() + if g.config().aligned_only { 0 } else { 4097 };
    let file = g.file("faults", &[])?;
    let mut src = g.device(size)?;
    let data = pattern(11, 0, size);
    src.write_at(0, &data).map_err(|e| e.to_string())?;
    let n = g.io(IoOp::Write, file.handle, src.ptr(), size, 0, 0)?;
    if n != size {
        return Err(format!(
            "write under short/EINTR transfers returned {n}, expected {size}"
        ));
    }
    same_bytes(
        "file written under short/EINTR transfers",
        &data,
        &file.contents()?,
    )?;
    let dst = g.device(size + SLACK)?;
    let n = g.io(IoOp::Read, file.handle, dst.ptr(), size, 0, 0)?;
    if n != size {
        return Err(format!(
            "read under short/EINTR transfers returned {n}, expected {size}"
        ));
    }
    let mut expected = data;
    expected.resize(size + SLACK, SENTINEL);
    same_bytes(
        "device buffer read under short/EINTR transfers",
        &expected,
        &dst.to_vec().map_err(|e| e.to_string())?,
    )?;
    expect_fired(&io, 6)?;
    drop((file, src, dst));
    g.finish()
}

fn check_os_error(what: &str, r: hipfile_core::Result<usize>, errno: Errno) -> Result<(), String> {
    let name = std::io::Error::from_raw_os_error(errno.raw_os_error());
    match r {
        Ok(n) => Err(format!(
            "{what} returned {n} instead of failing with {name}"
        )),
        Err(e) if e.kind() == ErrorKind::Os && e.errno() == Some(errno.raw_os_error()) => Ok(()),
        Err(e) => Err(format!("{what} failed, but not with {name}: {e}")),
    }
}

fn eio_is_reported(f: &Fixture) -> Result<(), String> {
    let Some((g, io)) = scripted(f, |s| {
        s.fail_preads_from(1, Errno::IO)
            .fail_pwrites_from(1, Errno::IO)
    })?
    else {
        return Ok(());
    };
    let size = 2 * g.chunk();
    let contents = pattern(12, 0, size);
    let file = g.file("eio", &contents)?;
    let dev = g.device(size)?;
    let r = g
        .io(IoOp::Read, file.handle, dev.ptr(), size, 0, 0)
        .map_err(|f| f.error);
    check_os_error("a read whose every pread fails with EIO", r, Errno::IO)?;
    same_bytes(
        "device buffer after a read that read nothing",
        &vec![SENTINEL; size],
        &dev.to_vec().map_err(|e| e.to_string())?,
    )?;
    let r = g
        .io(IoOp::Write, file.handle, dev.ptr(), size, 0, 0)
        .map_err(|f| f.error);
    check_os_error("a write whose every pwrite fails with EIO", r, Errno::IO)?;
    same_bytes(
        "file after a write that wrote nothing",
        &contents,
        &file.contents()?,
    )?;
    expect_fired(&io, 2)?;
    drop((file, dev));
    g.finish()
}

fn enospc_is_reported(f: &Fixture) -> Result<(), String> {
    let Some((g, io)) = scripted(f, |s| s.fail_pwrite(2, Errno::NOSPC))? else {
        return Ok(());
    };
    let size = 4 * g.chunk();
    let file = g.file("enospc", &[])?;
    let mut src = g.device(size)?;
    src.write_at(0, &pattern(13, 0, size))
        .map_err(|e| e.to_string())?;
    let r = g
        .io(IoOp::Write, file.handle, src.ptr(), size, 0, 0)
        .map_err(|f| f.error);
    check_os_error(
        "a write whose 2nd pwrite fails with ENOSPC",
        r,
        Errno::NOSPC,
    )?;
    expect_fired(&io, 1)?;
    drop((file, src));
    g.finish()
}
