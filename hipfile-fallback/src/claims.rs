//! The pieces of a transfer no thread has claimed yet, claimed from both ends without a lock.
//!
//! The staging threads take pieces first to last; a read whose far end is served whole from
//! somewhere else (page-cache windows pinned while it runs, [`crate::pins`]) gives up the pieces
//! there from the back, until front and back meet. One word holds both ends, so no piece is ever
//! claimed twice, and a transfer no thread started can be withdrawn.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The pieces of a transfer not claimed yet, `front..back`, in one word: pieces to stage are
/// taken from the front, a tail served whole from elsewhere from the back.
#[derive(Debug, Default)]
pub struct Claims(AtomicU64);

/// The front of a transfer withdrawn before any piece was claimed.
const WITHDRAWN: u32 = u32::MAX;

impl Claims {
    /// `0..pieces` (fewer than [`crate::plan::MAX_PIECES`]).
    pub fn new(pieces: usize) -> Claims {
        Claims(AtomicU64::new(Self::pack(0, pieces)))
    }

    fn pack(front: usize, back: usize) -> u64 {
        (front as u64 & 0xffff_ffff) | ((back as u64) << 32)
    }

    /// `(front, back)`.
    pub fn get(&self) -> (usize, usize) {
        let v = self.0.load(Ordering::Acquire);
        ((v & 0xffff_ffff) as usize, (v >> 32) as usize)
    }

    /// Whether the transfer was withdrawn before any piece was claimed.
    pub fn withdrawn(&self) -> bool {
        self.get().0 == WITHDRAWN as usize
    }

    /// Whether every piece was claimed (or the transfer withdrawn).
    pub fn exhausted(&self) -> bool {
        let (front, back) = self.get();
        front >= back
    }

    /// The next piece from the front, if any is left.
    pub fn front(&self) -> Option<usize> {
        let v = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let (front, back) = (v & 0xffff_ffff, v >> 32);
                (front < back).then_some(v + 1)
            })
            .ok()?;
        Some((v & 0xffff_ffff) as usize)
    }

    /// The pieces from `from` to the back, if the back is still `back` and the front has not
    /// passed them all: those from the front on.
    pub fn tail(&self, from: usize, back: usize) -> Option<Range<usize>> {
        let mut claimed = None;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let (front, now) = ((v & 0xffff_ffff) as usize, (v >> 32) as usize);
                let start = from.max(front);
                if now != back || start >= back {
                    return None;
                }
                claimed = Some(start..back);
                Some(Self::pack(front, start))
            })
            .ok()?;
        claimed
    }

    /// Withdraw the transfer if no piece was claimed.
    pub fn withdraw(&self, pieces: usize) -> bool {
        self.0
            .compare_exchange(
                Self::pack(0, pieces),
                Self::pack(WITHDRAWN as usize, pieces),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn claims_from_both_ends_take_every_piece_once() {
        let pieces = 10_000;
        let claims = Claims::new(pieces);
        let taken: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while let Some(k) = claims.front() {
                        taken[k].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            s.spawn(|| loop {
                let (front, back) = claims.get();
                if front >= back {
                    break;
                }
                // A tail of up to 7 pieces, as windows pinned at the back would give.
                if let Some(r) = claims.tail(back.saturating_sub(7), back) {
                    for k in r {
                        taken[k].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        });
        assert!(taken.iter().all(|t| t.load(Ordering::Relaxed) == 1));
        assert!(claims.exhausted());
    }

    #[test]
    fn a_tail_is_taken_only_while_the_back_is_where_it_was_seen() {
        let claims = Claims::new(10);
        assert_eq!(claims.front(), Some(0));
        assert_eq!(claims.tail(6, 10), Some(6..10));
        assert_eq!(claims.tail(4, 10), None, "the back moved");
        assert_eq!(claims.tail(0, 6), Some(1..6), "not past the front");
        assert_eq!(claims.front(), None);
        assert!(!claims.withdrawn());
        let fresh = Claims::new(3);
        assert!(fresh.withdraw(3));
        assert!(fresh.withdrawn() && fresh.exhausted());
        assert_eq!(fresh.front(), None);
        let started = Claims::new(3);
        started.front();
        assert!(!started.withdraw(3));
    }
}
