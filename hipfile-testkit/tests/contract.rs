//! The runtime contract ([`hipfile_hip::contract`]) on the runtime under test: the simulator by
//! default, the machine's real GPU runtime with `HIPFILE_GPU_TESTS=1` (the GPU bundle). The
//! simulated HIP and CUDA libraries run the same checks through the AMD and NVIDIA platform
//! code; here the real runtime is held to them. Its own binary: a runtime that crashed on a
//! check would take only these tests down.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hipfile_hip::{contract, GpuRuntime, HipError, HipErrorCode, Hold};
use hipfile_testkit::target::runtime_under_test;

/// The runtime under test, with this binary's lock: one case at a time. On a real GPU the cases
/// share the device, its host-function thread and the implicit synchronization of every free; a
/// case that holds a stream must not stall, or be stalled by, the others, so that a failure shows
/// as that case failing rather than as every case hanging.
fn runtime() -> (MutexGuard<'static, ()>, Arc<dyn GpuRuntime>) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    (turn, runtime_under_test().unwrap().runtime)
}

#[test]
fn pointer_queries_decode_every_kind_of_memory() {
    contract::pointer_queries_decode_every_kind_of_memory(&runtime().1);
}

#[test]
fn synchronous_copies_round_trip_and_bad_ranges_fail() {
    match contract::synchronous_copies_round_trip_and_bad_ranges_fail(&runtime().1) {
        HipError::Call { code, .. } => assert_eq!(code, HipErrorCode::INVALID_VALUE),
        other => panic!("{other:?}"),
    }
}

#[test]
fn async_copies_streams_events_and_host_functions_run_in_order() {
    contract::async_copies_streams_events_and_host_functions_run_in_order(&runtime().1);
}

#[test]
fn a_panicking_host_function_does_not_unwind_into_the_runtime() {
    contract::a_panicking_host_function_does_not_unwind_into_the_runtime(&runtime().1);
}

#[test]
fn stale_handles_are_refused() {
    let rut = runtime_under_test().unwrap();
    let Some(sim) = rut.sim else {
        // Using a destroyed stream or event is undefined behaviour for the CUDA runtime: it
        // does not promise to validate handles (cudaStreamSynchronize on a destroyed stream
        // crashed this test binary on the H200). Only runtimes that promise it are held to it:
        // the simulators, here and through the simulated HIP and CUDA libraries.
        hipfile_testkit::ledger::skip(
            "destroyed handles are undefined behaviour on a real GPU runtime, not refused",
        );
        return;
    };
    // A destroyed stream is INVALID_HANDLE (checked inside); a destroyed event must not pass
    // for a completed one.
    let event = contract::the_simulator_refuses_stale_handles(&sim);
    assert!(
        !matches!(event, Ok(true)),
        "querying a destroyed event answered {event:?}"
    );
}

#[test]
fn streams_of_both_orders_run_copies_and_know_their_device() {
    contract::streams_of_both_orders_run_copies_and_know_their_device(&runtime().1);
}

#[test]
fn asynchronous_fills_write_their_range() {
    contract::asynchronous_fills_write_their_range(&runtime().1);
}

#[test]
fn a_host_function_hold_keeps_its_stream_until_the_flag_is_stored() {
    contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&runtime().1, Hold::HostFunction)
        .unwrap();
}

#[test]
fn a_memop_hold_keeps_its_stream_until_the_flag_is_stored() {
    if let Err(reason) =
        contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&runtime().1, Hold::Memop)
    {
        hipfile_testkit::ledger::skip(&reason);
    }
}
