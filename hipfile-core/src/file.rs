//! Registered files: the two descriptors hipfile-rs keeps for each, their DIO alignment and the
//! facts about the filesystem that decide whether the direct path may serve them.

use std::any::Any;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use hipfile_hip::os::FileStamp;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};
use crate::io::IoOp;
use crate::policy::IoPolicy;

/// Alignment assumed when the kernel does not report one (no STATX_DIOALIGN).
pub const DEFAULT_DIO_ALIGN: u32 = 4096;

/// What kind of storage a file lives on, as far as the direct path cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FsKind {
    /// A block device opened directly.
    BlockDevice,
    /// ext4; `ordered` is true when its data mode is `ordered` (the default).
    Ext4 {
        /// The journal data mode is `ordered`.
        ordered: bool,
    },
    /// xfs.
    Xfs,
    /// Anything else, by its mountinfo type name.
    Other(String),
}

/// Filesystem facts of a registered file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsFacts {
    /// The kind.
    pub kind: FsKind,
    /// Mount point from mountinfo (empty when not found).
    pub mount_point: String,
    /// Mount source from mountinfo (empty when not found).
    pub source: String,
}

/// Direct IO alignment of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DioAlign {
    /// Required alignment of memory addresses.
    pub memory: u32,
    /// Required alignment of file offsets and sizes.
    pub offset: u32,
}

/// How the application opened the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// Reads are allowed.
    pub read: bool,
    /// Writes are allowed.
    pub write: bool,
}

/// The application's descriptor as one request finds it (see [`RegisteredFile::check_caller`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallerView {
    /// `O_APPEND` is set now: a write goes to the end of the file, whatever its offset says.
    pub append: bool,
    /// The file's size now, for regular files (`None` for block devices).
    pub size: Option<u64>,
    /// The file's size and change times now.
    pub stamp: FileStamp,
}

/// A file registered with the driver.
///
/// The application's descriptor stays the authority for every request: hipfile-rs reads and
/// writes through descriptors of its own (a buffered one and an O_DIRECT one, reopened with no
/// more access than the application's), and before each request [`RegisteredFile::check_caller`]
/// asks the kernel whether the application's descriptor is still open, still names the registered
/// file and still allows the direction. So IO through an `O_PATH` descriptor, reads through an
/// `O_WRONLY` one and writes through an `O_RDONLY` one fail with `EBADF`, as `pread`/`pwrite` on
/// that descriptor would; so does IO after the application closed its descriptor (upstream
/// hipFile answers the same), and IO after the number was reused for another file (where reading
/// through the number would touch a file the application never registered).
#[derive(Debug)]
pub struct RegisteredFile {
    user_fd: RawFd,
    buffered: OwnedFd,
    shares_description: bool,
    direct: Option<OwnedFd>,
    align: DioAlign,
    fs: FsFacts,
    access: Access,
    dev: u64,
    ino: u64,
    in_flight: AtomicUsize,
    /// The handle's [`IoPolicy`]: set means [`IoPolicy::DirectOnly`]. Changeable while
    /// requests run; each offer of a request to the backends reads it once.
    direct_only: AtomicBool,
    appending: Mutex<()>,
    /// What a backend keeps per registered file, made on first use and dropped with the
    /// registration (the staged engine's pinned page-cache pages of the file).
    backend_state: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl RegisteredFile {
    /// Open the descriptors for the application's `fd` and gather the file's facts.
    ///
    /// Both descriptors are reopened through `/proc/self/fd/N` with the application's access
    /// mode (an `O_PATH` descriptor gets an `O_PATH` one and no O_DIRECT one), so hipfile-rs
    /// never changes the flags or the offset of the application's descriptor and never holds more
    /// access than it. Where the file's mode refuses that reopen (`EACCES`, `EPERM`: a file the
    /// application created read-only but opened read-write, or whose mode changed since), both
    /// are duplicates of the application's descriptor instead (its open file description:
    /// exactly its access; only positioned IO, so its offset never moves), with an O_DIRECT one
    /// only when the application's descriptor is O_DIRECT itself. A number that names no open descriptor (negative, closed) fails as
    /// upstream's status query of it does, with `InternalError`. An `EINVAL` from the O_DIRECT
    /// open means the filesystem has no direct IO; any other failure fails the registration.
    pub fn open(fd: RawFd) -> Result<Self> {
        let caller = hipfile_hip::os::descriptor_state(fd).map_err(|e| {
            Error::new(
                ErrorKind::InternalError,
                format!("descriptor {fd} cannot be queried: {e}"),
            )
        })?;
        let file_type = FileType::from_raw_mode(caller.file_type);
        let is_block = file_type == FileType::BlockDevice;
        if file_type != FileType::RegularFile && !is_block {
            return Err(Error::new(
                ErrorKind::InvalidFileType,
                format!("descriptor {fd} is a {file_type:?}, not a regular file or block device"),
            ));
        }
        let path = format!("/proc/self/fd/{fd}");
        let stx = rustix::fs::statx(
            CWD,
            path.as_str(),
            AtFlags::empty(),
            StatxFlags::BASIC_STATS | StatxFlags::DIOALIGN,
        )
        .map_err(|e| Error::new(ErrorKind::InternalError, format!("statx of {path}: {e}")))?;
        let access = Access {
            read: caller.readable,
            write: caller.writable,
        };
        let flags = match (access.read, access.write) {
            _ if caller.path_only => OFlags::PATH,
            (true, true) => OFlags::RDWR,
            (false, true) => OFlags::WRONLY,
            _ => OFlags::RDONLY,
        } | OFlags::CLOEXEC;
        let reopen = |extra: OFlags| rustix::fs::open(path.as_str(), flags | extra, Mode::empty());
        let duplicate = || {
            hipfile_hip::os::duplicate_descriptor(fd).map_err(|e| {
                Error::new(
                    ErrorKind::GetNewFdFailed,
                    format!("duplicating descriptor {fd}: {e}"),
                )
            })
        };
        // A reopen is a fresh open, checked against the file's mode now: a file the
        // application created read-only (`open(O_CREAT | O_RDWR, 0444)`), or whose mode
        // changed since it was opened, refuses the access its descriptor still has. Then
        // hipfile-rs acts through a duplicate of the application's own open file, with exactly
        // its access, as upstream (which reads and writes through the application's descriptor).
        let (buffered, shared) = match reopen(OFlags::empty()) {
            Ok(own) => (own, false),
            Err(Errno::ACCESS | Errno::PERM) => (duplicate()?, true),
            Err(e) => return Err(reopen_error(e, fd, "buffered")),
        };
        // The number could have been made to name another file between the query and the
        // reopen (another thread's dup2): the descriptor hipfile-rs keeps must be the file the
        // checks of every request compare with.
        let reopened = rustix::fs::fstat(&buffered)
            .map_err(|e| Error::new(ErrorKind::InternalError, format!("fstat of {path}: {e}")))?;
        if (reopened.st_dev, reopened.st_ino) != (caller.dev, caller.ino) {
            return Err(Error::new(
                ErrorKind::InternalError,
                format!("descriptor {fd} changed while it was being registered"),
            ));
        }
        let direct = if caller.path_only {
            None
        } else if shared {
            // A duplicate shares the application's status flags and cannot set O_DIRECT
            // without setting it for the application too: it is a direct descriptor only when
            // the application's already is. Otherwise every request goes through the page cache.
            caller.direct.then(duplicate).transpose()?
        } else {
            match reopen(OFlags::DIRECT) {
                Ok(d) => Some(d),
                Err(Errno::INVAL) => None,
                Err(e) => return Err(reopen_error(e, fd, "O_DIRECT")),
            }
        };
        let has_dio =
            stx.stx_mask & StatxFlags::DIOALIGN.bits() != 0 && stx.stx_dio_offset_align != 0;
        let align = if has_dio {
            DioAlign {
                memory: stx.stx_dio_mem_align.max(1),
                offset: stx.stx_dio_offset_align,
            }
        } else {
            DioAlign {
                memory: DEFAULT_DIO_ALIGN,
                offset: DEFAULT_DIO_ALIGN,
            }
        };
        let fs = if is_block {
            FsFacts {
                kind: FsKind::BlockDevice,
                mount_point: String::new(),
                source: String::new(),
            }
        } else {
            fs_facts(stx.stx_dev_major, stx.stx_dev_minor)
        };
        Ok(RegisteredFile {
            user_fd: fd,
            buffered,
            shares_description: shared,
            direct,
            align,
            fs,
            access,
            dev: caller.dev,
            ino: caller.ino,
            in_flight: AtomicUsize::new(0),
            direct_only: AtomicBool::new(false),
            appending: Mutex::new(()),
            backend_state: OnceLock::new(),
        })
    }

    /// The application's descriptor (the registration key).
    pub fn user_fd(&self) -> RawFd {
        self.user_fd
    }

    /// The buffered descriptor hipfile-rs reads and writes through.
    pub fn buffered_fd(&self) -> BorrowedFd<'_> {
        self.buffered.as_fd()
    }

    /// Whether hipfile-rs's descriptors are duplicates of the application's (its open file
    /// description, status flags and all) because the file's mode refused a reopen with the
    /// application's access; otherwise they are opens of their own.
    pub fn shares_callers_description(&self) -> bool {
        self.shares_description
    }

    /// The O_DIRECT descriptor, when the filesystem supports direct IO.
    pub fn direct_fd(&self) -> Option<BorrowedFd<'_>> {
        self.direct.as_ref().map(AsFd::as_fd)
    }

    /// Direct IO alignment.
    pub fn dio_align(&self) -> DioAlign {
        self.align
    }

    /// Filesystem facts.
    pub fn fs(&self) -> &FsFacts {
        &self.fs
    }

    /// The application's access mode at registration.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Ask the kernel about the application's descriptor before a request in direction `op`:
    /// `EBADF` (as an OS error) when it was closed, now names another file, or does not allow
    /// `op`; else what the request must honour (`O_APPEND`, the file's size).
    pub fn check_caller(&self, op: IoOp) -> Result<CallerView> {
        let fd = self.user_fd;
        let badf = |why: String| Error::os(Errno::BADF.raw_os_error(), why);
        let now = hipfile_hip::os::descriptor_state(fd).map_err(|e| match e.raw_os_error() {
            Some(code) if code == Errno::BADF.raw_os_error() => {
                badf(format!("descriptor {fd} was closed after registration"))
            }
            _ => Error::from_io(&e, format!("querying descriptor {fd}")),
        })?;
        if (now.dev, now.ino) != (self.dev, self.ino) {
            return Err(badf(format!(
                "descriptor {fd} names another file than the one registered"
            )));
        }
        let allowed = match op {
            IoOp::Read => now.readable,
            IoOp::Write => now.writable,
        };
        if !allowed {
            return Err(badf(format!(
                "descriptor {fd} was not opened for {}",
                match op {
                    IoOp::Read => "reading",
                    IoOp::Write => "writing",
                }
            )));
        }
        Ok(CallerView {
            append: now.append,
            size: (self.fs.kind != FsKind::BlockDevice).then_some(now.stamp.size),
            stamp: now.stamp,
        })
    }

    /// Held for the whole of an appending write, so that appending requests of this process
    /// to one registered file land whole, one after the other, even when each is written in
    /// several pieces.
    pub fn append_lock(&self) -> MutexGuard<'_, ()> {
        self.appending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The state of type `T` a backend keeps for this file, made by `make` on first use; `None`
    /// when state of another type was made first (one backend keeps state per file). Dropped
    /// with the registration, once no request holds the file.
    pub fn backend_state<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<&T> {
        self.backend_state
            .get_or_init(|| Box::new(make()))
            .downcast_ref::<T>()
    }

    /// The state a backend made with [`RegisteredFile::backend_state`], if it is of type `T`.
    pub fn backend_state_if<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.backend_state.get()?.downcast_ref::<T>()
    }

    /// How the requests of this file may be served ([`IoPolicy`]; [`IoPolicy::Fallback`] until
    /// set).
    pub fn io_policy(&self) -> IoPolicy {
        if self.direct_only.load(Ordering::Acquire) {
            IoPolicy::DirectOnly
        } else {
            IoPolicy::Fallback
        }
    }

    /// Set the policy later requests of this file are served under (requests already handed to
    /// a backend keep the one they were offered under).
    pub fn set_io_policy(&self, policy: IoPolicy) {
        self.direct_only
            .store(policy == IoPolicy::DirectOnly, Ordering::Release);
    }

    /// Number of requests running on this file.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Count a request as running until the guard drops. Call it while the file table's lock is
    /// held, so a deregistration cannot slip between finding the file and counting the request.
    pub fn begin_io(self: &Arc<Self>) -> FileInFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        FileInFlight(Arc::clone(self))
    }
}

/// Marks one request as in flight on a registered file until dropped.
#[derive(Debug)]
pub struct FileInFlight(Arc<RegisteredFile>);

impl Drop for FileInFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn reopen_error(e: Errno, fd: RawFd, which: &str) -> Error {
    let kind = match e {
        Errno::ACCESS | Errno::PERM => ErrorKind::PermissionDenied,
        _ => ErrorKind::GetNewFdFailed,
    };
    Error::new(
        kind,
        format!(
            "reopening descriptor {fd} ({which}): {}",
            io::Error::from(e)
        ),
    )
}

/// Filesystem facts of the mount with device `major:minor`, from `/proc/self/mountinfo`.
fn fs_facts(major: u32, minor: u32) -> FsFacts {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mountinfo(&text, major, minor).unwrap_or(FsFacts {
        kind: FsKind::Other("unknown".to_string()),
        mount_point: String::new(),
        source: String::new(),
    })
}

/// Find the mount of device `major:minor` in mountinfo text and classify it. The last matching
/// line wins: later mounts shadow earlier ones.
pub fn parse_mountinfo(text: &str, major: u32, minor: u32) -> Option<FsFacts> {
    let dev = format!("{major}:{minor}");
    text.lines()
        .filter_map(parse_mountinfo_line)
        .rfind(|m| m.dev == dev)
        .map(|m| m.facts())
}

/// Every mount in mountinfo text, classified, in table order (for reports such as
/// `hipfile check`).
pub fn mount_table(text: &str) -> Vec<FsFacts> {
    text.lines()
        .filter_map(parse_mountinfo_line)
        .map(|m| m.facts())
        .collect()
}

struct MountLine<'a> {
    dev: &'a str,
    mount_point: &'a str,
    mount_options: &'a str,
    fstype: &'a str,
    source: &'a str,
    super_options: &'a str,
}

impl<'a> MountLine<'a> {
    fn options(&self) -> impl Iterator<Item = &'a str> {
        self.mount_options
            .split(',')
            .chain(self.super_options.split(','))
    }

    fn facts(&self) -> FsFacts {
        let kind = match self.fstype {
            "ext4" => {
                let data_mode = self
                    .options()
                    .find_map(|o| o.strip_prefix("data="))
                    .unwrap_or("ordered");
                FsKind::Ext4 {
                    ordered: data_mode == "ordered",
                }
            }
            "xfs" => FsKind::Xfs,
            other => FsKind::Other(other.to_string()),
        };
        FsFacts {
            kind,
            mount_point: self.mount_point.to_string(),
            source: self.source.to_string(),
        }
    }
}

fn parse_mountinfo_line(line: &str) -> Option<MountLine<'_>> {
    let (head, tail) = line.split_once(" - ")?;
    let mut h = head.split(' ');
    let _id = h.next()?;
    let _parent = h.next()?;
    let dev = h.next()?;
    let _root = h.next()?;
    let mount_point = h.next()?;
    let mount_options = h.next()?;
    let mut t = tail.split(' ');
    let fstype = t.next()?;
    let source = t.next()?;
    let super_options = t.next().unwrap_or("");
    Some(MountLine {
        dev,
        mount_point,
        mount_options,
        fstype,
        source,
        super_options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    const MOUNTINFO: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,errors=remount-ro
23 22 254:16 / /data rw,relatime shared:2 - xfs /dev/vdb rw,attr2,inode64
24 22 254:32 / /j rw,relatime - ext4 /dev/vdc rw,data=journal
25 22 0:44 / /tmp rw,nosuid - tmpfs tmpfs rw,size=100k
";

    #[test]
    fn mountinfo_classifies_filesystems() {
        assert_eq!(
            parse_mountinfo(MOUNTINFO, 254, 0).unwrap().kind,
            FsKind::Ext4 { ordered: true }
        );
        assert_eq!(
            parse_mountinfo(MOUNTINFO, 254, 16).unwrap().kind,
            FsKind::Xfs
        );
        assert_eq!(
            parse_mountinfo(MOUNTINFO, 254, 32).unwrap().kind,
            FsKind::Ext4 { ordered: false }
        );
        let tmp = parse_mountinfo(MOUNTINFO, 0, 44).unwrap();
        assert_eq!(tmp.kind, FsKind::Other("tmpfs".into()));
        assert_eq!(tmp.mount_point, "/tmp");
        assert!(parse_mountinfo(MOUNTINFO, 9, 9).is_none());
        let table = mount_table(MOUNTINFO);
        assert_eq!(table.len(), 4);
        assert_eq!(table[1].mount_point, "/data");
        assert_eq!(table[1].kind, FsKind::Xfs);
    }

    #[test]
    fn registration_reopens_both_descriptors_with_the_callers_access_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let ro = std::fs::File::open(&path).unwrap();
        let reg = RegisteredFile::open(ro.as_raw_fd()).unwrap();
        assert_eq!(
            reg.access(),
            Access {
                read: true,
                write: false
            }
        );
        assert!(reg.dio_align().offset >= 1);
        let mut buf = [0u8; 3];
        rustix::io::pread(reg.buffered_fd(), &mut buf, 0).unwrap();
        assert_eq!(&buf, b"abc");
        assert!(rustix::io::pwrite(reg.buffered_fd(), b"x", 0).is_err());
    }

    #[test]
    fn bad_descriptors_and_file_types_are_refused() {
        // As upstream, whose status query of the descriptor fails first: InternalError.
        assert_eq!(
            RegisteredFile::open(-1).unwrap_err().kind(),
            ErrorKind::InternalError
        );
        assert_eq!(
            RegisteredFile::open(99_999).unwrap_err().kind(),
            ErrorKind::InternalError
        );
        let (r, _w) = std::io::pipe().unwrap();
        assert_eq!(
            RegisteredFile::open(r.as_raw_fd()).unwrap_err().kind(),
            ErrorKind::InvalidFileType
        );
    }

    fn badf(r: Result<CallerView>) -> bool {
        r.is_err_and(|e| e.kind() == ErrorKind::Os && e.errno() == Some(Errno::BADF.raw_os_error()))
    }

    #[test]
    fn the_callers_descriptor_decides_each_direction() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [5u8; 8192]).unwrap();
        let open = |o: &mut std::fs::OpenOptions| o.open(&path).unwrap();

        let by_path = open(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(OFlags::PATH.bits() as i32),
        );
        let reg = RegisteredFile::open(by_path.as_raw_fd()).unwrap();
        assert!(
            reg.direct_fd().is_none(),
            "no O_DIRECT descriptor for O_PATH"
        );
        assert!(badf(reg.check_caller(IoOp::Read)));
        assert!(badf(reg.check_caller(IoOp::Write)));
        // The reopened descriptor has no more access than the caller's: it cannot be read.
        assert!(rustix::io::pread(reg.buffered_fd(), &mut [0u8; 1], 0).is_err());

        let wo = open(std::fs::OpenOptions::new().write(true));
        let reg = RegisteredFile::open(wo.as_raw_fd()).unwrap();
        assert!(badf(reg.check_caller(IoOp::Read)));
        assert!(reg.check_caller(IoOp::Write).is_ok());

        let ap = open(std::fs::OpenOptions::new().read(true).append(true));
        let reg = RegisteredFile::open(ap.as_raw_fd()).unwrap();
        let view = reg.check_caller(IoOp::Write).unwrap();
        assert_eq!((view.append, view.size), (true, Some(8192)));
        assert_eq!(view.stamp.size, 8192);
    }

    #[test]
    fn a_closed_or_reused_descriptor_answers_ebadf() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let file = std::fs::File::open(&a).unwrap();
        let fd = file.as_raw_fd();
        let reg = RegisteredFile::open(fd).unwrap();
        assert!(reg.check_caller(IoOp::Read).is_ok());
        // The number now names another file: dup2 puts `b` under it (and closes `a` there).
        let other = std::fs::File::open(&b).unwrap();
        let mut number = OwnedFd::from(file);
        rustix::io::dup2(&other, &mut number).unwrap();
        assert!(badf(reg.check_caller(IoOp::Read)));
        // Closed: EBADF (or, if another thread took the number meanwhile, another file: EBADF).
        drop(number);
        assert!(badf(reg.check_caller(IoOp::Read)));
    }
}
