//! Files whose mode refuses a fresh open with the access the application's descriptor holds: a
//! file created read-only but opened read-write (`open(O_CREAT | O_RDWR, 0444)`), a file made
//! write-only or unreadable by its mode, a file whose mode changed after it was opened. Upstream
//! hipFile registers them and moves bytes through the application's descriptor; so must
//! hipfile-rs, with exactly the descriptor's access and never more.
//!
//! Root opens any file whatever its mode, so the cases run in a child that, when started as
//! root, first becomes user and group 65534 (nobody), as a user of the library would be.

use std::fs::{File, OpenOptions, Permissions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hipfile::{AsDevice, Driver, DriverOptions, ErrorKind};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};

use crate::harness;

const NOBODY: libc::uid_t = 65534;

/// Give up root for user and group 65534 (every thread: glibc's set*id calls reach them all).
fn become_nobody() {
    // SAFETY: plain integer arguments; the calls only change this process's credentials.
    let rc = unsafe {
        let groups = libc::setgroups(0, std::ptr::null());
        let gid = libc::setresgid(NOBODY, NOBODY, NOBODY);
        let uid = libc::setresuid(NOBODY, NOBODY, NOBODY);
        groups | gid | uid
    };
    assert_eq!(rc, 0, "dropping root: {}", std::io::Error::last_os_error());
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn driver() -> (Arc<dyn GpuRuntime>, Driver) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let driver = Driver::with_options(DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap();
    (gpu, driver)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Create `path` with `mode` through a read-write descriptor (`O_CREAT | O_RDWR`), and (unless
/// `mode` allows it anyway) check that a fresh read-write open of it is refused: the case the
/// test is about.
fn create_rdwr(path: &Path, mode: u32, extra_flags: i32) -> File {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(extra_flags)
        .open(path)
        .unwrap();
    assert!(
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .is_err(),
        "mode {mode:o} lets this user reopen {} read-write: the case would prove nothing",
        path.display()
    );
    file
}

/// Write `len` bytes (odd sizes, so the staged path's unaligned head and tail run too) through
/// the library at `offset` and read them back through it and through the file.
fn round_trip(driver: &Driver, gpu: &Arc<dyn GpuRuntime>, file: &File, offset: u64, len: usize) {
    let handle = driver.register_file(file).unwrap();
    let data = pattern(len, offset as u8);
    let mut src = DeviceBuffer::new(gpu.clone(), len).unwrap();
    src.write_at(0, &data).unwrap();
    assert_eq!(handle.write(&src, offset).unwrap(), len);
    let mut back = DeviceBuffer::new(gpu.clone(), len).unwrap();
    assert_eq!(handle.read(&mut back, offset).unwrap(), len);
    assert_eq!(
        back.to_vec().unwrap(),
        data,
        "read back through the library"
    );
    let mut on_disk = vec![0u8; len];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut on_disk, offset).unwrap();
    assert_eq!(on_disk, data, "the file holds what the library wrote");
}

fn cases() {
    if is_root() {
        become_nobody();
    }
    // The temporary directory the environment names may be root's alone (the GPU bundle points
    // TMPDIR into its own folder): then /tmp, which every user may write.
    let dir = tempfile::Builder::new()
        .prefix("hipfile-access-")
        .tempdir_in(std::env::temp_dir())
        .or_else(|_| {
            tempfile::Builder::new()
                .prefix("hipfile-access-")
                .tempdir_in("/tmp")
        })
        .unwrap();
    let (gpu, driver) = driver();

    // Created read-only, opened read-write: the case.
    for (name, mode) in [("r--", 0o444), ("-w-", 0o222), ("---", 0o000)] {
        let file = create_rdwr(&dir.path().join(name), mode, 0);
        round_trip(&driver, &gpu, &file, 0, (1 << 20) + 17);
        round_trip(&driver, &gpu, &file, 4096 * 3 + 5, 12_345);
    }

    // A mode changed after the file was opened read-write.
    let path = dir.path().join("chmod");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
        .unwrap();
    std::fs::set_permissions(&path, Permissions::from_mode(0o400)).unwrap();
    round_trip(&driver, &gpu, &file, 0, 8192 + 3);

    // Appending through a read-only-mode file: the bytes land at the end, existing ones stay.
    let path = dir.path().join("append");
    let file = create_rdwr(&path, 0o444, libc::O_APPEND);
    std::os::unix::fs::FileExt::write_all_at(&file, &[7u8; 100], 0).unwrap();
    let handle = driver.register_file(&file).unwrap();
    let data = pattern(5000, 9);
    let mut src = DeviceBuffer::new(gpu.clone(), data.len()).unwrap();
    src.write_at(0, &data).unwrap();
    assert_eq!(handle.write(&src, 0).unwrap(), data.len());
    drop(handle);
    let whole = std::fs::read(&path).unwrap();
    assert_eq!(&whole[..100], &[7u8; 100][..], "appending never overwrites");
    assert_eq!(&whole[100..], &data[..]);

    // An O_DIRECT descriptor of such a file: the duplicates are O_DIRECT too (they share the
    // application's status flags), so aligned requests move their bytes and unaligned ones fail
    // with EINVAL, as pread/pwrite on the application's descriptor would; none moves wrong bytes.
    let path = dir.path().join("direct");
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o444)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            println!(
                "{}: no O_DIRECT there, its case not run",
                dir.path().display()
            );
            std::fs::remove_file(&path).ok();
        }
        Err(e) => panic!("creating an O_DIRECT file: {e}"),
        Ok(file) => {
            let handle = driver.register_file(&file).unwrap();
            let data = pattern(1 << 16, 3);
            let mut src = DeviceBuffer::new(gpu.clone(), data.len()).unwrap();
            src.write_at(0, &data).unwrap();
            assert_eq!(handle.write(&src, 0).unwrap(), data.len(), "aligned");
            let mut back = DeviceBuffer::new(gpu.clone(), data.len()).unwrap();
            assert_eq!(handle.read(&mut back, 0).unwrap(), data.len());
            assert_eq!(back.to_vec().unwrap(), data);
            let odd = src.slice(0..12_345).unwrap();
            match handle.write(odd, 4096 * 3 + 5) {
                Ok(n) => panic!("an unaligned write through O_DIRECT reported {n} bytes"),
                Err(e) => assert_eq!(e.errno(), Some(libc::EINVAL), "{e}"),
            }
            let mut odd_back = DeviceBuffer::new(gpu.clone(), 12_345).unwrap();
            match handle.read(&mut odd_back, 100) {
                Ok(n) => {
                    let got = odd_back.to_vec().unwrap();
                    assert_eq!(&got[..n], &data[100..100 + n], "bytes read unaligned");
                }
                Err(e) => assert_eq!(e.errno(), Some(libc::EINVAL), "{e}"),
            }
        }
    }

    // Never more access than the descriptor: a read-only descriptor of such a file reads and
    // refuses writes, a write-only one writes and refuses reads (EBADF, as pread/pwrite there).
    let path = dir.path().join("narrow");
    std::fs::write(&path, pattern(8192, 1)).unwrap();
    std::fs::set_permissions(&path, Permissions::from_mode(0o200)).unwrap();
    let wo = OpenOptions::new().write(true).open(&path).unwrap();
    let handle = driver.register_file(&wo).unwrap();
    let buf = DeviceBuffer::new(gpu.clone(), 4096).unwrap();
    assert_eq!(handle.write(&buf, 0).unwrap(), 4096);
    let mut into = DeviceBuffer::new(gpu.clone(), 4096).unwrap();
    let err = handle.read(&mut into, 0).unwrap_err();
    assert_eq!(
        (err.kind(), err.errno()),
        (ErrorKind::Os, Some(libc::EBADF)),
        "{err}"
    );
    drop(handle);
    std::fs::set_permissions(&path, Permissions::from_mode(0o400)).unwrap();
    let ro = File::open(&path).unwrap();
    std::fs::set_permissions(&path, Permissions::from_mode(0o000)).unwrap();
    let handle = driver.register_file(&ro).unwrap();
    assert_eq!(handle.read(&mut into, 4096).unwrap(), 4096);
    assert_eq!(into.to_vec().unwrap(), pattern(8192, 1)[4096..].to_vec());
    let err = handle.write(&buf, 0).unwrap_err();
    assert_eq!(
        (err.kind(), err.errno()),
        (ErrorKind::Os, Some(libc::EBADF)),
        "{err}"
    );
}

#[test]
fn files_whose_mode_refuses_a_reopen_register_and_move_bytes() {
    let name = harness::test_name(
        module_path!(),
        "files_whose_mode_refuses_a_reopen_register_and_move_bytes",
    );
    if harness::as_child(&name, cases) {
        return;
    }
    harness::run_child(
        harness::child_command(&name),
        Duration::from_secs(120),
        &name,
    )
    .assert_passed(&name);
}
