//! The stream engine of a session: the flag and mark words that hold applications' streams and
//! tell where they are, the watcher thread that sees a stream reach its op, and the runner
//! threads ops run on. What an op is and how it runs is the stream module's ([`crate::stream`]);
//! the engine sees it as an [`OrderedOp`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use hipfile_hip::{GpuRuntime, Hold, HostFlags, OwnedEvent, StreamRef};

use crate::error::{Error, ErrorKind, Result};
use crate::io::IoOp;

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

/// A stream-ordered op as the engine runs it.
pub(crate) trait OrderedOp: Send + fmt::Debug {
    /// Its direction, for log lines.
    fn op(&self) -> IoOp;
    /// Run it: its stream reached it.
    fn run(&self) -> Result<usize>;
    /// It ended with `outcome`: let its file and buffer go, write the result where the caller
    /// reads it, call `release` (its stream goes on), then let the rest go, its session last.
    fn end(self: Box<Self>, outcome: &Result<usize>, release: &mut dyn FnMut());
}

/// The target of the engine's log records: stream-ordered IO's, whichever of its two modules
/// writes them, so a filter on `hipfile_core::stream` sees them all.
const LOG_TARGET: &str = "hipfile_core::stream";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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

/// Lets an op's stream go on when dropped, whatever happened to the op (a panic included): a
/// stream must never wait forever on the library.
struct Release<'a> {
    engine: &'a StreamEngine,
    gate: Gate,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        if log::log_enabled!(target: LOG_TARGET, log::Level::Debug) {
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

/// An op queued on a stream, as the watcher keeps it.
#[derive(Debug)]
struct Queued {
    gate: Gate,
    /// When it was queued.
    queued_at: Instant,
    op: Box<dyn OrderedOp>,
}

/// What the watcher hears.
enum Message {
    /// An op to watch.
    Queued(Queued),
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
    /// device's streams store values and the settings allow it, `bypass` being their
    /// `stream_memops_bypass`; `false`: an event per op) and
    /// held (a stream memory wait where the platform holds streams so, else a host function).
    fn marking(&self, bypass: bool, device: i32) -> (bool, Hold) {
        if bypass {
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
    /// op, queued at `queued_at`, to the watcher. The word lock is held across the runtime
    /// calls, so the values of one word grow in the order the stream holds them. `bypass` is the
    /// settings' `stream_memops_bypass`.
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        bypass: bool,
        stream: &StreamRef<'_>,
        device: i32,
        op: Box<dyn OrderedOp>,
        queued_at: Instant,
    ) -> Result<()> {
        let (writes, how) = self.marking(bypass, device);
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
        self.watch(Queued {
            gate: Gate {
                seq,
                stream: key,
                event,
                word: line.word,
                value,
            },
            queued_at,
            op,
        });
        Ok(())
    }

    fn watch(self: &Arc<Self>, op: Queued) {
        let mut watcher = lock(&self.watcher);
        let mut message = Message::Queued(op);
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
        let mut streams: HashMap<StreamKey, VecDeque<Queued>> = HashMap::new();
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
        streams: &mut HashMap<StreamKey, VecDeque<Queued>>,
    ) {
        let devices: std::collections::BTreeSet<i32> = streams.keys().map(|k| k.device).collect();
        for device in devices {
            let Some(e) = self.probe(device) else {
                continue;
            };
            log::warn!(target: LOG_TARGET, "stream-ordered ops on device {device}: the device failed: {e}");
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
    fn waited(&self, op: &Queued) -> Option<Duration> {
        if !log::log_enabled!(target: LOG_TARGET, log::Level::Debug) {
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
    fn start(self: &Arc<Self>, queued: Queued, reached: Result<Option<Duration>>) {
        let engine = Arc::clone(self);
        let Queued { gate, op, .. } = queued;
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
                    target: LOG_TARGET,
                    "stream-ordered {} of {bytes} bytes on stream {:#x}: seen {} us after \
                     the stream's previous op ended (or it was queued), started {} us later, \
                     ran {} us",
                    op.op().name(),
                    release.gate.stream.raw,
                    waited.as_micros(),
                    started.saturating_duration_since(seen).as_micros(),
                    started.elapsed().as_micros()
                );
            }
            if let Err(e) = &outcome {
                log::warn!(
                    target: LOG_TARGET,
                    "stream-ordered {} on stream {:#x} failed: {e}",
                    op.op().name(),
                    release.gate.stream.raw
                );
            }
            // The op lets its file and buffer go before anyone can see it ended: an application
            // that synchronizes the stream, or waits for the result, may deregister them at once.
            // Its session goes last: the last share of a closed driver's session tears it down.
            let mut release = Some(release);
            op.end(&outcome, &mut || drop(release.take()));
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
