//! Complete balls: for a detector `v`, every node within its boundary distance `c_v`, with
//! its distance from `v` and the observables along the path the decoder's Dijkstra keeps, in
//! that Dijkstra's settle order (distance, then node). No ball the decoder grows is wider
//! than `c_v` (a defect's dual never exceeds its boundary distance), so once a detector's
//! complete ball is known, any ball of it is a prefix: a regrown ball is read, not searched.
//!
//! The cache belongs to the graph ([`SparseGraph::balls`](crate::SparseGraph::balls)) and is
//! shared by every decoder of it (threads included), filled the first time a decoder regrows
//! a ball of a detector, never changed after. Its memory is bounded ([`BALL_CACHE_BYTES`]):
//! once full, the detectors not in it are searched each time, as without it; the graph
//! itself stays linear in the DEM.
//!
//! Guarantee: a prefix of a complete ball is exactly the ball the decoder's Dijkstra grows to
//! that radius (nodes, distances, observables): both settle the nodes within the radius in
//! the same (distance, node) order, and a node's observables come from the first relaxation
//! that reaches its final distance, which a wider radius does not change (only relaxations
//! beyond the radius are added, and a later equal-length one never replaces a path).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The cache's bound, shared by all decoders of a graph: at d = 13 (2,184 detectors) every
/// regrown detector's complete ball together takes about 4.5 MB.
pub const BALL_CACHE_BYTES: usize = 64 << 20;

/// One node of a complete ball.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BallNode {
    /// Distance from the ball's detector, in the graph's integer units.
    pub dist: u64,
    /// Observables flipped along that path.
    pub obs: u64,
    /// The node (a detector).
    pub node: u32,
}

/// The complete balls known so far (module docs).
#[derive(Debug)]
pub struct BallCache {
    balls: Vec<OnceLock<Box<[BallNode]>>>,
    /// Nodes reserved, all balls together, against `limit` (set to `limit` once a ball did
    /// not fit).
    used: AtomicUsize,
    limit: usize,
}

impl BallCache {
    /// An empty cache for `detectors` detectors, holding at most `bytes` of balls.
    pub fn new(detectors: usize, bytes: usize) -> Self {
        BallCache {
            balls: (0..detectors).map(|_| OnceLock::new()).collect(),
            used: AtomicUsize::new(0),
            limit: bytes / std::mem::size_of::<BallNode>(),
        }
    }

    /// Detector `v`'s complete ball, if known.
    #[inline]
    pub fn get(&self, v: u32) -> Option<&[BallNode]> {
        self.balls.get(v as usize)?.get().map(|b| &b[..])
    }

    /// True when no more balls fit.
    pub fn is_full(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.limit
    }

    /// True when at least half the bound is taken.
    pub fn is_half_full(&self) -> bool {
        self.used.load(Ordering::Relaxed) >= self.limit / 2
    }

    /// Keeps `ball` as detector `v`'s complete ball when it fits the bound and none is kept
    /// yet; the ball kept for `v` afterwards, if any (another thread's, equal to this one).
    /// A ball that does not fit leaves the cache full: nothing more is kept.
    pub fn insert(&self, v: u32, ball: &[BallNode]) -> Option<&[BallNode]> {
        let slot = self.balls.get(v as usize)?;
        if slot.get().is_none() {
            let reserved = self
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                    (u + ball.len() <= self.limit).then_some(u + ball.len())
                })
                .is_ok();
            if !reserved {
                // Full for good: a search for a ball that cannot be kept is a wasted one.
                self.used.fetch_max(self.limit, Ordering::Relaxed);
            } else if slot.set(ball.into()).is_err() {
                // Another thread kept the same ball first.
                self.used.fetch_sub(ball.len(), Ordering::Relaxed);
            }
        }
        slot.get().map(|b| &b[..])
    }

    /// Bytes the kept balls take.
    pub fn memory_bytes(&self) -> usize {
        self.balls.iter().filter_map(|b| b.get()).map(|b| b.len()).sum::<usize>() * std::mem::size_of::<BallNode>()
    }

    /// Balls kept.
    pub fn len(&self) -> usize {
        self.balls.iter().filter(|b| b.get().is_some()).count()
    }

    /// True when no ball is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A copy of a graph starts with an empty cache: the balls are derived data.
impl Clone for BallCache {
    fn clone(&self) -> Self {
        BallCache::new(self.balls.len(), self.limit * std::mem::size_of::<BallNode>())
    }
}

/// Graphs are equal whatever their caches hold.
impl PartialEq for BallCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ball(n: u32) -> Vec<BallNode> {
        (0..n).map(|i| BallNode { dist: u64::from(i), obs: 0, node: i }).collect()
    }

    #[test]
    fn keeps_the_first_ball_within_the_bound() {
        let size = std::mem::size_of::<BallNode>();
        let c = BallCache::new(4, 5 * size);
        assert!(c.get(0).is_none() && c.is_empty() && !c.is_half_full());
        assert_eq!(c.insert(0, &ball(3)).map(<[_]>::len), Some(3));
        // The first kept stays.
        assert_eq!(c.insert(0, &ball(1)).map(<[_]>::len), Some(3));
        assert!(c.is_half_full());
        assert_eq!(c.insert(2, &ball(1)).map(<[_]>::len), Some(1));
        assert!(!c.is_full());
        // Beyond the bound: not kept, and nothing more is.
        assert!(c.insert(1, &ball(3)).is_none());
        assert!(c.is_full());
        assert!(c.insert(3, &ball(1)).is_none());
        assert!(c.insert(9, &ball(1)).is_none(), "out of range");
        assert_eq!(c.len(), 2);
        assert_eq!(c.memory_bytes(), 4 * size);
        assert!(c.get(1).is_none() && c.get(3).is_none());
        let copy = c.clone();
        assert!(copy.is_empty() && copy == c);
    }
}
