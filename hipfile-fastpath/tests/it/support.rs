//! A driver on the sim with the fastpath and the fallback, a registered file and helpers.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use hipfile_core::{
    Driver, DriverOptions, EnvConfig, FileHandleId, IoCall, IoOp, RegisteredFile, RegistryBuilder,
    Result, Settings,
};
use hipfile_hip::sim::{SimConfig, SimRuntime};
use hipfile_hip::{DeviceBuffer, GpuRuntime};
use tempfile::TempDir;

/// Switches with the statistics on (they tell which backend served a request).
pub fn env() -> EnvConfig {
    EnvConfig {
        stats_level: Some(1),
        ..EnvConfig::default()
    }
}

/// A fresh directory in the temporary directory (`TMPDIR`), which must be on a filesystem the
/// fastpath serves (ext4 or xfs): the selection tests check that it is.
pub fn build_fs_dir() -> TempDir {
    tempfile::tempdir().expect("a directory in the temporary directory")
}

/// What to build a [`Rig`] from.
pub struct Setup {
    pub sim: SimConfig,
    pub env: EnvConfig,
    pub settings: Settings,
    pub dir: TempDir,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            sim: SimConfig::default(),
            env: env(),
            settings: Settings::default(),
            dir: build_fs_dir(),
        }
    }
}

pub struct Rig {
    pub sim: Arc<SimRuntime>,
    pub gpu: Arc<dyn GpuRuntime>,
    pub driver: Driver,
    pub file: File,
    pub handle: FileHandleId,
    _dir: TempDir,
}

impl Rig {
    pub fn new() -> Rig {
        Rig::with(Setup::default())
    }

    pub fn with(setup: Setup) -> Rig {
        let sim = Arc::new(SimRuntime::new(setup.sim));
        let gpu: Arc<dyn GpuRuntime> = sim.clone();
        let mut backends = RegistryBuilder::new();
        hipfile_fastpath::register(&mut backends).unwrap();
        hipfile_fallback::register(&mut backends).unwrap();
        let driver = Driver::new(DriverOptions {
            backends: Some(backends),
            selection: None,
            env: setup.env,
            ..DriverOptions::with_runtime(Arc::clone(&gpu))
        });
        let settings = setup.settings;
        driver.stage_settings(|s| *s = settings).unwrap();
        driver.open().unwrap();
        assert_eq!(
            driver.session().unwrap().registry().names(),
            ["fastpath", "fallback"]
        );
        let file = open_rw(&setup.dir.path().join("data"));
        let handle = driver.handle_register(file.as_raw_fd()).unwrap();
        Rig {
            sim,
            gpu,
            driver,
            file,
            handle,
            _dir: setup.dir,
        }
    }

    pub fn registered(&self) -> Arc<RegisteredFile> {
        self.driver.file(self.handle).unwrap()
    }

    pub fn device(&self, len: usize) -> DeviceBuffer {
        DeviceBuffer::new(Arc::clone(&self.gpu), len).unwrap()
    }

    pub fn io(
        &self,
        op: IoOp,
        buffer: usize,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<usize> {
        self.driver.io(IoCall {
            op,
            handle: self.handle,
            buffer,
            size,
            file_offset,
            buffer_offset,
            loan: None,
        })
    }

    /// Run one request; the bytes and the backend that served it.
    pub fn served(
        &self,
        op: IoOp,
        buffer: usize,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<(usize, &'static str)> {
        let stats = self.driver.session().unwrap();
        let before = stats.stats().snapshot();
        let bytes = self.io(op, buffer, size, file_offset, buffer_offset)?;
        let after = stats.stats().snapshot();
        let ran = |name| {
            let count = |s: &hipfile_core::StatsSnapshot| s.backend(name).map_or(0, |b| b.ops);
            count(&after) > count(&before)
        };
        let by = if ran("fallback") {
            "fallback"
        } else if ran("fastpath") {
            "fastpath"
        } else {
            "nobody"
        };
        Ok((bytes, by))
    }

    /// Write `bytes` at `offset` of the file, bypassing hipfile.
    pub fn put(&self, bytes: &[u8], offset: u64) {
        self.file.write_all_at(bytes, offset).unwrap();
    }

    /// `len` bytes of the file at `offset`, bypassing hipfile.
    pub fn get(&self, len: usize, offset: u64) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let n = self.file.read_at(&mut out, offset).unwrap();
        out.truncate(n);
        out
    }
}

pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Bytes that differ from their neighbours and from other seeds.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

pub const KIB: usize = 1024;
