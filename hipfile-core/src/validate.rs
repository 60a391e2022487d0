//! Validation: a read or write as the caller states it ([`IoCall`]) becomes a [`Prepared`]
//! request, every argument checked, its file and buffer resolved against a [`Session`] and held in
//! flight, or an answer known without moving bytes. The synchronous path, batch entries and
//! stream-ordered ops all come through here.

use std::sync::Arc;

use hipfile_hip::{is_host, IoMemory, MemoryKind, Refusal};
use rustix::io::Errno;

use crate::config::MAX_RW_COUNT;
use crate::error::{Error, ErrorKind, Result};
use crate::file::{FileInFlight, RegisteredFile};
use crate::io::IoOp;
use crate::request::OwnedRequest;
use crate::session::{BufferGuard, FileHandleId, Session};

/// One read or write as the caller states it, before validation.
#[derive(Clone, Copy, Debug)]
pub struct IoCall {
    /// Direction.
    pub op: IoOp,
    /// The registered file.
    pub handle: FileHandleId,
    /// Buffer base: a registered buffer, or any device pointer.
    pub buffer: usize,
    /// Bytes to move.
    pub size: usize,
    /// File offset (negative is `EINVAL`).
    pub file_offset: i64,
    /// Offset into the buffer (negative is `EINVAL`).
    pub buffer_offset: i64,
}

/// A validated request that owns what it refers to: the file and buffer stay counted as in
/// flight (so neither can be deregistered) until it is dropped. The synchronous path builds one
/// per call; a batch keeps one per entry until the entry is reaped.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The request to offer the backends.
    pub(crate) request: OwnedRequest,
    _file_guard: FileInFlight,
    _buffer_guard: Option<BufferGuard>,
    /// The answer, when it is known without moving bytes.
    pub(crate) answer: Option<Result<usize>>,
}

/// Validate `call` against `session` and resolve what it refers to. Argument errors fail; a
/// request whose answer is known without moving bytes (size 0, a read at or past the end of the
/// file, a descriptor that no longer allows the direction) carries that answer. Stream-ordered
/// ops bind their arguments when the stream reaches them, possibly after the driver closed, and
/// are validated against the session they were submitted to.
pub(crate) fn prepare(session: &Session, call: &IoCall) -> Result<Prepared> {
    prepare_checked(session, session.file(call.handle)?, call, false)
}

/// [`prepare`] on a registration already found: a stream-ordered op runs on the registration it
/// was queued on, even where its handle was deregistered since (the deregistration forgot the
/// handle; the registration ends with its last op).
pub(crate) fn prepare_on(
    session: &Session,
    file: Arc<RegisteredFile>,
    call: &IoCall,
) -> Result<Prepared> {
    prepare_checked(session, file, call, false)
}

/// Validate one batch entry as upstream's batch does: every argument error is `InvalidValue`
/// (an unregistered file handle `HandleNotRegistered`), and the entry's first byte must lie
/// inside the buffer even when its size is 0.
pub(crate) fn prepare_batch_entry(session: &Session, call: &IoCall) -> Result<Prepared> {
    let invalid = |why: &str| Error::new(ErrorKind::InvalidValue, why.to_string());
    // The handle is looked up first, as a synchronous request does.
    let file = session.file(call.handle)?;
    if call.file_offset < 0 || call.buffer_offset < 0 {
        return Err(invalid("negative file or buffer offset"));
    }
    if (call.file_offset as u64).saturating_add(call.size as u64) > i64::MAX as u64 {
        return Err(invalid("the file range ends past the largest file offset"));
    }
    prepare_checked(session, file, call, true)
}

/// [`prepare`] on the registration `file`; with `first_byte_inside`, a request of 0 bytes must
/// still start inside its buffer (batch entries, as upstream checks them).
fn prepare_checked(
    session: &Session,
    file: Arc<RegisteredFile>,
    call: &IoCall,
    first_byte_inside: bool,
) -> Result<Prepared> {
    let file_guard = file.begin_io();
    if call.file_offset < 0 || call.buffer_offset < 0 {
        return Err(Error::os(
            Errno::INVAL.raw_os_error(),
            "negative file or buffer offset",
        ));
    }
    let size = call.size.min(MAX_RW_COUNT);
    // As pread(2): a range that ends past the largest file offset is EINVAL.
    if (call.file_offset as u64).saturating_add(size as u64) > i64::MAX as u64 {
        return Err(Error::os(
            Errno::INVAL.raw_os_error(),
            "the file range ends past the largest file offset",
        ));
    }
    if call.buffer == 0 {
        return Err(Error::new(ErrorKind::InvalidValue, "the buffer is NULL"));
    }
    let buffer_offset = usize::try_from(call.buffer_offset)
        .map_err(|_| Error::os(Errno::INVAL.raw_os_error(), "buffer offset out of range"))?;
    let probe = if first_byte_inside { size.max(1) } else { size };
    let settings = session.settings();
    let (mut memory, registered, buffer_guard) = buffer_view(
        session,
        call.buffer,
        buffer_offset,
        probe,
        settings.allow_system_memory,
    )?;
    if probe > size {
        memory = memory
            .slice(0, size)
            .expect("an empty range lies inside any range");
    }
    let mut prepared = Prepared {
        request: OwnedRequest {
            op: call.op,
            file,
            memory,
            file_offset: call.file_offset as u64,
            append: false,
            registered_buffer: registered,
            compat: settings.compat_mode(session.env()),
            settings,
            env: *session.env(),
            doorbell: None,
            stream_ordered: false,
            file_stamp: None,
        },
        _file_guard: file_guard,
        _buffer_guard: buffer_guard,
        answer: None,
    };
    let req = &mut prepared.request;
    // The application's descriptor decides, at this moment: closed, reused for another file
    // or not open for this direction is EBADF, as `pread`/`pwrite` on it would answer.
    let caller = match req.file.check_caller(call.op) {
        Ok(caller) => caller,
        Err(e) => {
            prepared.answer = Some(Err(e));
            return Ok(prepared);
        }
    };
    req.append = call.op == IoOp::Write && caller.append;
    req.file_stamp = Some(caller.stamp);
    if size == 0 {
        prepared.answer = Some(Ok(0));
        return Ok(prepared);
    }
    // A read that starts at or past the end of a regular file reads nothing, whatever its
    // alignment: no backend is asked (a direct-only driver would otherwise refuse an
    // unaligned offset at end of file, which readers that step by bytes read reach).
    // Otherwise nothing past the end of the file's last block is asked for: the kernel's
    // O_DIRECT read zero-fills the caller's buffer for the blocks past the end of file
    // beyond the bytes it reports. Clipped here, the buffer past the bytes read keeps what
    // it held, except that the direct path may zero the rest of the file's last block.
    // A size of 0 says nothing (procfs and sysfs files report 0 and have content): such
    // reads go to the backends whole.
    if let (IoOp::Read, Some(len @ 1..)) = (call.op, caller.size) {
        let offset = call.file_offset as u64;
        if offset >= len {
            prepared.answer = Some(Ok(0));
            return Ok(prepared);
        }
        let align = u64::from(req.file.dio_align().offset.max(1));
        let room = (len - offset).div_ceil(align).saturating_mul(align);
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        if room < req.memory.len() {
            req.memory = req
                .memory
                .slice(0, room)
                .expect("a clipped size lies inside the checked range");
        }
    }
    Ok(prepared)
}

/// Resolve the memory of a request: a registered buffer (exact base), else a temporary view from
/// the runtime's pointer query, which also serves interior pointers. Host memory, registered or
/// not, only with `allow_host` (the setting `allow_system_memory`); without it, it is
/// `HipMemoryTypeInvalid` as upstream answers. Answers the memory, whether it is registered, and
/// the registered buffer's in-flight guard.
fn buffer_view(
    session: &Session,
    base: usize,
    offset: usize,
    size: usize,
    allow_host: bool,
) -> Result<(IoMemory, bool, Option<BufferGuard>)> {
    let past_end = || {
        Error::new(
            ErrorKind::InvalidValue,
            "the request runs past the end of the buffer",
        )
    };
    let end = offset.checked_add(size).ok_or_else(past_end)?;
    if let Some(guard) = session.claim_buffer(base) {
        let kind = guard.range().kind();
        if is_host(kind) && !allow_host {
            return Err(not_device_memory(base, kind));
        }
        let range = guard.range().slice(offset, size).ok_or_else(past_end)?;
        return Ok((range, true, Some(guard)));
    }
    let refused = |kind| is_host(kind) && !allow_host;
    let whole = IoMemory::check(session.runtime(), base, end).map_err(|refusal| match refusal {
        Refusal::Query(e) => Error::hip(&e, format!("querying pointer {base:#x}")),
        Refusal::NotDevice(kind) | Refusal::NotHost(kind) => not_device_memory(base, kind),
        Refusal::PastEnd(kind) if kind == MemoryKind::Managed || refused(kind) => {
            not_device_memory(base, kind)
        }
        Refusal::PastEnd(_) => past_end(),
    })?;
    if whole.kind() == MemoryKind::Managed || refused(whole.kind()) {
        return Err(not_device_memory(base, whole.kind()));
    }
    let range = whole
        .slice(offset, size)
        .expect("offset + size is the checked length");
    Ok((range, false, None))
}

/// The error of memory that is not device memory.
pub(crate) fn not_device_memory(ptr: usize, kind: MemoryKind) -> Error {
    Error::new(
        ErrorKind::HipMemoryTypeInvalid,
        format!("{ptr:#x} is {kind:?} memory, not device memory"),
    )
}
