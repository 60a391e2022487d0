//! Tests of hipfile-remote that run everywhere: the simulated GPU and a loopback server of
//! this test binary's own.

mod read;
mod server;
mod write;
