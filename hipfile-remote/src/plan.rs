//! How a range of an object is cut into requests.

/// One request of a read: `len` bytes of the object at `object_offset`, landing at
/// `buffer_offset` of the read's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) object_offset: u64,
    pub(crate) buffer_offset: usize,
    pub(crate) len: usize,
}

/// `len` bytes from `start` cut into pieces of `size` bytes (the last one shorter).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces {
    start: u64,
    len: usize,
    size: usize,
}

impl Pieces {
    /// `size` must be above 0 ([`crate::RemoteOptions::validate`]).
    pub(crate) fn new(start: u64, len: usize, size: usize) -> Self {
        Pieces {
            start,
            len,
            size: size.max(1),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.len.div_ceil(self.size)
    }

    /// Piece `i`, or `None` past the last.
    pub(crate) fn get(&self, i: usize) -> Option<Piece> {
        let buffer_offset = i.checked_mul(self.size).filter(|&o| o < self.len)?;
        Some(Piece {
            object_offset: self.start + buffer_offset as u64,
            buffer_offset,
            len: self.size.min(self.len - buffer_offset),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range_once_in_order_with_a_short_last_one() {
        let p = Pieces::new(1000, 25, 10);
        assert_eq!(p.count(), 3);
        let all: Vec<Piece> = (0..).map_while(|i| p.get(i)).collect();
        assert_eq!(
            all,
            [
                Piece {
                    object_offset: 1000,
                    buffer_offset: 0,
                    len: 10
                },
                Piece {
                    object_offset: 1010,
                    buffer_offset: 10,
                    len: 10
                },
                Piece {
                    object_offset: 1020,
                    buffer_offset: 20,
                    len: 5
                },
            ]
        );
        assert_eq!(Pieces::new(0, 30, 10).count(), 3);
        assert_eq!(Pieces::new(0, 0, 10).count(), 0);
        assert_eq!(Pieces::new(0, 0, 10).get(0), None);
        assert_eq!(Pieces::new(0, 5, 8 << 20).get(0).unwrap().len, 5);
        assert_eq!(Pieces::new(0, 5, 1).get(usize::MAX), None, "no overflow");
    }
}
