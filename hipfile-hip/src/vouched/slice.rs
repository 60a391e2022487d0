//! Borrowed views of device memory: [`DeviceSlice`] (shared) and [`DeviceSliceMut`] (exclusive).
//!
//! A slice is the address range a read or a write names and nothing more: no runtime, no
//! reference count, nothing to free, so handing one to an IO call costs nothing. Its lifetime ties
//! it to the memory it was cut from: a slice of a [`DeviceBuffer`] cannot outlive the buffer, and
//! an exclusive slice cannot coexist with another view of the same bytes. These are the rules of
//! `&[u8]` and `&mut [u8]`, for memory the CPU does not address.
//!
//! hipFile names device memory as a base and an offset into it, because it recognises a
//! registered buffer by its base. A slice keeps both: [`base`](DeviceSlice::base) is the start of
//! the region it was cut from (a buffer's allocation, or the slice itself after
//! [`rebased`](DeviceSlice::rebased)), and [`offset`](DeviceSlice::offset) is where the slice
//! starts in that region. Cutting a slice of a slice keeps the base and adds the offsets.
//!
//! Memory allocated elsewhere (a framework's tensor, a pointer from C) enters through the
//! `unsafe` constructors [`DeviceSlice::from_raw_parts`] and [`DeviceSliceMut::from_raw_parts`]:
//! their contract is what the borrow checker proves for the safe ones. They live with the crate's
//! other vouched values (`vouched.rs`), because this crate holds hipfile-rs's `unsafe`.

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use crate::DeviceBuffer;

/// Shared view of `len` bytes of device memory: requests may read it (a file write takes its
/// bytes from one), nothing may write it while the view lives.
#[derive(Clone, Copy)]
pub struct DeviceSlice<'a> {
    pub(super) base: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) memory: PhantomData<&'a [u8]>,
}

/// Exclusive view of `len` bytes of device memory: a file read may land in it, and nothing else
/// reads or writes those bytes while the view lives.
///
/// ```
/// use std::sync::Arc;
/// use hipfile_hip::{sim::SimRuntime, DeviceBuffer, DeviceSliceMut, GpuRuntime};
///
/// let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
/// let mut buf = DeviceBuffer::new(rt, 8192)?;
/// let base = buf.ptr();
/// let half = DeviceSliceMut::from(&mut buf).get_mut(4096..).unwrap();
/// assert_eq!((half.base(), half.offset(), half.len()), (base, 4096, 4096));
///
/// // Memory allocated elsewhere: the caller vouches for it.
/// // SAFETY: `buf` outlives `raw`, and nothing else touches its bytes while `raw` lives.
/// let raw = unsafe { DeviceSliceMut::from_raw_parts(base, 8192) };
/// assert_eq!((raw.base(), raw.offset()), (base, 0));
/// # Ok::<(), hipfile_hip::HipError>(())
/// ```
pub struct DeviceSliceMut<'a> {
    pub(super) base: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) memory: PhantomData<&'a mut [u8]>,
}

/// `(start, end)` of `range` within `0..len`, or `None` when it does not fit.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1)?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

/// The accessors the shared and the exclusive slice have alike.
macro_rules! region_accessors {
    () => {
        /// Start of the region the slice was cut from: what a request names as its buffer.
        pub fn base(&self) -> usize {
            self.base
        }

        /// Where the slice starts in its region: what a request names as its buffer offset.
        pub fn offset(&self) -> usize {
            self.offset
        }

        /// Device address of the first byte.
        pub fn ptr(&self) -> usize {
            self.base + self.offset
        }

        /// Length in bytes.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether the slice has no bytes.
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }
    };
}

impl<'a> DeviceSlice<'a> {
    region_accessors!();

    /// The bytes `range` of this slice (relative to its start), with the same base; `None` when
    /// the range does not lie within the slice.
    pub fn get(self, range: impl RangeBounds<usize>) -> Option<DeviceSlice<'a>> {
        let (start, end) = bounds(range, self.len)?;
        Some(DeviceSlice {
            base: self.base,
            offset: self.offset + start,
            len: end - start,
            memory: PhantomData,
        })
    }

    /// The same bytes as a region of their own: the base becomes the slice's first byte and the
    /// offset 0. A buffer registered from this slice is recognised by that base.
    pub fn rebased(self) -> DeviceSlice<'a> {
        DeviceSlice {
            base: self.ptr(),
            offset: 0,
            len: self.len,
            memory: PhantomData,
        }
    }
}

impl<'a> DeviceSliceMut<'a> {
    region_accessors!();

    /// A shared view of the same bytes, for as long as it is borrowed.
    pub fn as_slice(&self) -> DeviceSlice<'_> {
        DeviceSlice {
            base: self.base,
            offset: self.offset,
            len: self.len,
            memory: PhantomData,
        }
    }

    /// An exclusive view of the same bytes for a shorter time, leaving this one usable after it.
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_> {
        DeviceSliceMut {
            base: self.base,
            offset: self.offset,
            len: self.len,
            memory: PhantomData,
        }
    }

    /// The bytes `range` of this slice, shared, with the same base; `None` when the range does not
    /// lie within the slice.
    pub fn get(&self, range: impl RangeBounds<usize>) -> Option<DeviceSlice<'_>> {
        self.as_slice().get(range)
    }

    /// The bytes `range` of this slice, exclusive, with the same base; `None` when the range does
    /// not lie within the slice. Consumes the view; [`reborrow`](Self::reborrow) first to keep it.
    pub fn get_mut(self, range: impl RangeBounds<usize>) -> Option<DeviceSliceMut<'a>> {
        let (start, end) = bounds(range, self.len)?;
        Some(DeviceSliceMut {
            base: self.base,
            offset: self.offset + start,
            len: end - start,
            memory: PhantomData,
        })
    }

    /// The slice cut in consecutive exclusive pieces of `size` bytes (the last one shorter when
    /// `size` does not divide the length), each with the same base: what a batch of requests
    /// into one buffer takes, one piece per request. `size` 0 gives no piece.
    pub fn chunks_mut(self, size: usize) -> impl Iterator<Item = DeviceSliceMut<'a>> {
        let (base, offset, len) = (self.base, self.offset, self.len);
        let starts = if size == 0 { 0 } else { len.div_ceil(size) };
        (0..starts).map(move |k| DeviceSliceMut {
            base,
            offset: offset + k * size,
            len: size.min(len - k * size),
            memory: PhantomData,
        })
    }

    /// The same bytes as a region of their own: the base becomes the slice's first byte and the
    /// offset 0. A buffer registered from this slice is recognised by that base.
    pub fn rebased(self) -> DeviceSliceMut<'a> {
        DeviceSliceMut {
            base: self.ptr(),
            offset: 0,
            len: self.len,
            memory: PhantomData,
        }
    }
}

impl<'a> From<DeviceSliceMut<'a>> for DeviceSlice<'a> {
    fn from(slice: DeviceSliceMut<'a>) -> DeviceSlice<'a> {
        DeviceSlice {
            base: slice.base,
            offset: slice.offset,
            len: slice.len,
            memory: PhantomData,
        }
    }
}

impl<'a> From<&'a DeviceBuffer> for DeviceSlice<'a> {
    /// The whole buffer; its base is the allocation's.
    fn from(buffer: &'a DeviceBuffer) -> DeviceSlice<'a> {
        DeviceSlice {
            base: buffer.ptr(),
            offset: 0,
            len: buffer.len(),
            memory: PhantomData,
        }
    }
}

impl<'a> From<&'a mut DeviceBuffer> for DeviceSliceMut<'a> {
    /// The whole buffer; its base is the allocation's.
    fn from(buffer: &'a mut DeviceBuffer) -> DeviceSliceMut<'a> {
        DeviceSliceMut {
            base: buffer.ptr(),
            offset: 0,
            len: buffer.len(),
            memory: PhantomData,
        }
    }
}

impl fmt::Debug for DeviceSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("base", &format_args!("{:#x}", self.base))
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl fmt::Debug for DeviceSliceMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceSliceMut")
            .field("base", &format_args!("{:#x}", self.base))
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{sim::SimRuntime, GpuRuntime};

    fn buffer(len: usize) -> DeviceBuffer {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        DeviceBuffer::new(rt, len).unwrap()
    }

    #[test]
    fn slices_of_slices_keep_the_base_and_add_the_offsets() {
        let mut buf = buffer(8192);
        let base = buf.ptr();
        let whole = DeviceSliceMut::from(&mut buf);
        let part = whole.get_mut(4096..).unwrap().get_mut(100..200).unwrap();
        assert_eq!(
            (part.base(), part.offset(), part.len(), part.ptr()),
            (base, 4196, 100, base + 4196)
        );
        let shared = DeviceSlice::from(&buf).get(1..=10).unwrap();
        assert_eq!(
            (shared.base(), shared.offset(), shared.len()),
            (base, 1, 10)
        );
        let rest = shared.get(10..).unwrap();
        assert!(rest.is_empty());
        assert_eq!(rest.offset(), 11);
    }

    #[test]
    fn chunks_cover_the_slice_once_in_order() {
        let mut buf = buffer(10_000);
        let base = buf.ptr();
        let part = DeviceSliceMut::from(&mut buf).get_mut(100..).unwrap();
        let pieces: Vec<_> = part
            .chunks_mut(4096)
            .map(|c| (c.base(), c.offset(), c.len()))
            .collect();
        assert_eq!(
            pieces,
            [(base, 100, 4096), (base, 4196, 4096), (base, 8292, 1708)]
        );
        assert_eq!(DeviceSliceMut::from(&mut buf).chunks_mut(0).count(), 0);
    }

    #[test]
    fn ranges_outside_the_slice_give_none() {
        let mut buf = buffer(4096);
        let whole = DeviceSlice::from(&buf);
        assert!(whole.get(..4097).is_none());
        assert!(whole.get(4097..).is_none());
        assert!(whole
            .get((Bound::Included(10), Bound::Excluded(5)))
            .is_none());
        assert!(whole.get(..=usize::MAX).is_none());
        assert!(whole
            .get((Bound::Excluded(usize::MAX), Bound::Unbounded))
            .is_none());
        assert_eq!(whole.get(4096..).map(|s| s.len()), Some(0));
        let mut exclusive = DeviceSliceMut::from(&mut buf);
        assert!(exclusive.reborrow().get_mut(4000..4097).is_none());
        assert!(exclusive.get(..4097).is_none());
        assert_eq!(exclusive.get_mut(..).map(|s| s.len()), Some(4096));
    }

    #[test]
    fn a_rebased_slice_starts_a_region_of_its_own() {
        let mut buf = buffer(8192);
        let base = buf.ptr();
        let part = DeviceSliceMut::from(&mut buf)
            .get_mut(4096..)
            .unwrap()
            .rebased();
        assert_eq!(
            (part.base(), part.offset(), part.len()),
            (base + 4096, 0, 4096)
        );
        let inner = part.get(8..16).unwrap();
        assert_eq!((inner.base(), inner.offset()), (base + 4096, 8));
        let shared: DeviceSlice<'_> = part.into();
        assert_eq!(shared.rebased().base(), base + 4096);
    }
}
