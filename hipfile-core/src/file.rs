//! Registered files: the two descriptors hipfile-rs keeps for each, their DIO alignment and the
//! facts about the filesystem that decide whether the direct path may serve them.

use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags, CWD};
use rustix::io::Errno;

use crate::error::{Error, ErrorKind, Result};

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

/// A file registered with the driver.
#[derive(Debug)]
pub struct RegisteredFile {
    user_fd: RawFd,
    buffered: OwnedFd,
    direct: Option<OwnedFd>,
    align: DioAlign,
    fs: FsFacts,
    access: Access,
    in_flight: AtomicUsize,
}

impl RegisteredFile {
    /// Open the descriptors for the application's `fd` and gather the file's facts.
    ///
    /// Both descriptors are reopened through `/proc/self/fd/N` with the application's access
    /// mode, so hipfile-rs never changes the flags or the offset of the application's descriptor.
    /// An `EINVAL` from the O_DIRECT open means the filesystem has no direct IO; any other failure
    /// fails the registration.
    pub fn open(fd: RawFd) -> Result<Self> {
        if fd < 0 {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                format!("file descriptor {fd} is negative"),
            ));
        }
        let path = format!("/proc/self/fd/{fd}");
        let stx = rustix::fs::statx(
            CWD,
            path.as_str(),
            AtFlags::empty(),
            StatxFlags::BASIC_STATS | StatxFlags::DIOALIGN,
        )
        .map_err(|e| match e {
            Errno::NOENT | Errno::BADF => Error::new(
                ErrorKind::InvalidValue,
                format!("{fd} is not an open file descriptor"),
            ),
            e => Error::os(e.raw_os_error(), format!("statx of descriptor {fd}")),
        })?;
        let file_type = FileType::from_raw_mode(stx.stx_mode.into());
        let is_block = file_type == FileType::BlockDevice;
        if file_type != FileType::RegularFile && !is_block {
            return Err(Error::new(
                ErrorKind::InvalidFileType,
                format!("descriptor {fd} is a {file_type:?}, not a regular file or block device"),
            ));
        }
        let access = access_mode(fd)?;
        let flags = match (access.read, access.write) {
            (true, true) => OFlags::RDWR,
            (false, true) => OFlags::WRONLY,
            _ => OFlags::RDONLY,
        } | OFlags::CLOEXEC;
        let reopen = |extra: OFlags| rustix::fs::open(path.as_str(), flags | extra, Mode::empty());
        let buffered = reopen(OFlags::empty()).map_err(|e| reopen_error(e, fd, "buffered"))?;
        let direct = match reopen(OFlags::DIRECT) {
            Ok(d) => Some(d),
            Err(Errno::INVAL) => None,
            Err(e) => return Err(reopen_error(e, fd, "O_DIRECT")),
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
            direct,
            align,
            fs,
            access,
            in_flight: AtomicUsize::new(0),
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

    /// The application's access mode.
    pub fn access(&self) -> Access {
        self.access
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

/// The access mode of `fd`, from `/proc/self/fdinfo` (no borrowing of a descriptor we do not own).
fn access_mode(fd: RawFd) -> Result<Access> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .map_err(|e| Error::from_io(&e, format!("reading fdinfo of descriptor {fd}")))?;
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InternalError,
                format!("no flags in fdinfo of descriptor {fd}"),
            )
        })?;
    Ok(match flags & 0o3 {
        0 => Access {
            read: true,
            write: false,
        },
        1 => Access {
            read: false,
            write: true,
        },
        _ => Access {
            read: true,
            write: true,
        },
    })
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
        assert_eq!(
            RegisteredFile::open(-1).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        assert_eq!(
            RegisteredFile::open(99_999).unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
        let (r, _w) = std::io::pipe().unwrap();
        assert_eq!(
            RegisteredFile::open(r.as_raw_fd()).unwrap_err().kind(),
            ErrorKind::InvalidFileType
        );
    }
}
