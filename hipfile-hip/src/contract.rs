//! Checks every [`GpuRuntime`] must pass, whatever library is under it: pointer queries, copies,
//! streams, events, host functions and stale handles. Each function panics at the first
//! violation. Built with the `contract` feature, for the tests of the libraries that stand in for
//! a GPU runtime (the simulated HIP and CUDA libraries run them through the AMD and NVIDIA
//! platforms); a release build of hipfile-rs does not contain them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use crate::sim::SimRuntime;
use crate::{
    DeviceBuffer, DeviceRange, GpuRuntime, HipError, HipErrorCode, Hold, HostFlags, MemoryKind,
    OwnedEvent, OwnedStream, PinnedBuffer, StreamRef,
};

/// Device, managed, pinned and pageable memory are told apart, with base and length, from an
/// interior pointer.
pub fn pointer_queries_decode_every_kind_of_memory(rt: &Arc<dyn GpuRuntime>) {
    let dev = DeviceBuffer::new(Arc::clone(rt), 10_000).unwrap();
    let info = rt.pointer_info(dev.ptr() + 123).unwrap();
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!((info.base, info.len), (dev.ptr(), 10_000));
    assert_eq!(info.remaining_from(dev.ptr() + 123), Some(10_000 - 123));

    let managed = DeviceBuffer::new_managed(Arc::clone(rt), 5000).unwrap();
    let info = rt.pointer_info(managed.ptr() + 1).unwrap();
    assert_eq!(info.kind, MemoryKind::Managed);
    assert_eq!((info.base, info.len), (managed.ptr(), 5000));

    let pinned = PinnedBuffer::new(Arc::clone(rt), 3000).unwrap();
    let p = pinned.as_ptr() as usize;
    let info = rt.pointer_info(p + 7).unwrap();
    assert_eq!(info.kind, MemoryKind::Host);
    assert_eq!((info.base, info.len), (p, 3000));

    let pageable = vec![0u8; 256];
    let info = rt.pointer_info(pageable.as_ptr() as usize).unwrap();
    assert_eq!(info.kind, MemoryKind::Unregistered);
    assert_eq!((info.base, info.len), (0, 0));
}

/// Synchronous copies round-trip at any offset; a copy that runs past its allocation is refused
/// with `INVALID_VALUE` and writes nothing. Returns that refusal, for the caller to check the
/// call name and detail its platform gives.
pub fn synchronous_copies_round_trip_and_bad_ranges_fail(rt: &Arc<dyn GpuRuntime>) -> HipError {
    let mut dev = DeviceBuffer::new(Arc::clone(rt), 1 << 16).unwrap();
    let data: Vec<u8> = (0..1 << 16).map(|i: u32| (i % 253) as u8).collect();
    dev.write_at(0, &data).unwrap();
    assert_eq!(dev.to_vec().unwrap(), data);
    let mut middle = vec![0u8; 1000];
    dev.read_at(5000, &mut middle).unwrap();
    assert_eq!(middle, data[5000..6000]);

    dev.fill(0xab).unwrap();
    assert!(dev.to_vec().unwrap().iter().all(|&b| b == 0xab));

    // SAFETY: the range runs past the allocation; the runtime refuses it and writes nothing.
    let r = unsafe { rt.copy_to_device(dev.ptr() + (1 << 16) - 8, &[0u8; 64]) };
    let refused = match r {
        Err(e @ HipError::Call { code, .. }) => {
            assert_eq!(code, HipErrorCode::INVALID_VALUE);
            e
        }
        other => panic!("an overrunning copy gave {other:?}"),
    };
    assert!(dev.to_vec().unwrap().iter().all(|&b| b == 0xab));
    refused
}

/// Asynchronous copies, host functions and events on one stream run in the order queued.
pub fn async_copies_streams_events_and_host_functions_run_in_order(rt: &Arc<dyn GpuRuntime>) {
    const LEN: usize = 1 << 20;
    const CHUNK: usize = LEN / 4;
    let dev = DeviceBuffer::new(Arc::clone(rt), LEN).unwrap();
    let mut src = PinnedBuffer::new(Arc::clone(rt), LEN).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 241) as u8;
    }
    let mut back = PinnedBuffer::new(Arc::clone(rt), LEN).unwrap();
    let stream = OwnedStream::new(Arc::clone(rt)).unwrap();
    let event = OwnedEvent::new(Arc::clone(rt)).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..4 {
        // SAFETY: both buffers outlive the event synchronisation below; `stream` is a live stream
        // of `rt`.
        unsafe {
            rt.copy_to_device_async(
                dev.ptr() + i * CHUNK,
                src.as_ptr().add(i * CHUNK),
                CHUNK,
                stream.handle(),
            )
            .unwrap();
        }
        let order = Arc::clone(&order);
        stream
            .launch_host_func(Box::new(move || order.lock().unwrap().push(i)))
            .unwrap();
    }
    // SAFETY: `back` outlives the synchronisation below and nothing reads it before then;
    // `stream` is a live stream of `rt`.
    unsafe {
        rt.copy_from_device_async(back.as_mut_ptr(), dev.ptr(), LEN, stream.handle())
            .unwrap();
    }
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    assert!(event.query().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(back.as_slice(), src.as_slice());
    stream.synchronize().unwrap();
}

/// A host function that panics does not unwind into the runtime, and the stream goes on.
pub fn a_panicking_host_function_does_not_unwind_into_the_runtime(rt: &Arc<dyn GpuRuntime>) {
    let stream = OwnedStream::new(Arc::clone(rt)).unwrap();
    stream
        .launch_host_func(Box::new(|| panic!("deliberate panic in a host function")))
        .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    stream
        .launch_host_func(Box::new(move || flag.store(true, Ordering::SeqCst)))
        .unwrap();
    stream.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

/// A destroyed stream is refused with `INVALID_HANDLE`. Returns what querying a destroyed event
/// answered, for the caller to check against its platform.
///
/// # Safety
/// `rt` looks every stream and event handle up and refuses unknown ones, as the simulator and the
/// libraries built on it do. A GPU runtime need not (CUDA does not): there, using a destroyed
/// handle is undefined behaviour, and this check must not run.
pub unsafe fn stale_handles_are_refused(rt: &Arc<dyn GpuRuntime>) -> crate::HipResult<bool> {
    let s = rt.stream_create().unwrap();
    // SAFETY: `s` is live until destroyed here; using it afterwards is what this check is about,
    // and the caller guarantees that `rt` refuses it.
    unsafe {
        rt.stream_destroy(s).unwrap();
        assert!(matches!(
            rt.stream_synchronize(s),
            Err(HipError::Call {
                code: HipErrorCode::INVALID_HANDLE,
                ..
            })
        ));
    }
    let e = rt.event_create().unwrap();
    // SAFETY: as for `s`.
    unsafe {
        rt.event_destroy(e).unwrap();
        rt.event_query(e)
    }
}

/// [`stale_handles_are_refused`] on the simulator, which looks every handle up in its tables.
pub fn the_simulator_refuses_stale_handles(sim: &Arc<SimRuntime>) -> crate::HipResult<bool> {
    let rt: Arc<dyn GpuRuntime> = sim.clone();
    // SAFETY: the simulator refuses every handle that is not in its tables.
    unsafe { stale_handles_are_refused(&rt) }
}

/// Streams ordered with the null stream and independent ones both run copies in order, and
/// know their device; the null stream answers the calling thread's current device.
pub fn streams_of_both_orders_run_copies_and_know_their_device(rt: &Arc<dyn GpuRuntime>) {
    const LEN: usize = 1 << 16;
    let current = rt.current_device().unwrap();
    assert_eq!(StreamRef::null(rt).device().unwrap(), current);
    let mut src = PinnedBuffer::new(Arc::clone(rt), LEN).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 239) as u8;
    }
    for stream in [
        OwnedStream::new(Arc::clone(rt)).unwrap(),
        OwnedStream::new_independent(Arc::clone(rt)).unwrap(),
    ] {
        assert_eq!(StreamRef::of(&stream).device().unwrap(), current);
        let dev = DeviceBuffer::new(Arc::clone(rt), LEN).unwrap();
        let mut back = PinnedBuffer::new(Arc::clone(rt), LEN).unwrap();
        // SAFETY: both buffers and `dev` outlive the synchronisation below; nothing reads `back`
        // before it; `stream` is a live stream of `rt`.
        unsafe {
            rt.copy_to_device_async(dev.ptr(), src.as_ptr(), LEN, stream.handle())
                .unwrap();
            rt.copy_from_device_async(back.as_mut_ptr(), dev.ptr(), LEN, stream.handle())
                .unwrap();
        }
        stream.synchronize().unwrap();
        assert_eq!(back.as_slice(), src.as_slice());
    }
}

/// An asynchronous fill writes exactly its range, in stream order.
pub fn asynchronous_fills_write_their_range(rt: &Arc<dyn GpuRuntime>) {
    let mut dev = DeviceBuffer::new(Arc::clone(rt), 8192).unwrap();
    dev.fill(0x11).unwrap();
    let stream = OwnedStream::new_independent(Arc::clone(rt)).unwrap();
    let range = DeviceRange::query(rt, dev.ptr(), 8192).unwrap();
    let s = StreamRef::of(&stream);
    s.fill_async(&range.slice(4096, 100).unwrap(), 0x22)
        .unwrap();
    s.fill_async(&range.slice(4146, 10).unwrap(), 0x33).unwrap();
    s.synchronize().unwrap();
    let bytes = dev.to_vec().unwrap();
    assert!(bytes[..4096].iter().all(|&b| b == 0x11));
    assert!(bytes[4096..4146].iter().all(|&b| b == 0x22));
    assert!(bytes[4146..4156].iter().all(|&b| b == 0x33));
    assert!(bytes[4156..4196].iter().all(|&b| b == 0x22));
    assert!(bytes[4196..].iter().all(|&b| b == 0x11));
}

/// Host-mapped flags start at zero, have device addresses, and hold an independent stream (and
/// the copy queued behind the hold) until the value is stored; a lower value does not release
/// it; a mark queued with a hold ([`StreamRef::mark_and_hold`]) is stored once the stream reaches
/// it while the hold still keeps the stream. With [`Hold::Memop`] on a device without stream
/// memory operations nothing is checked and
/// the reason is returned, for the caller to record the skip.
pub fn a_hold_keeps_its_stream_until_the_flag_is_stored(
    rt: &Arc<dyn GpuRuntime>,
    how: Hold,
) -> Result<(), String> {
    let device = rt.current_device().unwrap();
    if how == Hold::Memop && !rt.stream_memops(device) {
        let reason = format!(
            "device {device} of the {} runtime has no stream memory operations",
            rt.info().platform
        );
        return Err(reason);
    }
    let flags = Arc::new(HostFlags::new(Arc::clone(rt), 4).unwrap());
    assert!((0..4).all(|i| flags.load(i) == Some(0)));
    assert!(flags.device_addr(3).is_some());
    let stream = OwnedStream::new_independent(Arc::clone(rt)).unwrap();
    let dev = DeviceBuffer::new(Arc::clone(rt), 4096).unwrap();
    let mut src = PinnedBuffer::new(Arc::clone(rt), 4096).unwrap();
    src.as_mut_slice().fill(0x5c);
    let passed = OwnedEvent::new(Arc::clone(rt)).unwrap();
    let s = StreamRef::of(&stream);
    s.hold(&flags, 2, 7, how).unwrap();
    // Whatever fails below, the stream is let go: a stream left held would hang every later
    // free and synchronization of the device (and the tests running beside this one) instead
    // of failing this case.
    let _let_go = LetGo(Arc::clone(&flags), 2, 7);
    // SAFETY: `src` and `dev` outlive the synchronisation below; `stream` is live.
    unsafe {
        rt.copy_to_device_async(dev.ptr(), src.as_ptr(), 4096, stream.handle())
            .unwrap();
    }
    s.record(&passed).unwrap();
    flags.store(2, 6).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !passed.query().unwrap(),
        "{how:?}: 6 < 7, the stream is still held"
    );
    flags.store(2, 7).unwrap();
    passed.synchronize().unwrap();
    s.synchronize().unwrap();
    assert!(dev.to_vec().unwrap().iter().all(|&b| b == 0x5c));

    // A mark and a hold, where the device's streams store values: the mark lands once the
    // stream reaches it, the hold keeps the stream.
    if !rt.stream_writes(device) {
        return Ok(());
    }
    let marks = Arc::new(HostFlags::new(Arc::clone(rt), 4).unwrap());
    s.mark_and_hold(&marks, &flags, 3, 9, how).unwrap();
    let _let_go = LetGo(Arc::clone(&flags), 3, 9);
    s.record(&passed).unwrap();
    let since = std::time::Instant::now();
    while marks.load(3) != Some(9) {
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "{how:?}: the stream never stored its mark"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(!passed.query().unwrap(), "{how:?}: marked, still held");
    assert!(
        (0..3).all(|i| marks.load(i) == Some(0)),
        "only its own mark"
    );
    flags.store(3, 9).unwrap();
    passed.synchronize().unwrap();
    s.synchronize().unwrap();
    Ok(())
}

/// Stores its value into its flag word when dropped.
struct LetGo(Arc<HostFlags>, usize, u32);

impl Drop for LetGo {
    fn drop(&mut self) {
        let _ = self.0.store(self.1, self.2);
    }
}
