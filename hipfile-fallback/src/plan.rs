//! How a request is cut into pieces and how many threads share them.

/// How a request is cut and who works on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Bytes per piece (the last may be shorter).
    pub piece: usize,
    /// Number of pieces.
    pub pieces: usize,
    /// Workers offered the transfer besides the caller.
    pub helpers: usize,
}

impl Plan {
    /// Cut `size` bytes: requests up to `inline` bytes, or when only one thread may work, run on
    /// the caller alone in pieces of `chunk`; larger ones are spread over up to `threads` threads
    /// (caller included) in pieces between `min_piece` and `chunk`.
    pub fn new(size: usize, chunk: usize, min_piece: usize, inline: usize, threads: usize) -> Plan {
        let chunk = chunk.max(4096);
        let min_piece = min_piece.clamp(4096, chunk);
        let piece = if size <= inline || threads <= 1 {
            size.min(chunk)
        } else {
            let share = size.div_ceil(threads).next_multiple_of(min_piece);
            share.clamp(min_piece, chunk)
        }
        .max(1);
        let pieces = size.div_ceil(piece);
        let helpers = if size <= inline {
            0
        } else {
            pieces.min(threads).saturating_sub(1)
        };
        Plan {
            piece,
            pieces,
            helpers,
        }
    }

    /// The request-relative bytes of piece `k` of a plan for `size` bytes (`k < pieces`): the
    /// pieces tile `[0, size)` in order, all `piece` bytes long but the last.
    pub fn piece_range(&self, size: usize, k: usize) -> std::ops::Range<usize> {
        let start = k * self.piece;
        start..start + self.piece.min(size - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_stay_on_the_caller() {
        let p = Plan::new(4096, 4 << 20, 64 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 4096,
                pieces: 1,
                helpers: 0
            }
        );
        let p = Plan::new(10 << 20, 4 << 20, 64 << 10, 64 << 10, 1);
        assert_eq!(
            p,
            Plan {
                piece: 4 << 20,
                pieces: 3,
                helpers: 0
            }
        );
    }

    #[test]
    fn mid_sized_requests_are_spread_in_small_pieces() {
        let p = Plan::new(1 << 20, 4 << 20, 64 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 64 << 10,
                pieces: 16,
                helpers: 15
            }
        );
        let p = Plan::new(1 << 20, 4 << 20, 64 << 10, 64 << 10, 4);
        assert_eq!(
            p,
            Plan {
                piece: 256 << 10,
                pieces: 4,
                helpers: 3
            }
        );
    }

    #[test]
    fn large_requests_use_whole_chunks_on_every_thread() {
        let p = Plan::new(8 << 30, 4 << 20, 64 << 10, 64 << 10, 17);
        assert_eq!(p.piece, 4 << 20);
        assert_eq!(p.pieces, 2048);
        assert_eq!(p.helpers, 16);
        let odd = Plan::new((4 << 20) + 1, 4 << 20, 64 << 10, 64 << 10, 2);
        assert_eq!(odd.pieces, 2);
        assert_eq!(odd.helpers, 1);
    }

    #[test]
    fn the_smallest_piece_bounds_how_thin_a_request_is_spread() {
        let p = Plan::new(1 << 20, 4 << 20, 256 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 256 << 10,
                pieces: 4,
                helpers: 3
            }
        );
    }
}
