//! Stream-ordered IO: `hipFileReadAsync` / `hipFileWriteAsync` and stream registration.
//!
//! An op queued on an application's stream runs when the stream reaches it, and the work queued
//! after it on that stream runs once its bytes are in place and its result is written; the
//! caller's thread only enqueues. No host function does file IO, and nothing waits on the
//! caller's thread:
//!
//! 1. [`Driver::submit_async`] (the caller's thread) validates the op as upstream does at submit,
//!    marks the op's place on the stream, so that the library learns when the stream reached it,
//!    and makes the stream wait until the stream's flag word, a 32-bit word of host-mapped memory
//!    ([`HostFlags`]), reaches the op's value. Where the device's streams store values
//!    (`hipStreamWriteValue32`: AMD GPUs, the sim) the mark is such a store of the op's value
//!    into the stream's mark word, and the hold a stream memory wait (`hipStreamWaitValue32`):
//!    no event per op, one flag and one mark word per stream however many ops are queued on it.
//!    Elsewhere (NVIDIA, whose stream memory operations stall unrelated work; or with
//!    `stream_memops_bypass` set) an event is recorded per op (events are pooled) and a host
//!    function that only waits for the flag holds the stream ([`Hold`]). Then it hands the op
//!    to the session's stream engine and returns.
//! 2. The engine's watcher thread reads the mark (or queries the event) of the op at the head of
//!    each stream's queue. Once the stream reached an op, the op's arguments are bound (those
//!    the stream's flags do not fix are read through the caller's slots now, so work earlier on
//!    the stream may compute them) and
//!    the op runs on a runner thread as a synchronous request through the registry: the same
//!    engines, failover and statistics as `hipFileRead`/`hipFileWrite`, with
//!    [`IoRequest::stream_ordered`](crate::IoRequest::stream_ordered) set so the engines' own GPU
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

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use hipfile_hip::{GpuRuntime, Hold, HostFlags, OwnedEvent, StreamRef};

use crate::backend::IoOp;
use crate::driver::{Driver, FileHandleId, IoCall, Prepared, Session};
use crate::error::{Error, ErrorKind, Result};
use crate::stats::{ApiOp, Channel};
use crate::MAX_RW_COUNT;

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
/// Flag words in an engine: streams with ops in flight at once.
const FLAG_WORDS: usize = 4096;
/// Runner threads at most: ops running at once (one per stream that reached one).
const RUNNERS: usize = 64;
/// How long the watcher keeps polling without sleeping after something happened: the next op
/// of a stream whose op just ended is reached once the stream has seen the flag (tens of
/// microseconds through a host function), and a nap then would add its length to every op.
const SPIN: Duration = Duration::from_millis(2);
/// The longest sleep between two polls of a stream that has not reached its op.
const LONGEST_NAP: Duration = Duration::from_millis(1);
/// How long ops may wait with no stream moving before the watcher asks whether their devices
/// broke, and how often it asks again while they still wait.
const PROBE_AFTER: Duration = Duration::from_millis(250);
/// How long an idle watcher stays before it exits (the next op starts another).
const WATCHER_LINGER: Duration = Duration::from_secs(2);

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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The registered streams of a driver and their flags. Registration needs no open driver and
/// outlives its closing, as upstream's does.
#[derive(Debug, Default)]
pub(crate) struct StreamTable(HashMap<usize, u32>);

impl Driver {
    /// `hipFileStreamRegister`: remember `flags` for the stream whose raw handle is `stream`.
    /// Flags outside [`FLAGS_MASK`] and a stream already registered are invalid values.
    pub fn stream_register(&self, stream: usize, flags: u32) -> Result<()> {
        self.counted(
            ApiOp::StreamRegister,
            self.stream_register_counted(stream, flags),
        )
    }

    fn stream_register_counted(&self, stream: usize, flags: u32) -> Result<()> {
        if flags & !FLAGS_MASK != 0 {
            return Err(invalid("unknown stream flags"));
        }
        let mut table = self.stream_table();
        if table.0.contains_key(&stream) {
            return Err(invalid("the stream is already registered"));
        }
        table.0.insert(stream, flags);
        Ok(())
    }

    /// `hipFileStreamDeregister`: forget the stream. Ops already queued on it keep the flags
    /// they were submitted with. An unknown stream is an invalid value.
    pub fn stream_deregister(&self, stream: usize) -> Result<()> {
        let result = match self.stream_table().0.remove(&stream) {
            Some(_) => Ok(()),
            None => Err(invalid("the stream is not registered")),
        };
        self.counted(ApiOp::StreamDeregister, result)
    }

    /// The flags of a stream: its registration's, or 0 for a stream never registered (upstream
    /// treats it as registered with no flags).
    pub fn stream_flags(&self, stream: usize) -> u32 {
        self.stream_table().0.get(&stream).copied().unwrap_or(0)
    }

    /// The open session for an async op. A closed driver is opened (its use count becomes 1) and
    /// the op refused as an invalid value: cuFile's behaviour, which upstream mimics.
    pub fn async_session(&self) -> Result<Arc<Session>> {
        match self.session() {
            Some(session) => Ok(session),
            None => {
                self.open_implicitly()?;
                Err(invalid("the driver was not open"))
            }
        }
    }

    /// `hipFileReadAsync` / `hipFileWriteAsync` on an open `session`: validate with the values
    /// the caller's slots hold now, write 0 as the result, and queue the op on its stream. An
    /// op of 0 bytes queues nothing. Returns once the op is queued; see the module docs.
    pub fn submit_async(&self, session: &Arc<Session>, call: AsyncCall<'_>) -> Result<()> {
        let flags = self.stream_flags(call.stream.raw());
        let submitted = Bound::read(&*call.slots);
        submitted.check(flags)?;
        let prepared = session
            .prepare(&submitted.call(call.op, call.handle, call.buffer), false)
            .map_err(as_invalid_value)?;
        let device = call
            .stream
            .device()
            .map_err(|e| Error::hip(&e, "asking the stream's device"))?;
        if prepared.request.memory.device() != device {
            return Err(invalid("the buffer is on another device than the stream"));
        }
        call.slots.clear_result();
        if submitted.size == 0 {
            call.slots.set_result(&Ok(0));
            return Ok(());
        }
        let engine = session.stream_engine()?;
        engine.enqueue(
            session,
            call.stream,
            device,
            AsyncOp {
                op: call.op,
                handle: call.handle,
                buffer: call.buffer,
                flags,
                submitted,
                slots: call.slots,
                session: Arc::clone(session),
                held: prepared,
                gate: Gate::default(),
                queued_at: Instant::now(),
            },
        )
    }
}

/// The stream an op is ordered on, as the engine tells streams apart. A raw handle names one
/// stream, except the special handles, which name one stream per device: 0 (the null stream),
/// 1 (the legacy default stream) and 2 (the per-thread default stream, one per thread as well,
/// as is the null stream where it means the per-thread stream). Ops on two streams that share a
/// key would share a flag word: an op ending on one could then store a smaller value than the
/// other stream waits for after it stored the larger one, holding that stream for ever, and an
/// op could not start before another stream's op. Two keys for one stream cost nothing: the
/// stream itself orders the ops of both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct StreamKey {
    raw: usize,
    device: i32,
    thread: Option<std::thread::ThreadId>,
}

impl StreamKey {
    /// The key of the stream with raw handle `raw` on `device`, as the calling thread names it.
    fn of(raw: usize, device: i32) -> Self {
        StreamKey {
            raw,
            device,
            thread: (raw <= 2).then(|| std::thread::current().id()),
        }
    }
}

/// Where an op stands on its stream: what tells that the stream reached it (its mark: the mark
/// word reaching its value, or an event of its own) and the flag word and value that let the
/// stream go on.
#[derive(Debug, Default)]
struct Gate {
    /// The op's place among all ops queued on the engine: the watcher keeps each stream's ops in
    /// this order (the order the stream holds them), whatever order they reach it in.
    seq: u64,
    stream: StreamKey,
    /// The op's event, where its device's streams store no values.
    event: Option<OwnedEvent>,
    word: usize,
    value: u32,
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
    gate: Gate,
    /// When it was queued.
    queued_at: Instant,
}

impl AsyncOp {
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
        let mut prepared = self
            .session
            .prepare_on(
                Arc::clone(&self.held.request.file),
                &bound.call(self.op, self.handle, self.buffer),
                false,
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
}

/// Lets an op's stream go on when dropped, whatever happened to the op (a panic included): a
/// stream must never wait forever on the library.
struct Release<'a> {
    engine: &'a StreamEngine,
    gate: Gate,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if log::log_enabled!(log::Level::Debug) {
            if let Some(line) = lock(&self.engine.words)
                .by_stream
                .get_mut(&self.gate.stream)
            {
                line.ended_at = Some(Instant::now());
            }
        }
        // The result was written before: the stream's later work must see it.
        fence(Ordering::SeqCst);
        // The word is one the engine handed out, inside the flags: the store cannot fail.
        let _ = self.engine.flags.store(self.gate.word, self.gate.value);
        self.engine.settle(&mut self.gate);
    }
}

/// The flag word a stream with ops in flight holds.
#[derive(Clone, Copy, Debug)]
struct Line {
    word: usize,
    /// Ops queued on the stream and not ended.
    in_flight: usize,
    /// The last value handed out for the word.
    last: u32,
    /// When the stream's last op ended, while DEBUG logging is on: the next op's wait for its
    /// stream is timed from there.
    ended_at: Option<Instant>,
}

/// The flag words: held by streams, free, or never handed out.
#[derive(Debug, Default)]
struct Words {
    by_stream: HashMap<StreamKey, Line>,
    free: Vec<usize>,
    /// Words never handed out start here.
    fresh: usize,
    /// The next op's [`Gate::seq`].
    next_seq: u64,
}

/// A word whose values reached this is retired, so values never wrap (HIP compares them as
/// plain unsigned numbers).
const RETIRE_AT: u32 = u32::MAX - 1;

/// What the watcher hears.
enum Message {
    /// An op to watch.
    Queued(Box<AsyncOp>),
    /// An op ended: poll without napping for a while.
    Ended,
}

/// The stream engine of a session: flag and mark words, the watcher and the runners.
pub(crate) struct StreamEngine {
    runtime: Arc<dyn GpuRuntime>,
    /// What each stream with ops in flight waits for, one word per stream.
    flags: Arc<HostFlags>,
    /// Where each stream with ops in flight is: the stream stores an op's value into its word
    /// of these once it reached the op.
    marks: Arc<HostFlags>,
    words: Mutex<Words>,
    /// Per device: whether its streams can wait for a value and store one.
    memops: Mutex<HashMap<i32, (bool, bool)>>,
    /// Events of ops that ended, per device, for the next ops marked by events.
    events: Mutex<HashMap<i32, Vec<OwnedEvent>>>,
    /// Per device, made once an op waited long: a never-recorded event whose query answers the
    /// error of a context that broke (a sticky error), which no mark would ever tell.
    probes: Mutex<HashMap<i32, OwnedEvent>>,
    watcher: Mutex<Option<Sender<Message>>>,
    runners: Runners,
}

impl fmt::Debug for StreamEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamEngine").finish_non_exhaustive()
    }
}

impl StreamEngine {
    pub(crate) fn new(runtime: Arc<dyn GpuRuntime>) -> Result<Self> {
        let flags = HostFlags::new(Arc::clone(&runtime), FLAG_WORDS)
            .map_err(|e| Error::hip(&e, "allocating the stream flag words"))?;
        let marks = HostFlags::new(Arc::clone(&runtime), FLAG_WORDS)
            .map_err(|e| Error::hip(&e, "allocating the stream mark words"))?;
        Ok(StreamEngine {
            runtime,
            flags: Arc::new(flags),
            marks: Arc::new(marks),
            words: Mutex::new(Words::default()),
            memops: Mutex::new(HashMap::new()),
            probes: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            watcher: Mutex::new(None),
            runners: Runners::new(RUNNERS),
        })
    }

    /// How ops on streams of `device` are marked (`true`: a stream memory write, where the
    /// device's streams store values and the settings allow it; `false`: an event per op) and
    /// held (a stream memory wait where the platform holds streams so, else a host function).
    fn marking(&self, session: &Session, device: i32) -> (bool, Hold) {
        if session.settings().stream_memops_bypass {
            return (false, Hold::HostFunction);
        }
        let (waits, writes) = *lock(&self.memops).entry(device).or_insert_with(|| {
            (
                self.runtime.stream_memops(device),
                self.runtime.stream_writes(device),
            )
        });
        (
            writes,
            if waits {
                Hold::Memop
            } else {
                Hold::HostFunction
            },
        )
    }

    fn event(&self, device: i32) -> Result<OwnedEvent> {
        if let Some(event) = lock(&self.events).get_mut(&device).and_then(Vec::pop) {
            return Ok(event);
        }
        OwnedEvent::on_device(Arc::clone(&self.runtime), device)
            .map_err(|e| Error::hip(&e, "creating a stream event"))
    }

    /// The line of `stream`: the one it holds, or a free or fresh word, which starts from the
    /// value the word holds (every op that used it has ended).
    fn line(&self, words: &mut Words, stream: StreamKey) -> Result<Line> {
        if let Some(line) = words.by_stream.get(&stream) {
            if line.last < RETIRE_AT {
                return Ok(*line);
            }
        }
        loop {
            let word = match words.free.pop() {
                Some(word) => word,
                None if words.fresh < self.flags.len() => {
                    words.fresh += 1;
                    words.fresh - 1
                }
                None => {
                    return Err(Error::new(
                        ErrorKind::HipDriverError,
                        format!("more than {FLAG_WORDS} streams have ops in flight"),
                    ))
                }
            };
            let last = self.flags.load(word).unwrap_or(RETIRE_AT);
            if last < RETIRE_AT {
                return Ok(Line {
                    word,
                    in_flight: 0,
                    last,
                    ended_at: None,
                });
            }
        }
    }

    /// Mark the op's place on `stream` and hold the stream on the op's flag word, then hand the
    /// op to the watcher. The word lock is held across the runtime calls, so the values of one
    /// word grow in the order the stream holds them.
    fn enqueue(
        self: &Arc<Self>,
        session: &Session,
        stream: &StreamRef<'_>,
        device: i32,
        mut op: AsyncOp,
    ) -> Result<()> {
        let (writes, how) = self.marking(session, device);
        let event = match writes {
            true => None,
            false => Some(self.event(device)?),
        };
        let mut words = lock(&self.words);
        let key = StreamKey::of(stream.raw(), device);
        let mut line = self.line(&mut words, key)?;
        let value = line.last + 1;
        let queued = match &event {
            None => stream.mark_and_hold(&self.marks, &self.flags, line.word, value, how),
            Some(event) => stream
                .record(event)
                .and_then(|()| stream.hold(&self.flags, line.word, value, how)),
        };
        if let Err(e) = queued {
            // A mark store queued before the failure may still land, whenever the stream gets
            // there: the word could never again tell which op its stream reached. It is retired
            // (never freed); the stream's ops already on it end there, its next op takes another.
            line.last = RETIRE_AT;
            if line.in_flight > 0 {
                words.by_stream.insert(key, line);
            } else {
                words.by_stream.remove(&key);
            }
            drop(words);
            if let Some(event) = event {
                lock(&self.events).entry(device).or_default().push(event);
            }
            return Err(Error::hip(&e, "queueing the op on its stream"));
        }
        // A stream moved off a retired word keeps its old line's ops counted there until they
        // end; the retired word is never freed (see `settle`).
        line.in_flight += 1;
        line.last = value;
        words.by_stream.insert(key, line);
        let seq = words.next_seq;
        words.next_seq += 1;
        drop(words);
        op.gate = Gate {
            seq,
            stream: key,
            event,
            word: line.word,
            value,
        };
        self.watch(op);
        Ok(())
    }

    fn watch(self: &Arc<Self>, op: AsyncOp) {
        let mut watcher = lock(&self.watcher);
        let mut message = Message::Queued(Box::new(op));
        if let Some(tx) = watcher.as_ref() {
            match tx.send(message) {
                Ok(()) => return,
                Err(returned) => message = returned.0,
            }
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let _ = tx.send(message);
        let engine = Arc::clone(self);
        let watcher_rx = rx.clone();
        let spawned = std::thread::Builder::new()
            .name("hipfile-streams".into())
            .spawn(move || engine.watcher_loop(watcher_rx));
        match spawned {
            Ok(_) => *watcher = Some(tx),
            Err(e) => {
                // Nobody can watch the stream: the op ends now with the error, and its stream
                // is let go at once rather than never.
                drop(watcher);
                while let Ok(Message::Queued(op)) = rx.try_recv() {
                    let error = Error::new(
                        ErrorKind::InternalError,
                        format!("starting the stream watcher: {e}"),
                    );
                    self.start(op, Err(error));
                }
            }
        }
    }

    /// The watcher: reads the mark of each stream's oldest op and starts the op once its stream
    /// reached it.
    fn watcher_loop(self: Arc<Self>, rx: Receiver<Message>) {
        let mut streams: HashMap<StreamKey, VecDeque<Box<AsyncOp>>> = HashMap::new();
        let mut last_news = Instant::now();
        let mut probed = Instant::now();
        loop {
            let quiet = last_news.elapsed();
            let message = if quiet < SPIN {
                std::thread::yield_now();
                rx.try_recv().ok()
            } else if streams.is_empty() {
                match rx.recv_timeout(WATCHER_LINGER) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => {
                        let mut watcher = lock(&self.watcher);
                        if rx.is_empty() {
                            *watcher = None;
                            return;
                        }
                        None
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            } else {
                rx.recv_timeout((quiet / 4).min(LONGEST_NAP)).ok()
            };
            if let Some(message) = message {
                last_news = Instant::now();
                if let Message::Queued(op) = message {
                    // Two threads queueing on one stream may hand their ops over in either
                    // order; the stream reaches them in the order they were held.
                    let queue = streams.entry(op.gate.stream).or_default();
                    let at = queue.partition_point(|queued| queued.gate.seq < op.gate.seq);
                    queue.insert(at, op);
                }
                continue;
            }
            streams.retain(|_, queue| {
                while let Some(head) = queue.front() {
                    let gate = &head.gate;
                    // Marks of one word only grow: a mark at or past the op's value says the
                    // stream passed everything queued before the op.
                    let reached = match &gate.event {
                        Some(event) => event.query(),
                        None => Ok(self.marks.load(gate.word).is_some_and(|m| m >= gate.value)),
                    };
                    let op = match reached {
                        Ok(false) => break,
                        _ => queue.pop_front().expect("the head is there"),
                    };
                    match reached {
                        Err(e) => self.start(op, Err(Error::hip(&e, "waiting for the stream"))),
                        Ok(_) => {
                            let waited = self.waited(&op);
                            self.start(op, Ok(waited));
                        }
                    }
                    last_news = Instant::now();
                }
                !queue.is_empty()
            });
            let stuck = !streams.is_empty() && last_news.elapsed() >= PROBE_AFTER;
            if stuck && probed.elapsed() >= PROBE_AFTER {
                probed = Instant::now();
                self.end_ops_of_broken_devices(&mut streams);
            }
        }
    }

    /// Ops whose streams have not moved for a while may wait on a device whose context broke
    /// (a kernel fault leaves CUDA's context failing every call): no stream of it will ever
    /// store a mark. Ask each such device's probe; the ops of a broken one end with its error,
    /// which lets their streams go (a broken stream runs nothing more anyway).
    fn end_ops_of_broken_devices(
        self: &Arc<Self>,
        streams: &mut HashMap<StreamKey, VecDeque<Box<AsyncOp>>>,
    ) {
        let devices: std::collections::BTreeSet<i32> = streams.keys().map(|k| k.device).collect();
        for device in devices {
            let Some(e) = self.probe(device) else {
                continue;
            };
            log::warn!("stream-ordered ops on device {device}: the device failed: {e}");
            streams.retain(|key, queue| {
                if key.device != device {
                    return true;
                }
                for op in queue.drain(..) {
                    self.start(op, Err(Error::hip(&e, "the stream's device failed")));
                }
                false
            });
        }
    }

    /// The failure `device`'s context reports now, if any (see [`StreamEngine::probes`]).
    fn probe(&self, device: i32) -> Option<hipfile_hip::HipError> {
        let mut probes = lock(&self.probes);
        let probe = match probes.entry(device) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                match OwnedEvent::on_device(Arc::clone(&self.runtime), device) {
                    Ok(event) => v.insert(event),
                    Err(e) => return Some(e),
                }
            }
        };
        probe.query().err()
    }

    /// While DEBUG logging is on, how long the watcher took to see that `op`'s stream reached
    /// it: from the end of the stream's previous op, or from its queueing if that came later.
    fn waited(&self, op: &AsyncOp) -> Option<Duration> {
        if !log::log_enabled!(log::Level::Debug) {
            return None;
        }
        let ended = lock(&self.words)
            .by_stream
            .get(&op.gate.stream)
            .and_then(|line| line.ended_at);
        let since = ended.filter(|&t| t > op.queued_at).unwrap_or(op.queued_at);
        Some(since.elapsed())
    }

    /// Run an op whose stream reached it (or whose stream failed: then the failure is its
    /// result) on a runner; `reached` holds, while DEBUG logging is on, how long seeing that
    /// took ([`StreamEngine::waited`]).
    fn start(self: &Arc<Self>, mut op: Box<AsyncOp>, reached: Result<Option<Duration>>) {
        let engine = Arc::clone(self);
        let gate = std::mem::take(&mut op.gate);
        let seen = Instant::now();
        self.runners.run(Box::new(move || {
            let started = Instant::now();
            let release = Release {
                engine: &engine,
                gate,
            };
            // A panic in the engines must still end the op with a result (a Rust waiter would
            // otherwise wait for it forever); `release` lets the stream go either way.
            let waited = reached.as_ref().ok().copied().flatten();
            let outcome = reached.and_then(|_| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| op.run())).unwrap_or_else(
                    |_| {
                        Err(Error::new(
                            ErrorKind::InternalError,
                            "a stream-ordered op panicked",
                        ))
                    },
                )
            });
            if let (Some(waited), Ok(bytes)) = (waited, &outcome) {
                log::debug!(
                    "stream-ordered {} of {bytes} bytes on stream {:#x}: seen {} us after \
                     the stream's previous op ended (or it was queued), started {} us later, \
                     ran {} us",
                    crate::driver::op_name(op.op),
                    release.gate.stream.raw,
                    waited.as_micros(),
                    started.saturating_duration_since(seen).as_micros(),
                    started.elapsed().as_micros()
                );
            }
            if let Err(e) = &outcome {
                log::warn!(
                    "stream-ordered {} on stream {:#x} failed: {e}",
                    crate::driver::op_name(op.op),
                    release.gate.stream.raw
                );
            }
            // The op lets its file and buffer go before anyone can see it ended: an application
            // that synchronizes the stream, or waits for the result, may deregister them at once.
            // Its session goes last: the last share of a closed driver's session tears it down.
            let AsyncOp {
                held,
                slots,
                session,
                ..
            } = *op;
            drop(held);
            slots.set_result(&outcome);
            drop(release);
            drop(session);
        }));
    }

    /// An op ended: its stream's word is freed when the stream has nothing else in flight on it
    /// (a retired word is never freed).
    fn settle(&self, gate: &mut Gate) {
        if let Some(event) = gate.event.take() {
            lock(&self.events)
                .entry(gate.stream.device)
                .or_default()
                .push(event);
        }
        let mut words = lock(&self.words);
        if let Some(line) = words.by_stream.get_mut(&gate.stream) {
            if line.word == gate.word {
                line.in_flight -= 1;
                if line.in_flight == 0 {
                    let retired = line.last >= RETIRE_AT;
                    words.by_stream.remove(&gate.stream);
                    if !retired {
                        words.free.push(gate.word);
                    }
                }
            }
        }
        drop(words);
        if let Some(tx) = lock(&self.watcher).as_ref() {
            let _ = tx.send(Message::Ended);
        }
    }
}

type RunnerWork = Box<dyn FnOnce() + Send>;

/// The threads stream-ordered ops run on, one op each at a time. Threads start when an op finds
/// none idle (up to a limit; beyond it ops wait their turn) and leave after [`WATCHER_LINGER`]
/// without work. They are never joined: the engine may be dropped by the last op on a runner,
/// and the runners leave once the engine, which holds the only sender, is gone.
#[derive(Debug)]
struct Runners {
    tx: Sender<RunnerWork>,
    rx: Receiver<RunnerWork>,
    idle: Arc<std::sync::atomic::AtomicUsize>,
    live: Arc<std::sync::atomic::AtomicUsize>,
    limit: usize,
}

impl Runners {
    fn new(limit: usize) -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Runners {
            tx,
            rx,
            idle: Arc::default(),
            live: Arc::default(),
            limit,
        }
    }

    fn run(&self, work: RunnerWork) {
        // The receiver lives in `self`: sending cannot fail.
        let _ = self.tx.send(work);
        if self.idle.load(Ordering::Acquire) > 0 || self.live.load(Ordering::Acquire) >= self.limit
        {
            return;
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        let (rx, idle, live) = (
            self.rx.clone(),
            Arc::clone(&self.idle),
            Arc::clone(&self.live),
        );
        let spawned = std::thread::Builder::new()
            .name("hipfile-stream-op".into())
            .spawn(move || serve_ops(&rx, &idle, &live));
        if spawned.is_err() {
            self.live.fetch_sub(1, Ordering::AcqRel);
            if self.live.load(Ordering::Acquire) == 0 {
                // No thread to run it: run it here rather than leave its stream waiting.
                while let Ok(work) = self.rx.try_recv() {
                    work();
                }
            }
        }
    }
}

/// A runner's life: run ops until none came for [`WATCHER_LINGER`]. A runner that leaves while
/// an op was just queued stays for it (the submitter saw it idle and started nobody).
fn serve_ops(
    rx: &Receiver<RunnerWork>,
    idle: &std::sync::atomic::AtomicUsize,
    live: &std::sync::atomic::AtomicUsize,
) {
    loop {
        idle.fetch_add(1, Ordering::AcqRel);
        let next = rx.recv_timeout(WATCHER_LINGER);
        idle.fetch_sub(1, Ordering::AcqRel);
        match next {
            Ok(work) => work(),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                live.fetch_sub(1, Ordering::AcqRel);
                if rx.is_empty() {
                    return;
                }
                live.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    live.fetch_sub(1, Ordering::AcqRel);
}
