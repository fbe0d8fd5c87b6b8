//! The GPU stage's decoder, as its model: exact minimum-weight perfect matching with boundary
//! on the all-pairs table, by subset DP for up to K defects (QEC.md, "Decoder v1"); above K
//! the shot's independent clusters, each matched exactly (the DP up to K defects, an exact
//! blossom matcher on its doubled graph above). No greedy step: every decode is exact, or
//! (a cluster over the GPU scratch's edge cap, [`matching_edge_cap`]) not made at all,
//! status `Overflow`. The CPU stage decodes with `rocelink_qec::MatchingDecoder`; this one
//! is what `kernels/stages/qec.cuh` computes, bit for bit.
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
//! - **Above K: clusters, each exact.** Defects x and y are linked when some optimal matching
//!   may pair them, that is when their distance is finite and below the sum of their
//!   boundary distances (or either has no boundary path). A pair across clusters can always
//!   be replaced by both defects to the boundary at no extra weight, so the sum of the
//!   clusters' exact matchings is a minimum-weight matching of the whole shot: weights equal
//!   to PyMatching's, observables differing only on ties. Clusters go in order of their
//!   lowest defect, each with its defects in increasing order: up to K by the DP above;
//!   above K by `rocelink_qec::matching::PerfectMatching` on the cluster's doubled graph (two
//!   copies of its linked pairs, each defect's copies joined by twice its boundary distance;
//!   a perfect matching there is two matchings with boundary of equal total, so copy one's
//!   half is optimal), its edges in the order the GPU writes them: copy one's pairs by
//!   (i, j), copy two's likewise, then the joins by i. The GPU's matcher
//!   (kernels/stages/blossom.cuh) is this one statement for statement.
//! - **Allocation**: the DP's buffers are sized for K at construction; the cluster buffers
//!   grow to the largest shot seen and are reused.
//! - **No panic on any input**: bits beyond the DEM's detectors are ignored; out-of-range or
//!   unsorted defect lists give [`DecodeStatus::Invalid`].

use std::sync::Arc;

use thiserror::Error;

use super::graph::{DistanceTable, TableWeight};

/// QEC.md: "Cap K defects (12-14)"; 12 by default.
pub const DEFAULT_MAX_DEFECTS: usize = 12;

/// The DP holds 2^K entries; 20 keeps that at 16 MiB and sums of 20 16-bit entries in a u32.
pub const MAX_MAX_DEFECTS: usize = 20;

/// The edges a cluster's doubled graph may have on a table of `n` detectors: what the GPU
/// stage's per-block scratch holds (gpu/qec_state.rs sizes it so); a cluster with more is
/// not decoded (status [`DecodeStatus::Overflow`]). Generous: a cluster of c defects has
/// 2 L + c edges for L linked pairs, and at circuit-level noise a defect links to a few.
pub const fn matching_edge_cap(n: usize) -> usize {
    16 * n + 1024
}

/// How a shot was decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DecodeStatus {
    /// Exact minimum-weight matching.
    #[default]
    Ok,
    /// Not decoded: a cluster's doubled graph above [`matching_edge_cap`] (module docs).
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
    /// Above K: union-find parents, then roots; the clusters' defects, cluster after
    /// cluster; where each starts; per root a count, then a cursor.
    uf: Vec<u32>,
    list: Vec<u32>,
    starts: Vec<usize>,
    cursor: Vec<usize>,
    /// A cluster above K: its boundary distances, doubled graph and matching.
    bnd: Vec<W>,
    edges: Vec<(u32, u32, i64)>,
    mate: Vec<u32>,
    matcher: rocelink_qec::matching::PerfectMatching,
    edge_cap: usize,
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
            list: Vec::new(),
            starts: Vec::new(),
            cursor: Vec::new(),
            bnd: Vec::new(),
            edges: Vec::new(),
            mate: Vec::new(),
            matcher: rocelink_qec::matching::PerfectMatching::new(),
            edge_cap: matching_edge_cap(n),
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
    /// without a boundary path.
    fn linked(e: W, bx: W, by: W) -> bool {
        e != W::UNREACHABLE
            && (bx == W::UNREACHABLE || by == W::UNREACHABLE || e.to_acc() < bx.to_acc() + by.to_acc())
    }

    fn find(uf: &[u32], mut x: u32) -> u32 {
        while uf[x as usize] != x {
            x = uf[x as usize];
        }
        x
    }

    /// Above K (module docs): the shot's clusters, each decoded exactly. Any cluster without
    /// a perfect matching makes the shot [`DecodeStatus::Unmatchable`], any over the edge
    /// cap [`DecodeStatus::Overflow`] (infinite weight, no observables either way).
    fn clusters(&mut self, defects: &[u32]) -> (W::Acc, u64, DecodeStatus) {
        let k = defects.len();
        let t = Arc::clone(&self.table);
        let b = t.boundary();
        self.uf.clear();
        self.uf.extend(0..k as u32);
        for x in 0..k {
            let bx = t.distance(defects[x] as usize, b);
            for y in x + 1..k {
                let e = t.distance(defects[x] as usize, defects[y] as usize);
                if Self::linked(e, bx, t.distance(defects[y] as usize, b)) {
                    // the higher root under the lower: a cluster's root is its lowest defect
                    let (rx, ry) = (Self::find(&self.uf, x as u32), Self::find(&self.uf, y as u32));
                    if rx != ry {
                        self.uf[rx.max(ry) as usize] = rx.min(ry);
                    }
                }
            }
        }
        for x in 0..k {
            self.uf[x] = Self::find(&self.uf, x as u32);
        }
        // clusters by root, members in increasing order
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
            self.list[self.cursor[r]] = defects[x];
            self.cursor[r] += 1;
        }
        let (mut total, mut obs) = (W::ACC_ZERO, 0u64);
        let list = std::mem::take(&mut self.list);
        let starts = std::mem::take(&mut self.starts);
        let mut status = DecodeStatus::Ok;
        for c in 0..starts.len() - 1 {
            let cluster = &list[starts[c]..starts[c + 1]];
            let (cost, o, st) =
                if cluster.len() <= self.max_defects { self.exact(cluster) } else { self.match_cluster(cluster) };
            if st != DecodeStatus::Ok {
                status = st;
                break;
            }
            total = total + cost;
            obs ^= o;
        }
        self.list = list;
        self.starts = starts;
        match status {
            DecodeStatus::Ok => (total, obs, status),
            _ => (W::ACC_INF, 0, status),
        }
    }

    /// One cluster above K, exactly, on its doubled graph (module docs).
    fn match_cluster(&mut self, cluster: &[u32]) -> (W::Acc, u64, DecodeStatus) {
        let t = Arc::clone(&self.table);
        let b = t.boundary();
        let c = cluster.len();
        self.bnd.clear();
        self.bnd.extend(cluster.iter().map(|&d| t.distance(d as usize, b)));
        self.edges.clear();
        for i in 0..c {
            for j in i + 1..c {
                let e = t.distance(cluster[i] as usize, cluster[j] as usize);
                if Self::linked(e, self.bnd[i], self.bnd[j]) {
                    let Some(w) = e.matching_weight() else { return (W::ACC_INF, 0, DecodeStatus::Overflow) };
                    self.edges.push((i as u32, j as u32, w));
                }
            }
        }
        let pairs = self.edges.len();
        let joins = self.bnd.iter().filter(|&&x| x != W::UNREACHABLE).count();
        if 2 * pairs + joins > self.edge_cap {
            return (W::ACC_INF, 0, DecodeStatus::Overflow);
        }
        for q in 0..pairs {
            let (i, j, w) = self.edges[q];
            self.edges.push((c as u32 + i, c as u32 + j, w));
        }
        for i in 0..c {
            if self.bnd[i] != W::UNREACHABLE {
                let Some(w) = self.bnd[i].matching_weight() else { return (W::ACC_INF, 0, DecodeStatus::Overflow) };
                self.edges.push((i as u32, (c + i) as u32, 2 * w));
            }
        }
        if self.matcher.solve(2 * c, &self.edges, &mut self.mate).is_none() {
            return (W::ACC_INF, 0, DecodeStatus::Unmatchable);
        }
        let (mut total, mut obs) = (W::ACC_ZERO, 0u64);
        for i in 0..c {
            let u = self.mate[i] as usize;
            let di = cluster[i] as usize;
            if u == c + i {
                total = total + self.bnd[i].to_acc();
                obs ^= t.parity(di, b);
            } else if u < c && i < u {
                total = total + t.distance(di, cluster[u] as usize).to_acc();
                obs ^= t.parity(di, cluster[u] as usize);
            }
        }
        (total, obs, DecodeStatus::Ok)
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
        // D0, D1, D2: one cluster above K = 2, matched on its doubled graph: D0 to the
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
            let mut defects = Vec::new();
            for i in 0..96u32 {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if (state >> 33) % 100 < 17 {
                    defects.push(i);
                }
            }
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
