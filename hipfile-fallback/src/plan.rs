//! How a request is cut into pieces and how many threads share them.
//!
//! Why every piece of a request is one size (the last may be shorter), the first ones too: a
//! request's first copy waits for one round of piece reads, about 0.6 ms of a 1 GiB request cut
//! in 4 MiB pieces on the H200 host (medians of 24 requests, 8 GiB hot file, first read with
//! windows pinned beside it), and from that copy on the device copies the request at 53.1-53.4
//! GB/s, 0.96-0.97 of one large pinned copy (55.3), while the host's copies into staging share its
//! memory. Smaller first pieces, doubling per round up to the chunk, were measured against it in
//! the same runs: starting from 512 KiB the first copy was queued at 0.12 ms, from 2 MiB at 0.32
//! ms, but the copies after it ran slower (50.8 and 52.1-52.5 GB/s) and the request took as long
//! or longer (21.2 and 20.8-21.0 ms against 20.7-20.8); 8 MiB chunks from 1 MiB first pieces 22.1
//! ms. For 64 MiB requests, smaller first pieces gained nothing either (35.0-36.5 GB/s against
//! 36.2-36.4) and pieces tapered towards the end lost (30.8-31.5).

use hipfile_core::{Error, ErrorKind};
use hipfile_hip::DeviceRange;

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

/// Pieces a thread's share of a spread request is cut into at least (while they stay at least
/// the smallest piece): a staging lane reads one piece from the file while the device copies the
/// one before, so a share of one piece would leave the lane's reads and copies in series. Large
/// requests are cut into whole chunks, many per thread, anyway.
const PIECES_PER_SHARE: usize = 4;

/// Most pieces a request is cut into.
pub const MAX_PIECES: usize = (u32::MAX - 1) as usize;

impl Plan {
    /// Cut `size` bytes: requests up to `inline` bytes, or when only one thread may work, run on
    /// the caller alone in pieces of `chunk`; larger ones are spread over up to `threads` threads
    /// (caller included) in pieces between `min_piece` and `chunk`, each thread's share cut in
    /// `PIECES_PER_SHARE` (4) pieces or more.
    pub fn new(size: usize, chunk: usize, min_piece: usize, inline: usize, threads: usize) -> Plan {
        let chunk = chunk.max(4096);
        let min_piece = min_piece.clamp(4096, chunk);
        let piece = if size <= inline || threads <= 1 {
            size.min(chunk)
        } else {
            let share = size.div_ceil(threads);
            share
                .div_ceil(PIECES_PER_SHARE)
                .next_multiple_of(min_piece)
                .clamp(min_piece, chunk)
        }
        .max(1)
        // A transfer counts its pieces in 32 bits (`claims::Claims`); no device holds a request
        // large enough to need more (16 TiB in pieces of 4 KiB).
        .max(size.div_ceil(MAX_PIECES));
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

/// The device memory of the `len` request-relative bytes at `start` of `memory`, a request's.
pub fn piece_memory(memory: &DeviceRange, start: usize, len: usize) -> Result<DeviceRange, Error> {
    memory.slice(start, len).ok_or_else(|| {
        Error::new(
            ErrorKind::InternalError,
            "a staged piece outside the request",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_request_is_cut_into_more_pieces_than_a_transfer_counts() {
        let p = Plan::new(usize::MAX, 4 << 20, 64 << 10, 64 << 10, 16);
        assert!(p.pieces <= MAX_PIECES);
        assert!(p.pieces as u128 * p.piece as u128 >= usize::MAX as u128);
    }

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
                piece: 64 << 10,
                pieces: 16,
                helpers: 3
            }
        );
    }

    #[test]
    fn every_thread_of_a_mid_sized_request_gets_pieces_to_overlap_reads_with_copies() {
        // 64 MiB over 17 threads: shares of under 4 MiB, each cut in four pieces of 1 MiB.
        let p = Plan::new(64 << 20, 4 << 20, 64 << 10, 64 << 10, 17);
        assert_eq!(
            p,
            Plan {
                piece: 1 << 20,
                pieces: 64,
                helpers: 16
            }
        );
        // Shares of four whole chunks: already pieces enough.
        let p = Plan::new(17 * (16 << 20), 4 << 20, 64 << 10, 64 << 10, 17);
        assert_eq!(p.piece, 4 << 20);
    }

    #[test]
    fn large_requests_use_whole_chunks_on_every_thread() {
        let p = Plan::new(8 << 30, 4 << 20, 64 << 10, 64 << 10, 17);
        assert_eq!(p.piece, 4 << 20);
        assert_eq!(p.pieces, 2048);
        assert_eq!(p.helpers, 16);
        let odd = Plan::new((4 << 20) + 1, 4 << 20, 64 << 10, 64 << 10, 2);
        // Shares of 2 MiB + 1 byte, in pieces of 576 KiB: the last piece holds the odd byte.
        assert_eq!(odd.piece, 576 << 10);
        assert_eq!(odd.pieces, 8);
        assert_eq!(
            odd.piece_range((4 << 20) + 1, 7),
            7 * (576 << 10)..(4 << 20) + 1
        );
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
