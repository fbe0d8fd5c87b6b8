//! The sparse decoding graph: the DEM's matching graph as adjacency lists in PyMatching's
//! integer weights, plus each detector's shortest distance to the boundary. Memory is linear
//! in the DEM (no all-pairs table): d = 25 with 25 rounds (15,600 detectors) is a few MB.
//!
//! - Nodes are the detectors; the boundary is not a node (a sink, as in PyMatching): no path
//!   between two detectors passes through it, since such a path is two boundary matches,
//!   which the decoder considers on its own.
//! - Edge weights are PyMatching's discretised ones, `round(w * scale)` with
//!   `scale = MatchingGraph::pymatching_scale()` (`(2^24 - 1) / max |w|`, or 1 when every
//!   weight is an integer), so a matching minimising their sum minimises PyMatching's own
//!   objective, and predictions differ from PyMatching's only where two matchings tie.
//! - [`SparseGraph::boundary_distance`] is the shortest path from a detector to the boundary
//!   (one multi-source Dijkstra at build time), with the observables flipped along it.
//! - Every path weight fits [`MAX_PATH_UNITS`] (checked at build): the exact matcher takes
//!   sums of them as `i64`.
//! - A negative edge (merged probability above 0.5) is handled as PyMatching handles it: the
//!   graph holds its magnitude, and a shot is decoded with the detection events of every
//!   negative edge's ends flipped ([`SparseGraph::negative_detectors`], applied by
//!   [`SparseGraph::for_each_defect`]); the negative edges' observables and weights are
//!   added to the answer. A set of edges whose ends are the flipped events is, XORed with the
//!   negative edges, one whose ends are the shot's, and weighs its magnitudes plus the
//!   negative weights, so the minimum of one is the other's.

use thiserror::Error;

use crate::balls::{BallCache, BALL_CACHE_BYTES};
use crate::graph::{MatchingGraph, BOUNDARY};

/// "No path".
pub const UNREACHABLE: u64 = u64::MAX;

/// The largest path weight the decoder accepts: twice it (a boundary edge of the doubled
/// cluster graph) stays within the dense matcher's weight contract, 2^40.
pub const MAX_PATH_UNITS: u64 = 1 << 39;

/// One directed half of an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arc {
    /// The other end.
    pub to: u32,
    /// Weight in integer units.
    pub weight: u32,
    /// Observables flipped along the edge.
    pub observables: u64,
}

/// Why a DEM's graph cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SparseError {
    /// The longest possible path does not fit the matcher's integer weights.
    #[error(
        "{detectors} detectors with integer edge weights up to {max_weight}: path weights could \
         exceed 2^39, more than the exact matcher's integers hold"
    )]
    TooLarge {
        /// Detectors.
        detectors: usize,
        /// The largest edge weight in integer units.
        max_weight: u64,
    },
    /// More than 64 observables.
    #[error("{0} observables: the decoder tracks at most 64")]
    TooManyObservables(usize),
}

/// The decoding graph (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SparseGraph {
    num_detectors: usize,
    num_observables: usize,
    scale: f64,
    /// CSR: the arcs of detector `v` are `arcs[start[v]..start[v + 1]]`.
    start: Vec<u32>,
    arcs: Vec<Arc>,
    /// Shortest distance to the boundary ([`UNREACHABLE`] when none) and its observables.
    boundary_dist: Vec<u64>,
    boundary_obs: Vec<u64>,
    /// Negative edges (module docs): the detectors an odd number of them touch, ascending;
    /// their observables; their weights' sum in integer units (at most 0).
    negative_detectors: Vec<u32>,
    negative_observables: u64,
    negative_units: i64,
    /// The decoders' complete balls, filled as they regrow them.
    balls: BallCache,
}

impl SparseGraph {
    /// The decoding graph of a matching graph (module docs).
    pub fn new(graph: &MatchingGraph) -> Result<Self, SparseError> {
        let n = graph.num_detectors;
        if graph.num_observables > 64 {
            return Err(SparseError::TooManyObservables(graph.num_observables));
        }
        let scale = graph.pymatching_scale();
        let units = graph.integer_weights();
        let max_weight = units.iter().copied().max().unwrap_or(0);
        if max_weight.saturating_mul(n as u64 + 1) > MAX_PATH_UNITS {
            return Err(SparseError::TooLarge { detectors: n, max_weight });
        }

        let mut deg = vec![0u32; n + 1];
        let mut boundary_edge = vec![(UNREACHABLE, 0u64); n];
        let (mut flipped, mut negative_observables, mut negative_units) = (vec![false; n], 0u64, 0i64);
        for (e, &w) in graph.edges.iter().zip(&units).filter(|(e, _)| e.weight < 0.0) {
            for v in [e.a, e.b] {
                if let Some(f) = flipped.get_mut(v as usize) {
                    *f ^= true;
                }
            }
            negative_observables ^= e.observables;
            negative_units -= w as i64;
        }
        let negative_detectors = (0..n as u32).filter(|&v| flipped[v as usize]).collect();
        for (e, &w) in graph.edges.iter().zip(&units) {
            if e.b == BOUNDARY {
                // A merged graph has one boundary edge per detector; keep the lightest anyway.
                if w < boundary_edge[e.a as usize].0 {
                    boundary_edge[e.a as usize] = (w, e.observables);
                }
            } else {
                deg[e.a as usize] += 1;
                deg[e.b as usize] += 1;
            }
        }
        let mut start = vec![0u32; n + 1];
        for v in 0..n {
            start[v + 1] = start[v] + deg[v];
        }
        let mut fill: Vec<u32> = start[..n].to_vec();
        let mut arcs = vec![Arc { to: 0, weight: 0, observables: 0 }; start[n] as usize];
        for (e, &w) in graph.edges.iter().zip(&units).filter(|(e, _)| e.b != BOUNDARY) {
            let w = w as u32;
            for (from, to) in [(e.a, e.b), (e.b, e.a)] {
                arcs[fill[from as usize] as usize] = Arc { to, weight: w, observables: e.observables };
                fill[from as usize] += 1;
            }
        }

        // Multi-source Dijkstra from the boundary edges.
        let mut dist: Vec<u64> = boundary_edge.iter().map(|b| b.0).collect();
        let mut obs: Vec<u64> = boundary_edge.iter().map(|b| b.1).collect();
        let mut heap = std::collections::BinaryHeap::new();
        for (v, &d) in dist.iter().enumerate() {
            if d != UNREACHABLE {
                heap.push(std::cmp::Reverse((d, v as u32)));
            }
        }
        while let Some(std::cmp::Reverse((d, u))) = heap.pop() {
            let u = u as usize;
            if d > dist[u] {
                continue;
            }
            for a in &arcs[start[u] as usize..start[u + 1] as usize] {
                let nd = d + u64::from(a.weight);
                if nd < dist[a.to as usize] {
                    dist[a.to as usize] = nd;
                    obs[a.to as usize] = obs[u] ^ a.observables;
                    heap.push(std::cmp::Reverse((nd, a.to)));
                }
            }
        }
        Ok(SparseGraph {
            num_detectors: n,
            num_observables: graph.num_observables,
            scale,
            start,
            arcs,
            boundary_dist: dist,
            boundary_obs: obs,
            negative_detectors,
            negative_observables,
            negative_units,
            balls: BallCache::new(n, BALL_CACHE_BYTES),
        })
    }

    /// The detectors whose detection events a shot's decode flips (module docs): those an
    /// odd number of negative edges touch, ascending. Empty without negative edges.
    pub fn negative_detectors(&self) -> &[u32] {
        &self.negative_detectors
    }

    /// The observables of the negative edges, XORed into every answer.
    pub fn negative_observables(&self) -> u64 {
        self.negative_observables
    }

    /// The negative edges' weights' sum in integer units (0 without), added to every answer.
    pub fn negative_units(&self) -> i64 {
        self.negative_units
    }

    /// Calls `f` with the defects among detectors `first..end` (below the detector count) of
    /// `bits` (a shot's detection events, b8 order, bit i detector i): the set bits with the
    /// [`negative_detectors`](Self::negative_detectors) flipped, ascending.
    pub fn for_each_defect(&self, bits: &[u8], first: usize, end: usize, mut f: impl FnMut(u32)) {
        let end = end.min(self.num_detectors);
        let flips = &self.negative_detectors;
        let mut t = flips.partition_point(|&v| (v as usize) < first);
        let bit = |i: usize| bits.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1);
        let mut i = first;
        while i < end {
            let byte = bits.get(i / 8).map_or(0, |b| b >> (i % 8));
            let next_bit = if byte == 0 { (i / 8 + 1) * 8 } else { i + byte.trailing_zeros() as usize };
            let next_flip = flips.get(t).map_or(usize::MAX, |&v| v as usize);
            let at = next_bit.min(next_flip);
            if at >= end {
                break;
            }
            let on = (at == next_bit && bit(at)) != (at == next_flip);
            if at == next_flip {
                t += 1;
            }
            if on {
                f(at as u32);
            }
            i = at + 1;
        }
    }

    /// Detectors.
    pub fn num_detectors(&self) -> usize {
        self.num_detectors
    }

    /// Observables.
    pub fn num_observables(&self) -> usize {
        self.num_observables
    }

    /// Integer units per unit of ln((1-p)/p).
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Undirected edges between detectors.
    pub fn num_edges(&self) -> usize {
        self.arcs.len() / 2
    }

    /// The arcs leaving detector `v`.
    #[inline]
    pub fn arcs(&self, v: u32) -> &[Arc] {
        let v = v as usize;
        &self.arcs[self.start[v] as usize..self.start[v + 1] as usize]
    }

    /// Shortest distance from `v` to the boundary and the observables along that path
    /// (`(UNREACHABLE, 0)` when no path).
    #[inline]
    pub fn boundary_distance(&self, v: u32) -> (u64, u64) {
        (self.boundary_dist[v as usize], self.boundary_obs[v as usize])
    }

    /// The graph with its balls' cache bounded to `bytes` instead of [`BALL_CACHE_BYTES`]
    /// (0: no cache, every ball searched), emptied.
    pub fn with_ball_cache_bytes(mut self, bytes: usize) -> Self {
        self.balls = BallCache::new(self.num_detectors, bytes);
        self
    }

    /// The complete balls the decoders of this graph have regrown ([`crate::balls`]),
    /// shared by them and bounded by [`BALL_CACHE_BYTES`].
    pub fn balls(&self) -> &BallCache {
        &self.balls
    }

    /// Bytes the graph holds (the balls' cache aside: [`BallCache::memory_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.start.len() * 4 + self.arcs.len() * std::mem::size_of::<Arc>() + self.boundary_dist.len() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(text: &str) -> SparseGraph {
        SparseGraph::new(&MatchingGraph::from_dem_text(text).unwrap()).unwrap()
    }

    #[test]
    fn chain_boundary_distances_and_observables() {
        // boundary -0- D0 -1- D1 -2- D2 -3- boundary, equal weights: D1 is two edges from
        // either side; the left side is found first and carries L0.
        let g = sparse("error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1 D2\nerror(0.1) D2\n");
        let w = (g.scale() * (0.9f64 / 0.1).ln()).round() as u64;
        assert_eq!(g.num_edges(), 2);
        assert_eq!(g.boundary_distance(0), (w, 1));
        assert_eq!(g.boundary_distance(2), (w, 0));
        assert_eq!(g.boundary_distance(1).0, 2 * w);
        assert_eq!(g.arcs(1).len(), 2);
    }

    #[test]
    fn no_boundary_is_unreachable() {
        let g = sparse("error(0.1) D0 D1\nerror(0.2) D1 D2\ndetector D3\n");
        for v in 0..4 {
            assert_eq!(g.boundary_distance(v), (UNREACHABLE, 0));
        }
        assert!(g.arcs(3).is_empty());
    }

    /// Defects of every range, with and without negative edges: the set bits, the negative
    /// edges' ends flipped, ascending; bits past the buffer read as zeros.
    #[test]
    fn defects_of_any_range_flip_the_negative_edges_ends() {
        let text = "error(0.1) D0 D1\nerror(0.7) D1 D2 L0\nerror(0.6) D2 D9\nerror(0.8) D12\nerror(0.1) D33\n";
        let g = sparse(text);
        assert_eq!(g.negative_detectors(), &[1, 9, 12][..]);
        assert_eq!(g.negative_observables(), 1);
        let w = |p: f64| (g.scale() * ((1.0 - p) / p).ln().abs()).round() as i64;
        assert_eq!(g.negative_units(), -(w(0.7) + w(0.6) + w(0.8)));
        let plain = sparse("error(0.1) D0 D1\nerror(0.1) D33\n");
        let bits = [0b1000_0011u8, 0b0001_0010, 0b0001_0000, 0xFF];
        for (graph, flips) in [(&g, &[1u32, 9, 12][..]), (&plain, &[][..])] {
            for first in 0..36 {
                for end in first..36 {
                    let mut got = Vec::new();
                    graph.for_each_defect(&bits, first, end, |i| got.push(i));
                    let on = |i: usize| (i < 32 && bits[i / 8] >> (i % 8) & 1 == 1) != flips.contains(&(i as u32));
                    let want: Vec<u32> = (first..end.min(34)).filter(|&i| on(i)).map(|i| i as u32).collect();
                    assert_eq!(got, want, "{first}..{end}");
                }
            }
        }
    }

    #[test]
    fn weights_are_pymatchings_discretisation() {
        let m = MatchingGraph::from_dem_text("error(0.01) D0 D1\nerror(0.3) D1\n").unwrap();
        let g = SparseGraph::new(&m).unwrap();
        let scale = m.pymatching_scale();
        assert_eq!(u64::from(g.arcs(0)[0].weight), ((0.99f64 / 0.01).ln() * scale).round() as u64);
        assert_eq!(g.arcs(0)[0].weight, (1 << 24) - 1, "the heaviest edge gets 2^24 - 1");
    }
}
