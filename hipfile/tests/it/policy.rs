//! The IO policy of a file handle through the facade: a direct-only handle's stream-ordered
//! ops and batch requests run on the direct path or fail with `IoNotSupported`, moving nothing;
//! the same ops falling back run on the staged engine. And the allowed direct mechanisms.

use std::sync::Arc;

use hipfile::{
    AsDeviceMut, BatchRequest, DeviceBuffer, Driver, ErrorKind, IoPolicy, P2pMechanism,
    P2pMechanisms,
};

use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{GpuRuntime, OwnedStream, StreamRef};
use hipfile_testkit::conformance::pattern;

use crate::harness::{counting_options, scratch_dir};
use crate::stream::{data_file, ended, outcome, sentinel_buffer, SENTINEL};

const KIB: usize = 1024;

fn driver() -> (Arc<dyn GpuRuntime>, Driver) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let options = counting_options(&gpu);
    (
        gpu,
        Driver::with_options(options).expect("a driver on the sim"),
    )
}

#[test]
fn stream_ordered_ops_of_a_direct_only_handle_fail_closed_where_the_fastpath_declines() {
    let (gpu, driver) = driver();
    let dir = scratch_dir();
    let content = pattern(11, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver
        .register_file_with_policy(&file, IoPolicy::DirectOnly)
        .unwrap();
    assert_eq!(handle.policy().unwrap(), IoPolicy::DirectOnly);
    let stream = OwnedStream::new_independent(Arc::clone(&gpu)).unwrap();
    let stream = StreamRef::of(&stream);
    let mut aligned = sentinel_buffer(&driver, 16 * KIB);
    let mut unaligned = sentinel_buffer(&driver, 4 * KIB);
    let run = |aligned: &mut DeviceBuffer, unaligned: &mut DeviceBuffer| {
        let mut head = unaligned.slice_mut(..1000).unwrap();
        driver.on_stream(&stream, |io| {
            let ops = [
                io.read(&handle, aligned, 16 * KIB as u64).unwrap(),
                io.read(&handle, &mut head, 3).unwrap(),
            ];
            ops.map(|op| outcome(&ended(&op)))
        })
    };
    assert_eq!(
        run(&mut aligned, &mut unaligned),
        [Ok(16 * KIB), Err(ErrorKind::IoNotSupported)]
    );
    assert_eq!(aligned.to_vec().unwrap(), content[16 * KIB..32 * KIB]);
    assert_eq!(
        unaligned.to_vec().unwrap(),
        vec![SENTINEL; 4 * KIB],
        "nothing moved"
    );
    let stats = driver.stats().unwrap();
    assert_eq!(stats.refused_by_policy, 1);
    assert_eq!(stats.backend("fallback").unwrap().ops, 0);

    handle.set_policy(IoPolicy::Fallback).unwrap();
    assert_eq!(run(&mut aligned, &mut unaligned), [Ok(16 * KIB), Ok(1000)]);
    assert_eq!(unaligned.to_vec().unwrap()[..1000], content[3..1003]);
    assert_eq!(driver.stats().unwrap().refused_by_policy, 1);
}

#[test]
fn batch_requests_of_a_direct_only_handle_fail_closed_when_the_mechanism_is_masked() {
    let (_gpu, driver) = driver();
    let dir = scratch_dir();
    let content = pattern(12, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    handle.set_policy(IoPolicy::DirectOnly).unwrap();
    driver.set_p2p_mechanisms(P2pMechanisms::of(&[P2pMechanism::AmdKfd]));
    assert_eq!(driver.p2p_mechanisms().names(), ["amd_kfd"]);
    let mut dst = sentinel_buffer(&driver, 8 * KIB);
    let results = driver
        .batch(2, |batch| {
            batch
                .submit([BatchRequest::read(&handle, &mut dst, 0).unwrap()])
                .unwrap();
            batch.wait(1, 1, None).unwrap()
        })
        .unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0].result.as_ref().unwrap_err().kind(),
        ErrorKind::IoNotSupported
    );
    assert_eq!(dst.to_vec().unwrap(), vec![SENTINEL; 8 * KIB]);
    assert_eq!(driver.stats().unwrap().p2p_mechanisms, ["amd_kfd"]);

    driver.set_p2p_mechanisms(P2pMechanisms::ALL);
    assert_eq!(handle.read(&mut dst, 0).unwrap(), 8 * KIB);
    assert_eq!(dst.to_vec().unwrap(), content[..8 * KIB]);
}
