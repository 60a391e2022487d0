//! Stream-ordered IO: `hipFileReadAsync` / `hipFileWriteAsync` and stream registration.
//!
//! An op queued on an application's stream runs when the stream reaches it, and the work queued
//! after it on that stream runs once its bytes are in place and its result is written; the
//! caller's thread only enqueues. No host function does file IO, and nothing waits on the
//! caller's thread:
//!
//! 1. [`crate::Driver::submit_async`] (the caller's thread) validates the op as upstream does at submit,
//!    marks the op's place on the stream, so that the library learns when the stream reached it,
//!    and makes the stream wait until the stream's flag word, a 32-bit word of host-mapped memory
//!    ([`HostFlags`](hipfile_hip::HostFlags)), reaches the op's value. Where the device's streams store values
//!    (`hipStreamWriteValue32`: AMD GPUs, the sim) the mark is such a store of the op's value
//!    into the stream's mark word, and the hold a stream memory wait (`hipStreamWaitValue32`):
//!    no event per op, one flag and one mark word per stream however many ops are queued on it.
//!    Elsewhere (NVIDIA, whose stream memory operations stall unrelated work; or with
//!    `stream_memops_bypass` set) an event is recorded per op (events are pooled) and a host
//!    function that only waits for the flag holds the stream ([`Hold`](hipfile_hip::Hold)). Then it hands the op
//!    to the session's stream engine and returns.
//! 2. The engine's watcher thread reads the mark (or queries the event) of the op at the head of
//!    each stream's queue. Once the stream reached an op, the op's arguments are bound (those
//!    the stream's flags do not fix are read through the caller's slots now, so work earlier on
//!    the stream may compute them) and
//!    the op runs on a runner thread as a synchronous request through the registry: the same
//!    engines, failover and statistics as `hipFileRead`/`hipFileWrite`, with
//!    [`stream_ordered`](crate::OwnedRequest::stream_ordered) set so the engines' own GPU
//!    streams do not wait behind the application's.
//! 3. The runner writes the result into the caller's slot and stores the awaited value into the
//!    flag word: the stream goes on.
//!
//! Ops on one stream run strictly in stream order (the next op's mark is stored, or its event
//! completes, only after the previous op let the stream go); ops on different streams run side by side. Each stream with ops
//! in flight holds one flag word and the mark word of the same number; the values of a word only
//! grow (an op's value is one past the word's last), so a word can pass to another stream once
//! its own has nothing in flight, whatever the GPU has seen of it, and a mark at or past an op's
//! value always means the stream reached that op; a word whose mark may still land for an op
//! that was never queued (its hold failed after its mark) is retired. A device whose context
//! broke (a sticky error) lets no stream of it reach its op: ops that have waited a quarter of a
//! second with no stream moving ask the device (a never-recorded event's query answers its
//! error), and those of a broken device end with that error.
//!
//! Results follow upstream: the bytes moved; `-hipFileInvalidValue` (as [`ErrorKind::InvalidValue`])
//! for a bound size larger than at submission or a bound region that is invalid; an OS error for a
//! failing `pread`/`pwrite` (the C ABI writes -1, upstream's encoding). An op submitted before the
//! driver closed still runs when its stream reaches it, on the session it was submitted to: the
//! stream never hangs on the library, and the session lives until its last op ends.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use hipfile_hip::StreamRef;

use crate::config::MAX_RW_COUNT;
use crate::error::{Error, ErrorKind, Result};
use crate::io::IoOp;
use crate::session::{FileHandleId, Session};
use crate::stats::Channel;
use crate::stream_engine::OrderedOp;
use crate::validate::{self, IoCall, Prepared};

/// `HIPFILE_STREAM_FIXED_BUF_OFFSET`: the buffer offset is read at submission.
pub const FIXED_BUF_OFFSET: u32 = 1;
/// `HIPFILE_STREAM_FIXED_FILE_OFFSET`: the file offset is read at submission.
pub const FIXED_FILE_OFFSET: u32 = 1 << 1;
/// `HIPFILE_STREAM_FIXED_FILE_SIZE`: the size is read at submission.
pub const FIXED_FILE_SIZE: u32 = 1 << 2;
/// `HIPFILE_STREAM_PAGE_ALIGNED_INPUTS`: size and offsets are multiples of 4 KiB.
pub const PAGE_ALIGNED_INPUTS: u32 = 1 << 3;
/// Every stream flag.
pub const FLAGS_MASK: u32 = 0xf;

/// The alignment [`PAGE_ALIGNED_INPUTS`] promises.
const PAGE: u64 = 4096;

/// Where an op's arguments come from and its result goes: the caller's memory. The C ABI reads
/// and writes the caller's pointers; the Rust API owns its slots.
pub trait AsyncSlots: Send + Sync + fmt::Debug {
    /// The size to move, as the caller's slot holds it now.
    fn size(&self) -> usize;
    /// The file offset, as the caller's slot holds it now.
    fn file_offset(&self) -> i64;
    /// The buffer offset, as the caller's slot holds it now.
    fn buffer_offset(&self) -> i64;
    /// The op is queued: the result slot says 0 until the op ends (upstream writes 0 at
    /// submission).
    fn clear_result(&self);
    /// The op ended with `result`: written before its stream goes on.
    fn set_result(&self, result: &Result<usize>);
}

/// One stream-ordered op as the caller states it.
#[derive(Debug)]
pub struct AsyncCall<'a> {
    /// Direction.
    pub op: IoOp,
    /// The registered file.
    pub handle: FileHandleId,
    /// Buffer base: a registered buffer, or any device pointer.
    pub buffer: usize,
    /// The stream the op is ordered on.
    pub stream: &'a StreamRef<'a>,
    /// Arguments and result.
    pub slots: Arc<dyn AsyncSlots>,
}

/// The arguments of an op, bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Bound {
    size: usize,
    file_offset: i64,
    buffer_offset: i64,
}

impl Bound {
    fn read(slots: &dyn AsyncSlots) -> Self {
        Bound {
            size: slots.size().min(MAX_RW_COUNT),
            file_offset: slots.file_offset(),
            buffer_offset: slots.buffer_offset(),
        }
    }

    /// Negative offsets, and with [`PAGE_ALIGNED_INPUTS`] unaligned ones, are invalid values.
    fn check(&self, flags: u32) -> Result<()> {
        if self.file_offset < 0 || self.buffer_offset < 0 {
            return Err(invalid("a negative file or buffer offset"));
        }
        let aligned = |v: u64| v % PAGE == 0;
        if flags & PAGE_ALIGNED_INPUTS != 0
            && !(aligned(self.size as u64)
                && aligned(self.file_offset as u64)
                && aligned(self.buffer_offset as u64))
        {
            return Err(invalid(
                "the stream promises page-aligned inputs and this op's are not",
            ));
        }
        Ok(())
    }

    fn call(&self, op: IoOp, handle: FileHandleId, buffer: usize) -> IoCall {
        IoCall {
            op,
            handle,
            buffer,
            size: self.size,
            file_offset: self.file_offset,
            buffer_offset: self.buffer_offset,
        }
    }
}

fn invalid(why: &str) -> Error {
    Error::new(ErrorKind::InvalidValue, why.to_string())
}

/// Upstream answers every argument error of an async op with `hipFileInvalidValue`, where the
/// synchronous calls answer `EINVAL`.
fn as_invalid_value(e: Error) -> Error {
    if e.errno() == Some(rustix::io::Errno::INVAL.raw_os_error()) {
        Error::new(ErrorKind::InvalidValue, e.context().to_string())
    } else {
        e
    }
}

/// The registered streams of a driver and their flags. Registration needs no open driver and
/// outlives its closing, as upstream's does.
#[derive(Debug, Default)]
pub(crate) struct StreamTable(Mutex<HashMap<usize, u32>>);

impl StreamTable {
    fn table(&self) -> MutexGuard<'_, HashMap<usize, u32>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remember `flags` for the stream whose raw handle is `stream`. Flags outside
    /// [`FLAGS_MASK`] and a stream already registered are invalid values.
    pub(crate) fn register(&self, stream: usize, flags: u32) -> Result<()> {
        if flags & !FLAGS_MASK != 0 {
            return Err(invalid("unknown stream flags"));
        }
        let mut table = self.table();
        if table.contains_key(&stream) {
            return Err(invalid("the stream is already registered"));
        }
        table.insert(stream, flags);
        Ok(())
    }

    /// Forget the stream. Ops already queued on it keep the flags they were submitted with. An
    /// unknown stream is an invalid value.
    pub(crate) fn deregister(&self, stream: usize) -> Result<()> {
        match self.table().remove(&stream) {
            Some(_) => Ok(()),
            None => Err(invalid("the stream is not registered")),
        }
    }

    /// The flags of a stream: its registration's, or 0 for a stream never registered (upstream
    /// treats it as registered with no flags).
    pub(crate) fn flags(&self, stream: usize) -> u32 {
        self.table().get(&stream).copied().unwrap_or(0)
    }
}

/// The refusal of an async op on a closed driver, which the op's call opened (cuFile's
/// behaviour, which upstream mimics).
pub(crate) fn refused_while_closed() -> Error {
    invalid("the driver was not open")
}

/// Validate an op on an open `session` for a stream registered with `flags`, with the values the
/// caller's slots hold now, write 0 as the result, and queue the op on its stream. An op of 0
/// bytes queues nothing. Returns once the op is queued; see the module docs.
pub(crate) fn submit(session: &Arc<Session>, flags: u32, call: AsyncCall<'_>) -> Result<()> {
    let submitted = Bound::read(&*call.slots);
    submitted.check(flags)?;
    let prepared = validate::prepare(session, &submitted.call(call.op, call.handle, call.buffer))
        .map_err(as_invalid_value)?;
    let device = call
        .stream
        .device()
        .map_err(|e| Error::hip(&e, "asking the stream's device"))?;
    // Host memory belongs to no device: any stream may order IO on it.
    let memory = &prepared.request.memory;
    if memory.device_range().is_some() && memory.device() != device {
        return Err(invalid("the buffer is on another device than the stream"));
    }
    call.slots.clear_result();
    if submitted.size == 0 {
        call.slots.set_result(&Ok(0));
        return Ok(());
    }
    let engine = session.stream_engine()?;
    let queued_at = Instant::now();
    engine.enqueue(
        session.settings().stream_memops_bypass,
        call.stream,
        device,
        Box::new(AsyncOp {
            op: call.op,
            handle: call.handle,
            buffer: call.buffer,
            flags,
            submitted,
            slots: call.slots,
            session: Arc::clone(session),
            held: prepared,
        }),
        queued_at,
    )
}

/// An op queued on a stream.
#[derive(Debug)]
struct AsyncOp {
    op: IoOp,
    handle: FileHandleId,
    buffer: usize,
    flags: u32,
    submitted: Bound,
    slots: Arc<dyn AsyncSlots>,
    session: Arc<Session>,
    /// The file and buffer of the submission, counted as in flight until the op ends; the op
    /// runs on this registration of the file.
    held: Prepared,
}

impl OrderedOp for AsyncOp {
    fn op(&self) -> IoOp {
        self.op
    }

    /// Bind the arguments the stream's flags leave open and run the op as a synchronous request.
    fn run(&self) -> Result<usize> {
        let now = Bound::read(&*self.slots);
        let fixed = |flag: u32| self.flags & flag != 0;
        let bound = Bound {
            size: if fixed(FIXED_FILE_SIZE) {
                self.submitted.size
            } else {
                now.size
            },
            file_offset: if fixed(FIXED_FILE_OFFSET) {
                self.submitted.file_offset
            } else {
                now.file_offset
            },
            buffer_offset: if fixed(FIXED_BUF_OFFSET) {
                self.submitted.buffer_offset
            } else {
                now.buffer_offset
            },
        };
        if bound.size > self.submitted.size {
            return Err(invalid("the size grew after submission"));
        }
        bound.check(self.flags)?;
        if bound.size == 0 {
            return Ok(0);
        }
        let mut prepared = validate::prepare_on(
            &self.session,
            Arc::clone(&self.held.request.file),
            &bound.call(self.op, self.handle, self.buffer),
        )
        .map_err(as_invalid_value)?;
        if let Some(answer) = prepared.answer.take() {
            return answer;
        }
        prepared.request.stream_ordered = true;
        let start = self.session.stats().now_us();
        let request = prepared.request.request();
        let outcome = self.session.registry().dispatch(&request);
        self.session
            .count_io(self.op, Channel::Async, Some(&request), start, &outcome);
        outcome.map(|d| d.bytes)
    }

    fn end(self: Box<Self>, outcome: &Result<usize>, release: &mut dyn FnMut()) {
        let AsyncOp {
            held,
            slots,
            session,
            ..
        } = *self;
        drop(held);
        slots.set_result(outcome);
        release();
        drop(session);
    }
}
