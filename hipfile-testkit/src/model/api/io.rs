//! `hipFileRead`/`hipFileWrite` in the C API model: the checks in the order the entry points make
//! them, the validated request ([`Effect`]), and the bytes it moves between the model's files and
//! device memory. Batch entries are checked and applied with the same pieces.

use hipfile_core::{ErrorKind, IoOp, MAX_RW_COUNT};
use rustix::io::Errno;

use super::{Access, ApiModel, Failure, IoArgs, Memory, ALLOCATION_LEN, DESCRIPTORS};

/// A request that moves bytes, validated: where and how. Applied to the model's contents by
/// [`ApiModel::apply_effect`], at once for `hipFileRead`/`hipFileWrite`, once it is known to have
/// completed for a batch entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Effect {
    pub(super) op: IoOp,
    /// The descriptor whose handle the request names.
    pub(super) descriptor: usize,
    pub(super) file: usize,
    /// A write through an `O_APPEND` descriptor: it lands at the end of the file.
    pub(super) append: bool,
    pub(super) allocation: usize,
    /// The first device byte, from the allocation's start.
    pub(super) start: usize,
    pub(super) size: usize,
    pub(super) file_offset: usize,
    /// The registered buffer the request goes through (allocation, offset), if any.
    pub(super) registered: Option<(usize, usize)>,
}

impl ApiModel {
    /// Bytes a request may use from `memory`'s base: its registered length, else the rest of
    /// its allocation; `None` when the memory is not device memory.
    pub(super) fn room(&self, memory: Memory) -> Option<usize> {
        match memory {
            Memory::Device { allocation, offset } => Some(
                self.buffers
                    .get(&(allocation, offset))
                    .copied()
                    .unwrap_or(ALLOCATION_LEN - offset),
            ),
            _ => None,
        }
    }

    /// Validate a `hipFileRead`/`hipFileWrite` in the order the entry point checks: the error,
    /// `None` for a request that moves nothing (zero bytes), else the request.
    pub(super) fn check_io(&self, io: &IoArgs) -> Result<Option<Effect>, Failure> {
        if !self.refs.is_open() {
            return Err(Failure::os(Errno::INVAL));
        }
        let Some(d) = self.handle_file(io.handle) else {
            return Err(Failure::of(ErrorKind::HandleNotRegistered));
        };
        if io.file_offset < 0 || io.buffer_offset < 0 {
            return Err(Failure::os(Errno::INVAL));
        }
        let size = io.size.min(MAX_RW_COUNT);
        if (io.file_offset as u64).saturating_add(size as u64) > i64::MAX as u64 {
            return Err(Failure::os(Errno::INVAL));
        }
        self.check_memory(io.memory, io.buffer_offset, size)?;
        if !self.allows(d, io.op) {
            return Err(Failure::os(Errno::BADF));
        }
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(self.effect(io, d, size)))
    }

    /// The memory checks of a call and of a batch entry, in their order: `span` bytes at
    /// `buffer_offset` (not negative) from `memory`'s base lie within what a request may use.
    pub(super) fn check_memory(
        &self,
        memory: Memory,
        buffer_offset: i64,
        span: usize,
    ) -> Result<(), Failure> {
        let past_end = Failure::of(ErrorKind::InvalidValue);
        if memory == Memory::Null {
            return Err(past_end);
        }
        let end = (buffer_offset as usize).checked_add(span).ok_or(past_end)?;
        let room = self
            .room(memory)
            .ok_or(Failure::of(ErrorKind::HipMemoryTypeInvalid))?;
        if end > room {
            return Err(past_end);
        }
        Ok(())
    }

    /// Whether descriptor `d` allows `op`.
    pub(super) fn allows(&self, d: usize, op: IoOp) -> bool {
        let access = DESCRIPTORS[d].access;
        match op {
            IoOp::Read => access.readable(),
            IoOp::Write => access.writable(),
        }
    }

    /// The request of `size` bytes a call through descriptor `d` makes once it passed its checks
    /// (its memory is device memory).
    pub(super) fn effect(&self, io: &IoArgs, d: usize, size: usize) -> Effect {
        let Memory::Device { allocation, offset } = io.memory else {
            unreachable!("room() is None for other memory")
        };
        Effect {
            op: io.op,
            descriptor: d,
            file: DESCRIPTORS[d].file,
            append: io.op == IoOp::Write && DESCRIPTORS[d].access == Access::Append,
            allocation,
            start: offset + io.buffer_offset as usize,
            size,
            file_offset: usize::try_from(io.file_offset).unwrap_or(usize::MAX),
            registered: self
                .buffers
                .contains_key(&(allocation, offset))
                .then_some((allocation, offset)),
        }
    }

    /// Move the bytes of `effect` between the model's file and device memory; the bytes moved.
    pub(super) fn apply_effect(&mut self, effect: &Effect) -> usize {
        self.dirty_files.insert(effect.file);
        self.dirty_allocations.insert(effect.allocation);
        let (start, size) = (effect.start, effect.size);
        let file = &mut self.files[effect.file];
        let device = &mut self.device[effect.allocation];
        match effect.op {
            IoOp::Read => {
                let from = effect.file_offset;
                let n = file.len().saturating_sub(from).min(size);
                if n > 0 {
                    device[start..start + n].copy_from_slice(&file[from..from + n]);
                }
                if n > 0 && n < size {
                    let last_block = n.div_ceil(self.block) * self.block;
                    self.unspecified
                        .push((effect.allocation, start + n..start + size.min(last_block)));
                }
                n
            }
            IoOp::Write => {
                let at = if effect.append {
                    file.len()
                } else {
                    effect.file_offset
                };
                if file.len() < at + size {
                    file.resize(at + size, 0);
                }
                file[at..at + size].copy_from_slice(&device[start..start + size]);
                size
            }
        }
    }
}
