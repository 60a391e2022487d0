//! Host memory as IO buffers (the setting `allow_system_memory`): pageable and pinned memory
//! read and written straight between file and memory by the `host` backend, O_DIRECT where
//! aligned, through every door (synchronous, batch, stream-ordered, registered buffers), and
//! refused as `HipMemoryTypeInvalid` with the setting off, as upstream hipFile answers, and with
//! it on wherever the request does not carry the application's loan of the bytes.

use std::fs::{File, OpenOptions};
use std::sync::Arc;
use std::time::Duration;

use hipfile::{
    BatchStatus, Driver, DriverOptions, ErrorKind, FileHandle, HostLoan, IoCall, IoOp, IoPath,
    Settings,
};
use hipfile_core::{BatchEntry, DeclineReason};
use hipfile_hip::{GpuRuntime, LentPinned, PinnedBuffer, StreamRef};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, scratch_dir};
use crate::no_access_page::NoAccessPage;
use crate::stream::submit_core_lent;

const LEN: usize = 64 << 10;

struct Setup {
    gpu: Arc<dyn GpuRuntime>,
    driver: Driver,
    dir: tempfile::TempDir,
}

/// A driver on the runtime under test with the built-in backends, counting at level 1, host
/// memory allowed or not.
fn setup(allow_host: bool) -> Setup {
    let gpu = runtime_under_test().unwrap().runtime;
    let settings = Settings {
        allow_system_memory: allow_host,
        ..Settings::default()
    };
    let driver = Driver::with_options(DriverOptions {
        settings,
        ..harness::counting_options(&gpu)
    })
    .unwrap();
    Setup {
        gpu,
        driver,
        dir: scratch_dir(),
    }
}

impl Setup {
    fn file(&self, name: &str, data: &[u8], options: &mut OpenOptions) -> (File, FileHandle) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, data).unwrap();
        let file = options.open(&path).unwrap();
        let handle = self.driver.register_file(&file).unwrap();
        (file, handle)
    }

    fn read_write(&self, name: &str, data: &[u8]) -> (File, FileHandle) {
        self.file(name, data, OpenOptions::new().read(true).write(true))
    }

    fn contents(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap()
    }

    fn host_counter(&self, name: &str) -> u64 {
        let stats = self.driver.stats().unwrap();
        let host = stats
            .backend("host")
            .expect("the host backend is registered");
        host.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// `len` bytes of `buf` starting at an address that is a multiple of `align`.
fn aligned(buf: &mut [u8], align: usize, len: usize) -> &mut [u8] {
    let skip = buf.as_ptr().align_offset(align);
    &mut buf[skip..skip + len]
}

#[test]
fn pageable_memory_is_read_and_written_straight_with_o_direct_where_aligned() {
    let s = setup(true);
    let data = pattern(3, 0, LEN);
    let (_file, handle) = s.read_write("data", &data);
    let registered = handle.file().unwrap();
    let align = registered.dio_align();
    let unit = align.offset.max(align.memory).max(512) as usize;

    let mut backing = vec![0u8; LEN + unit];
    let buf = aligned(&mut backing, unit, LEN);
    assert_eq!(handle.read_host(buf, 0).unwrap(), LEN);
    assert_eq!(buf, &data[..]);
    let direct = s.host_counter("o_direct_bytes");
    if registered.direct_fd().is_some() {
        assert_eq!(
            direct, LEN as u64,
            "aligned: through the O_DIRECT descriptor"
        );
    } else {
        assert_eq!(s.host_counter("page_cache_bytes"), LEN as u64);
    }

    // Unaligned: an odd offset and size, into an odd address.
    let mut odd = vec![0u8; 10_001];
    assert_eq!(handle.read_host(&mut odd[1..], 7).unwrap(), 10_000);
    assert_eq!(&odd[1..], &data[7..10_007]);
    assert_eq!(s.host_counter("o_direct_bytes"), direct, "no O_DIRECT");

    let fresh = pattern(4, 0, 3000);
    assert_eq!(handle.write_host(&fresh, 5).unwrap(), 3000);
    let mut aligned_src = vec![0u8; 8192 + unit];
    let src = aligned(&mut aligned_src, unit, 8192);
    src.copy_from_slice(&pattern(5, 0, 8192));
    assert_eq!(handle.write_host(src, 16384).unwrap(), 8192);
    let mut expected = data.clone();
    expected[5..3005].copy_from_slice(&fresh);
    expected[16384..24576].copy_from_slice(src);
    assert_eq!(s.contents("data"), expected);
    if registered.direct_fd().is_some() {
        assert_eq!(s.host_counter("o_direct_bytes"), direct + 8192);
    }

    let stats = s.driver.stats().unwrap();
    assert_eq!(stats.ops_by(IoPath::Host), 4);
    assert_eq!((stats.read.host, stats.write.host), (2, 2));
    assert_eq!(
        stats.ops_by(IoPath::Staged) + stats.ops_by(IoPath::Direct),
        0
    );
    let staged = stats.backend("fallback").unwrap();
    assert_eq!(staged.declined(DeclineReason::HostMemory), 4);
}

#[test]
fn pinned_memory_registered_or_not_is_served_by_the_host_path() {
    let s = setup(true);
    let data = pattern(6, 0, LEN);
    let (_file, handle) = s.read_write("data", &data);
    let mut pinned = PinnedBuffer::new(Arc::clone(&s.gpu), LEN).unwrap();
    assert_eq!(handle.read_host(pinned.as_mut_slice(), 0).unwrap(), LEN);
    assert_eq!(pinned.as_slice(), &data[..]);

    // Registered: an interior offset of the registration, both directions. The registration
    // holds the loan; its requests carry none.
    let core = s.driver.core();
    let pinned = LentPinned::new(pinned);
    let base = pinned.ptr();
    core.buf_register_lent(pinned.loan(), 0).unwrap();
    pinned.with_bytes(|b| b.fill(0));
    let call = |op, size, file_offset, buffer_offset| IoCall {
        op,
        handle: handle.id(),
        buffer: base,
        size,
        file_offset,
        buffer_offset,
        loan: None,
    };
    assert_eq!(core.io(call(IoOp::Read, 4096, 8192, 100)).unwrap(), 4096);
    pinned.with_bytes(|b| assert_eq!(&b[100..4196], &data[8192..12288]));
    assert_eq!(core.io(call(IoOp::Write, 4096, 0, 100)).unwrap(), 4096);
    assert_eq!(s.contents("data")[..4096], data[8192..12288]);
    let past = core.io(call(IoOp::Read, LEN, 0, 100)).unwrap_err();
    assert_eq!(
        past.kind(),
        ErrorKind::InvalidValue,
        "past the registration"
    );
    core.buf_deregister(base).unwrap();
    assert_eq!(s.driver.stats().unwrap().ops_by(IoPath::Host), 3);
}

#[test]
fn a_read_is_short_only_at_the_end_of_the_file() {
    let s = setup(true);
    let data = pattern(7, 0, 10_000);
    let (_file, handle) = s.read_write("data", &data);
    // Aligned, so O_DIRECT serves what it can: the bytes past the end of the file stay as they
    // were, as `pread` leaves them (a direct read would zero the rest of the last block).
    let mut backing = vec![0xeeu8; 16384 + 4096];
    let buf = aligned(&mut backing, 4096, 16384);
    assert_eq!(handle.read_host(buf, 8192).unwrap(), 10_000 - 8192);
    assert_eq!(&buf[..1808], &data[8192..]);
    assert!(
        buf[1808..].iter().all(|&b| b == 0xee),
        "past the bytes read"
    );
    assert_eq!(handle.read_host(buf, 10_000).unwrap(), 0, "at the end");
    assert_eq!(handle.read_host(buf, 20_000).unwrap(), 0, "past the end");
}

#[test]
fn an_append_descriptor_appends_and_a_read_only_one_refuses_writes() {
    let s = setup(true);
    let (_file, appending) = s.file("log", b"head", OpenOptions::new().read(true).append(true));
    assert_eq!(appending.write_host(b"-one", 0).unwrap(), 4);
    assert_eq!(appending.write_host(b"-two", 1).unwrap(), 4);
    assert_eq!(s.contents("log"), b"head-one-two");

    let (_file, read_only) = s.file("ro", b"fixed", OpenOptions::new().read(true));
    let e = read_only.write_host(b"no", 0).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EBADF), "{e}");
    assert_eq!(s.contents("ro"), b"fixed");
}

#[test]
fn a_host_address_the_process_cannot_touch_is_efault_not_a_crash() {
    let s = setup(true);
    let data = pattern(8, 0, 8192);
    let (_file, handle) = s.read_write("data", &data);
    let page = NoAccessPage::new();
    let bad = page.addr();
    for op in [IoOp::Read, IoOp::Write] {
        // SAFETY: the page is this test's own mapping, which nothing else uses while the
        // request runs (and the kernel refuses to touch).
        let loan = unsafe { HostLoan::lend_mut(bad, 4096) };
        let e = s
            .driver
            .core()
            .io(IoCall {
                op,
                handle: handle.id(),
                buffer: bad,
                size: 4096,
                file_offset: 0,
                buffer_offset: 0,
                loan: Some(loan),
            })
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EFAULT), "{op:?}: {e}");
    }
    assert_eq!(s.contents("data"), data, "nothing written");
}

/// Every core door that names host memory at `base` for a read of 4096 bytes (`loan` the one
/// its requests carry): the error of each, by name. A registration registers what its loan
/// lends, so it is tried only where the loan lends the 4096 bytes at `base`.
fn refusals_at(
    s: &Setup,
    handle: &FileHandle,
    base: usize,
    loan: impl Fn() -> Option<HostLoan>,
) -> Vec<(&'static str, ErrorKind)> {
    let core = s.driver.core();
    let mut errors = Vec::new();
    let registered = match loan() {
        Some(loan) if loan.ptr() == base && loan.len() == 4096 => {
            Some(core.buf_register_lent(loan, 0))
        }
        Some(_) => None,
        None => Some(core.buf_register(base, 4096, 0)),
    };
    if let Some(registered) = registered {
        errors.push(("registration", registered.unwrap_err().kind()));
    }
    let call = IoCall {
        op: IoOp::Read,
        handle: handle.id(),
        buffer: base,
        size: 4096,
        file_offset: 0,
        buffer_offset: 0,
        loan: loan(),
    };
    errors.push(("read", core.io(call.clone()).unwrap_err().kind()));
    let batch = core.batch_setup(1).unwrap();
    let e = core
        .batch_submit(batch, &[BatchEntry { call, cookie: 1 }])
        .unwrap_err();
    errors.push(("batch entry", e.kind()));
    core.batch_destroy(batch).unwrap();
    let stream = StreamRef::null(&s.gpu);
    let e = submit_core_lent(
        core,
        IoOp::Read,
        handle.id(),
        base,
        4096,
        0,
        &stream,
        loan(),
    )
    .unwrap_err();
    errors.push(("stream op", e.kind()));
    errors
}

const EVERY_DOOR_REFUSED: [(&str, ErrorKind); 4] = [
    ("registration", ErrorKind::HipMemoryTypeInvalid),
    ("read", ErrorKind::HipMemoryTypeInvalid),
    ("batch entry", ErrorKind::HipMemoryTypeInvalid),
    ("stream op", ErrorKind::HipMemoryTypeInvalid),
];

#[test]
fn with_the_setting_off_host_memory_is_an_invalid_memory_type_everywhere() {
    let s = setup(false);
    let data = pattern(9, 0, 8192);
    let (_file, handle) = s.read_write("data", &data);
    let mut pageable = vec![0u8; 4096];
    let e = handle.read_host(&mut pageable, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HipMemoryTypeInvalid);
    let e = handle.write_host(&pageable, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HipMemoryTypeInvalid);
    let pinned = PinnedBuffer::new(Arc::clone(&s.gpu), 4096).unwrap();
    let pinned = LentPinned::new(pinned);
    pinned.with_bytes(|b| {
        let e = handle.read_host(b, 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HipMemoryTypeInvalid);
    });

    // Lent or not, the setting refuses it.
    let base = pinned.ptr();
    assert_eq!(
        refusals_at(&s, &handle, base, || Some(pinned.loan())),
        EVERY_DOOR_REFUSED
    );
    assert_eq!(refusals_at(&s, &handle, base, || None), EVERY_DOOR_REFUSED);
    HostLoan::scoped_mut(&mut pageable, |loan| {
        let base = loan.ptr();
        assert_eq!(
            refusals_at(&s, &handle, base, || Some(loan.clone())),
            EVERY_DOOR_REFUSED
        );
    });
    assert!(pageable.iter().all(|&b| b == 0));
    pinned.with_bytes(|b| assert!(b.iter().all(|&b| b == 0)));
}

#[test]
fn with_the_setting_on_host_memory_no_loan_covers_is_an_invalid_memory_type_everywhere() {
    let s = setup(true);
    let data = pattern(12, 0, 8192);
    let (_file, handle) = s.read_write("data", &data);
    let pinned = LentPinned::new(PinnedBuffer::new(Arc::clone(&s.gpu), 8192).unwrap());
    let mut pageable = vec![0u8; 8192];
    let pageable_at = pageable.as_ptr() as usize;
    for base in [pinned.ptr(), pageable_at] {
        assert_eq!(
            refusals_at(&s, &handle, base, || None),
            EVERY_DOOR_REFUSED,
            "no loan"
        );
    }
    // A loan of other bytes than the request names.
    let other = pinned.ptr() + 4096;
    // SAFETY: `pageable` is this test's own vector, not touched until the loan's requests end
    // (each is refused before it moves a byte, and `refusals_at` returns after them).
    let elsewhere = || Some(unsafe { HostLoan::lend_mut(pageable_at, 8192) });
    assert_eq!(
        refusals_at(&s, &handle, other, elsewhere),
        EVERY_DOOR_REFUSED[1..],
        "a loan elsewhere"
    );
    HostLoan::scoped_mut(&mut pageable[..4095], |loan| {
        assert_eq!(
            refusals_at(&s, &handle, pageable_at, || Some(loan.clone())),
            EVERY_DOOR_REFUSED[1..],
            "a loan one byte short"
        );
    });
    // Bytes lent for reading only take a write from them, never a read into them.
    HostLoan::scoped(&pageable, |loan| {
        let call = |op| IoCall {
            op,
            handle: handle.id(),
            buffer: pageable_at,
            size: 4096,
            file_offset: 0,
            buffer_offset: 0,
            loan: Some(loan.clone()),
        };
        let e = s.driver.core().io(call(IoOp::Read)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HipMemoryTypeInvalid);
        assert_eq!(s.driver.core().io(call(IoOp::Write)).unwrap(), 4096);
    });
    assert!(pageable.iter().all(|&b| b == 0), "no byte read into it");
    assert_eq!(s.contents("data")[..4096], [0u8; 4096]);
    assert_eq!(s.driver.stats().unwrap().ops_by(IoPath::Host), 1);
}

#[test]
fn with_the_setting_on_batches_and_stream_ordered_ops_take_host_memory() {
    let s = setup(true);
    let data = pattern(10, 0, LEN);
    let (_file, handle) = s.read_write("data", &data);
    let core = s.driver.core();
    let mut dst = vec![0u8; LEN];
    let base = dst.as_mut_ptr() as usize;
    HostLoan::scoped_mut(&mut dst, |loan| {
        let batch = core.batch_setup(2).unwrap();
        let entries: Vec<BatchEntry> = (0..2)
            .map(|i| BatchEntry {
                call: IoCall {
                    op: IoOp::Read,
                    handle: handle.id(),
                    buffer: base,
                    size: LEN / 2,
                    file_offset: (i * LEN / 2) as i64,
                    buffer_offset: (i * LEN / 2) as i64,
                    loan: Some(loan.clone()),
                },
                cookie: i,
            })
            .collect();
        core.batch_submit(batch, &entries).unwrap();
        let events = core
            .batch_status(batch, 2, 2, Some(Duration::from_secs(30)))
            .unwrap();
        assert_eq!(events.len(), 2);
        for event in &events {
            assert_eq!(event.status, BatchStatus::Complete, "{event:?}");
            assert_eq!(event.result.as_ref().ok(), Some(&(LEN / 2)));
        }
        core.batch_destroy(batch).unwrap();
    });
    assert_eq!(dst, data);

    let tail = pattern(11, 0, 4096);
    let stream = StreamRef::null(&s.gpu);
    let at = LEN as i64;
    let src = tail.as_ptr() as usize;
    HostLoan::scoped(&tail, |loan| {
        let slots = submit_core_lent(
            core,
            IoOp::Write,
            handle.id(),
            src,
            4096,
            at,
            &stream,
            Some(loan),
        )
        .unwrap();
        assert_eq!(slots.ended().unwrap(), 4096);
    });
    assert_eq!(s.contents("data"), [data, tail].concat());
    let stats = s.driver.stats().unwrap();
    assert_eq!(stats.ops_by(IoPath::Host), 3);
}

/// An aligned write from host memory that crosses the process's file size limit writes up to it
/// and fails with the kernel's `EFBIG`, as a `pwrite` does (an O_DIRECT write cut at an unaligned
/// limit would answer `EINVAL`). In a child process: the limit and the ignored `SIGXFSZ` are
/// process-wide.
#[test]
fn a_host_write_crossing_the_file_size_limit_fails_with_efbig_having_written_up_to_it() {
    const LIMIT: u64 = 20_000;
    let name = harness::test_name(
        module_path!(),
        "a_host_write_crossing_the_file_size_limit_fails_with_efbig_having_written_up_to_it",
    );
    if harness::as_child(&name, || {
        harness::ignore_signal(libc::SIGXFSZ).expect("ignoring SIGXFSZ");
        let s = setup(true);
        let (file, handle) = s.read_write("limited", &[]);
        let mut backing = vec![0u8; 32768 + 4096];
        let src = aligned(&mut backing, 4096, 32768);
        src.copy_from_slice(&pattern(12, 0, 32768));
        harness::limit_file_size(LIMIT).expect("setting RLIMIT_FSIZE");
        let e = handle.write_host(src, 0).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EFBIG), "{e}");
        assert_eq!(file.metadata().unwrap().len(), LIMIT);
        assert_eq!(s.contents("limited"), src[..LIMIT as usize]);
    }) {
        return;
    }
    let run = harness::run_child(
        harness::child_command(&name),
        Duration::from_secs(60),
        &name,
    );
    run.assert_passed(&name);
}
