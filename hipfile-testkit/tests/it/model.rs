//! The reference model against the real driver: random operation sequences, every answer and
//! the use count compared after every step.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use hipfile_core::{
    Driver, DriverOptions, Error, ErrorKind, FileHandleId, IoCall, IoOp, RegistryBuilder,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, GpuRuntime, PinnedBuffer};
use hipfile_testkit::faults::Errno;
use hipfile_testkit::model::{
    ops_strategy, Answer, BufTarget, Model, Op, BUFFER_LEN, MAX_IO_SIZE, SLOTS,
};
use proptest::prelude::*;

use crate::backend::vec_copy_descriptor;

/// A handle no driver ever issues (stands for "this slot was never registered").
const NEVER: FileHandleId = FileHandleId(u64::MAX);

/// The real things the model's slots stand for.
struct World {
    driver: Driver,
    _dir: tempfile::TempDir,
    files: Vec<File>,
    handles: Vec<FileHandleId>,
    devices: Vec<DeviceBuffer>,
    hosts: Vec<PinnedBuffer>,
    managed: Vec<DeviceBuffer>,
}

impl World {
    fn new() -> Self {
        let sim = Arc::new(SimRuntime::default());
        let rt: Arc<dyn GpuRuntime> = sim;
        let mut backends = RegistryBuilder::new();
        backends.add(vec_copy_descriptor()).unwrap();
        let driver = Driver::new(DriverOptions {
            backends: Some(backends),
            selection: None,
            ..DriverOptions::with_runtime(rt.clone())
        });
        let dir = tempfile::tempdir().unwrap();
        let files = (0..SLOTS)
            .map(|i| {
                let path = dir.path().join(format!("f{i}"));
                std::fs::write(&path, vec![i as u8; BUFFER_LEN]).unwrap();
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .unwrap()
            })
            .collect();
        World {
            driver,
            _dir: dir,
            files,
            handles: vec![NEVER; SLOTS],
            devices: (0..SLOTS)
                .map(|_| DeviceBuffer::new(rt.clone(), BUFFER_LEN).unwrap())
                .collect(),
            hosts: (0..SLOTS)
                .map(|_| PinnedBuffer::new(rt.clone(), BUFFER_LEN).unwrap())
                .collect(),
            managed: (0..SLOTS)
                .map(|_| DeviceBuffer::new_managed(rt.clone(), BUFFER_LEN).unwrap())
                .collect(),
        }
    }

    /// After IO of `n` bytes on `slot`: the first `n` bytes of its file and of its device
    /// buffer are the same (a read copied the file's, a write the buffer's).
    fn bytes_differ(&self, slot: usize, n: usize) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let mut file = vec![0u8; n];
        self.files[slot].read_exact_at(&mut file, 0).ok()?;
        let mut device = vec![0u8; n];
        self.devices[slot].read_at(0, &mut device).ok()?;
        (file != device).then(|| {
            let at = file.iter().zip(&device).position(|(a, b)| a != b);
            format!("{n} bytes moved, but file and device buffer differ at byte {at:?}")
        })
    }

    fn apply(&mut self, op: &Op) -> Result<Answer, Error> {
        let done = |r: Result<(), Error>| r.map(|()| Answer::Done);
        match *op {
            Op::DriverOpen => done(self.driver.open()),
            Op::DriverClose => done(self.driver.close()),
            Op::HandleRegister { slot, valid } => {
                let fd = if valid {
                    self.files[slot].as_raw_fd()
                } else {
                    -1
                };
                let id = self.driver.handle_register(fd)?;
                self.handles[slot] = id;
                Ok(Answer::Done)
            }
            Op::HandleDeregister { slot } => {
                done(self.driver.handle_deregister(self.handles[slot]))
            }
            Op::BufRegister { slot, target } => {
                let (ptr, len) = match target {
                    BufTarget::Device => (self.devices[slot].ptr(), BUFFER_LEN),
                    BufTarget::PastEnd => (self.devices[slot].ptr(), BUFFER_LEN + 1),
                    BufTarget::Prefix => (self.devices[slot].ptr(), MAX_IO_SIZE),
                    BufTarget::Host => (self.hosts[slot].as_ptr() as usize, BUFFER_LEN),
                    BufTarget::Managed => (self.managed[slot].ptr(), BUFFER_LEN),
                };
                done(self.driver.buf_register(ptr, len, 0))
            }
            Op::BufDeregister { slot } => {
                done(self.driver.buf_deregister(self.devices[slot].ptr()))
            }
            Op::Read { slot, size } | Op::Write { slot, size } => {
                let op = if matches!(op, Op::Read { .. }) {
                    IoOp::Read
                } else {
                    IoOp::Write
                };
                self.driver
                    .io(IoCall {
                        op,
                        handle: self.handles[slot],
                        buffer: self.devices[slot].ptr(),
                        size,
                        file_offset: 0,
                        buffer_offset: 0,
                        loan: None,
                    })
                    .map(Answer::Bytes)
            }
        }
    }
}

/// Apply `ops` to both; the first disagreement, described.
fn disagreement(ops: &[Op]) -> Option<String> {
    let mut model = Model::new();
    let mut world = World::new();
    for (step, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let actual = world.apply(op);
        let same = match (&expected, &actual) {
            (Ok(e), Ok(a)) => e == a,
            (Err(ErrorKind::Os), Err(a)) => {
                a.kind() == ErrorKind::Os && a.errno() == Some(Errno::INVAL.raw_os_error())
            }
            (Err(e), Err(a)) => *e == a.kind(),
            _ => false,
        };
        if !same {
            return Some(format!(
                "step {step} {op:?}: model {expected:?}, driver {actual:?}"
            ));
        }
        if model.use_count() != world.driver.use_count() {
            return Some(format!(
                "step {step} {op:?}: use count model {} driver {}",
                model.use_count(),
                world.driver.use_count()
            ));
        }
        for slot in 0..SLOTS {
            let registered = world.driver.file(world.handles[slot]).is_ok();
            if registered != model.files().contains(&slot) {
                return Some(format!(
                    "step {step} {op:?}: file {slot} registered: model {}, driver {registered}",
                    model.files().contains(&slot)
                ));
            }
            let buffer = world.driver.buffer_registered(world.devices[slot].ptr());
            if buffer != model.buffers().contains(&slot) {
                return Some(format!(
                    "step {step} {op:?}: buffer {slot} registered: model {}, driver {buffer}",
                    model.buffers().contains(&slot)
                ));
            }
        }
        if let (Ok(Answer::Bytes(n)), Op::Read { slot, .. } | Op::Write { slot, .. }) =
            (&actual, op)
        {
            if let Some(why) = world.bytes_differ(*slot, *n) {
                return Some(format!("step {step} {op:?}: {why}"));
            }
        }
    }
    None
}

/// Sequences tried: 1,000, or `HIPFILE_MODEL_CASES` (`cargo xtask fuzz` runs 10,000).
fn model_cases() -> u32 {
    std::env::var("HIPFILE_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: model_cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_driver_follows_the_reference_model(ops in ops_strategy(40)) {
        if let Some(why) = disagreement(&ops) {
            prop_assert!(false, "{}", why);
        }
    }
}

#[test]
fn a_scripted_sequence_covers_every_rule() {
    use Op::*;
    let ops = [
        DriverClose,
        HandleRegister {
            slot: 0,
            valid: false,
        },
        Read { slot: 0, size: 10 },
        BufDeregister { slot: 0 },
        HandleDeregister { slot: 0 },
        BufRegister {
            slot: 0,
            target: BufTarget::Managed,
        },
        HandleRegister {
            slot: 0,
            valid: true,
        },
        HandleRegister {
            slot: 0,
            valid: true,
        },
        BufRegister {
            slot: 1,
            target: BufTarget::Device,
        },
        BufRegister {
            slot: 1,
            target: BufTarget::Prefix,
        },
        BufRegister {
            slot: 2,
            target: BufTarget::PastEnd,
        },
        BufRegister {
            slot: 2,
            target: BufTarget::Host,
        },
        Write { slot: 1, size: 100 },
        Read {
            slot: 0,
            size: 4096,
        },
        DriverOpen,
        DriverClose,
        Read { slot: 0, size: 1 },
        DriverClose,
        Read { slot: 0, size: 1 },
        BufDeregister { slot: 1 },
    ];
    let mut model = Model::new();
    let kinds: Vec<_> = ops.iter().map(|op| model.apply(op).err()).collect();
    assert_eq!(
        kinds,
        [
            Some(ErrorKind::DriverNotInitialized),
            Some(ErrorKind::InternalError),
            Some(ErrorKind::Os),
            Some(ErrorKind::DriverClosing),
            Some(ErrorKind::DriverNotInitialized),
            Some(ErrorKind::HipMemoryTypeInvalid),
            None,
            Some(ErrorKind::HandleAlreadyRegistered),
            None,
            Some(ErrorKind::MemoryAlreadyRegistered),
            Some(ErrorKind::HipPointerRangeError),
            Some(ErrorKind::HipMemoryTypeInvalid),
            Some(ErrorKind::HandleNotRegistered),
            None,
            None,
            None,
            None,
            None,
            Some(ErrorKind::Os),
            Some(ErrorKind::DriverClosing),
        ]
    );
    assert_eq!(disagreement(&ops), None);
}
