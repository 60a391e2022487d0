//! The options of `hipfile bench` and the phases `--only` chooses from.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::size::parse_size;

/// The phases `--only` chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Phase {
    /// Whole-file read, file in the page cache.
    Hot,
    /// Whole-file read after dropping the page cache (root only).
    Cold,
    /// Whole-file write, without and with fsync, to a scratch file next to the file (never to
    /// the file itself).
    Write,
    /// Small random reads, one at a time: 4 KiB, 64 KiB, 1 MiB.
    Latency,
    /// Pinned host-to-device copy, parallel page-cache and O_DIRECT reads to host memory.
    Ceilings,
    /// Batch IO: random 4 KiB and 64 KiB reads through one batch at queue depth 1, 8, 32, 128
    /// against synchronous reads from 1, 8, 16 threads; 64 large reads in one batch against the
    /// hot read (which it brings along); cold random 4 KiB reads at queue depth 32 against 32
    /// threads of O_DIRECT reads (root only).
    Batch,
    /// Stream-ordered IO: the whole file as reads queued on GPU streams (`hipFileReadAsync`),
    /// on 1 and 4 streams, against the hot read (which it brings along) and against upstream's
    /// design replayed (a `pread` in a host function, then an async copy); the submission cost
    /// of each op; and a GPU workload on another stream, alone, next to the reads alone, and
    /// both at once.
    Async,
}

/// Arguments of `hipfile bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// File to read. One that exists is opened read-only and never written (a regular file, not
    /// empty); one that does not exist is made with a pattern and kept. The write phases write a
    /// scratch file of --size bytes in the same directory instead, removed at the end (so they
    /// need that much free space there). Default: a temporary file in the current directory.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Bytes to move: a number with an optional unit K, M, G or T, binary whatever the
    /// spelling (256M, 256MB and 256MiB are all 256 MiB). Default: 256M on the sim, 8G on a
    /// GPU, or the size of a file that exists.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<usize>,
    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Platform: amd, nvidia or sim (default: the GPU the machine has, else the sim).
    #[arg(long)]
    pub platform: Option<String>,
    /// One JSON object per measurement per line, then a summary object.
    #[arg(long)]
    pub json: bool,
    /// When no GPU is found, list the loader's answer for every runtime library tried.
    #[arg(long)]
    pub verbose: bool,
    /// Also run upstream hipFile's design: one thread, pread into a 16 MiB pageable buffer,
    /// synchronous copy.
    #[arg(long)]
    pub baseline: bool,
    /// Path of `kvikio_anchor.py`: run it between our repetitions and print ratios ours/KvikIO.
    /// It reads the bytes we read, makes as many small reads as we do, and writes into our
    /// scratch file, left in the state our writes start from.
    #[arg(long, value_name = "SCRIPT")]
    pub kvikio: Option<PathBuf>,
    /// The KvikIO thread sweep, one process per thread count; its best figure is the anchor.
    #[arg(long, value_delimiter = ',', default_value = "1,8,16,32")]
    pub kvikio_threads: Vec<usize>,
    /// KvikIO's task size, with an optional unit as --size (default: our staged engine's chunk
    /// when that engine serves our reads, else KvikIO's own default).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub kvikio_task_size: Option<usize>,
    /// The Python interpreter that runs the anchor.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Phases to run (comma separated; default: all). `batch` brings `hot` along.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Phase>,
    /// Backends to offer requests to, in order (as `HIPFILE_BACKENDS`), e.g. `fallback`.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// Random reads per size and repetition in the latency phase.
    #[arg(long, default_value_t = 2000)]
    pub latency_ops: usize,
    /// Random reads per size, queue depth or thread count, and repetition in the batch phase,
    /// cold ones included (default: 1000 on the sim, 20000 on a GPU; at most what the file
    /// holds of each size).
    #[arg(long, value_name = "N")]
    pub batch_ops: Option<usize>,
    /// Bytes of each stream-ordered read of the async phase, with an optional unit as --size
    /// (at most the file's size).
    #[arg(long, value_parser = parse_size, default_value = "64M", value_name = "SIZE")]
    pub async_op_size: usize,
    /// Measure reads of a remote object (`s3://bucket/key`, `http(s)://...`) into GPU and host
    /// memory instead of a file: the whole object, or its first --size bytes.
    #[cfg(feature = "remote")]
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Requests to the remote object (with --remote).
    #[cfg(feature = "remote")]
    #[command(flatten)]
    pub remote_options: crate::remote_args::RemoteArgs,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            file: None,
            size: None,
            repeat: 3,
            platform: None,
            json: false,
            verbose: false,
            baseline: false,
            kvikio: None,
            kvikio_threads: vec![1, 8, 16, 32],
            kvikio_task_size: None,
            python: "python3".into(),
            only: Vec::new(),
            backend: None,
            latency_ops: 2000,
            batch_ops: None,
            async_op_size: 64 << 20,
            #[cfg(feature = "remote")]
            remote: None,
            #[cfg(feature = "remote")]
            remote_options: Default::default(),
        }
    }
}
