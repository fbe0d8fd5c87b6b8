//! The GPU stage's decoder, as its model: exact minimum-weight perfect matching with boundary
//! on the all-pairs table, by subset DP for up to K defects (docs/qec.md, "The table
//! decoder"); above K the shot's clusters, each matched exactly, joined until their LP duals
//! prove the whole shot optimal. No greedy step: every decode is exact, or (a cluster over
//! the GPU scratch's edge cap, [`matching_edge_cap`]) not made at all, status `Overflow`.
//! The CPU stage decodes with `rocelink_qec::MatchingDecoder`; this one is what
//! `kernels/stages/qec.cuh` computes, bit for bit.
//!
//! For defects `b_0 < b_1 < ... < b_{k-1}` (detector order) and a subset `mask` of them, with
//! `a` the lowest defect in `mask`:
//!
//! ```text
//! dp[0]    = 0
//! dp[mask] = min( D[a][boundary] + dp[mask \ {a}],
//!                 min_{j in mask, j > a} D[a][b_j] + dp[mask \ {a, b_j}] )
//! ```
//!
//! Guarantees:
//! - **Exact**: within the cap the result is a minimum-weight matching of the defects to each
//!   other or to the boundary over the table's shortest paths, which is what PyMatching
//!   computes; with [`DistanceTable<u32>`] from `MatchingGraph::fine_table` the objective is
//!   PyMatching's own integer one, so observables differ from PyMatching only on exact ties
//!   (equal weight, another matching), which callers count.
//! - **Deterministic tie-breaking, the contract the GPU kernel follows to be bit-identical**:
//!   `dp[mask]` depends only on its sub-masks, so any evaluation order gives the same values
//!   (memoised top-down from the full set here, which solves only reachable sub-masks; on
//!   the GPU bottom-up over the same reachable masks, by layer of lowest defect, with the
//!   masks of one or two defects solved straight from the table); inside one mask the boundary option
//!   first, then partners by increasing defect index, replacing the best only when strictly
//!   smaller. Observables are the XOR of the chosen option's parity and the sub-mask's.
//!   Entries equal to `UNREACHABLE` are never chosen, nor are infinite sub-problems.
//! - **Above K: clusters proved by their duals.** Defects x and y are *linked* when an
//!   optimal matching may pair them: their distance finite and below the sum of their
//!   boundary distances (or either without a boundary path); a longer pair is never better
//!   than both going to the boundary, so only linked pairs matter. Each defect first joins
//!   its nearest linked partner (the lowest index among equals; clusters are the components,
//!   rooted at their lowest defect). Then, until the proof holds: each cluster not solved at
//!   its present size is matched exactly (its linked pairs, each defect free to go to the
//!   boundary at its distance: `PerfectMatching::solve_with_boundary`), with an LP dual `y` per
//!   defect (doubled units); the sum of
//!   the clusters' matchings is optimal for the whole shot when every linked pair across
//!   clusters has `y_x + y_y <= 2 e` (blossom duals only add to a pair's
//!   reduced cost), and the pairs where that fails join their clusters. Clusters only grow,
//!   so the loop ends (at one cluster at worst). Clusters of one and two defects are solved
//!   in closed form; of three and four by enumeration of their matchings with duals from
//!   each matched pair's free split (`solve_small`; when no split satisfies every join and
//!   linked pair, the matcher decides); larger by `rocelink_qec::matching::PerfectMatching`,
//!   its edges in the order the GPU writes them: the linked pairs by (i, j). The GPU's matcher
//!   (kernels/stages/blossom.cuh) is this one run on a warp, making the same choices in the same order. A cluster without a perfect matching gets duals above
//!   any distance, so it joins every neighbour it may pair with; the shot is unmatchable
//!   when one is left at the end. Weights equal PyMatching's; observables differ only on
//!   ties.
//! - **Streaming** ([`ExactDecoder::set_stream`]): a session that sends a shot in messages
//!   settles it as it arrives. At each threshold `t` (the bit count at a message's end) with
//!   more than K defects below it, the clusters of the defects below the threshold before
//!   are extended from the last step's (the new ones join their nearest partners among all
//!   below `t`) and proved as above, the clusters with a defect of the latest message
//!   (young: its partner may be in the next one) left out, neither solved nor checked; at
//!   the last threshold nothing is left out, and the whole shot is the last step. Matching
//!   young defects at once would join clusters the whole shot never joins (a defect whose
//!   partner is still to come pairs with another's), and clusters only grow: deferring
//!   them keeps the streamed clusters near the whole shot's (d = 11, p = 0.1%, a round a
//!   message: a fifth of the matcher runs). Clusters, duals and solves carry over, so
//!   the final message re-solves only what its defects touch. The result is a function of
//!   the shot and the thresholds alone, however the messages came: the GPU settles at each
//!   message where it can and replays the steps it missed (another decoder's shot in
//!   between, a new launch), and answers byte for byte as this does. Exact either way.
//! - **Allocation**: the DP's buffers are sized for K at construction; the cluster buffers
//!   grow to the largest shot seen and are reused.
//! - **No panic on any input**: bits beyond the DEM's detectors are ignored; out-of-range or
//!   unsorted defect lists give [`DecodeStatus::Invalid`].

use std::sync::Arc;

use thiserror::Error;

use rocelink_qec::matching::{BOUNDARY, NO_BOUNDARY};

use super::graph::{DistanceTable, TableWeight};

/// K, the most defects the subset DP takes (docs/qec.md, "The table decoder"); 12 by default.
pub const DEFAULT_MAX_DEFECTS: usize = 12;

/// The DP holds 2^K entries; 20 keeps that at 16 MiB and sums of 20 16-bit entries in a u32.
pub const MAX_MAX_DEFECTS: usize = 20;

/// The edges (linked pairs) a cluster's matching may have on a table of `n` detectors: what
/// the GPU stage's per-block scratch holds (gpu/qec_state.rs sizes it so); a cluster with
/// more is not decoded (status [`DecodeStatus::Overflow`]). Generous: at circuit-level noise
/// a defect links to a few.
pub const fn matching_edge_cap(n: usize) -> usize {
    16 * n + 1024
}

/// Stream thresholds a decoder keeps (abi.h RL_QEC_MAX_STREAM, the GPU header's room).
pub const MAX_STREAM: usize = crate::abi::RL_QEC_MAX_STREAM as usize;

/// The bit counts at the end of every message of a shot but the last, for a DEM of
/// `detectors_per_round` (`Dem::detectors_per_round`) sent `rounds_per_message` rounds a
/// message: the stream thresholds of a session replaying it so (module docs, "Streaming").
pub fn stream_thresholds(detectors_per_round: &[usize], rounds_per_message: u32) -> Vec<u32> {
    let per = rounds_per_message.max(1) as usize;
    let mut out = Vec::new();
    let mut bits = 0usize;
    for (r, &d) in detectors_per_round.iter().enumerate() {
        bits += d;
        if (r + 1) % per == 0 && r + 1 < detectors_per_round.len() {
            out.push(u32::try_from(bits).unwrap_or(u32::MAX));
        }
    }
    out
}

/// `thresholds` as a decoder keeps them: strictly ascending, below `n`, at most
/// [`MAX_STREAM`].
pub fn normalize_stream(thresholds: &[u32], n: usize) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for &t in thresholds {
        if (t as usize) < n && out.last().is_none_or(|&l| t > l) && out.len() < MAX_STREAM {
            out.push(t);
        }
    }
    out
}

/// No path: a matcher weight that is never linked nor chosen.
const NO_PATH: i64 = i64::MAX;

/// The doubled dual of a defect whose cluster has no perfect matching: above twice any
/// distance, so the proof joins every pair it may use; two of them sum without overflow.
const BIG: i64 = 1 << 60;

/// Clusters up to this many defects are solved without the matcher where their duals allow
/// (`solve_small`).
const SMALL_CLUSTER: usize = 4;

/// The matchings `solve_small` tries, as partner lists (a defect's own index: the boundary),
/// of three defects and of four, in the order it takes the first of equal weight.
const SMALL_MATCHINGS: [&[[u8; SMALL_CLUSTER]]; 2] = [
    &[[0, 1, 2, 3], [1, 0, 2, 3], [2, 1, 0, 3], [0, 2, 1, 3]],
    &[
        [0, 1, 2, 3],
        [1, 0, 2, 3],
        [2, 1, 0, 3],
        [3, 1, 2, 0],
        [0, 2, 1, 3],
        [0, 3, 2, 1],
        [0, 1, 3, 2],
        [1, 0, 3, 2],
        [2, 3, 0, 1],
        [3, 2, 1, 0],
    ],
];

/// `solve_small`'s constraints on its free variables, each kind as its tightest bound
/// (module docs): `t1` in `[l1, h1]`, `t2` in `[l2, h2]`, `t1 + t2` in `[s_lo, s_hi]`,
/// `t1 - t2` in `[d_lo, d_hi]`; `ok` false once a constraint without variables fails.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    ok: bool,
    l1: i64,
    h1: i64,
    l2: i64,
    h2: i64,
    s_lo: i64,
    s_hi: i64,
    d_lo: i64,
    d_hi: i64,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { ok: true, l1: -BIG, h1: BIG, l2: -BIG, h2: BIG, s_lo: -BIG, s_hi: BIG, d_lo: -BIG, d_hi: BIG }
    }
}

impl Bounds {
    /// Adds `a t1 + b t2 <= r`. No two defects of one matched pair meet in a constraint, so
    /// `a` and `b` are in -1..=1.
    fn constrain(&mut self, a: i64, b: i64, r: i64) {
        let (lo, hi) = match (a, b) {
            (0, 0) => {
                self.ok &= r >= 0;
                return;
            }
            (_, 0) => (&mut self.l1, &mut self.h1),
            (0, _) => (&mut self.l2, &mut self.h2),
            _ if a == b => (&mut self.s_lo, &mut self.s_hi),
            _ => (&mut self.d_lo, &mut self.d_hi),
        };
        // the kind's positive side is bounded above by r, its negative side below by -r
        if a + b > 0 || (a > 0 && b < 0) {
            *hi = (*hi).min(r);
        } else {
            *lo = (*lo).max(-r);
        }
    }
}

/// A cluster's last solve above K, kept by its root: its size then (0: never solved), how
/// it went, its matching's weight and observables.
#[derive(Debug, Clone, Copy)]
struct Solved<A> {
    size: u32,
    status: DecodeStatus,
    cost: A,
    obs: u64,
}

/// How a shot was decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DecodeStatus {
    /// Exact minimum-weight matching.
    #[default]
    Ok,
    /// Not decoded: a cluster's linked pairs above [`matching_edge_cap`] (module docs).
    /// Observables 0, infinite weight.
    Overflow,
    /// No perfect matching: a defect with no path to any partner or the boundary (odd
    /// defects in a component without boundary). Observables and weight are those of the
    /// defects that could be matched (exact part) or zero.
    Unmatchable,
    /// A defect list out of range or not strictly increasing ([`ExactDecoder::decode_defects`]).
    Invalid,
}

impl DecodeStatus {
    /// The status byte of the wire decode report (`rocelink_wire::qec::REPORT_*`).
    pub const fn report_code(self) -> u8 {
        match self {
            DecodeStatus::Ok => rocelink_wire::qec::REPORT_OK,
            DecodeStatus::Overflow => rocelink_wire::qec::REPORT_OVERFLOW,
            DecodeStatus::Unmatchable | DecodeStatus::Invalid => rocelink_wire::qec::REPORT_UNMATCHABLE,
        }
    }
}

/// One decoded shot.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Decoded {
    /// Bit k set: observable k flips (the correction).
    pub observables: u64,
    /// Matching weight in ln((1-p)/p) units (table sum / table scale).
    pub weight: f64,
    /// Defects (detection events) in the shot.
    pub defects: u32,
    /// How it was decoded.
    pub status: DecodeStatus,
}

/// Counters since construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecoderCounters {
    /// Shots decoded.
    pub shots: u64,
    /// Shots not decoded (a cluster above the matcher's edge cap).
    pub overflows: u64,
    /// Shots without a perfect matching.
    pub unmatchable: u64,
    /// Invalid defect lists.
    pub invalid: u64,
    /// Solving rounds of the clusters above K (one per shot above K when the first
    /// clusters are proved at once).
    pub proof_rounds: u64,
    /// Pairs the proof joined across clusters.
    pub joins: u64,
    /// Clusters solved by the matcher (three defects or more).
    pub blossom_clusters: u64,
    /// Clusters of three or four defects solved in closed form.
    pub small_clusters: u64,
    /// Clusters of three or four defects whose duals needed the matcher after all.
    pub small_fallbacks: u64,
}

/// A bad decoder configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// K above [`MAX_MAX_DEFECTS`].
    #[error("defect cap {0} is above the largest supported, {MAX_MAX_DEFECTS}")]
    MaxDefects(usize),
    /// The table's arrays do not have `(n+1)^2` entries.
    #[error("distance table arrays have the wrong length")]
    BadTable,
    /// An invalid session setting.
    #[error("{0}")]
    Session(&'static str),
}

/// The exact matcher with its reusable buffers.
#[derive(Debug)]
pub struct ExactDecoder<W: TableWeight = u32> {
    table: Arc<DistanceTable<W>>,
    max_defects: usize,
    defects: Vec<u32>,
    // DP over subsets of at most K defects.
    pair: Vec<W>,
    pair_parity: Vec<u64>,
    to_boundary: Vec<W>,
    boundary_parity: Vec<u64>,
    dp_cost: Vec<W::Acc>,
    dp_obs: Vec<u64>,
    /// The reachable masks of three defects or more, by layer (module docs of `schedule`).
    schedule: Schedule,
    k: usize,
    /// Above K: union-find parents, then roots; the clusters' defects (indices in the
    /// shot), cluster after cluster; where each starts; per root a count, then a cursor.
    uf: Vec<u32>,
    /// The roots as the clusters were listed, while the proof joins them.
    roots: Vec<u32>,
    list: Vec<u32>,
    starts: Vec<usize>,
    cursor: Vec<usize>,
    /// The shot's defects' distances to each other (k x k) and to the boundary, as matcher
    /// weights; per defect its doubled LP dual; per root its last solve.
    near: Vec<i64>,
    bnd: Vec<i64>,
    duals: Vec<i64>,
    solved: Vec<Solved<W::Acc>>,
    /// Per root: its cluster was solved in this pass of the proof. The GPU checks only the
    /// pairs that touch such a cluster (qec.cuh rl_qec_settle); `narrow_misses` counts the
    /// joins that would skip (none, if its argument holds: the others' duals are those of
    /// the pass that last checked them).
    fresh: Vec<bool>,
    /// Per root: its cluster has a young defect this step (`settle`), so it is left alone.
    deferred: Vec<bool>,
    narrow_misses: u64,
    /// A cluster's linked pairs, its defects' boundary distances, and its matching.
    edges: Vec<(u32, u32, i64)>,
    boundary: Vec<i64>,
    mate: Vec<u32>,
    matcher: rocelink_qec::matching::PerfectMatching,
    edge_cap: usize,
    /// Ascending bit counts below n where a stream settles the shot's defects so far
    /// ([`ExactDecoder::set_stream`]); empty: whole shots.
    stream: Vec<u32>,
    counters: DecoderCounters,
}

impl<W: TableWeight> ExactDecoder<W> {
    /// A decoder over `table` with cap `max_defects` (K).
    pub fn new(table: Arc<DistanceTable<W>>, max_defects: usize) -> Result<Self, ConfigError> {
        if max_defects > MAX_MAX_DEFECTS {
            return Err(ConfigError::MaxDefects(max_defects));
        }
        let s = table.stride();
        if table.distances.len() != s * s || table.parities.len() != s * s {
            return Err(ConfigError::BadTable);
        }
        let n = table.num_detectors;
        let k = max_defects;
        Ok(ExactDecoder {
            max_defects,
            defects: Vec::with_capacity(n),
            pair: vec![W::UNREACHABLE; k * k],
            pair_parity: vec![0; k * k],
            to_boundary: vec![W::UNREACHABLE; k],
            boundary_parity: vec![0; k],
            dp_cost: vec![W::ACC_INF; 1 << k],
            dp_obs: vec![0; 1 << k],
            schedule: Schedule::new(k),
            k: 0,
            uf: Vec::new(),
            roots: Vec::new(),
            list: Vec::new(),
            starts: Vec::new(),
            cursor: Vec::new(),
            near: Vec::new(),
            bnd: Vec::new(),
            duals: Vec::new(),
            solved: Vec::new(),
            fresh: Vec::new(),
            deferred: Vec::new(),
            narrow_misses: 0,
            edges: Vec::new(),
            boundary: Vec::new(),
            mate: Vec::new(),
            matcher: rocelink_qec::matching::PerfectMatching::new(),
            edge_cap: matching_edge_cap(n),
            stream: Vec::new(),
            counters: DecoderCounters::default(),
            table,
        })
    }

    /// The table.
    pub fn table(&self) -> &DistanceTable<W> {
        &self.table
    }

    /// K.
    pub fn max_defects(&self) -> usize {
        self.max_defects
    }

    /// Counters since construction.
    pub fn counters(&self) -> DecoderCounters {
        self.counters
    }

    /// Joins of the proof between two clusters neither of which was solved in that pass:
    /// those the GPU's narrower proof would miss (its answers would then differ). Zero,
    /// by the argument in `fresh`'s docs; the tests hold it so on every shot they decode.
    pub fn narrow_misses(&self) -> u64 {
        self.narrow_misses
    }

    /// The stream thresholds (module docs, "Streaming"): ascending bit counts, those at or
    /// above the detector count and repeats dropped, at most [`MAX_STREAM`] kept (the
    /// first). [`stream_thresholds`] gives a DEM's message boundaries.
    pub fn set_stream(&mut self, thresholds: &[u32]) {
        self.stream = normalize_stream(thresholds, self.table.num_detectors);
    }

    /// The stream thresholds in use.
    pub fn stream(&self) -> &[u32] {
        &self.stream
    }

    /// Decodes one shot of detection events, bit-packed LSB first (stim b8: bit i is bit
    /// `i % 8` of byte `i / 8`). Bits at or beyond the DEM's detector count are ignored; a
    /// short buffer reads as zeros.
    pub fn decode_b8(&mut self, shot: &[u8]) -> Decoded {
        let n = self.table.num_detectors;
        let mut defects = std::mem::take(&mut self.defects);
        defects.clear();
        for (byte_index, &byte) in shot.iter().enumerate().take(n.div_ceil(8)) {
            let mut b = byte;
            while b != 0 {
                let i = byte_index * 8 + b.trailing_zeros() as usize;
                b &= b - 1;
                if i < n {
                    defects.push(i as u32);
                }
            }
        }
        let d = self.decode_sorted(&defects);
        self.defects = defects;
        d
    }

    /// Decodes a shot given as its defects: detector indices, strictly increasing, below the
    /// detector count (else [`DecodeStatus::Invalid`]).
    pub fn decode_defects(&mut self, defects: &[u32]) -> Decoded {
        let n = self.table.num_detectors;
        let valid = defects.windows(2).all(|w| w[0] < w[1]) && defects.last().is_none_or(|&d| (d as usize) < n);
        if !valid {
            self.counters.shots += 1;
            self.counters.invalid += 1;
            return Decoded {
                defects: defects.len().min(u32::MAX as usize) as u32,
                status: DecodeStatus::Invalid,
                ..Decoded::default()
            };
        }
        self.decode_sorted(defects)
    }

    fn decode_sorted(&mut self, defects: &[u32]) -> Decoded {
        self.counters.shots += 1;
        let k = defects.len();
        let (cost, observables, status) =
            if k <= self.max_defects { self.exact(defects) } else { self.clusters(defects) };
        match status {
            DecodeStatus::Unmatchable => self.counters.unmatchable += 1,
            DecodeStatus::Overflow => self.counters.overflows += 1,
            _ => {}
        }
        let weight = if cost == W::ACC_INF { f64::INFINITY } else { W::acc_to_f64(cost) / self.table.scale };
        Decoded { observables, weight, defects: k as u32, status }
    }

    /// The subset DP (module docs). `defects.len() <= K`.
    ///
    /// Bottom-up over the sub-masks reachable from the full set only (those with no more
    /// removed defects above their lowest than below it: 349 masks of three defects or more
    /// of the 4096 at 12), in layers by lowest defect, highest first: every sub-mask an option
    /// reads has a higher lowest defect, so it is done. The masks of one or two defects come
    /// straight from the sub-table. The values are the all-masks DP's, tie-breaking included,
    /// since dp[mask] is a function of its sub-masks alone; the GPU stage runs the same
    /// schedule. Speed: the same as the memoised recursion it replaced, within the run-to-run
    /// spread of `examples/decode_times.rs` (8 defects of the d=5 fixture: 1.3-1.8 us at p50
    /// either way on the Rust machine); the time goes to ~30 instructions per option (index
    /// checks, loads, selects), not to the order of evaluation.
    fn exact(&mut self, defects: &[u32]) -> (W::Acc, u64, DecodeStatus) {
        self.gather(defects);
        let k = defects.len();
        self.dp_cost[0] = W::ACC_ZERO;
        self.dp_obs[0] = 0;
        for x in 0..k {
            let tb = self.to_boundary[x];
            let single = if tb == W::UNREACHABLE { (W::ACC_INF, 0) } else { (tb.to_acc(), self.boundary_parity[x]) };
            self.dp_cost[1 << x] = single.0;
            self.dp_obs[1 << x] = single.1;
            for y in x + 1..k {
                // boundary option first (both to the boundary), then the pair if strictly cheaper
                let (mut best, mut obs) = (W::ACC_INF, 0u64);
                let ty = self.to_boundary[y];
                if tb != W::UNREACHABLE && ty != W::UNREACHABLE {
                    best = tb.to_acc() + ty.to_acc();
                    obs = self.boundary_parity[x] ^ self.boundary_parity[y];
                }
                let e = self.pair[x * k + y];
                if e != W::UNREACHABLE && e.to_acc() < best {
                    best = e.to_acc();
                    obs = self.pair_parity[x * k + y];
                }
                self.dp_cost[(1 << x) | (1 << y)] = best;
                self.dp_obs[(1 << x) | (1 << y)] = obs;
            }
        }
        // k's masks are stored in solving order (layer after layer)
        for i in self.schedule.starts[k]..self.schedule.starts[k + 1] {
            let mask = self.schedule.masks[i] as usize;
            self.solve(mask);
        }
        let full = (1usize << k) - 1;
        let cost = self.dp_cost[full];
        if cost == W::ACC_INF {
            (W::ACC_INF, 0, DecodeStatus::Unmatchable)
        } else {
            (cost, self.dp_obs[full], DecodeStatus::Ok)
        }
    }

    /// Copies the k x k sub-table of the shot's defects into dense local arrays.
    fn gather(&mut self, defects: &[u32]) {
        let k = defects.len();
        self.k = k;
        let t = &*self.table;
        let b = t.boundary();
        for (x, &dx) in defects.iter().enumerate() {
            self.to_boundary[x] = t.distance(dx as usize, b);
            self.boundary_parity[x] = t.parity(dx as usize, b);
            for (y, &dy) in defects.iter().enumerate().skip(x + 1) {
                self.pair[x * k + y] = t.distance(dx as usize, dy as usize);
                self.pair_parity[x * k + y] = t.parity(dx as usize, dy as usize);
            }
        }
    }

    /// dp[mask] (module docs) from its sub-masks, all solved: the boundary option, then the
    /// partners by increasing index, replacing the best only when strictly smaller. Written
    /// without a branch per option (TableWeight::option_cost, selects): an infinite option
    /// is never strictly smaller, and an infinite result gets observables 0, as before.
    fn solve(&mut self, mask: usize) {
        let k = self.k;
        let a = mask.trailing_zeros() as usize;
        let rest = mask & !(1 << a);
        let mut best = self.to_boundary[a].option_cost(self.dp_cost[rest]);
        let mut obs = self.dp_obs[rest] ^ self.boundary_parity[a];
        // Every j above a, the partners not in the mask made infinite: the trip count is the
        // same for a whole layer, and no branch depends on the data.
        let row = a * k;
        for j in a + 1..k {
            let sub = rest ^ (1 << j);
            let c = self.pair[row + j].option_cost(self.dp_cost[sub]);
            let c = if rest & (1 << j) != 0 { c } else { W::ACC_INF };
            let o = self.dp_obs[sub] ^ self.pair_parity[row + j];
            let take = c < best;
            best = if take { c } else { best };
            obs = if take { o } else { obs };
        }
        self.dp_cost[mask] = best;
        self.dp_obs[mask] = if best == W::ACC_INF { 0 } else { obs };
    }

    /// The same DP bottom-up over every mask (numeric order; the GPU kernel goes by layer of
    /// lowest defect over the reachable masks only): the reference the top-down version is
    /// tested against.
    #[cfg(test)]
    fn exact_bottom_up(&mut self, defects: &[u32]) -> (W::Acc, u64) {
        self.gather(defects);
        let k = defects.len();
        let full = (1usize << k) - 1;
        let mut cost = vec![W::ACC_INF; full + 1];
        let mut obsv = vec![0u64; full + 1];
        cost[0] = W::ACC_ZERO;
        for mask in 1..=full {
            let a = mask.trailing_zeros() as usize;
            let rest = mask & !(1 << a);
            let tb = self.to_boundary[a];
            if tb != W::UNREACHABLE && cost[rest] != W::ACC_INF {
                cost[mask] = cost[rest] + tb.to_acc();
                obsv[mask] = obsv[rest] ^ self.boundary_parity[a];
            }
            let mut m = rest;
            while m != 0 {
                let j = m.trailing_zeros() as usize;
                m &= m - 1;
                let e = self.pair[a * k + j];
                let sub = rest & !(1 << j);
                if e == W::UNREACHABLE || cost[sub] == W::ACC_INF {
                    continue;
                }
                let c = cost[sub] + e.to_acc();
                if c < cost[mask] {
                    cost[mask] = c;
                    obsv[mask] = obsv[sub] ^ self.pair_parity[a * k + j];
                }
            }
        }
        (cost[full], obsv[full])
    }

    /// Whether an optimal matching may pair two defects at distance `e` whose boundary
    /// distances are `bx` and `by` (module docs): `e` finite and below `bx + by`, or either
    /// without a boundary path. A pair at least `bx + by` long is never better than both
    /// defects going to the boundary, so the matchings that leave such pairs out include an
    /// optimal one.
    fn linked(e: i64, bx: i64, by: i64) -> bool {
        e != NO_PATH && (bx == NO_PATH || by == NO_PATH || e < bx + by)
    }

    fn find(uf: &[u32], mut x: u32) -> u32 {
        while uf[x as usize] != x {
            x = uf[x as usize];
        }
        x
    }

    /// Joins the clusters of `x` and `y`, the higher root under the lower: a cluster's root
    /// is its lowest defect whatever order the joins come in.
    fn union(uf: &mut [u32], x: u32, y: u32) {
        let (rx, ry) = (Self::find(uf, x), Self::find(uf, y));
        if rx != ry {
            uf[rx.max(ry) as usize] = rx.min(ry);
        }
    }

    /// An entry as a matcher weight, [`NO_PATH`] when unreachable; None for a float table.
    fn weight(e: W) -> Option<i64> {
        if e == W::UNREACHABLE {
            Some(NO_PATH)
        } else {
            e.matching_weight()
        }
    }

    /// Above K (module docs, "Above K"): clusters joined until their LP duals prove the sum
    /// of their exact matchings optimal for the whole shot. A cluster without a perfect
    /// matching joins its neighbours (its duals are [`BIG`]) and makes the shot
    /// [`DecodeStatus::Unmatchable`] if none is left to join; any over the edge cap makes it
    /// [`DecodeStatus::Overflow`] at once (infinite weight, no observables either way).
    fn clusters(&mut self, defects: &[u32]) -> (W::Acc, u64, DecodeStatus) {
        let k = defects.len();
        let t = Arc::clone(&self.table);
        let b = t.boundary();
        // Distances among the shot's defects and to the boundary, as matcher weights (the
        // table's entry of the lower defect's row).
        self.bnd.clear();
        self.near.clear();
        self.near.resize(k * k, NO_PATH);
        for x in 0..k {
            let Some(bx) = Self::weight(t.distance(defects[x] as usize, b)) else {
                return (W::ACC_INF, 0, DecodeStatus::Overflow);
            };
            self.bnd.push(bx);
            for y in x + 1..k {
                let Some(e) = Self::weight(t.distance(defects[x] as usize, defects[y] as usize)) else {
                    return (W::ACC_INF, 0, DecodeStatus::Overflow);
                };
                self.near[x * k + y] = e;
                self.near[y * k + x] = e;
            }
        }
        let (near, bnd) = (std::mem::take(&mut self.near), std::mem::take(&mut self.bnd));
        let out = self.proved_clusters(defects, &near, &bnd);
        self.near = near;
        self.bnd = bnd;
        out
    }

    /// The shot's clusters, settled at every stream threshold the shot passes with more
    /// than K defects below it (module docs, "Streaming"), then for the whole shot; the sum
    /// of their matchings.
    fn proved_clusters(&mut self, defects: &[u32], near: &[i64], bnd: &[i64]) -> (W::Acc, u64, DecodeStatus) {
        self.uf.clear();
        self.solved.clear();
        self.duals.clear();
        let mut m = 0;
        let stream = std::mem::take(&mut self.stream);
        let mut settled = true;
        for (i, &t) in stream.iter().enumerate() {
            let mt = defects.partition_point(|&d| d < t);
            if mt <= self.max_defects {
                continue;
            }
            // The latest message's defects wait a step (the last threshold's step settles
            // them all, for a final message that adds none).
            let mj = match i {
                _ if i + 1 == stream.len() => mt,
                0 => 0,
                _ => defects.partition_point(|&d| d < stream[i - 1]),
            };
            if mj > m {
                settled = self.settle(defects, near, bnd, m, mj, mt);
                if !settled {
                    break;
                }
                m = mj;
            }
        }
        self.stream = stream;
        if !settled || !self.settle(defects, near, bnd, m, defects.len(), defects.len()) {
            return (W::ACC_INF, 0, DecodeStatus::Overflow);
        }
        let (mut total, mut obs) = (W::ACC_ZERO, 0u64);
        for c in 0..self.starts.len() - 1 {
            let s = self.solved[self.list[self.starts[c]] as usize];
            if s.status != DecodeStatus::Ok {
                return (W::ACC_INF, 0, s.status);
            }
            total = total + s.cost;
            obs ^= s.obs;
        }
        (total, obs, DecodeStatus::Ok)
    }

    /// Extends the clusters of the first `m` defects (settled) to the first `mj`, among the
    /// first `mt` present (`mj <= mt`; the defects from `mj` on are *young*: the latest
    /// message's): each new defect below `mj` joins its nearest linked partner among all
    /// `mt` (the lowest index among equals); then, until the proof holds, the clusters not
    /// solved at their present size are solved and the pairs across clusters whose reduced
    /// cost is negative join them. A cluster with a young defect is *deferred*: neither
    /// solved nor checked, since its defects' partners may still be to come, and matching
    /// them now only joins clusters the whole shot never would (module docs, "Streaming").
    /// Clusters only grow, so a solve is kept while its root's cluster keeps its size.
    /// `near` is the whole shot's (stride `defects.len()`). False: a cluster over the edge
    /// cap (the shot is not decoded).
    fn settle(&mut self, defects: &[u32], near: &[i64], bnd: &[i64], m: usize, mj: usize, mt: usize) -> bool {
        let k = defects.len();
        let linked = |x: usize, y: usize| Self::linked(near[x * k + y], bnd[x], bnd[y]);
        let loaded = self.uf.len() as u32;
        self.uf.extend(loaded..mt as u32);
        self.solved.resize(mt, Solved { size: 0, status: DecodeStatus::Ok, cost: W::ACC_ZERO, obs: 0 });
        self.duals.resize(mt, 0);
        for x in m..mj {
            let mut best = (NO_PATH, usize::MAX);
            for y in 0..mt {
                if y != x && linked(x, y) && near[x * k + y] < best.0 {
                    best = (near[x * k + y], y);
                }
            }
            if best.1 != usize::MAX {
                Self::union(&mut self.uf, x as u32, best.1 as u32);
            }
        }
        loop {
            self.counters.proof_rounds += 1;
            self.list_clusters(mt);
            self.fresh.clear();
            self.fresh.resize(mt, false);
            self.deferred.clear();
            self.deferred.resize(mt, false);
            for c in 0..self.starts.len() - 1 {
                let (start, end) = (self.starts[c], self.starts[c + 1]);
                let root = self.list[start] as usize;
                // members increase: the last is the cluster's youngest
                if self.list[end - 1] as usize >= mj {
                    self.deferred[root] = true;
                    continue;
                }
                if self.solved[root].size as usize == end - start {
                    continue;
                }
                self.fresh[root] = true;
                let members = std::mem::take(&mut self.list);
                let s = self.solve_cluster(defects, &members[start..end], near, bnd);
                self.list = members;
                if s.status == DecodeStatus::Overflow {
                    return false;
                }
                self.solved[root] = s;
            }
            // The proof: every pair across clusters that an optimal matching may use has a
            // non-negative reduced cost, or joins its two clusters.
            let mut joined = 0;
            self.roots.clear();
            self.roots.extend_from_slice(&self.uf);
            for x in 0..mt {
                for y in x + 1..mt {
                    let (rx, ry) = (self.roots[x] as usize, self.roots[y] as usize);
                    if rx == ry || self.deferred[rx] || self.deferred[ry] || !linked(x, y) {
                        continue;
                    }
                    let (yx, yy, e2) = (self.duals[x], self.duals[y], 2 * near[x * k + y]);
                    if yx + yy > e2 {
                        if !self.fresh[self.roots[x] as usize] && !self.fresh[self.roots[y] as usize] {
                            self.narrow_misses += 1;
                        }
                        Self::union(&mut self.uf, x as u32, y as u32);
                        joined += 1;
                    }
                }
            }
            if joined == 0 {
                return true;
            }
            self.counters.joins += joined;
        }
    }

    /// A cluster of three or four defects without the matcher (module docs): its cheapest
    /// matching by enumeration ([`SMALL_MATCHINGS`], the first of equal weight), then duals
    /// for it, each matched pair's split a free variable `t` (the doubled dual of its lower
    /// defect; the other gets `2 e - t`), each defect to the boundary at `2 c`. Duals that
    /// respect every join and linked pair of the cluster and are tight on the matching prove
    /// it optimal (complementary slackness); with at most two pairs the constraints read
    /// `a t1 + b t2 <= r`, `a, b` in -1..=1, and Fourier-Motzkin on `t2` gives `t1`'s range.
    /// Each variable goes to the point of its range nearest the even split `e`. None when
    /// the ranges are empty (the matcher decides then).
    fn solve_small(&mut self, defects: &[u32], cluster: &[u32], near: &[i64], bnd: &[i64]) -> Option<Solved<W::Acc>> {
        let k = defects.len();
        let t = Arc::clone(&self.table);
        let b = t.boundary();
        let c = cluster.len();
        let d = |i: usize, j: usize| near[cluster[i] as usize * k + cluster[j] as usize];
        let cb = |i: usize| bnd[cluster[i] as usize];
        let linked = |i: usize, j: usize| Self::linked(d(i, j), cb(i), cb(j));
        // The cheapest matching: partners (`i` itself: the boundary).
        let mut best: Option<(i64, [usize; SMALL_CLUSTER])> = None;
        for m in SMALL_MATCHINGS[c - 3] {
            let mut cost = 0i64;
            let mut ok = true;
            for (i, &j) in m.iter().enumerate().take(c) {
                let j = j as usize;
                if j == i {
                    ok &= cb(i) != NO_PATH;
                    cost = cost.saturating_add(cb(i));
                } else if i < j {
                    ok &= linked(i, j);
                    cost = cost.saturating_add(d(i, j));
                }
            }
            if ok && best.is_none_or(|(w, _)| cost < w) {
                best = Some((cost, m.map(|x| x as usize)));
            }
        }
        let (_, m) = best?;
        // Y_i = base[i] + coef[i] . (t1, t2): the pairs in order of their lower defect.
        let (mut base, mut coef, mut split) = ([0i64; SMALL_CLUSTER], [(0i64, 0i64); SMALL_CLUSTER], [0i64; 2]);
        let mut pairs = 0;
        for i in 0..c {
            let j = m[i];
            if j == i {
                base[i] = 2 * cb(i);
            } else if i < j {
                let e = d(i, j);
                coef[i] = if pairs == 0 { (1, 0) } else { (0, 1) };
                coef[j] = if pairs == 0 { (-1, 0) } else { (0, -1) };
                base[j] = 2 * e;
                split[pairs] = e;
                pairs += 1;
            }
        }
        // The constraints a t1 + b t2 <= r (a, b in -1..=1), each kind kept as its tightest
        // bound: t1 in [l1, h1], t2 in [l2, h2], t1 + t2 in [s_lo, s_hi], t1 - t2 in [d_lo,
        // d_hi]; the joins, then the linked pairs not matched.
        let mut bounds = Bounds::default();
        for i in 0..c {
            if m[i] != i && cb(i) != NO_PATH {
                bounds.constrain(coef[i].0, coef[i].1, 2 * cb(i) - base[i]);
            }
        }
        for i in 0..c {
            for j in i + 1..c {
                if m[i] != j && linked(i, j) {
                    bounds.constrain(coef[i].0 + coef[j].0, coef[i].1 + coef[j].1, 2 * d(i, j) - base[i] - base[j]);
                }
            }
        }
        let Bounds { ok, l1, h1, l2, h2, s_lo, s_hi, d_lo, d_hi } = bounds;
        // t1's range with t2 eliminated (Fourier-Motzkin: each lower bound of t2 below each
        // upper one), then t2's given t1.
        let lo1 = l1.max(s_lo - h2).max(d_lo + l2).max((s_lo + d_lo).div_euclid(2) + (s_lo + d_lo).rem_euclid(2));
        let hi1 = h1.min(s_hi - l2).min(d_hi + h2).min((s_hi + d_hi).div_euclid(2));
        if !ok || l2 > h2 || s_lo > s_hi || d_lo > d_hi || lo1 > hi1 {
            return None;
        }
        let t1 = if pairs > 0 { split[0].clamp(lo1, hi1) } else { 0 };
        let (lo2, hi2) = (l2.max(s_lo - t1).max(t1 - d_hi), h2.min(s_hi - t1).min(t1 - d_lo));
        if lo2 > hi2 {
            return None;
        }
        let t2 = if pairs > 1 { split[1].clamp(lo2, hi2) } else { 0 };
        let (mut cost, mut obs) = (W::ACC_ZERO, 0u64);
        for i in 0..c {
            let x = cluster[i] as usize;
            let y = base[i] + coef[i].0 * t1 + coef[i].1 * t2;
            self.duals[x] = y;
            let dx = defects[x] as usize;
            let j = m[i];
            if j == i {
                cost = cost + t.distance(dx, b).to_acc();
                obs ^= t.parity(dx, b);
            } else if i < j {
                let dy = defects[cluster[j] as usize] as usize;
                cost = cost + t.distance(dx, dy).to_acc();
                obs ^= t.parity(dx, dy);
            }
        }
        Some(Solved { size: c as u32, status: DecodeStatus::Ok, cost, obs })
    }

    /// Roots in `uf`, then the clusters by root (their lowest defect), members increasing:
    /// `list[starts[c]..starts[c + 1]]`.
    fn list_clusters(&mut self, k: usize) {
        for x in 0..k {
            self.uf[x] = Self::find(&self.uf, x as u32);
        }
        self.cursor.clear();
        self.cursor.resize(k, 0);
        for x in 0..k {
            self.cursor[self.uf[x] as usize] += 1;
        }
        self.starts.clear();
        let mut pos = 0;
        for r in 0..k {
            let m = self.cursor[r];
            if m > 0 {
                self.starts.push(pos);
                self.cursor[r] = pos;
                pos += m;
            }
        }
        self.starts.push(pos);
        self.list.clear();
        self.list.resize(k, 0);
        for x in 0..k {
            let r = self.uf[x] as usize;
            self.list[self.cursor[r]] = x as u32;
            self.cursor[r] += 1;
        }
    }

    /// One cluster (defect indices, increasing), exactly, with its duals (module docs): one
    /// defect to the boundary and two to each other in closed form, more by the matcher on
    /// the cluster's linked pairs, each defect with its boundary edge.
    fn solve_cluster(&mut self, defects: &[u32], cluster: &[u32], near: &[i64], bnd: &[i64]) -> Solved<W::Acc> {
        let k = defects.len();
        let t = Arc::clone(&self.table);
        let b = t.boundary();
        let c = cluster.len();
        let failed = |status| Solved { size: c as u32, status, cost: W::ACC_ZERO, obs: 0 };
        let unmatchable = |duals: &mut Vec<i64>| {
            for &x in cluster {
                duals[x as usize] = BIG;
            }
            failed(DecodeStatus::Unmatchable)
        };
        let entry = |i: usize, j: usize| t.distance(i, j).to_acc();
        if c == 1 {
            let x = cluster[0] as usize;
            if bnd[x] == NO_PATH {
                return unmatchable(&mut self.duals);
            }
            self.duals[x] = 2 * bnd[x];
            let obs = t.parity(defects[x] as usize, b);
            return Solved { size: 1, status: DecodeStatus::Ok, cost: entry(defects[x] as usize, b), obs };
        }
        if c == 2 {
            // Linked, so the pair beats both to the boundary. Duals: y_x + y_y = e,
            // y_x <= c_x, y_y <= c_y (the boundary edges), as even as those allow.
            let (x, y) = (cluster[0] as usize, cluster[1] as usize);
            let e = near[x * k + y];
            let lo = if bnd[y] == NO_PATH { -BIG } else { 2 * e - 2 * bnd[y] };
            let hi = if bnd[x] == NO_PATH { BIG } else { 2 * bnd[x] };
            let yx = e.clamp(lo, hi);
            self.duals[x] = yx;
            self.duals[y] = 2 * e - yx;
            let obs = t.parity(defects[x] as usize, defects[y] as usize);
            let cost = entry(defects[x] as usize, defects[y] as usize);
            return Solved { size: 2, status: DecodeStatus::Ok, cost, obs };
        }
        if c <= SMALL_CLUSTER {
            if let Some(s) = self.solve_small(defects, cluster, near, bnd) {
                self.counters.small_clusters += 1;
                return s;
            }
            self.counters.small_fallbacks += 1;
        }
        // The cluster's linked pairs by (i, j) (the order the GPU writes them in), each
        // defect's boundary distance beside them.
        self.edges.clear();
        self.boundary.clear();
        for (i, &x) in cluster.iter().enumerate() {
            let x = x as usize;
            self.boundary.push(if bnd[x] == NO_PATH { NO_BOUNDARY } else { bnd[x] });
            for (j, &y) in cluster.iter().enumerate().skip(i + 1) {
                let y = y as usize;
                if Self::linked(near[x * k + y], bnd[x], bnd[y]) {
                    self.edges.push((i as u32, j as u32, near[x * k + y]));
                }
            }
        }
        if self.edges.len() > self.edge_cap {
            return failed(DecodeStatus::Overflow);
        }
        self.counters.blossom_clusters += 1;
        if self.matcher.solve_with_boundary(c, &self.edges, &self.boundary, &mut self.mate).is_none() {
            return unmatchable(&mut self.duals);
        }
        let (mut cost, mut obs) = (W::ACC_ZERO, 0u64);
        for (i, &x) in cluster.iter().enumerate() {
            self.duals[x as usize] = self.matcher.vertex_dual_doubled(i);
            let u = self.mate[i];
            let dx = defects[x as usize] as usize;
            if u == BOUNDARY {
                cost = cost + entry(dx, b);
                obs ^= t.parity(dx, b);
            } else if (i as u32) < u {
                let y = cluster[u as usize] as usize;
                cost = cost + entry(dx, defects[y] as usize);
                obs ^= t.parity(dx, defects[y] as usize);
            }
        }
        Solved { size: c as u32, status: DecodeStatus::Ok, cost, obs }
    }
}

/// The DP's schedule for every defect count up to K: for k defects, the masks of three
/// defects or more reachable from the full set (with at most `a` defects above their lowest,
/// `a`, removed: each went as the partner of one below it), layer by layer from the highest
/// lowest defect down, increasing within a layer. kernels/stages/qec.cuh builds the same
/// lists at compile time (839 masks for k up to 12; 45,850 up to 20).
#[derive(Debug, Clone)]
struct Schedule {
    masks: Vec<u32>,
    /// k's masks are `masks[starts[k]..starts[k + 1]]`.
    starts: Vec<usize>,
}

impl Schedule {
    fn new(max_k: usize) -> Schedule {
        let (mut masks, mut starts) = (Vec::new(), Vec::with_capacity(max_k + 2));
        for k in 0..=max_k {
            starts.push(masks.len());
            for a in (0..k).rev() {
                let up = k - 1 - a; // defects above a
                for u in 0u32..(1 << up) {
                    let removed = up - u.count_ones() as usize;
                    if removed > a || u.count_ones() < 2 {
                        continue;
                    }
                    masks.push((1 << a) | (u << (a + 1)));
                }
            }
        }
        starts.push(masks.len());
        Schedule { masks, starts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qec::graph::MatchingGraph;

    fn decoder<W: TableWeight>(table: DistanceTable<W>, k: usize) -> ExactDecoder<W> {
        ExactDecoder::new(Arc::new(table), k).unwrap()
    }

    /// A repetition code: boundary - D0 - D1 - ... - D{n-1} - boundary, each edge p = 0.1,
    /// the left boundary edge flips L0.
    fn repetition(n: usize) -> MatchingGraph {
        let mut s = String::from("error(0.1) D0 L0\n");
        for i in 0..n - 1 {
            s += &format!("error(0.1) D{} D{}\n", i, i + 1);
        }
        s += &format!("error(0.1) D{}\n", n - 1);
        MatchingGraph::from_dem_text(&s).unwrap()
    }

    /// Brute force over all matchings, for checking the DP.
    fn brute(t: &DistanceTable<f64>, defects: &[usize]) -> f64 {
        if defects.is_empty() {
            return 0.0;
        }
        let a = defects[0];
        let rest = &defects[1..];
        let mut best = t.weight(a, t.boundary()) + brute(t, rest);
        for j in 0..rest.len() {
            let mut r: Vec<usize> = rest.to_vec();
            let bj = r.remove(j);
            best = best.min(t.weight(a, bj) + brute(t, &r));
        }
        best
    }

    #[test]
    fn repetition_code_matches_by_hand() {
        let g = repetition(5);
        let mut d = decoder(g.fine_table().unwrap(), 12);
        let w = (0.9f64 / 0.1).ln();
        // No defects.
        let r = d.decode_b8(&[0]);
        assert_eq!((r.observables, r.weight, r.defects, r.status), (0, 0.0, 0, DecodeStatus::Ok));
        // D0 alone: to the left boundary (flips L0).
        let r = d.decode_b8(&[0b00001]);
        assert_eq!((r.observables, r.defects), (1, 1));
        assert!((r.weight - w).abs() < 1e-5);
        // D4 alone: right boundary, no flip.
        assert_eq!(d.decode_b8(&[0b10000]).observables, 0);
        // D0 and D1: pair them (w) rather than both to boundaries (w + 2w).
        let r = d.decode_b8(&[0b00011]);
        assert_eq!(r.observables, 0);
        assert!((r.weight - w).abs() < 1e-5);
        // D1 and D3: pair (2w) vs D1 left (2w, L0) + D3 right (2w): pair.
        let r = d.decode_b8(&[0b01010]);
        assert_eq!(r.observables, 0);
        assert!((r.weight - 2.0 * w).abs() < 1e-5);
        // D0 and D4: pair is 4w, boundaries 2w (flip L0).
        let r = d.decode_b8(&[0b10001]);
        assert_eq!(r.observables, 1);
        assert!((r.weight - 2.0 * w).abs() < 1e-5);
        // Bits beyond the 5 detectors are ignored.
        assert_eq!(d.decode_b8(&[0b1110_0000, 0xFF]).defects, 0);
        assert_eq!(d.counters().shots, 7);
    }

    #[test]
    fn dp_equals_brute_force_on_a_grid() {
        // A 4x4 grid with boundaries on the left and right, varied probabilities.
        let mut s = String::new();
        let id = |r: usize, c: usize| r * 4 + c;
        for r in 0..4 {
            s += &format!("error(0.0{}) D{} L0\n", r + 1, id(r, 0));
            s += &format!("error(0.0{}) D{}\n", 4 - r, id(r, 3));
            for c in 0..4 {
                if c + 1 < 4 {
                    s += &format!("error(0.0{}) D{} D{}\n", (r + c) % 5 + 1, id(r, c), id(r, c + 1));
                }
                if r + 1 < 4 {
                    s += &format!("error(0.0{}) D{} D{}\n", (2 * r + c) % 5 + 1, id(r, c), id(r + 1, c));
                }
            }
        }
        let g = MatchingGraph::from_dem_text(&s).unwrap();
        let ft = g.float_table().unwrap();
        let mut d = decoder(ft.clone(), 10);
        let mut state = 12345u64;
        for _ in 0..300 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let bits = (state >> 20) as u16;
            let defects: Vec<usize> = (0..16).filter(|i| bits >> i & 1 == 1).collect();
            if defects.len() > 10 {
                continue;
            }
            let r = d.decode_b8(&bits.to_le_bytes());
            assert_eq!(r.status, DecodeStatus::Ok);
            let b = brute(&ft, &defects);
            assert!((r.weight - b).abs() < 1e-9, "{defects:?}: dp {} brute {}", r.weight, b);
        }
    }

    #[test]
    fn top_down_equals_bottom_up_on_random_shots() {
        // A 6x6 grid, boundaries left (L0) and right, probabilities from a few values so
        // that ties occur; the memoised DP must pick exactly what the full DP picks.
        let mut s = String::new();
        let id = |r: usize, c: usize| r * 6 + c;
        let ps = ["0.01", "0.02", "0.01", "0.05", "0.02"];
        for r in 0..6 {
            s += &format!("error({}) D{} L0\n", ps[r % 5], id(r, 0));
            s += &format!("error({}) D{}\n", ps[(r + 1) % 5], id(r, 5));
            for c in 0..6 {
                if c + 1 < 6 {
                    s += &format!("error({}) D{} D{}\n", ps[(r + c) % 5], id(r, c), id(r, c + 1));
                }
                if r + 1 < 6 {
                    s += &format!("error({}) D{} D{}\n", ps[(2 * r + c) % 5], id(r, c), id(r + 1, c));
                }
            }
        }
        let g = MatchingGraph::from_dem_text(&s).unwrap();
        let mut d = decoder(g.compact_table().unwrap(), 12);
        let mut state = 7u64;
        for _ in 0..2000 {
            let mut defects = Vec::new();
            for i in 0..36u32 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if (state >> 40).is_multiple_of(5) {
                    defects.push(i);
                }
            }
            defects.truncate(12);
            let r = d.decode_defects(&defects);
            let (cost, obs) = d.exact_bottom_up(&defects);
            assert_eq!(r.observables, obs, "{defects:?}");
            assert_eq!(r.weight, cost as f64 / d.table().scale, "{defects:?}");
        }
    }

    #[test]
    fn the_schedule_lists_the_reachable_masks_layer_by_layer() {
        let s = Schedule::new(MAX_MAX_DEFECTS);
        let count = |k: usize| s.starts[k + 1] - s.starts[k];
        // the sizes kernels/stages/qec.cuh asserts for its copy
        assert_eq!((count(8), count(12), s.starts[13]), (40, 349, 839));
        assert_eq!((count(20), s.starts[21]), (17645, 45850));
        for k in 0..=MAX_MAX_DEFECTS {
            let list = &s.masks[s.starts[k]..s.starts[k + 1]];
            let mut last_low = u32::MAX;
            for &m in list {
                let low = m.trailing_zeros();
                // three defects or more, all of them below k, lowest defects never increasing
                assert!(m.count_ones() >= 3 && (m >> k) == 0 && low <= last_low, "k {k} mask {m:b}");
                last_low = low;
                // reachable: removed defects above the lowest at most the lowest's index
                let removed_above = (k as u32 - 1 - low) - (m.count_ones() - 1);
                assert!(removed_above <= low, "k {k} mask {m:b}");
            }
        }
    }

    #[test]
    fn above_k_the_clusters_are_exact() {
        let g = repetition(8);
        let mut d = decoder(g.fine_table().unwrap(), 2);
        // D0, D1, D2: one cluster above K = 2, matched with its boundary: D0 to the
        // boundary (w, L0) + D1-D2 (w) = 2w, L0, as the DP finds it.
        let r = d.decode_b8(&[0b111]);
        let mut e = decoder(g.fine_table().unwrap(), 12);
        let x = e.decode_b8(&[0b111]);
        assert_eq!((r.status, x.status), (DecodeStatus::Ok, DecodeStatus::Ok));
        assert_eq!(r.defects, 3);
        assert_eq!(d.counters().overflows, 0);
        assert_eq!((r.observables, x.observables), (1, 1));
        assert!((r.weight - x.weight).abs() < 1e-9);
    }

    /// An r x c grid of detectors, each with its own boundary edge (p = 0.02; the left
    /// column's flip L0), the grid edges p = 0.05..0.09: boundary paths stay short, so
    /// defects more than a few edges apart are never worth pairing.
    fn grid(rows: usize, cols: usize) -> MatchingGraph {
        let mut s = String::new();
        let id = |r: usize, c: usize| r * cols + c;
        for r in 0..rows {
            for c in 0..cols {
                s += &format!("error(0.02) D{}{}\n", id(r, c), if c == 0 { " L0" } else { "" });
                if c + 1 < cols {
                    s += &format!("error(0.0{}) D{} D{}\n", (r + c) % 5 + 5, id(r, c), id(r, c + 1));
                }
                if r + 1 < rows {
                    s += &format!("error(0.0{}) D{} D{}\n", (2 * r + c) % 5 + 5, id(r, c), id(r + 1, c));
                }
            }
        }
        MatchingGraph::from_dem_text(&s).unwrap()
    }

    /// Detectors 0..n each a defect with probability pct %, from an LCG.
    fn random_defects(state: &mut u64, n: u32, pct: u64) -> Vec<u32> {
        (0..n)
            .filter(|_| {
                *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (*state >> 33) % 100 < pct
            })
            .collect()
    }

    #[test]
    fn clusters_under_and_above_k_give_the_exact_weight() {
        // 13-20 defects on an 8 x 12 grid: K = 6 (clusters by the DP or the matcher) and
        // K = 0 (every cluster by the matcher) against K = 20 (the DP of the whole shot).
        let g = grid(8, 12);
        let t = g.fine_table().unwrap();
        let mut six = decoder(t.clone(), 6);
        let mut zero = decoder(t.clone(), 0);
        let mut exact = decoder(t, 20);
        let mut state = 777u64;
        let mut tried = 0;
        for _ in 0..400 {
            let defects = random_defects(&mut state, 96, 17);
            if !(13..=20).contains(&defects.len()) {
                continue;
            }
            tried += 1;
            let want = exact.decode_defects(&defects);
            assert_eq!(want.status, DecodeStatus::Ok);
            for d in [&mut six, &mut zero] {
                let got = d.decode_defects(&defects);
                assert_eq!(got.status, DecodeStatus::Ok);
                assert!((want.weight - got.weight).abs() < 1e-9, "{defects:?}: {} against {}", got.weight, want.weight);
            }
        }
        assert!(tried > 30, "{tried}");
        assert_eq!(six.counters().overflows + zero.counters().overflows, 0);
        assert_eq!(six.narrow_misses() + zero.narrow_misses(), 0);
        // Both ways of solving a small cluster were taken, and the proof joined clusters.
        let c = zero.counters();
        assert!(c.small_clusters > 0 && c.small_fallbacks > 0 && c.blossom_clusters > 0 && c.joins > 0, "{c:?}");
    }

    #[test]
    fn streamed_shots_decode_to_the_exact_weight() {
        // The same shots with stream thresholds every row (and at odd places) and without:
        // equal weights, equal to the whole shot's DP; streaming took steps that reused
        // solved clusters.
        let g = grid(8, 12);
        let t = g.fine_table().unwrap();
        let mut exact = decoder(t.clone(), 20);
        let mut whole = decoder(t.clone(), 0);
        let mut rows = decoder(t.clone(), 0);
        rows.set_stream(&(1..8).map(|r| 12 * r).collect::<Vec<u32>>());
        let mut odd = decoder(t, 2);
        odd.set_stream(&[5, 5, 3, 40, 41, 77, 95, 96, 500]);
        assert_eq!(odd.stream(), &[5, 40, 41, 77, 95][..], "ascending, below n");
        assert_eq!(stream_thresholds(&[12, 24, 24, 12], 1), vec![12, 36, 60]);
        assert_eq!(stream_thresholds(&[12, 24, 24, 12], 2), vec![36]);
        assert_eq!(stream_thresholds(&[12, 24, 24, 12], 4), Vec::<u32>::new());
        let mut state = 4242u64;
        let mut tried = 0;
        for _ in 0..400 {
            let defects = random_defects(&mut state, 96, 16);
            if !(8..=20).contains(&defects.len()) {
                continue;
            }
            tried += 1;
            let want = exact.decode_defects(&defects);
            for d in [&mut whole, &mut rows, &mut odd] {
                let got = d.decode_defects(&defects);
                assert_eq!(got.status, want.status);
                assert!((want.weight - got.weight).abs() < 1e-9, "{defects:?}: {} against {}", got.weight, want.weight);
            }
        }
        assert!(tried > 100, "{tried}");
        let (w, r) = (whole.counters(), rows.counters());
        assert!(r.proof_rounds > w.proof_rounds, "{r:?} {w:?}");
        for d in [&exact, &whole, &rows, &odd] {
            assert_eq!(d.narrow_misses(), 0);
        }
    }

    #[test]
    fn young_defects_wait_for_their_partners() {
        // Pairs across each other row boundary, a column apart: streamed a row a message,
        // each pair's upper defect comes a message before its partner and is nearer the
        // pair before it than the boundary. Matched at once it would join that pair (a
        // cluster of three); deferred a step, it pairs as in the whole shot. (At the last
        // threshold nothing waits: no pair crosses it here.)
        let t = grid(8, 12).fine_table().unwrap();
        let id = |r: u32, c: u32| r * 12 + c;
        let defects = vec![id(0, 2), id(1, 2), id(2, 3), id(3, 3), id(4, 4), id(5, 4)];
        let mut whole = decoder(t.clone(), 0);
        let mut rows = decoder(t, 0);
        rows.set_stream(&(1..8).map(|r| 12 * r).collect::<Vec<u32>>());
        let want = whole.decode_defects(&defects);
        let got = rows.decode_defects(&defects);
        assert_eq!((got.status, got.observables), (want.status, want.observables));
        assert!((want.weight - got.weight).abs() < 1e-9);
        let c = rows.counters();
        assert_eq!((c.joins, c.small_clusters, c.blossom_clusters), (0, 0, 0), "{c:?}");
        assert!(c.proof_rounds > whole.counters().proof_rounds, "{c:?}: settled in steps");
    }

    #[test]
    fn the_proof_joins_only_clusters_solved_in_its_pass() {
        // Stim's d = 5 shots at p = 0.3% (the committed fixture), whole and streamed a round
        // a message, every cluster through the proof (K = 0) and above K = 2: no join of the
        // proof is between two clusters its pass left alone, so the GPU's proof, which
        // checks only pairs that touch a cluster solved in its pass, joins the same.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qec/d5_p0.003");
        let dem = crate::qec::load_dem(&dir.join("model.dem")).unwrap();
        let rounds = dem.detectors_per_round().unwrap();
        let table = crate::qec::fine_table_from_file(&dir.join("model.dem")).unwrap();
        let per = dem.num_detectors.div_ceil(8);
        let b8 = std::fs::read(dir.join("dets.b8")).unwrap();
        let mut joins = 0;
        for (k, rounds_per_message) in [(0, 1), (2, 1), (0, 100), (2, 2)] {
            let mut d = ExactDecoder::new(Arc::clone(&table), k).unwrap();
            d.set_stream(&stream_thresholds(&rounds, rounds_per_message));
            for shot in b8.chunks(per) {
                assert_ne!(d.decode_b8(shot).status, DecodeStatus::Overflow);
            }
            assert_eq!(d.narrow_misses(), 0, "K = {k}, {rounds_per_message} rounds a message");
            joins += d.counters().joins;
        }
        assert!(joins > 100, "the proof joined clusters: {joins}");
    }

    #[test]
    fn clusters_never_link_across_a_cheaper_boundary() {
        // A chain of 30 whose every detector has a boundary edge (all p = 0.1): pairs D0-D1,
        // D14-D15, D28-D29 each cost w against 2w to the boundary, but no two of them are
        // worth joining: three clusters of two under K = 2, exact (3 w, no L0).
        let mut dem = String::new();
        for i in 0..30 {
            dem += &format!("error(0.1) D{i}{}\n", if i == 0 { " L0" } else { "" });
            if i + 1 < 30 {
                dem += &format!("error(0.1) D{i} D{}\n", i + 1);
            }
        }
        let g = MatchingGraph::from_dem_text(&dem).unwrap();
        let mut d = decoder(g.fine_table().unwrap(), 2);
        let r = d.decode_defects(&[0, 1, 14, 15, 28, 29]);
        assert_eq!(r.status, DecodeStatus::Ok);
        let w = (0.9f64 / 0.1).ln();
        assert!((r.weight - 3.0 * w).abs() < 1e-4, "{}", r.weight);
        assert_eq!(r.observables, 0);
        assert_eq!(d.counters().overflows, 0);
        // Three in a row are one cluster of three, above K = 2: the matcher's 2 w (one pair,
        // one defect to the boundary).
        let r = d.decode_defects(&[0, 1, 2]);
        assert_eq!(r.status, DecodeStatus::Ok);
        assert!((r.weight - 2.0 * w).abs() < 1e-4, "{}", r.weight);
        // Clusters {D0, D1}, {D2}, {D3} under K = 2, but D3 has no path anywhere: the whole
        // shot is unmatchable.
        let g = MatchingGraph::from_dem_text("error(0.1) D0 D1\nerror(0.1) D2\nerror(0.1) D3 D4\n").unwrap();
        let mut d = decoder(g.fine_table().unwrap(), 2);
        let r = d.decode_defects(&[0, 1, 2, 3]);
        assert_eq!(r.status, DecodeStatus::Unmatchable);
        assert!(r.weight.is_infinite());
        assert_eq!(r.observables, 0);
    }

    #[test]
    fn odd_clusters_without_a_boundary_are_joined_until_they_match() {
        // A ring of 20 without boundary: the first joins give {0, 1, 2} and {10, 11, 12}, each
        // without a perfect matching; the proof joins them, and the six match at 10 w.
        let dem: String = (0..20).map(|i| format!("error(0.1) D{i} D{}\n", (i + 1) % 20)).collect();
        let g = MatchingGraph::from_dem_text(&dem).unwrap();
        let mut d = decoder(g.fine_table().unwrap(), 0);
        let r = d.decode_defects(&[0, 1, 2, 10, 11, 12]);
        assert_eq!(r.status, DecodeStatus::Ok);
        let w = (0.9f64 / 0.1).ln();
        assert!((r.weight - 10.0 * w).abs() < 1e-4, "{}", r.weight);
        assert!(d.counters().joins > 0 && d.counters().proof_rounds >= 2, "{:?}", d.counters());
        // Five of them cannot match, whatever is joined.
        assert_eq!(d.decode_defects(&[0, 1, 2, 10, 11]).status, DecodeStatus::Unmatchable);
    }

    #[test]
    fn long_chains_are_matched_exactly_and_the_edge_cap_is_kept() {
        let g = repetition(40);
        let t = g.fine_table().unwrap();
        let mut d = decoder(t.clone(), 4);
        let r = d.decode_b8(&[0xFF; 5]);
        assert_eq!(r.status, DecodeStatus::Ok);
        assert_eq!(r.defects, 40);
        // All 40 defects: 20 neighbouring pairs, 20 w (a greedy start at the boundary costs 21 w).
        let w = (0.9f64 / 0.1).ln();
        assert!((r.weight - 20.0 * w).abs() < 1e-4, "{}", r.weight);
        assert_eq!(r.observables, 0);
        // Over the edge cap the shot is not decoded, and counted.
        d.edge_cap = 10;
        let r = d.decode_b8(&[0xFF; 5]);
        assert_eq!((r.status, r.observables), (DecodeStatus::Overflow, 0));
        assert!(r.weight.is_infinite());
        assert_eq!(d.counters().overflows, 1);
        // A float table has no integer weights for the matcher: not decoded either.
        let mut f = decoder(g.float_table().unwrap(), 4);
        assert_eq!(f.decode_b8(&[0xFF; 5]).status, DecodeStatus::Overflow);
    }

    #[test]
    fn unmatchable_and_invalid() {
        let g = MatchingGraph::from_dem_text("error(0.1) D0 D1\ndetector D2\n").unwrap();
        let mut d = decoder(g.fine_table().unwrap(), 12);
        assert_eq!(d.decode_b8(&[0b011]).status, DecodeStatus::Ok);
        assert_eq!(d.decode_b8(&[0b001]).status, DecodeStatus::Unmatchable);
        assert_eq!(d.decode_b8(&[0b100]).status, DecodeStatus::Unmatchable);
        assert_eq!(d.decode_defects(&[1, 0]).status, DecodeStatus::Invalid);
        assert_eq!(d.decode_defects(&[3]).status, DecodeStatus::Invalid);
        assert_eq!(d.decode_defects(&[0, 1]).status, DecodeStatus::Ok);
        let c = d.counters();
        assert_eq!((c.shots, c.unmatchable, c.invalid), (6, 2, 2));
        let mut g2 = decoder(g.fine_table().unwrap(), 1);
        assert_eq!(g2.decode_b8(&[0b101]).status, DecodeStatus::Unmatchable);
    }

    #[test]
    fn config_errors() {
        let g = repetition(3);
        assert_eq!(ExactDecoder::new(Arc::new(g.fine_table().unwrap()), 21).unwrap_err(), ConfigError::MaxDefects(21));
        let mut t = g.fine_table().unwrap();
        t.distances.pop();
        assert_eq!(ExactDecoder::new(Arc::new(t), 12).unwrap_err(), ConfigError::BadTable);
    }

    #[test]
    fn tables_agree_on_the_repetition_code() {
        let g = repetition(12);
        let mut a = decoder(g.float_table().unwrap(), 12);
        let mut b = decoder(g.fine_table().unwrap(), 12);
        let mut c = decoder(g.compact_table().unwrap(), 12);
        for bits in 0u16..4096 {
            let shot = bits.to_le_bytes();
            let (x, y, z) = (a.decode_b8(&shot), b.decode_b8(&shot), c.decode_b8(&shot));
            assert!((x.weight - y.weight).abs() < 1e-5 * x.weight.max(1.0));
            assert!((x.weight - z.weight).abs() < 1e-3 * x.weight.max(1.0));
            // All edges are equal here, so ties abound: compare weights only, and that the
            // integer tables break ties identically (same additive structure).
            assert_eq!(y.observables, z.observables, "{bits:012b}");
        }
    }
}
