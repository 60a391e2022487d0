//! Integration tests of the staged engine: the shared conformance suite under every O_DIRECT
//! policy and under scripted faults, settings that must change behaviour, and concurrency.

mod behaviour;
mod conformance;
mod faults;
mod pins;
mod support;
