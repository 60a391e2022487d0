//! # hipfile-remote: remote objects into and out of GPU memory
//!
//! Reads objects named `s3://bucket/key` or `http(s)://...` into device memory (and host memory)
//! with parallel ranged GETs on a connection pool, each response body received straight into a
//! pinned staging lane of the staged engine's kind and copied to the GPU while the next one
//! arrives.
//!
//! (The design, the defaults and the error mapping are described below, with the writer.)

#![forbid(unsafe_code)]

mod aws;
mod client;
mod error;
mod lanes;
mod location;
mod options;
mod plan;
mod read;
mod stats;
mod write;

pub use aws::AwsConfig;
pub use error::{RemoteError, Result};
pub use location::ObjectUrl;
pub use options::{RemoteOptions, MIN_PART_SIZE};
pub use read::{PendingRead, RemoteFile};
pub use stats::{RemoteCounters, RemoteCounts, COUNTER_NAMES, PATH_NAME};
pub use write::RemoteWriter;
