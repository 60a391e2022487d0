//! Batches against a backend the test drives by hand: which entry finishes when, which one a
//! thread has started, which backend fails over. Bytes are the facade's and the C tests' job;
//! here it is the bookkeeping: order, capacity, timeouts, cancellation, failover, shutdown.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hipfile_core::*;
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::DeviceBuffer;

/// Requests the test finishes by hand, named by their file offset.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<GateState>,
    moved: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    released: HashSet<u64>,
    started: HashSet<u64>,
    withdrawn: HashSet<u64>,
    bells: HashMap<u64, Doorbell>,
    submitted: Vec<u64>,
}

impl Gate {
    fn release(&self, key: u64) {
        let mut s = self.state.lock().unwrap();
        s.released.insert(key);
        let bell = s.bells.get(&key).cloned();
        drop(s);
        self.moved.notify_all();
        if let Some(bell) = bell {
            bell.ring();
        }
    }

    fn start(&self, key: u64) {
        self.state.lock().unwrap().started.insert(key);
    }

    fn submitted(&self) -> Vec<u64> {
        self.state.lock().unwrap().submitted.clone()
    }
}

#[derive(Debug)]
struct Held {
    gate: Arc<Gate>,
    key: u64,
    size: usize,
}

impl PendingIo for Held {
    fn wait(self: Box<Self>) -> IoOutcome {
        let mut s = self.gate.state.lock().unwrap();
        while !s.released.contains(&self.key) && !s.withdrawn.contains(&self.key) {
            s = self.gate.moved.wait(s).unwrap();
        }
        Ok(if s.withdrawn.contains(&self.key) {
            0
        } else {
            self.size
        })
    }

    fn is_finished(&self) -> bool {
        let s = self.gate.state.lock().unwrap();
        s.released.contains(&self.key) || s.withdrawn.contains(&self.key)
    }

    fn cancel(&self) -> bool {
        let mut s = self.gate.state.lock().unwrap();
        if s.started.contains(&self.key) || s.released.contains(&self.key) {
            return false;
        }
        s.withdrawn.insert(self.key);
        true
    }
}

#[derive(Debug)]
struct GateBackend(Arc<Gate>);

impl Backend for GateBackend {
    fn name(&self) -> &'static str {
        "gate"
    }
    fn accepts(&self, _req: &IoRequest<'_>) -> Result<(), Decline> {
        Ok(())
    }
    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        assert_eq!(how, Submit::Queue, "batch entries are queued");
        let key = req.file_offset;
        let mut s = self.0.state.lock().unwrap();
        s.submitted.push(key);
        if let Some(bell) = &req.doorbell {
            s.bells.insert(key, bell.clone());
        }
        Completion::pending(Box::new(Held {
            gate: Arc::clone(&self.0),
            key,
            size: req.size(),
        }))
    }
}

/// Fails every request with ENODEV, which fails over.
#[derive(Debug)]
struct NoDevice;

impl Backend for NoDevice {
    fn name(&self) -> &'static str {
        "nodev"
    }
    fn accepts(&self, _req: &IoRequest<'_>) -> Result<(), Decline> {
        Ok(())
    }
    fn submit(&self, _req: &IoRequest<'_>, _how: Submit) -> Completion {
        Completion::ready(Err(IoFailure::new(
            Error::os(libc_enodev(), "no device"),
            0,
        )))
    }
}

fn libc_enodev() -> i32 {
    rustix::io::Errno::NODEV.raw_os_error()
}

thread_local! {
    static GATE: RefCell<Option<Arc<Gate>>> = const { RefCell::new(None) };
}

fn gate_backend(_: &BackendContext) -> Result<Arc<dyn Backend>> {
    let gate = GATE
        .with(|g| g.borrow().clone())
        .expect("the test set a gate");
    Ok(Arc::new(GateBackend(gate)))
}

struct Setup {
    driver: Driver,
    gate: Arc<Gate>,
    _dir: tempfile::TempDir,
    _file: std::fs::File,
    handle: FileHandleId,
    memory: DeviceBuffer,
}

fn setup(with_nodev: bool, change: impl FnOnce(&mut Settings)) -> Setup {
    let gate = Arc::new(Gate::default());
    GATE.with(|g| *g.borrow_mut() = Some(Arc::clone(&gate)));
    let mut backends = RegistryBuilder::new();
    backends
        .add(BackendDescriptor {
            name: "gate",
            priority: 1,
            path: IoPath::Staged,
            init: gate_backend,
        })
        .unwrap();
    if with_nodev {
        backends
            .add(BackendDescriptor {
                name: "nodev",
                priority: 2,
                path: IoPath::Direct,
                init: |_| Ok(Arc::new(NoDevice)),
            })
            .unwrap();
    }
    let runtime = Arc::new(SimRuntime::default());
    let mut settings = Settings {
        stats_level: 1,
        ..Settings::default()
    };
    change(&mut settings);
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        settings,
        ..DriverOptions::with_runtime(runtime.clone())
    });
    driver.open().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    let memory = DeviceBuffer::new(runtime, 1 << 20).unwrap();
    Setup {
        driver,
        gate,
        _dir: dir,
        _file: file,
        handle,
        memory,
    }
}

impl Setup {
    /// A 4 KiB read at `key` KiB of the file, tagged `key`.
    fn entry(&self, key: u64) -> BatchEntry {
        BatchEntry {
            call: IoCall {
                op: IoOp::Read,
                handle: self.handle,
                buffer: self.memory.ptr(),
                size: 4096,
                file_offset: (key * 4096) as i64,
                buffer_offset: 0,
                loan: None,
            },
            cookie: key as usize,
        }
    }

    fn release(&self, key: u64) {
        self.gate.release(key * 4096);
    }
}

fn cookies(events: &[BatchEvent]) -> Vec<usize> {
    events.iter().map(|e| e.cookie).collect()
}

#[test]
fn entries_are_reaped_as_they_finish_in_submission_order() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(8).unwrap();
    s.driver
        .batch_submit(b, &[s.entry(1), s.entry(2), s.entry(3)])
        .unwrap();
    assert_eq!(
        s.gate.submitted(),
        [4096, 8192, 12288],
        "all queued at once"
    );
    let none = s.driver.batch_status(b, 0, 8, None).unwrap();
    assert!(none.is_empty(), "nothing has finished");
    s.release(3);
    s.release(1);
    let events = s.driver.batch_status(b, 2, 8, None).unwrap();
    assert_eq!(cookies(&events), [1, 3]);
    assert!(events
        .iter()
        .all(|e| e.status == BatchStatus::Complete && *e.result.as_ref().unwrap() == 4096));
    // A waiter for one more wakes when the last entry finishes on another thread.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            s.release(2);
        });
        let events = s.driver.batch_status(b, 1, 8, None).unwrap();
        assert_eq!(cookies(&events), [2]);
    });
    // Nothing outstanding: an answer at once, even when asked to wait for one.
    assert!(s.driver.batch_status(b, 1, 8, None).unwrap().is_empty());
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn a_status_wait_ends_at_its_timeout_with_what_finished() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(4).unwrap();
    s.driver.batch_submit(b, &[s.entry(1), s.entry(2)]).unwrap();
    s.release(2);
    let since = Instant::now();
    let events = s
        .driver
        .batch_status(b, 2, 4, Some(Duration::from_millis(30)))
        .unwrap();
    assert!(since.elapsed() >= Duration::from_millis(30));
    assert_eq!(cookies(&events), [2]);
    s.release(1);
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn unreaped_entries_count_against_the_capacity() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(2).unwrap();
    s.driver.batch_submit(b, &[s.entry(1), s.entry(2)]).unwrap();
    s.release(1);
    s.release(2);
    let full = s.driver.batch_submit(b, &[s.entry(3)]).unwrap_err();
    assert_eq!(full.kind(), ErrorKind::BatchFull);
    assert_eq!(s.driver.batch_status(b, 1, 1, None).unwrap().len(), 1);
    s.driver.batch_submit(b, &[s.entry(3)]).unwrap();
    let full = s.driver.batch_submit(b, &[s.entry(4)]).unwrap_err();
    assert_eq!(full.kind(), ErrorKind::BatchFull);
    s.release(3);
    assert_eq!(
        cookies(&s.driver.batch_status(b, 2, 2, None).unwrap()),
        [2, 3]
    );
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn one_bad_entry_queues_nothing() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(4).unwrap();
    let mut bad = s.entry(2);
    bad.call.file_offset = -4096;
    let e = s
        .driver
        .batch_submit(b, &[s.entry(1), bad, s.entry(3)])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
    let mut unknown = s.entry(2);
    unknown.call.handle = FileHandleId(999_999);
    let e = s
        .driver
        .batch_submit(b, &[s.entry(1), unknown])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HandleNotRegistered);
    let mut past = s.entry(2);
    past.call.buffer_offset = 1 << 20;
    past.call.size = 0;
    let e = s.driver.batch_submit(b, &[past]).unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidValue,
        "an offset at the buffer's end"
    );
    assert!(s.gate.submitted().is_empty());
    assert!(s.driver.batch_status(b, 0, 4, None).unwrap().is_empty());
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn cancel_withdraws_what_has_not_started_and_waits_for_the_rest() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(4).unwrap();
    s.driver
        .batch_submit(b, &[s.entry(1), s.entry(2), s.entry(3)])
        .unwrap();
    s.gate.start(2 * 4096);
    std::thread::scope(|scope| {
        let releaser = scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(30));
            s.release(2);
            Instant::now()
        });
        s.driver.batch_cancel(b).unwrap();
        let released = releaser.join().unwrap();
        assert!(
            Instant::now() >= released,
            "cancel waited for the started entry"
        );
    });
    let events = s.driver.batch_status(b, 3, 4, None).unwrap();
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.cookie, e.status, *e.result.as_ref().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            (1, BatchStatus::Canceled, 0),
            (2, BatchStatus::Complete, 4096),
            (3, BatchStatus::Canceled, 0)
        ]
    );
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn an_entry_past_the_batch_timeout_reports_timeout_and_keeps_its_place() {
    let s = setup(false, |settings| settings.batch_io_timeout_ms = 40);
    let b = s.driver.batch_setup(2).unwrap();
    s.driver.batch_submit(b, &[s.entry(1), s.entry(2)]).unwrap();
    s.release(2);
    let events = s.driver.batch_status(b, 2, 2, None).unwrap();
    assert_eq!(cookies(&events), [1, 2]);
    assert_eq!(events[0].status, BatchStatus::Timeout);
    assert_eq!(events[0].result.as_ref().unwrap_err().errno(), Some(110));
    assert_eq!(events[1].status, BatchStatus::Complete);
    // Still running: it holds its place until it finishes, and its bytes are never reported.
    let full = s
        .driver
        .batch_submit(b, &[s.entry(3), s.entry(4)])
        .unwrap_err();
    assert_eq!(full.kind(), ErrorKind::BatchFull);
    s.release(1);
    assert!(s.driver.batch_status(b, 0, 2, None).unwrap().is_empty());
    s.driver.batch_submit(b, &[s.entry(3), s.entry(4)]).unwrap();
    s.release(3);
    s.release(4);
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn an_entry_fails_over_to_the_next_backend_by_itself() {
    let s = setup(true, |_| {});
    let b = s.driver.batch_setup(2).unwrap();
    s.driver.batch_submit(b, &[s.entry(1), s.entry(2)]).unwrap();
    assert_eq!(s.gate.submitted(), [4096, 8192], "both failed over at once");
    s.release(1);
    s.release(2);
    let events = s.driver.batch_status(b, 2, 2, None).unwrap();
    assert!(events.iter().all(|e| e.status == BatchStatus::Complete));
    let stats = s.driver.session().unwrap().stats().snapshot();
    assert_eq!(stats.backend("gate").unwrap().ops, 2, "{stats:?}");
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn closing_the_driver_destroys_its_batches_after_their_entries_finish() {
    let s = setup(false, |_| {});
    let closed_batch = s.driver.batch_setup(2).unwrap();
    s.driver.batch_submit(closed_batch, &[s.entry(1)]).unwrap();
    s.gate.start(4096);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            s.release(1);
        });
        s.driver.close().unwrap();
    });
    assert_eq!(s.driver.batch_count(), 0);
    let e = s.driver.batch_status(closed_batch, 0, 1, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidValue);
}

#[test]
fn setup_needs_no_open_driver_and_checks_the_capacity() {
    let driver = Driver::new(DriverOptions {
        backends: Some(RegistryBuilder::new()),
        ..DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
    });
    let b = driver.batch_setup(128).unwrap();
    assert_eq!(driver.use_count(), 0);
    for bad in [0, 129] {
        assert_eq!(
            driver.batch_setup(bad).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
    }
    driver.stage_settings(|s| s.max_batch_io_size = 4).unwrap();
    assert_eq!(
        driver.batch_setup(5).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    let e = driver.batch_submit(b, &[]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DriverNotInitialized);
    for (min, max) in [(0, 0), (2, 1)] {
        let e = driver.batch_status(b, min, max, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidValue);
    }
    assert!(driver.batch_status(b, 0, 1, None).unwrap().is_empty());
    driver.batch_destroy(b).unwrap();
    assert_eq!(
        driver.batch_destroy(b).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        driver.batch_cancel(BatchId(0)).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
}

#[test]
fn a_minimum_above_the_entries_outstanding_waits_for_those_only() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(8).unwrap();
    s.driver.batch_submit(b, &[s.entry(1), s.entry(2)]).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(10));
            s.release(1);
            s.release(2);
        });
        // With no timeout: it would wait forever for 4.
        let events = s.driver.batch_status(b, 4, 8, None).unwrap();
        assert_eq!(cookies(&events), [1, 2]);
    });
    assert_eq!(s.driver.batch_room(b).unwrap(), 8);
    s.driver.batch_destroy(b).unwrap();
}

#[test]
fn an_empty_entry_at_the_largest_file_offset_completes_with_nothing() {
    let s = setup(false, |_| {});
    let b = s.driver.batch_setup(2).unwrap();
    let mut empty = s.entry(1);
    empty.call.file_offset = i64::MAX;
    empty.call.size = 0;
    s.driver.batch_submit(b, &[empty]).unwrap();
    let events = s.driver.batch_status(b, 1, 2, None).unwrap();
    assert_eq!(events[0].status, BatchStatus::Complete);
    assert_eq!(*events[0].result.as_ref().unwrap(), 0);
    assert!(
        s.gate.submitted().is_empty(),
        "no backend is asked to move nothing"
    );
    s.driver.batch_destroy(b).unwrap();
}
