//! The fastpath on the simulated GPU, registered next to the fallback as the facade registers
//! them: which backend each request goes to, failover, and aligned IO end to end.
//!
//! Files live in the temporary directory (`TMPDIR`; ext4 on the machines that run these tests)
//! so the filesystem rule accepts them; tests that need another filesystem probe for it and say
//! what they skipped.

mod conformance;
mod failover;
mod platform;
mod policy;
mod roundtrip;
mod selection;
mod support;
