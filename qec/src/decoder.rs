//! The exact decoder: minimum-weight perfect matching of any number of defects on the sparse
//! graph ([`SparseGraph`]), each defect matched to another or to the boundary, which is the
//! objective PyMatching minimises.
//!
//! Algorithm (exact, no table, no fallback): a restricted matching problem, solved, then
//! proved optimal for the whole problem by its LP duals, and widened where the proof fails.
//! 1. **Balls.** Each defect `a` grows a Dijkstra ball of radius `rho_a`, at first the
//!    lightest edge weight (at most `c_a`, its distance to the boundary). Two balls
//!    that touch give a candidate pair: at a node both hold, or across an edge `(u, v)`
//!    joining them, the path `d_a(u) + w(u, v) + d_b(v)`. Every candidate is a real path,
//!    and a pair with `d(a, b) <= rho_a + rho_b` is found with its exact length (the last
//!    node of a shortest path within `rho_a` of `a` has its successor within `rho_b` of `b`).
//! 2. **Clusters.** Candidates with `d < c_a + c_b` link defects (a pair at least that long
//!    is never better than both going to the boundary); linked defects form clusters.
//! 3. **Matching.** Each cluster is solved exactly as a minimum-weight matching of its
//!    defects and candidate pairs in which each defect may instead go to the boundary at
//!    its cost `c_a` ([`PerfectMatching::solve_with_boundary`]: the boundary is no vertex,
//!    only the constraint `y_a <= c_a` on each defect's dual), so the matcher works on the
//!    cluster itself, not on a doubled graph of twice the vertices and edges. Its LP duals
//!    `y` make the proof below work across clusters, since clusters share no edge. Clusters
//!    of one and two defects are solved in closed form.
//! 4. **Proof.** The matching is optimal for the whole problem when every pair left out
//!    has a non-negative reduced cost under the duals, that is `y_a + y_b <= d(a, b)`
//!    (blossom duals only add to reduced costs, and no blossom spans two clusters). A pair never found has
//!    `d(a, b) > rho_a + rho_b`, so `y_a <= rho_a` for every defect proves them all; a found
//!    pair that was left out (`d >= c_a + c_b`) is checked directly. A defect with
//!    `y_a > rho_a` grows its ball (to `max(y_a, 2 rho_a)`, at most `c_a`, which no dual
//!    exceeds: a prefix of the detector's complete ball, [`crate::balls`]) and a failed pair
//!    is put in, then the clusters are solved again. Each round adds pairs or grows balls, and with
//!    every ball grown to the whole graph nothing is left out, so the loop ends. At low
//!    noise most defects sit in tight pairs and stay at one edge; only what needs a wider
//!    search gets one.
//!
//! Streaming: a ball depends only on its defect and the static graph, so
//! [`MatchingDecoder::add_defect`] grows the first ball as soon as the defect arrives (round
//! by round) and finds its candidates with the earlier defects then;
//! [`MatchingDecoder::settle`], called after a round, does steps 2 to 4 for the defects so
//! far (the balls they need grow then, their clusters are solved then); a cluster none of
//! whose defects changed since keeps its solution, so [`MatchingDecoder::finish`] re-solves
//! only what the last round touched. [`MatchingDecoder::settle_last`], after the last round
//! but one, solves every cluster (whatever its size or age) and proves the matching; a final
//! round that adds no defect is then answered with no work. The weight does not depend on
//! how the defects were split into rounds or settled, nor on their order (candidates of one
//! pair keep the shortest, then the smallest observable mask); where two matchings tie,
//! streaming may pick the other one.
//!
//! Guarantees:
//! - Exact: the weight equals the minimum-weight matching's over PyMatching's integer
//!   weights; the observables differ from PyMatching's only where two matchings have equal
//!   weight.
//! - Buffers grow to the largest shot seen and are reused: no allocation per shot after that.
//! - No panic on any input: a defect out of range or given twice makes the shot
//!   [`DecodeStatus::Invalid`]; a cluster without a perfect matching (an odd number of
//!   defects and no path to the boundary, once its balls cover the graph) makes it
//!   [`DecodeStatus::Unmatchable`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::balls::BallNode;
use crate::matching::{PerfectMatching, BOUNDARY, NO_BOUNDARY};
use crate::sparse::{SparseGraph, UNREACHABLE};

/// How a shot was decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DecodeStatus {
    /// A minimum-weight perfect matching.
    #[default]
    Ok,
    /// No perfect matching: some cluster has an odd number of defects and no path to the
    /// boundary. Observables and weight are those of the clusters that matched.
    Unmatchable,
    /// A defect out of range or given twice.
    Invalid,
}

/// One decoded shot.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Decoded {
    /// Bit k set: observable k flips (the correction).
    pub observables: u64,
    /// Matching weight in ln((1-p)/p) units (`weight_units / scale`).
    pub weight: f64,
    /// Matching weight in the graph's integer units.
    pub weight_units: u64,
    /// Defects (detection events) in the shot.
    pub defects: u32,
    /// Clusters the shot split into (in the last, proved, round).
    pub clusters: u32,
    /// Defects of the largest cluster.
    pub largest_cluster: u32,
    /// Rounds of solving (1 when the first balls already proved the matching optimal).
    pub rounds: u32,
    /// How it was decoded.
    pub status: DecodeStatus,
}

/// Counters since construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecoderCounters {
    /// Shots decoded.
    pub shots: u64,
    /// Shots without a perfect matching.
    pub unmatchable: u64,
    /// Shots with an invalid defect list.
    pub invalid: u64,
    /// Clusters of three defects or more, solved by the blossom matcher.
    pub blossom_clusters: u64,
    /// Balls grown again because the duals asked for a wider search.
    pub regrown_balls: u64,
    /// Solving rounds beyond the first.
    pub extra_rounds: u64,
    /// Regrown balls read from their detector's complete ball ([`crate::balls`]) instead of
    /// searched (including those whose complete ball was searched then, the first time).
    pub balls_read: u64,
    /// Clusters whose last solution was reused (streaming: solved in an earlier round).
    pub reused_clusters: u64,
    /// Shots `finish` answered from the last complete settle, no defect having come since
    /// (`settle_last`).
    pub answered_ahead: u64,
}

/// A defect's ball reached a node: the defect (its index in the shot), the distance and the
/// observables along the ball's shortest path, and the next visit of the same node.
#[derive(Debug, Clone, Copy)]
struct Visit {
    defect: u32,
    dist: u64,
    obs: u64,
    next: u32,
}

/// A candidate pair of defects (indices in the shot, `a < b`) with its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pair {
    a: u32,
    b: u32,
    dist: u64,
    obs: u64,
    /// Linked in the clusters: `dist < c_a + c_b`, or a left-out pair the proof failed on.
    linked: bool,
}

const NONE: u32 = u32::MAX;

/// A Dijkstra heap entry: a distance and a node packed in one integer that orders as the pair
/// `(distance, node)` does, so that nodes leave the heap in one fixed order (ties by index)
/// whichever width holds them.
trait HeapKey: Ord + Copy {
    /// `dist` must fit the width (below 2^32 for `u64`).
    fn key(dist: u64, node: u32) -> Self;
    fn parts(self) -> (u64, u32);
}

/// Distances below 2^32: one word, compared and moved at half the cost of the pair.
impl HeapKey for u64 {
    #[inline]
    fn key(dist: u64, node: u32) -> Self {
        debug_assert!(dist < 1 << 32);
        dist << 32 | u64::from(node)
    }
    #[inline]
    fn parts(self) -> (u64, u32) {
        (self >> 32, self as u32)
    }
}

/// Any distance.
impl HeapKey for u128 {
    #[inline]
    fn key(dist: u64, node: u32) -> Self {
        u128::from(dist) << 32 | u128::from(node)
    }
    #[inline]
    fn parts(self) -> (u64, u32) {
        ((self >> 32) as u64, self as u32)
    }
}

/// The largest dirty cluster [`MatchingDecoder::settle`] solves; larger ones wait for
/// `finish` (latency-reports/decisions.md).
pub const SETTLE_MAX_CLUSTER: usize = 32;

/// [`MatchingDecoder::settle`] leaves alone the clusters holding a defect of the last this
/// many rounds (latency-reports/decisions.md).
pub const SETTLE_LAG: u32 = 1;

/// The exact decoder with its reusable buffers (module docs).
#[derive(Debug)]
pub struct MatchingDecoder {
    graph: Arc<SparseGraph>,
    /// The first ball's radius cap: the lightest edge weight.
    first_radius: u64,
    // The shot.
    defects: Vec<u32>,
    /// Radius each defect's ball is grown to.
    radius: Vec<u64>,
    is_defect: Vec<bool>,
    invalid: bool,
    // Dijkstra scratch for one ball, valid where `stamp == ball`.
    dist: Vec<u64>,
    obs: Vec<u64>,
    stamp: Vec<u32>,
    settled: Vec<u32>,
    ball: u32,
    /// The ball's Dijkstra heap, keys packed in one word ([`HeapKey`]): 64-bit while the
    /// radius is below 2^32 (every ball of PyMatching's integer weights in practice), else
    /// 128-bit.
    heap: BinaryHeap<Reverse<u64>>,
    wide_heap: BinaryHeap<Reverse<u128>>,
    ball_nodes: Vec<u32>,
    /// A complete ball just searched, before the graph's cache keeps it.
    complete: Vec<BallNode>,
    // Visits of every ball of the shot, listed per node.
    head: Vec<u32>,
    visited: Vec<u32>,
    visits: Vec<Visit>,
    pairs: Vec<Pair>,
    /// `pairs[..sorted_pairs]` is sorted and deduplicated (`solve_round`): candidates found
    /// since are appended after it, and only they are sorted before the two runs merge.
    sorted_pairs: usize,
    merged: Vec<Pair>,
    /// While one ball grows: the candidate it has with each other defect (`pairs` index),
    /// valid where `offer_stamp == ball`, so a pair is recorded once per growth.
    offer_slot: Vec<u32>,
    offer_stamp: Vec<u32>,
    // Clustering, matching and the proof.
    /// Union-find over the shot's defects by their linked candidates, kept as links come
    /// (`link`): a root is its cluster's lowest defect, and `parent[x] <= x`.
    parent: Vec<u32>,
    /// Counting-sort scratch of `solve_round` (per root: its cluster's start in `order`).
    starts: Vec<u32>,
    order: Vec<u32>,
    /// Per defect, its index in the cluster being matched; `NONE` outside it (kept so, the
    /// cluster's entries reset after use: no clearing per cluster).
    local: Vec<u32>,
    /// Per defect, its LP dual in its cluster's matching, doubled (`2 y`).
    duals: Vec<i64>,
    /// Per defect of the cluster being matched, its boundary distance (the matcher's input).
    boundary: Vec<i64>,
    /// Per defect: something that can change its cluster's matching happened since that
    /// cluster was last solved (the defect is new, its ball grew, it got a candidate).
    dirty: Vec<bool>,
    /// Per cluster, by its first defect: the last solution (defects, weight, observables,
    /// matched), reused while none of its defects is dirty (clusters only ever merge, and
    /// a merge makes both sides dirty).
    solved: Vec<(u32, u64, u64, bool)>,
    /// Per defect: its cluster was left unsolved this round (`settle`'s size limit).
    deferred: Vec<bool>,
    settle_max_cluster: usize,
    /// Rounds (`settle` calls) of the shot so far, and the round each defect arrived in:
    /// `settle` leaves the clusters of the last `settle_lag` rounds' defects alone (their
    /// partners are likely still to come; solving them now only grows balls for nothing).
    epoch: u32,
    born: Vec<u32>,
    settle_lag: u32,
    edges: Vec<(u32, u32, i64)>,
    mate: Vec<u32>,
    matcher: PerfectMatching,
    counters: DecoderCounters,
    /// The result of the last complete settle ([`settle_last`](MatchingDecoder::settle_last)):
    /// every cluster solved and the matching proved for the defects so far. `finish` answers
    /// it while no defect came since (`add_defect` and `begin_shot` drop it).
    ahead: Option<Decoded>,
}

impl MatchingDecoder {
    /// A decoder for `graph`'s DEM.
    pub fn new(graph: Arc<SparseGraph>) -> Self {
        let n = graph.num_detectors();
        // The first ball: the lightest edge (latency-reports/decisions.md: the fastest of the
        // radii measured; heavier first balls cost more than the regrowth they save).
        let first_radius =
            (0..n as u32).flat_map(|v| graph.arcs(v).iter().map(|a| u64::from(a.weight))).min().unwrap_or(0);
        MatchingDecoder {
            graph,
            first_radius,
            defects: Vec::new(),
            radius: Vec::new(),
            is_defect: vec![false; n],
            invalid: false,
            dist: vec![0; n],
            obs: vec![0; n],
            stamp: vec![0; n],
            settled: vec![0; n],
            ball: 0,
            heap: BinaryHeap::new(),
            wide_heap: BinaryHeap::new(),
            ball_nodes: Vec::new(),
            complete: Vec::new(),
            head: vec![NONE; n],
            visited: Vec::new(),
            visits: Vec::new(),
            pairs: Vec::new(),
            sorted_pairs: 0,
            merged: Vec::new(),
            offer_slot: Vec::new(),
            offer_stamp: Vec::new(),
            parent: Vec::new(),
            starts: Vec::new(),
            order: Vec::new(),
            local: Vec::new(),
            duals: Vec::new(),
            boundary: Vec::new(),
            dirty: Vec::new(),
            solved: Vec::new(),
            deferred: Vec::new(),
            settle_max_cluster: SETTLE_MAX_CLUSTER,
            epoch: 0,
            born: Vec::new(),
            settle_lag: SETTLE_LAG,
            edges: Vec::new(),
            mate: Vec::new(),
            matcher: PerfectMatching::new(),
            counters: DecoderCounters::default(),
            ahead: None,
        }
    }

    /// The largest dirty cluster [`settle`](Self::settle) solves ([`SETTLE_MAX_CLUSTER`] by
    /// default; 0 makes `settle` only grow balls, `usize::MAX` solves every cluster).
    pub fn set_settle_max_cluster(&mut self, defects: usize) {
        self.settle_max_cluster = defects;
    }

    /// How many of the latest rounds' clusters [`settle`](Self::settle) leaves alone
    /// ([`SETTLE_LAG`] by default; 0 settles them too).
    pub fn set_settle_lag(&mut self, rounds: u32) {
        self.settle_lag = rounds;
    }

    /// The graph.
    pub fn graph(&self) -> &Arc<SparseGraph> {
        &self.graph
    }

    /// Counters since construction.
    pub fn counters(&self) -> DecoderCounters {
        self.counters
    }

    /// Defects of the shot being assembled.
    pub fn pending_defects(&self) -> usize {
        self.defects.len()
    }

    /// Starts a new shot, dropping any unfinished one.
    pub fn begin_shot(&mut self) {
        for &d in &self.defects {
            if let Some(f) = self.is_defect.get_mut(d as usize) {
                *f = false;
            }
        }
        for &v in &self.visited {
            self.head[v as usize] = NONE;
        }
        self.defects.clear();
        self.radius.clear();
        self.duals.clear();
        self.dirty.clear();
        self.born.clear();
        self.epoch = 0;
        self.solved.clear();
        self.visited.clear();
        self.visits.clear();
        self.pairs.clear();
        self.sorted_pairs = 0;
        self.parent.clear();
        self.invalid = false;
        self.ahead = None;
    }

    /// Adds one defect to the shot and grows its first ball now (module docs). A defect is a
    /// detection event as the matching sees it: where the DEM has negative edges, the events
    /// at their ends are flipped first, which [`add_bits`](Self::add_bits),
    /// [`add_events`](Self::add_events) and the `decode_*` calls do and this does not.
    pub fn add_defect(&mut self, detector: u32) {
        let n = self.graph.num_detectors();
        if (detector as usize) >= n || self.is_defect[detector as usize] || self.invalid {
            self.invalid = true;
            return;
        }
        self.is_defect[detector as usize] = true;
        self.ahead = None;
        let index = self.defects.len() as u32;
        self.defects.push(detector);
        self.radius.push(0);
        self.dirty.push(true);
        self.born.push(self.epoch);
        self.parent.push(index);
        let c = self.graph.boundary_distance(detector).0;
        self.grow_ball(index, self.first_radius.min(c), true);
    }

    /// Adds the detection events `bits` (LSB first, stim b8 order), bit `i` being detector
    /// `first + i`, as defects (those of the graph's negative edges flipped:
    /// `SparseGraph::negative_detectors`); bits at or beyond `count` or the detector count
    /// are ignored. For a round of a stream, or a whole shot with `first = 0`.
    pub fn add_bits(&mut self, first: u32, bits: &[u8], count: usize) {
        let first = first as usize;
        let n = self.graph.num_detectors();
        if self.graph.negative_detectors().is_empty() {
            for (byte_index, &byte) in bits.iter().enumerate().take(count.div_ceil(8)) {
                let mut b = byte;
                while b != 0 {
                    let i = byte_index * 8 + b.trailing_zeros() as usize;
                    b &= b - 1;
                    if i < count && first + i < n {
                        self.add_defect((first + i) as u32);
                    }
                }
            }
            return;
        }
        // Flipped events: the bits placed at their detectors' positions first.
        let end = (first + count).min(n);
        let mut shot = vec![0u8; end.div_ceil(8)];
        for i in 0..end.saturating_sub(first) {
            if bits.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1) {
                shot[(first + i) / 8] |= 1 << ((first + i) % 8);
            }
        }
        self.add_events(&shot, first, end);
    }

    /// Adds the detection events of detectors `first..end` of `shot` (a shot's events so far,
    /// b8 order, bit i detector i) as defects, those of the negative edges flipped (as
    /// [`add_bits`](Self::add_bits)): a stream's round, given the shot it belongs to.
    pub fn add_events(&mut self, shot: &[u8], first: usize, end: usize) {
        if !self.graph.negative_detectors().is_empty() {
            let graph = Arc::clone(&self.graph);
            graph.for_each_defect(shot, first, end, |d| self.add_defect(d));
            return;
        }
        // No negative edge (the common case): the set bits, a byte at a time where it is zero.
        let end = end.min(self.graph.num_detectors()).min(shot.len() * 8);
        let mut i = first;
        while i < end {
            let b = shot[i / 8] >> (i % 8);
            if b == 0 {
                i = (i / 8 + 1) * 8;
                continue;
            }
            let at = i + b.trailing_zeros() as usize;
            if at >= end {
                return;
            }
            self.add_defect(at as u32);
            i = at + 1;
        }
    }

    /// Decodes one shot given as its detection events (detector indices, any order, each
    /// once); those of the negative edges are flipped as [`add_bits`](Self::add_bits) does.
    pub fn decode_defects(&mut self, defects: &[u32]) -> Decoded {
        self.begin_shot();
        if self.graph.negative_detectors().is_empty() {
            for &d in defects {
                self.add_defect(d);
            }
        } else {
            let mut events = defects.to_vec();
            events.sort_unstable();
            if events.windows(2).any(|w| w[0] == w[1]) {
                // A repeated event is invalid input, as without negative edges.
                defects.iter().for_each(|&d| self.add_defect(d));
                return self.finish();
            }
            events.extend_from_slice(self.graph.negative_detectors());
            events.sort_unstable();
            let mut i = 0;
            while i < events.len() {
                let same = events[i..].iter().take_while(|&&e| e == events[i]).count();
                if same % 2 == 1 {
                    self.add_defect(events[i]);
                }
                i += same;
            }
        }
        self.finish()
    }

    /// Decodes one shot of detection events bit-packed LSB first (stim b8); bits at or
    /// beyond the detector count are ignored and a short buffer reads as zeros.
    pub fn decode_b8(&mut self, shot: &[u8]) -> Decoded {
        self.begin_shot();
        self.add_events(shot, 0, self.graph.num_detectors());
        self.finish()
    }

    /// The ball of `source` out to `new_radius` (stamped `self.ball`): every node's distance
    /// and observables along its shortest path, and in `ball_nodes` the nodes beyond `old`
    /// (all of them when `first`). Nodes leave the heap by (distance, node index).
    fn dijkstra<K: HeapKey>(
        &mut self,
        g: &SparseGraph,
        heap: &mut BinaryHeap<Reverse<K>>,
        source: u32,
        new_radius: u64,
        old: u64,
        first: bool,
    ) {
        let ball = self.ball;
        heap.clear();
        self.dist[source as usize] = 0;
        self.obs[source as usize] = 0;
        self.stamp[source as usize] = ball;
        heap.push(Reverse(K::key(0, source)));
        while let Some(Reverse(key)) = heap.pop() {
            let (d, u) = key.parts();
            let ui = u as usize;
            if self.settled[ui] == ball || d > self.dist[ui] {
                continue;
            }
            self.settled[ui] = ball;
            if first || d > old {
                self.ball_nodes.push(u);
            }
            for a in g.arcs(u) {
                let v = a.to as usize;
                let nd = d + u64::from(a.weight);
                if nd > new_radius || self.settled[v] == ball {
                    continue;
                }
                if self.stamp[v] != ball || nd < self.dist[v] {
                    self.stamp[v] = ball;
                    self.dist[v] = nd;
                    self.obs[v] = self.obs[ui] ^ a.observables;
                    heap.push(Reverse(K::key(nd, a.to)));
                }
            }
        }
    }

    /// Grows defect `index`'s ball to `new_radius` (module docs, step 1): the nodes beyond
    /// its old radius are recorded, and give candidates with the other balls' visits.
    fn grow_ball(&mut self, index: u32, new_radius: u64, first: bool) {
        let g = Arc::clone(&self.graph);
        let source = self.defects[index as usize];
        let old = self.radius[index as usize];
        self.radius[index as usize] = new_radius;
        self.dirty[index as usize] = true;
        self.next_ball();
        if self.offer_stamp.len() < self.defects.len() {
            self.offer_stamp.resize(self.defects.len(), 0);
            self.offer_slot.resize(self.defects.len(), 0);
        }
        self.ball_nodes.clear();
        // A regrown ball within the boundary distance (every one, the widening keeps to it)
        // is a prefix of the detector's complete ball, read rather than searched once known.
        let c = g.boundary_distance(source).0;
        if first && new_radius == self.first_radius && self.first_radius > 0 {
            self.first_ball(&g, source);
        } else if first
            || c == UNREACHABLE
            || new_radius > c
            || !self.read_complete_ball(&g, source, c, new_radius, old)
        {
            self.search(&g, source, new_radius, old, first);
        }
        let ball = self.ball;

        // Candidates with the other balls: at a node both hold, and across an edge leaving
        // this ball (one into it is never shorter than the node candidate at its head, which
        // whichever ball came second offers: `d(v) <= d(u) + w(u, v)` within the ball).
        // Walked from the smaller side: the new nodes and their arcs, or the nodes other
        // balls visited and theirs (arcs come in both directions, and a pair keeps its best
        // candidate whatever the order they are offered in).
        let new = |me: &Self, u: usize| me.settled[u] == ball && (first || me.dist[u] > old);
        if self.visited.len() < self.ball_nodes.len() {
            for k in 0..self.visited.len() {
                let x = self.visited[k] as usize;
                if new(self, x) {
                    self.offer_visits(x, index, self.dist[x], self.obs[x]);
                } else if self.settled[x] != ball {
                    for a in g.arcs(x as u32) {
                        let u = a.to as usize;
                        if new(self, u) {
                            self.offer_visits(
                                x,
                                index,
                                self.dist[u] + u64::from(a.weight),
                                self.obs[u] ^ a.observables,
                            );
                        }
                    }
                }
            }
        } else {
            for k in 0..self.ball_nodes.len() {
                let u = self.ball_nodes[k];
                let (du, ou) = (self.dist[u as usize], self.obs[u as usize]);
                self.offer_visits(u as usize, index, du, ou);
                for a in g.arcs(u) {
                    if self.settled[a.to as usize] != ball {
                        self.offer_visits(a.to as usize, index, du + u64::from(a.weight), ou ^ a.observables);
                    }
                }
            }
        }
        // Then record the new visits.
        for k in 0..self.ball_nodes.len() {
            let u = self.ball_nodes[k] as usize;
            if self.head[u] == NONE {
                self.visited.push(u as u32);
            }
            let next = self.head[u];
            self.head[u] = self.visits.len() as u32;
            self.visits.push(Visit { defect: index, dist: self.dist[u], obs: self.obs[u], next });
        }
    }

    /// Offers the growing ball `index` a candidate with every other ball that visited `node`,
    /// `dist` and `obs` being the path from `index`'s defect to `node`.
    #[inline(always)]
    fn offer_visits(&mut self, node: usize, index: u32, dist: u64, obs: u64) {
        let mut at = self.head[node];
        while at != NONE {
            let v = self.visits[at as usize];
            self.offer(v.defect, index, dist + v.dist, obs ^ v.obs);
            at = v.next;
        }
    }

    /// A fresh stamp for the next ball's scratch.
    fn next_ball(&mut self) {
        self.ball = self.ball.wrapping_add(1);
        if self.ball == 0 {
            self.stamp.fill(0);
            self.settled.fill(0);
            self.offer_stamp.fill(0);
            self.ball = 1;
        }
    }

    /// The first ball of `source` when its radius is the graph's lightest weight, and that is
    /// not zero: the source and the neighbours one lightest arc away, since any longer path
    /// weighs at least twice that. The same ball as the search's, in its order (distance,
    /// then node; a neighbour's observables from its first such arc), without a heap.
    fn first_ball(&mut self, g: &SparseGraph, source: u32) {
        let (ball, m) = (self.ball, self.first_radius);
        let s = source as usize;
        self.stamp[s] = ball;
        self.settled[s] = ball;
        self.dist[s] = 0;
        self.obs[s] = 0;
        self.ball_nodes.push(source);
        let from = self.ball_nodes.len();
        for a in g.arcs(source) {
            let v = a.to as usize;
            if u64::from(a.weight) == m && self.stamp[v] != ball {
                self.stamp[v] = ball;
                self.settled[v] = ball;
                self.dist[v] = m;
                self.obs[v] = a.observables;
                self.ball_nodes.push(a.to);
            }
        }
        self.ball_nodes[from..].sort_unstable();
    }

    /// Dijkstra from `source` to `radius` into the ball's scratch, with the heap its
    /// distances fit.
    fn search(&mut self, g: &SparseGraph, source: u32, radius: u64, old: u64, first: bool) {
        if radius < 1 << 32 {
            let mut heap = std::mem::take(&mut self.heap);
            self.dijkstra(g, &mut heap, source, radius, old, first);
            self.heap = heap;
        } else {
            let mut heap = std::mem::take(&mut self.wide_heap);
            self.dijkstra(g, &mut heap, source, radius, old, first);
            self.wide_heap = heap;
        }
    }

    /// Searches `source`'s complete ball (radius `c`, its boundary distance) into `out`, and
    /// leaves the scratch to the next ball.
    fn search_complete_ball(&mut self, g: &SparseGraph, source: u32, c: u64, out: &mut Vec<BallNode>) {
        self.search(g, source, c, 0, true);
        out.clear();
        out.extend(self.ball_nodes.iter().map(|&u| BallNode {
            dist: self.dist[u as usize],
            obs: self.obs[u as usize],
            node: u,
        }));
        self.ball_nodes.clear();
        self.next_ball();
    }

    /// Searches the complete balls ([`crate::balls`]) of the detectors with a boundary that
    /// the graph's cache lacks, in detector order, until the cache is half full (the other
    /// half stays for the balls shots regrow): a real-time stage calls it once before its
    /// first shot, so that no shot pays for a first search where they all fit (d = 11: 1.7
    /// MB). Returns how many it kept.
    pub fn fill_complete_balls(&mut self) -> usize {
        let g = Arc::clone(&self.graph);
        let mut ball = Vec::new();
        let mut kept = 0;
        for v in 0..g.num_detectors() as u32 {
            let c = g.boundary_distance(v).0;
            if g.balls().is_half_full() {
                break;
            }
            if c != UNREACHABLE && g.balls().get(v).is_none() {
                self.next_ball();
                self.search_complete_ball(&g, v, c, &mut ball);
                kept += usize::from(g.balls().insert(v, &ball).is_some());
            }
        }
        kept
    }

    /// Reads `source`'s ball of radius `radius <= c` (its boundary distance) from its
    /// complete ball into the scratch, the nodes beyond `old` listed as new; the complete
    /// ball is searched first when the graph's cache lacks it and has room and `radius` is
    /// at least half of `c`. False (nothing read) otherwise.
    fn read_complete_ball(&mut self, g: &SparseGraph, source: u32, c: u64, radius: u64, old: u64) -> bool {
        let mut fresh = std::mem::take(&mut self.complete);
        let nodes = match g.balls().get(source) {
            Some(nodes) => nodes,
            // Searching the complete ball costs more than this one: done only for a ball at
            // least half as wide, which most regrown balls are (a defect at the boundary
            // asks for all of it).
            None if g.balls().is_full() || radius.saturating_mul(2) < c => {
                self.complete = fresh;
                return false;
            }
            None => {
                self.search_complete_ball(g, source, c, &mut fresh);
                // Not kept (the cache filled meanwhile): read from the search just made.
                g.balls().insert(source, &fresh).unwrap_or(&fresh)
            }
        };
        self.counters.balls_read += 1;
        let ball = self.ball;
        for n in nodes {
            if n.dist > radius {
                break;
            }
            let u = n.node as usize;
            self.settled[u] = ball;
            self.stamp[u] = ball;
            self.dist[u] = n.dist;
            self.obs[u] = n.obs;
            if n.dist > old {
                self.ball_nodes.push(n.node);
            }
        }
        self.complete = fresh;
        true
    }

    /// Records a candidate of the pair `(x, y)`; pairs never better than both defects going
    /// to the boundary (`dist >= c_x + c_y`) are kept unlinked, for the proof.
    #[inline]
    fn offer(&mut self, x: u32, y: u32, dist: u64, obs: u64) {
        if x == y {
            return;
        }
        // `y` is the growing ball: one record per other defect and growth, the best kept. A
        // linked candidate can change the clusters' matchings: its defects become dirty.
        let o = x as usize;
        let slot = if self.offer_stamp[o] == self.ball {
            let i = self.offer_slot[o] as usize;
            if (dist, obs) >= (self.pairs[i].dist, self.pairs[i].obs) {
                return;
            }
            i
        } else {
            self.offer_stamp[o] = self.ball;
            self.offer_slot[o] = self.pairs.len() as u32;
            self.pairs.push(Pair { a: x.min(y), b: x.max(y), dist, obs, linked: false });
            self.pairs.len() - 1
        };
        let (ca, cb) =
            (self.graph.boundary_distance(self.defects[o]).0, self.graph.boundary_distance(self.defects[y as usize]).0);
        let linked = ca == UNREACHABLE || cb == UNREACHABLE || dist < ca + cb;
        self.pairs[slot] = Pair { dist, obs, linked, ..self.pairs[slot] };
        if linked {
            self.dirty[o] = true;
            self.dirty[y as usize] = true;
            self.link(x, y);
        }
    }

    /// Clusters, matches and proves the shot (module docs, steps 2 to 4).
    pub fn finish(&mut self) -> Decoded {
        self.counters.shots += 1;
        let k = self.defects.len();
        if self.invalid {
            self.counters.invalid += 1;
            let d = Decoded { defects: k as u32, status: DecodeStatus::Invalid, ..Decoded::default() };
            self.begin_shot();
            return d;
        }
        // A complete settle since the last defect: solving again would reuse every cluster and
        // find the proof holding, the same answer.
        let mut out = match self.ahead.take() {
            Some(out) => {
                self.counters.answered_ahead += 1;
                out
            }
            None => self.solve_proved(usize::MAX, u32::MAX, &mut || false).0,
        };
        if out.status == DecodeStatus::Unmatchable {
            self.counters.unmatchable += 1;
        }
        // The negative edges (SparseGraph's module docs), in the answer.
        out.observables ^= self.graph.negative_observables();
        out.weight = (out.weight_units as f64 + self.graph.negative_units() as f64) / self.graph.scale();
        self.begin_shot();
        out
    }

    /// Solves the defects so far and proves the matching optimal for them, without ending
    /// the shot: a stream calls it after each round, so that the final round finds balls
    /// already grown where the earlier defects need them and clusters already solved, and
    /// re-solves only the clusters the final round's defects touch. The shot's result is
    /// the same minimum weight either way (equal-weight matchings may be chosen differently).
    ///
    /// A dirty cluster of more than [`SETTLE_MAX_CLUSTER`] defects is left to `finish`: at
    /// high noise one cluster can take most of the shot, and re-solving it every round
    /// would cost more per round than the final round saves.
    pub fn settle(&mut self) {
        self.settle_unless(&mut || false);
    }

    /// [`settle`](Self::settle), given up as soon as `stop()` says so (asked before each
    /// cluster it would solve and each solving round): what it solved by then stays solved,
    /// the rest is left to the next `settle` or to `finish`, whose answer is the same either
    /// way. For a caller that settles beside a stream and must not keep the next round, or
    /// the final one, waiting.
    pub fn settle_unless(&mut self, stop: &mut dyn FnMut() -> bool) {
        if !self.invalid {
            // Defects of this round have `born == epoch`: the last `lag` rounds are those
            // born at `epoch + 1 - lag` or later.
            let fresh = (self.epoch + 1).saturating_sub(self.settle_lag);
            let _ = self.solve_proved(self.settle_max_cluster, fresh, stop);
            self.epoch += 1;
        }
    }

    /// The settle of a shot's last round but one: every cluster solved, whatever its size or
    /// age, and the matching proved for the defects so far, so that a final round that adds
    /// no defect is answered by `finish` with no work (the same answer it would compute).
    /// The work the final round would do on the other clusters is done here instead.
    pub fn settle_last(&mut self) {
        self.settle_last_unless(&mut || false);
    }

    /// [`settle_last`](Self::settle_last), given up as [`settle_unless`](Self::settle_unless)
    /// is; given up, it keeps no answer for `finish`.
    pub fn settle_last_unless(&mut self, stop: &mut dyn FnMut() -> bool) {
        if !self.invalid {
            let (out, stopped) = self.solve_proved(usize::MAX, u32::MAX, stop);
            if !stopped {
                self.ahead = Some(out);
            }
            self.epoch += 1;
        }
    }

    /// Solving rounds until the proof holds (module docs, steps 2 to 4).
    /// Dirty clusters above `limit` defects are deferred: not solved, not proved.
    /// And so are clusters holding a defect born in round `fresh` or later. Once `stop()`
    /// is true, the clusters left are deferred too and no proof runs: the result is not
    /// proved then (only a settle stops), and the flag beside it says so.
    fn solve_proved(&mut self, limit: usize, fresh: u32, stop: &mut dyn FnMut() -> bool) -> (Decoded, bool) {
        let mut rounds = 0;
        loop {
            rounds += 1;
            let (mut out, stopped) = self.solve_round(limit, fresh, stop);
            // Stopped: the proof (which checks every pair and ball afresh each time) is
            // left to the next call.
            if stopped || self.widen() == 0 {
                out.rounds = rounds;
                out.weight = out.weight_units as f64 / self.graph.scale();
                return (out, stopped);
            }
            self.counters.extra_rounds += 1;
        }
    }

    /// One round: clusters over the linked candidates, each matched exactly (or its last
    /// solution reused when none of its defects is dirty), duals kept. True with it when
    /// `stop()` deferred the clusters it had not solved yet.
    fn solve_round(&mut self, limit: usize, fresh: u32, stop: &mut dyn FnMut() -> bool) -> (Decoded, bool) {
        let k = self.defects.len();
        self.deferred.clear();
        self.deferred.resize(k, false);
        self.sort_pairs();

        // Every defect's root (in increasing order, each find leaves parent[i] the root:
        // parent[i] < i was done before), then the defects by (root, index), by counting.
        for i in 0..k as u32 {
            find(&mut self.parent, i);
        }
        self.starts.clear();
        self.starts.resize(k, 0);
        for &r in &self.parent {
            self.starts[r as usize] += 1;
        }
        let mut at = 0;
        for c in self.starts.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        self.order.clear();
        self.order.resize(k, 0);
        for i in 0..k {
            let r = self.parent[i] as usize;
            self.order[self.starts[r] as usize] = i as u32;
            self.starts[r] += 1;
        }
        // Duals of clean clusters stay as their last solve left them.
        self.duals.resize(k, 0);
        self.solved.resize(k, (0, 0, 0, false));

        let mut out = Decoded { defects: k as u32, ..Decoded::default() };
        let mut stopped = false;
        let mut start = 0;
        while start < k {
            let root = self.parent[self.order[start] as usize];
            let mut end = start + 1;
            while end < k && self.parent[self.order[end] as usize] == root {
                end += 1;
            }
            out.clusters += 1;
            let size = (end - start) as u32;
            out.largest_cluster = out.largest_cluster.max(size);
            let first = self.order[start] as usize;
            let cached = self.solved[first];
            let clean = cached.0 == size && self.order[start..end].iter().all(|&i| !self.dirty[i as usize]);
            let young = || self.order[start..end].iter().any(|&i| self.born[i as usize] >= fresh);
            if !clean && !stopped && size as usize <= limit && !young() {
                stopped = stop();
            }
            if !clean && (stopped || size as usize > limit || young()) {
                for x in start..end {
                    let i = self.order[x] as usize;
                    self.deferred[i] = true;
                }
                start = end;
                continue;
            }
            let matched = if clean {
                self.counters.reused_clusters += 1;
                out.weight_units += cached.1;
                out.observables ^= cached.2;
                cached.3
            } else {
                let (w0, o0) = (out.weight_units, out.observables);
                let ok = self.match_cluster(start, end, &mut out);
                self.solved[first] = (size, out.weight_units - w0, out.observables ^ o0, ok);
                for x in start..end {
                    let i = self.order[x] as usize;
                    self.dirty[i] = false;
                }
                ok
            };
            if !matched {
                out.status = DecodeStatus::Unmatchable;
            }
            start = end;
        }
        (out, stopped)
    }

    /// The proof (module docs, step 4): grows the balls of the defects whose duals exceed
    /// their radius and links the left-out pairs whose reduced cost is negative. Returns how
    /// many were widened (0: the matching is proved optimal).
    fn widen(&mut self) -> usize {
        let mut widened = 0;
        for i in 0..self.pairs.len() {
            let p = self.pairs[i];
            if p.linked || self.deferred[p.a as usize] || self.deferred[p.b as usize] {
                continue;
            }
            let (ya, yb) = (self.duals[p.a as usize], self.duals[p.b as usize]);
            let d2 = 2 * p.dist as i64;
            if ya + yb > d2 {
                self.pairs[i].linked = true;
                self.dirty[p.a as usize] = true;
                self.dirty[p.b as usize] = true;
                self.link(p.a, p.b);
                widened += 1;
            }
        }
        for i in 0..self.defects.len() {
            if self.deferred[i] {
                continue;
            }
            let y2 = self.duals[i];
            let r = self.radius[i];
            if r == UNREACHABLE || y2 <= 0 || (y2 as u64) <= 2 * r {
                continue;
            }
            // `i64::MAX`: an unmatchable cluster, whose balls cover the graph next.
            // Never beyond the boundary distance: a dual never exceeds it, so a ball that wide
            // is never regrown (and is a prefix of the complete ball).
            let c = self.graph.boundary_distance(self.defects[i]).0;
            let wanted = if y2 == i64::MAX { UNREACHABLE } else { (y2 as u64).div_ceil(2).max(2 * r).max(1).min(c) };
            self.counters.regrown_balls += 1;
            self.grow_ball(i as u32, wanted, false);
            widened += 1;
        }
        widened
    }

    /// Matches the cluster `order[start..end]`, adding its weight and observables to `out`
    /// and leaving its duals in `duals`; false when it has no perfect matching (then its
    /// balls are grown to the whole graph, so that the next round can find what is missing,
    /// and the shot is unmatchable only once they all are).
    fn match_cluster(&mut self, start: usize, end: usize, out: &mut Decoded) -> bool {
        let g = Arc::clone(&self.graph);
        let size = end - start;
        let c = |i: u32| g.boundary_distance(self.defects[i as usize]);
        if size == 1 {
            let i = self.order[start];
            let (d, o) = c(i);
            if d == UNREACHABLE {
                self.unmatchable_cluster(start, end);
                return false;
            }
            out.weight_units += d;
            out.observables ^= o;
            let y2 = 2 * d as i64;
            self.duals[i as usize] = y2;
            return true;
        }
        if size == 2 {
            let (a, b) = (self.order[start], self.order[start + 1]);
            let p = self.pairs[self.pair_index(a.min(b), a.max(b)).expect("a cluster of two is one pair")];
            out.weight_units += p.dist;
            out.observables ^= p.obs;
            // Duals: y_a + y_b = d, y_a <= c_a, y_b <= c_b (the boundary edges);
            // within that, y_a <= rho_a and y_b <= rho_b when possible (the proof).
            let (ca, cb) = (c(a).0, c(b).0);
            let (ra, rb) = (self.radius[a as usize], self.radius[b as usize]);
            let d = p.dist as i128;
            let lo = (d - cb.min(u64::MAX / 2) as i128).max(d - rb.min(u64::MAX / 2) as i128);
            let hi = (ca.min(u64::MAX / 2) as i128).min(ra.min(u64::MAX / 2) as i128);
            let hard_lo = d - cb.min(u64::MAX / 2) as i128;
            let hard_hi = ca.min(u64::MAX / 2) as i128;
            let t = if lo <= hi { lo } else { hi.clamp(hard_lo, hard_hi) };
            let (ya, yb) = ((2 * t) as i64, (2 * (d - t)) as i64);
            self.duals[a as usize] = ya;
            self.duals[b as usize] = yb;
            return true;
        }
        self.counters.blossom_clusters += 1;
        // The cluster's defects 0..size, each with its boundary edge (module docs, step 3).
        if self.local.len() < self.defects.len() {
            self.local.resize(self.defects.len(), NONE);
        }
        self.boundary.clear();
        for (x, &i) in self.order[start..end].iter().enumerate() {
            self.local[i as usize] = x as u32;
            let (d, _) = c(i);
            self.boundary.push(if d == UNREACHABLE { NO_BOUNDARY } else { d as i64 });
        }
        // The cluster's linked pairs in the pairs' order (sorted by `(b, a)`): its defects
        // are in increasing index (`solve_round`'s counting sort), and each one's pairs
        // `(_, b)` are found by a binary search, not by a scan of the shot's pairs.
        self.edges.clear();
        for (y, &i) in self.order[start..end].iter().enumerate() {
            let from = self.pairs.partition_point(|p| p.b < i);
            for p in self.pairs[from..].iter().take_while(|p| p.b == i) {
                let x = self.local[p.a as usize];
                if p.linked && x != NONE {
                    self.edges.push((x, y as u32, p.dist as i64));
                }
            }
        }
        for &i in &self.order[start..end] {
            self.local[i as usize] = NONE;
        }
        let Some(total) = self.matcher.solve_with_boundary(size, &self.edges, &self.boundary, &mut self.mate) else {
            self.unmatchable_cluster(start, end);
            return false;
        };
        out.weight_units += total as u64;
        for x in 0..size as u32 {
            let i = self.order[start + x as usize];
            let y2 = self.matcher.vertex_dual_doubled(x as usize);
            self.duals[i as usize] = y2;
            let m = self.mate[x as usize];
            if m == BOUNDARY {
                out.observables ^= c(i).1;
            } else if x < m {
                let j = self.order[start + m as usize];
                let p = self.pairs[self.pair_index(i.min(j), i.max(j)).expect("matched pairs are candidates")];
                out.observables ^= p.obs;
            }
        }
        true
    }

    /// A cluster without a perfect matching: its defects' duals are set so that the proof
    /// grows every ball of it not yet covering the graph.
    fn unmatchable_cluster(&mut self, start: usize, end: usize) {
        for x in start..end {
            let i = self.order[x] as usize;
            let big = if self.radius[i] == UNREACHABLE { 0 } else { i64::MAX };
            self.duals[i] = big;
        }
    }

    /// Sorts and deduplicates the candidates by `(b, a)`: the shortest per pair, then the
    /// smallest observable mask, so the choice does not depend on the order the balls were
    /// grown in; a pair linked once stays linked. Only the candidates found since the last
    /// call are sorted, then merged into the others' tail from the first place one of them
    /// goes: a stream's new defects have the highest indices, so the pairs their first balls
    /// find (most of a round's) sort after every earlier pair and the merge is an append, not
    /// a pass over all the shot's pairs each round. Unstable sorts: the keys are total, and
    /// they do not allocate.
    fn sort_pairs(&mut self) {
        let key = |p: &Pair| (p.b, p.a, p.dist, p.obs, !p.linked);
        let s = self.sorted_pairs;
        if s == self.pairs.len() {
            return;
        }
        self.pairs[s..].sort_unstable_by_key(key);
        let first = (self.pairs[s].b, self.pairs[s].a);
        // Every earlier pair before `from` is another pair than the new ones.
        let from = self.pairs[..s].partition_point(|p| (p.b, p.a) < first);
        self.merged.clear();
        let (old, new) = self.pairs.split_at(s);
        let old = &old[from..];
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let p = if j == new.len() || (i < old.len() && key(&old[i]) <= key(&new[j])) {
                i += 1;
                old[i - 1]
            } else {
                j += 1;
                new[j - 1]
            };
            match self.merged.last_mut() {
                Some(q) if (q.a, q.b) == (p.a, p.b) => q.linked |= p.linked,
                _ => self.merged.push(p),
            }
        }
        self.pairs.truncate(from);
        self.pairs.extend_from_slice(&self.merged);
        self.sorted_pairs = self.pairs.len();
    }

    /// Joins the clusters of defects `a` and `b` (the higher root under the lower, so a
    /// cluster's root is its lowest defect whatever order the links come in).
    fn link(&mut self, a: u32, b: u32) {
        let (ra, rb) = (find(&mut self.parent, a), find(&mut self.parent, b));
        if ra != rb {
            let (lo, hi) = (ra.min(rb), ra.max(rb));
            self.parent[hi as usize] = lo;
        }
    }

    /// The candidate of pair `(a, b)`, `a < b` (pairs are sorted by `(b, a)` and deduplicated).
    fn pair_index(&self, a: u32, b: u32) -> Option<usize> {
        self.pairs.binary_search_by_key(&(b, a), |p| (p.b, p.a)).ok()
    }
}

/// Union-find root with path halving.
fn find(parent: &mut [u32], mut x: u32) -> u32 {
    while parent[x as usize] != x {
        let g = parent[parent[x as usize] as usize];
        parent[x as usize] = g;
        x = g;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::MatchingGraph;

    #[test]
    fn heap_keys_order_as_distance_then_node() {
        let pairs = [(0u64, 0u32), (0, 7), (1, 0), (5, u32::MAX), (6, 1), ((1 << 32) - 1, 0), ((1 << 32) - 1, 9)];
        for w in pairs.windows(2) {
            let (a, b) = (w[0], w[1]);
            assert!(u64::key(a.0, a.1) < u64::key(b.0, b.1), "{a:?} {b:?}");
            assert!(u128::key(a.0, a.1) < u128::key(b.0, b.1), "{a:?} {b:?}");
        }
        for (d, n) in pairs {
            assert_eq!(u64::key(d, n).parts(), (d, n));
            assert_eq!(u128::key(d, n).parts(), (d, n));
        }
        let wide = [(1u64 << 32, 0u32), (u64::MAX - 1, 3), (u64::MAX, 0)];
        for (d, n) in wide {
            assert_eq!(u128::key(d, n).parts(), (d, n));
            assert!(u128::key((1 << 32) - 1, u32::MAX) < u128::key(d, n));
        }
    }

    /// A small random DEM: a grid of detectors with random edge probabilities, some boundary
    /// edges, random observables.
    fn random_dem(seed: u64, w: usize, h: usize, boundary_every: usize) -> String {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut s = String::new();
        let p = |r: u64| 0.001 + (r % 1000) as f64 / 1000.0 * 0.2;
        for i in 0..w * h {
            let (r, c) = (i / w, i % w);
            let obs = |v: u64| if v.is_multiple_of(5) { " L0" } else { "" };
            if c + 1 < w {
                s += &format!("error({}) D{} D{}{}\n", p(next()), i, i + 1, obs(next()));
            }
            if r + 1 < h {
                s += &format!("error({}) D{} D{}{}\n", p(next()), i, i + w, obs(next()));
            }
            if boundary_every > 0 && (c == 0 || c + 1 == w) && i % boundary_every == 0 {
                s += &format!("error({}) D{}{}\n", p(next()), i, obs(next()));
            }
        }
        s
    }

    /// Minimum matching weight (integer units) over the all-pairs table, by subset DP: the
    /// reference, independent of the balls and clusters.
    fn reference(t: &crate::graph::DistanceTable<u32>, defects: &[u32]) -> Option<u64> {
        let b = t.boundary();
        let k = defects.len();
        let inf = u64::MAX;
        let d = |i: usize, j: usize| {
            let v = t.distance(i, j);
            if v == u32::MAX {
                inf
            } else {
                u64::from(v)
            }
        };
        let mut dp = vec![inf; 1 << k];
        dp[0] = 0;
        for mask in 1usize..1 << k {
            let a = mask.trailing_zeros() as usize;
            let rest = mask & !(1 << a);
            let da = d(defects[a] as usize, b);
            if da != inf && dp[rest] != inf {
                dp[mask] = dp[mask].min(da + dp[rest]);
            }
            for j in a + 1..k {
                if rest >> j & 1 == 1 {
                    let r = rest & !(1 << j);
                    let dj = d(defects[a] as usize, defects[j] as usize);
                    if dj != inf && dp[r] != inf {
                        dp[mask] = dp[mask].min(dj + dp[r]);
                    }
                }
            }
        }
        (dp[(1 << k) - 1] != inf).then(|| dp[(1 << k) - 1])
    }

    /// `k` distinct detectors below `n`, drawn from the generator seeded with `x`.
    fn distinct_defects(x: u64, k: usize, n: u64) -> Vec<u32> {
        let mut defects: Vec<u32> = Vec::new();
        let mut y = x;
        while defects.len() < k {
            y = y.wrapping_mul(6364136223846793005).wrapping_add(1);
            let d = ((y >> 33) % n) as u32;
            if !defects.contains(&d) {
                defects.push(d);
            }
        }
        defects
    }

    #[test]
    fn equals_the_table_dp_on_random_graphs_and_shots() {
        let mut checked = 0;
        for seed in 1..60u64 {
            let (w, h) = (3 + seed as usize % 5, 2 + seed as usize % 4);
            let text = random_dem(seed, w, h, if seed % 7 == 0 { 0 } else { 1 + seed as usize % 3 });
            let graph = MatchingGraph::from_dem_text(&text).unwrap();
            let sparse = Arc::new(SparseGraph::new(&graph).unwrap());
            let mut dec = MatchingDecoder::new(Arc::clone(&sparse));
            let table = graph.fine_table().unwrap();
            let n = graph.num_detectors as u64;
            let mut x = seed;
            for shot in 0..40 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = 1 + (x >> 33) as usize % 10.min(n as usize);
                let mut defects = distinct_defects(x, k, n);
                // Arrival order does not matter: shuffle half the shots.
                if shot % 2 == 1 {
                    defects.reverse();
                }
                let got = dec.decode_defects(&defects);
                let mut sorted = defects.clone();
                sorted.sort_unstable();
                match reference(&table, &sorted) {
                    Some(w) => {
                        assert_eq!(got.status, DecodeStatus::Ok, "seed {seed} shot {shot} {defects:?}");
                        assert_eq!(got.weight_units, w, "seed {seed} shot {shot} {defects:?}\n{text}");
                    }
                    None => assert_eq!(got.status, DecodeStatus::Unmatchable, "seed {seed} shot {shot}"),
                }
                checked += 1;
            }
        }
        assert!(checked > 2000);
    }

    /// A grid of equal weights (many shortest paths of equal length, with different
    /// observables) with boundary edges on its left and right columns.
    fn uniform_dem(w: usize, h: usize) -> String {
        let mut s = String::new();
        for i in 0..w * h {
            let (r, c) = (i / w, i % w);
            let obs = |k: usize| if k.is_multiple_of(3) { " L0" } else { "" };
            if c + 1 < w {
                s += &format!("error(0.1) D{} D{}{}\n", i, i + 1, obs(i));
            }
            if r + 1 < h {
                s += &format!("error(0.1) D{} D{}{}\n", i, i + w, obs(i + 1));
            }
            if c == 0 || c + 1 == w {
                s += &format!("error(0.1) D{i}{}\n", obs(i + 2));
            }
        }
        s
    }

    /// The balls' tests' DEMs (seed, text): random weights, and equal weights everywhere.
    fn ball_test_dems() -> impl Iterator<Item = (u64, String)> {
        (1..12u64)
            .map(|s| (s, random_dem(s, 3 + s as usize % 5, 2 + s as usize % 4, 1 + s as usize % 3)))
            .chain([(0, uniform_dem(7, 6)), (0, uniform_dem(3, 9))])
    }

    /// A complete ball's prefix to any radius is the ball the search grows to that radius:
    /// the same nodes in the same order, with the same distances and observables.
    #[test]
    fn complete_ball_prefixes_are_the_searched_balls() {
        let mut compared = 0;
        for (seed, text) in ball_test_dems() {
            let g = crate::sparse_graph_from_dem_text(&text).unwrap();
            let mut d = MatchingDecoder::new(Arc::clone(&g));
            for v in 0..g.num_detectors() as u32 {
                let c = g.boundary_distance(v).0;
                if c == UNREACHABLE {
                    continue;
                }
                d.next_ball();
                d.ball_nodes.clear();
                assert!(d.read_complete_ball(&g, v, c, c, 0));
                let complete = g.balls().get(v).expect("kept").to_vec();
                assert_eq!(complete[0], BallNode { dist: 0, obs: 0, node: v });
                for radius in [0, c / 3, c / 2, c - 1, c] {
                    d.next_ball();
                    d.ball_nodes.clear();
                    d.search(&g, v, radius, 0, true);
                    let searched: Vec<BallNode> = d
                        .ball_nodes
                        .iter()
                        .map(|&u| BallNode { dist: d.dist[u as usize], obs: d.obs[u as usize], node: u })
                        .collect();
                    let prefix: Vec<BallNode> = complete.iter().copied().take_while(|n| n.dist <= radius).collect();
                    assert_eq!(searched, prefix, "seed {seed} detector {v} radius {radius}\n{text}");
                    compared += 1;
                }
            }
        }
        assert!(compared > 500, "{compared}");
    }

    /// A first ball built from the lightest arcs is the search's first ball: the same nodes
    /// in the same order, distances and observables (equal weights everywhere included).
    #[test]
    fn first_balls_are_the_searched_first_balls() {
        let mut compared = 0;
        for (seed, text) in ball_test_dems() {
            let g = crate::sparse_graph_from_dem_text(&text).unwrap();
            let mut d = MatchingDecoder::new(Arc::clone(&g));
            assert!(d.first_radius > 0);
            let ball = |d: &MatchingDecoder| -> Vec<(u32, u64, u64)> {
                d.ball_nodes.iter().map(|&u| (u, d.dist[u as usize], d.obs[u as usize])).collect()
            };
            for v in 0..g.num_detectors() as u32 {
                d.next_ball();
                d.ball_nodes.clear();
                d.search(&g, v, d.first_radius, 0, true);
                let searched = ball(&d);
                d.next_ball();
                d.ball_nodes.clear();
                d.first_ball(&g, v);
                assert_eq!(ball(&d), searched, "seed {seed} detector {v}\n{text}");
                assert!(d.ball_nodes.iter().all(|&u| d.settled[u as usize] == d.ball));
                compared += usize::from(searched.len() > 1);
            }
        }
        assert!(compared > 50, "{compared}");
    }

    /// The balls' cache changes no answer: decoders of a graph without it and of one with it
    /// (shared by both decoders, whole and streamed) give the same results shot for shot.
    #[test]
    fn decodes_the_same_with_and_without_complete_balls() {
        let mut read = 0;
        for seed in 1..30u64 {
            let (graph, n) = stream_case_graph(seed);
            let plain = Arc::new((*graph).clone().with_ball_cache_bytes(0));
            let filled = Arc::new((*graph).clone());
            let mut f = MatchingDecoder::new(Arc::clone(&filled));
            assert!(f.fill_complete_balls() > 0 && !filled.balls().is_empty());
            let reads = f.counters().balls_read;
            let (mut a, mut b, mut s) =
                (MatchingDecoder::new(plain), MatchingDecoder::new(Arc::clone(&graph)), MatchingDecoder::new(graph));
            let mut x = seed;
            for shot in 0..30 {
                let defects = stream_case_shot(&mut x, n);
                let want = a.decode_defects(&defects);
                assert_eq!(b.decode_defects(&defects), want, "seed {seed} shot {shot}");
                assert_eq!(f.decode_defects(&defects), want, "seed {seed} shot {shot}, filled first");
                s.begin_shot();
                for (i, &det) in defects.iter().enumerate() {
                    s.add_defect(det);
                    if i % 3 == 2 {
                        s.settle();
                    }
                }
                assert_eq!(s.finish().weight_units, want.weight_units, "seed {seed} shot {shot}, streamed");
            }
            assert_eq!(a.counters().balls_read, 0);
            assert_eq!(reads, 0, "filling reads no ball");
            read += b.counters().balls_read + s.counters().balls_read;
        }
        assert!(read > 100, "{read}");
    }

    /// The streaming tests' graph for `seed` (a random DEM of 12 to 56 detectors) and its
    /// detector count.
    fn stream_case_graph(seed: u64) -> (Arc<SparseGraph>, u64) {
        let (w, h) = (4 + seed as usize % 5, 3 + seed as usize % 4);
        let graph = MatchingGraph::from_dem_text(&random_dem(seed, w, h, 1 + seed as usize % 3)).unwrap();
        (Arc::new(SparseGraph::new(&graph).unwrap()), graph.num_detectors as u64)
    }

    /// The streaming tests' next shot: 2 to 15 distinct defects below `n`, from the generator
    /// state `x` (advanced).
    fn stream_case_shot(x: &mut u64, n: u64) -> Vec<u32> {
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let k = 2 + (*x >> 33) as usize % 14.min(n as usize - 2);
        distinct_defects(*x, k, n)
    }

    /// Settles given up at any point (after 0, 1, 2, ... of the clusters they would solve) and
    /// streamed in rounds of any size leave the same minimum weight for `finish`.
    #[test]
    fn settles_stopped_anywhere_leave_the_same_weight() {
        let mut checked = 0;
        for seed in 1..30u64 {
            let (sparse, n) = stream_case_graph(seed);
            let (mut whole, mut streamed) = (MatchingDecoder::new(Arc::clone(&sparse)), MatchingDecoder::new(sparse));
            streamed.set_settle_lag(0);
            let mut x = seed;
            for shot in 0..30u64 {
                let defects = stream_case_shot(&mut x, n);
                let want = whole.decode_defects(&defects);
                streamed.begin_shot();
                let per_round = 1 + shot as usize % 4;
                for (r, round) in defects.chunks(per_round).enumerate() {
                    for &d in round {
                        streamed.add_defect(d);
                    }
                    // Stop after `allow` questions: 0 (nothing solved), a few, or never.
                    let allow = (seed as usize + shot as usize + r) % 4;
                    let mut asked = 0;
                    streamed.settle_unless(&mut || {
                        asked += 1;
                        allow != 3 && asked > allow
                    });
                    // The sorted pairs stay one per pair, by `(b, a)`, whatever the order the
                    // defects came in (new pairs merged anywhere, not only appended).
                    let sorted = &streamed.pairs[..streamed.sorted_pairs];
                    assert!(sorted.windows(2).all(|w| (w[0].b, w[0].a) < (w[1].b, w[1].a)), "seed {seed} shot {shot}");
                }
                let got = streamed.finish();
                assert_eq!(
                    (got.status, got.weight_units),
                    (want.status, want.weight_units),
                    "seed {seed} shot {shot} {defects:?}"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 29 * 30);
    }

    /// A complete last settle answers a final round that adds no defect with the minimum
    /// weight a whole-shot decode finds (and the status); one given up, or followed by a
    /// defect, keeps no answer and `finish` solves again, to the same weight.
    #[test]
    fn a_last_settle_answers_a_quiet_final_round() {
        let mut checked = 0;
        for seed in 1..30u64 {
            let (sparse, n) = stream_case_graph(seed);
            let (mut whole, mut last, mut plain) = (
                MatchingDecoder::new(Arc::clone(&sparse)),
                MatchingDecoder::new(Arc::clone(&sparse)),
                MatchingDecoder::new(sparse),
            );
            let mut x = seed;
            for shot in 0..30u64 {
                let defects = stream_case_shot(&mut x, n);
                let want = whole.decode_defects(&defects);
                // The same rounds, a settle after each; before the final round `last` settles
                // completely (given up after `allow` questions in one shot of four).
                let per_round = 1 + shot as usize % 4;
                let rounds: Vec<&[u32]> = defects.chunks(per_round).collect();
                // A final round with no defect, or with the shot's last ones (one shot in three).
                let quiet = shot % 3 != 0;
                let (body, tail): (&[&[u32]], &[&[u32]]) =
                    if quiet { (&rounds[..], &[]) } else { rounds.split_at(rounds.len() - 1) };
                let stop_after = (shot % 4 == 3).then_some((seed + shot) as usize % 3);
                let before = last.counters().answered_ahead;
                last.begin_shot();
                plain.begin_shot();
                for (r, round) in body.iter().enumerate() {
                    for &d in *round {
                        last.add_defect(d);
                        plain.add_defect(d);
                    }
                    if r + 1 == body.len() {
                        let mut asked = 0;
                        last.settle_last_unless(&mut || {
                            asked += 1;
                            stop_after.is_some_and(|a| asked > a)
                        });
                    } else {
                        last.settle();
                    }
                    plain.settle();
                }
                for &d in tail.iter().flat_map(|r| r.iter()) {
                    last.add_defect(d);
                    plain.add_defect(d);
                }
                let (got, base) = (last.finish(), plain.finish());
                assert_eq!(
                    (got.status, got.weight_units),
                    (want.status, want.weight_units),
                    "seed {seed} shot {shot} {defects:?}"
                );
                assert_eq!((got.status, got.weight_units), (base.status, base.weight_units), "seed {seed} shot {shot}");
                let ahead = last.counters().answered_ahead - before;
                let asked_never = stop_after.is_none();
                if quiet && asked_never {
                    assert_eq!(ahead, 1, "a quiet final round after a complete settle: seed {seed} shot {shot}");
                } else if !quiet {
                    assert_eq!(ahead, 0, "a defect after the last settle drops its answer: seed {seed} shot {shot}");
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 29 * 30);
    }

    #[test]
    fn invalid_defects_and_reuse() {
        let g = crate::sparse_graph_from_dem_text("error(0.1) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1\n").unwrap();
        let mut d = MatchingDecoder::new(g);
        assert_eq!(d.decode_defects(&[0, 0]).status, DecodeStatus::Invalid);
        assert_eq!(d.decode_defects(&[2]).status, DecodeStatus::Invalid);
        let ok = d.decode_defects(&[0]);
        assert_eq!((ok.status, ok.observables, ok.defects), (DecodeStatus::Ok, 1, 1));
        let pair = d.decode_defects(&[1, 0]);
        assert_eq!((pair.status, pair.observables, pair.clusters), (DecodeStatus::Ok, 0, 1));
        let empty = d.decode_defects(&[]);
        assert_eq!((empty.status, empty.weight_units, empty.clusters), (DecodeStatus::Ok, 0, 0));
        assert_eq!(d.counters().invalid, 2);
        // Streaming: defects added one by one, then finished, give the same answer.
        d.begin_shot();
        d.add_bits(0, &[0b01], 1);
        d.add_bits(1, &[0b1], 1);
        assert_eq!(d.pending_defects(), 2);
        assert_eq!(d.finish(), pair);
    }

    /// Negative edges (merged p > 0.5) against brute force: on small random graphs, every
    /// edge set whose odd-degree detectors are the shot's events, the lightest by PyMatching's
    /// signed integer weights; the decoder's weight is that minimum and its observables those of
    /// a lightest set. Whole shots, streamed bits and defect lists agree; a repeated event is
    /// invalid.
    #[test]
    fn negative_edges_decode_to_the_lightest_edge_set() {
        let mut x = 99u64;
        let mut next = |k: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % k
        };
        let mut checked = 0;
        for _ in 0..300 {
            let n = 2 + next(4) as u32;
            let mut dem = String::new();
            let mut edges = Vec::new();
            for a in 0..n {
                for b in a..=n {
                    if next(3) == 0 {
                        continue;
                    }
                    // b == n: a boundary edge
                    let p = [0.05, 0.1, 0.3, 0.6, 0.8, 0.95][next(6) as usize];
                    let obs = next(2);
                    if b == a {
                        continue;
                    }
                    let target = if b == n { String::new() } else { format!(" D{b}") };
                    dem.push_str(&format!("error({p}) D{a}{target}{}\n", if obs == 1 { " L0" } else { "" }));
                    edges.push((a, b, obs));
                }
            }
            if edges.is_empty() || edges.len() > 12 {
                continue;
            }
            dem.push_str(&format!("detector D{}\n", n - 1));
            let m = crate::graph::MatchingGraph::from_dem_text(&dem).unwrap();
            let g = Arc::new(SparseGraph::new(&m).unwrap());
            let units = m.integer_weights();
            let signed: Vec<i64> =
                m.edges.iter().zip(&units).map(|(e, &u)| if e.weight < 0.0 { -(u as i64) } else { u as i64 }).collect();
            let mut d = MatchingDecoder::new(Arc::clone(&g));
            for shot in 0..(1u32 << n) {
                let events: Vec<u32> = (0..n).filter(|&i| shot >> i & 1 == 1).collect();
                let (mut best, mut best_obs) = (i64::MAX, Vec::new());
                for set in 0..(1u32 << m.edges.len()) {
                    let (mut parity, mut w, mut obs) = (0u32, 0i64, 0u64);
                    for (k, e) in m.edges.iter().enumerate().filter(|(k, _)| set >> k & 1 == 1) {
                        parity ^= 1 << e.a;
                        if e.b != crate::graph::BOUNDARY {
                            parity ^= 1 << e.b;
                        }
                        w += signed[k];
                        obs ^= e.observables;
                    }
                    if parity != shot {
                        continue;
                    }
                    if w < best {
                        (best, best_obs) = (w, vec![obs]);
                    } else if w == best {
                        best_obs.push(obs);
                    }
                }
                let got = d.decode_defects(&events);
                if best == i64::MAX {
                    assert_eq!(got.status, DecodeStatus::Unmatchable, "{dem}{events:?}");
                    continue;
                }
                assert_eq!(got.status, DecodeStatus::Ok, "{dem}{events:?}");
                assert!(
                    (got.weight - best as f64 / g.scale()).abs() < 1e-9,
                    "{dem}{events:?}: {} against {best}",
                    got.weight
                );
                assert!(best_obs.contains(&got.observables), "{dem}{events:?}");
                assert_eq!(d.decode_b8(&[shot as u8]), got, "{dem}{events:?}");
                d.begin_shot();
                d.add_bits(0, &[shot as u8 & 1], 1);
                d.add_bits(1, &[(shot >> 1) as u8], n as usize - 1);
                assert_eq!(d.finish(), got, "{dem}{events:?} streamed");
                checked += 1;
            }
        }
        assert!(checked > 500, "{checked}");
        let g = crate::sparse_graph_from_dem_text("error(0.7) D0 D1\nerror(0.1) D1\nerror(0.1) D0\n").unwrap();
        let mut d = MatchingDecoder::new(g);
        assert_eq!(d.decode_defects(&[1, 1]).status, DecodeStatus::Invalid);
    }

    #[test]
    fn no_boundary_odd_cluster_is_unmatchable() {
        let g = crate::sparse_graph_from_dem_text("error(0.1) D0 D1\nerror(0.1) D1 D2\n").unwrap();
        let mut d = MatchingDecoder::new(g);
        assert_eq!(d.decode_defects(&[0, 1, 2]).status, DecodeStatus::Unmatchable);
        let two = d.decode_defects(&[0, 2]);
        assert_eq!(two.status, DecodeStatus::Ok);
        assert!((two.weight - 2.0 * 9f64.ln()).abs() < 1e-5);
    }
}
