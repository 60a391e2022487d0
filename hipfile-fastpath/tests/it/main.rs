//! The fastpath on the simulated GPU, registered next to the fallback as the facade registers
//! them: which backend each request goes to, failover, and aligned IO end to end.
//!
//! Files live under `CARGO_TARGET_TMPDIR` (the build filesystem, ext4 here) so the filesystem
//! rule accepts them; tests that need another filesystem probe for it and say what they skipped.

mod failover;
mod roundtrip;
mod selection;
mod support;
