//! The matching graph of a DEM and its all-pairs tables (docs/qec.md, "The table decoder"):
//! once per DEM, on the host, the graph is built and Dijkstra from every node gives the
//! distance table `D[i][j]`, the observable parity `P[i][j]` of the shortest path, and the
//! distance to the boundary.
//!
//! Graph (what `pymatching.Matching.from_detector_error_model` builds, PyMatching 2.4,
//! `UserGraph::handle_dem_instruction`):
//! - nodes: the DEM's detectors plus one boundary node;
//! - every `^`-separated component with 2 detectors is an edge, with 1 detector an edge to
//!   the boundary; its weight is ln((1-p)/p) and it carries the component's observables;
//! - components with 0 detectors and errors with p = 0 add nothing (as in PyMatching);
//! - components with more than 2 detectors are refused ([`GraphError::Hyperedge`]) unless
//!   [`HyperedgePolicy::Ignore`] is asked for. PyMatching 2.4 drops them silently; refusing is
//!   the default because a DEM that has them was not decomposed and the matching would be
//!   wrong without a word;
//! - parallel edges merge as independent mechanisms (PyMatching's default `INDEPENDENT`
//!   strategy for DEMs): p = p1(1-p2) + p2(1-p1), the weight computed with PyMatching's
//!   overflow-safe `merge_weights` formula in file order, and the edge **keeps the
//!   observables of the first component seen**: PyMatching does the same ("If they do not
//!   match up, then the code has distance 2"). Such conflicts are counted in
//!   [`GraphStats::observable_conflicts`].
//! - p > 0.5 (negative weight) is refused: the exact matcher needs non-negative distances.
//!
//! Tables (flat, row-major, `(n+1) x (n+1)` with `n = num_detectors`; row and column `n` are
//! the boundary; `D[i][n]` is the distance to the boundary; the diagonal is 0). Shortest
//! paths never pass through the boundary node (it is a sink, as in PyMatching, where the
//! boundary is not a real node): a path via the boundary is two boundary matches, which the
//! matcher considers on its own. Equal-length paths are broken by Dijkstra's first
//! discovery (adjacency in edge order); the table is made symmetric from the `i < j` half.
//!
//! - [`DistanceTable<f64>`] from [`MatchingGraph::float_table`]: float weights, scale 1;
//! - [`DistanceTable<u32>`] from [`MatchingGraph::fine_table`]: PyMatching's own integer
//!   weights (`round(w * (2^24 - 1) / max|w|)`, `UserGraph::iter_discretized_edges`, without
//!   its factor 2), summed along the path. The matcher on this table minimises exactly the
//!   objective PyMatching minimises, so it agrees with PyMatching wherever the minimum is
//!   unique, and an observable disagreement with equal weight is a true tie. The default
//!   for CPU decoding;
//! - [`DistanceTable<u16>`] from [`MatchingGraph::compact_table`]: the GPU's 16-bit copy
//!   (121 x 121 x 2 bytes = 29 KB for d=5, fits shared memory). Edge weights are rounded to
//!   integers at a per-DEM scale first (half away from zero, as C's `round` in PyMatching)
//!   and then summed by Dijkstra, so the table is exactly
//!   additive and structural ties stay ties. The scale is the largest (tried from
//!   65534 / max useful float distance down in 2% steps) at which every *useful* entry fits
//!   in 65534; `65535` means "never match this pair" (unreachable, or longer than both
//!   defects going to the boundary, so never strictly optimal). Sums of up to 20 entries fit
//!   a `u32` accumulator. For the d=5, p=0.1% fixture: scale 2820 per unit of weight (edge
//!   rounding <= 1.8e-4), 65% of the entries 0xFFFF; on every fixture shot the matching on
//!   this table equals the one on the `u32` table (operator/tests/qec_fixtures.rs).
//!
//! Entries equal to [`TableWeight::UNREACHABLE`] mean no path (or, in the integer tables, a
//! pair the matcher may skip as above).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fmt::Debug;
use std::ops::Add;

use thiserror::Error;

use rocelink_wire::dem::DetectorErrorModel;

/// The boundary, as the second end of a boundary edge.
pub const BOUNDARY: u32 = u32::MAX;

/// The largest DEM the tables are built for: `(n+1)^2` entries each.
pub const MAX_TABLE_DETECTORS: usize = 4096;

/// PyMatching's `NUM_DISTINCT_WEIGHTS - 1` for 32-bit weights (`1 << 24` minus one).
pub const PYMATCHING_MAX_HALF_EDGE_WEIGHT: f64 = ((1u32 << 24) - 1) as f64;

/// The largest useful entry of the 16-bit table; `u16::MAX` is "never".
pub const COMPACT_MAX: u64 = u16::MAX as u64 - 1;

/// One merged edge of the matching graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    /// First detector.
    pub a: u32,
    /// Second detector, or [`BOUNDARY`].
    pub b: u32,
    /// Probability that the edge flips (independent merge of its mechanisms).
    pub probability: f64,
    /// ln((1-p)/p), merged as PyMatching merges.
    pub weight: f64,
    /// Observables flipped along the edge (those of its first mechanism).
    pub observables: u64,
}

/// What to do with a decomposed component that flips more than 2 detectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HyperedgePolicy {
    /// Refuse the DEM with [`GraphError::Hyperedge`] (default).
    #[default]
    Refuse,
    /// Drop the component and count it, as PyMatching 2.4 does silently.
    Ignore,
}

/// Options for [`MatchingGraph::from_dem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphOptions {
    /// Components with more than 2 detectors.
    pub hyperedges: HyperedgePolicy,
}

/// What building the graph did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphStats {
    /// Components that became (or merged into) edges.
    pub components: usize,
    /// Components merged into an existing edge.
    pub merged: usize,
    /// Merges whose observables differed from the edge's (the edge kept its own).
    pub observable_conflicts: usize,
    /// Components with more than 2 detectors dropped under [`HyperedgePolicy::Ignore`].
    pub hyperedges_ignored: usize,
    /// The DEM line of the first of them.
    pub first_hyperedge_line: Option<usize>,
    /// Error mechanisms with p = 0 (skipped).
    pub zero_probability: usize,
}

/// Why a graph or table cannot be built.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GraphError {
    /// A component with more than 2 detectors.
    #[error(
        "DEM line {line}: an error component flips {detectors} detectors; a matching decoder \
         needs 1 or 2 per component (decompose the DEM: stim's \
         detector_error_model(decompose_errors=True))"
    )]
    Hyperedge {
        /// 1-based DEM line.
        line: usize,
        /// Detectors in the component.
        detectors: usize,
    },
    /// An edge of merged probability above 0.5 (a negative weight), where a table is asked
    /// for: the all-pairs tables and their decoders (the GPU stage) take no negative weight;
    /// the sparse decoder does.
    #[error(
        "the edge {edge} has probability {p} > 0.5, a negative weight: the all-pairs tables (the \
         GPU stage) take none; decode on the CPU (the sparse exact decoder takes them)"
    )]
    NegativeWeight {
        /// The edge, `D<a>-D<b>` or `D<a>-boundary`.
        edge: String,
        /// Its merged probability.
        p: f64,
    },
    /// p = 1: an error that always happens weighs minus infinity (PyMatching refuses it too).
    #[error(
        "DEM line {line}: probability 1 is an error that always happens, an infinite negative \
         weight; a matching decoder cannot weigh it"
    )]
    CertainError {
        /// 1-based DEM line.
        line: usize,
    },
    /// Too many detectors for all-pairs tables.
    #[error("{0} detectors: all-pairs tables are built for at most {MAX_TABLE_DETECTORS}")]
    TooManyDetectors(usize),
    /// An entry that the matcher may use does not fit the table's integer type.
    #[error("shortest-path distances do not fit the {0}-bit table")]
    DistanceOverflow(u32),
}

/// The matching graph of a DEM.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchingGraph {
    /// Detectors (nodes besides the boundary).
    pub num_detectors: usize,
    /// Observables.
    pub num_observables: usize,
    /// Merged edges, in order of first appearance.
    pub edges: Vec<Edge>,
    /// What the build did.
    pub stats: GraphStats,
}

/// ln((1-p)/p), as PyMatching computes it; for a subnormal p, where (1-p)/p overflows to
/// infinity, the same value as ln(1-p) - ln(p) (about 744 at the smallest p), so that every
/// edge weight is finite (an infinite one would make [`MatchingGraph::pymatching_scale`] 0
/// and zero every other weight of the fine table).
fn edge_weight(p: f64) -> f64 {
    let w = ((1.0 - p) / p).ln();
    if w.is_finite() {
        w
    } else {
        (-p).ln_1p() - p.ln()
    }
}

/// Edge weights in table units are capped here before the integer Dijkstra: a path has at
/// most [`MAX_TABLE_DETECTORS`] + 1 edges, so sums of capped weights (and the sum of two
/// such paths in `useful`) stay below `u64::MAX`, which stands for "unreachable". A capped
/// edge is far above any table's limit, so every entry through it is "never" or an overflow
/// either way.
const MAX_EDGE_UNITS: f64 = (1u64 << 50) as f64;

/// PyMatching's `merge_weights`: the weight of two independent parallel mechanisms,
/// computed without overflow for large weights (equivalent to merging the probabilities).
pub fn merge_weights(a: f64, b: f64) -> f64 {
    let sgn = 1f64.copysign(a) * 1f64.copysign(b);
    let signed_min = sgn * a.abs().min(b.abs());
    signed_min + (-(a + b).abs()).exp().ln_1p() - (-(a - b).abs()).exp().ln_1p()
}

impl MatchingGraph {
    /// Builds the graph of a flattened DEM (module docs).
    pub fn from_dem(dem: &DetectorErrorModel, options: GraphOptions) -> Result<Self, GraphError> {
        let mut edges: Vec<Edge> = Vec::new();
        let mut index: HashMap<(u32, u32), usize> = HashMap::new();
        let mut stats = GraphStats::default();
        for e in &dem.errors {
            let p = e.probability;
            if p <= 0.0 {
                stats.zero_probability += 1;
                continue;
            }
            if p >= 1.0 {
                return Err(GraphError::CertainError { line: e.line });
            }
            let w = edge_weight(p);
            for c in &e.components {
                let (a, b) = match c.detectors[..] {
                    [] => continue,
                    [a] => (a, BOUNDARY),
                    [a, b] => (a.min(b), a.max(b)),
                    _ => match options.hyperedges {
                        HyperedgePolicy::Refuse => {
                            return Err(GraphError::Hyperedge { line: e.line, detectors: c.detectors.len() })
                        }
                        HyperedgePolicy::Ignore => {
                            stats.hyperedges_ignored += 1;
                            stats.first_hyperedge_line.get_or_insert(e.line);
                            continue;
                        }
                    },
                };
                stats.components += 1;
                match index.get(&(a, b)) {
                    Some(&i) => {
                        let edge = &mut edges[i];
                        edge.weight = merge_weights(w, edge.weight);
                        edge.probability = p * (1.0 - edge.probability) + edge.probability * (1.0 - p);
                        stats.merged += 1;
                        if edge.observables != c.observables {
                            stats.observable_conflicts += 1;
                        }
                    }
                    None => {
                        index.insert((a, b), edges.len());
                        edges.push(Edge { a, b, probability: p, weight: w, observables: c.observables });
                    }
                }
            }
        }
        Ok(MatchingGraph { num_detectors: dem.num_detectors, num_observables: dem.num_observables, edges, stats })
    }

    /// Parses DEM text and builds its graph with default options.
    pub fn from_dem_text(text: &str) -> Result<Self, crate::LoadError> {
        let dem = DetectorErrorModel::parse(text)?;
        Ok(Self::from_dem(&dem, GraphOptions::default())?)
    }

    /// PyMatching's normalising constant (`UserGraph::get_edge_weight_normalising_constant`):
    /// 1 when every weight is an integer, else `(2^24 - 1) / max |w|`.
    pub fn pymatching_scale(&self) -> f64 {
        let max = self.edges.iter().fold(0f64, |m, e| m.max(e.weight.abs()));
        if self.edges.iter().all(|e| e.weight.round() == e.weight) || max == 0.0 {
            1.0
        } else {
            PYMATCHING_MAX_HALF_EDGE_WEIGHT / max
        }
    }

    /// Every edge's weight magnitude in PyMatching's integer units, `round(|w| *
    /// pymatching_scale())` (at most `u32::MAX`), in edge order: what the sparse decoding
    /// graph and the oracles in the tests match on (a negative edge's sign is
    /// [`Edge::weight`]'s).
    pub fn integer_weights(&self) -> Vec<u64> {
        let scale = self.pymatching_scale();
        self.edges.iter().map(|e| (e.weight.abs() * scale).round().min(u32::MAX as f64) as u64).collect()
    }

    /// The tables' checks: their size, and no negative weight.
    fn check_size(&self) -> Result<(), GraphError> {
        if self.num_detectors > MAX_TABLE_DETECTORS {
            return Err(GraphError::TooManyDetectors(self.num_detectors));
        }
        if let Some(e) = self.edges.iter().find(|e| e.weight < 0.0) {
            let b = if e.b == BOUNDARY { "boundary".to_string() } else { format!("D{}", e.b) };
            return Err(GraphError::NegativeWeight { edge: format!("D{}-{b}", e.a), p: e.probability });
        }
        Ok(())
    }

    /// Float distances (scale 1).
    pub fn float_table(&self) -> Result<DistanceTable<f64>, GraphError> {
        self.check_size()?;
        let w: Vec<f64> = self.edges.iter().map(|e| e.weight).collect();
        let (d, parity) = self.all_pairs(&w);
        Ok(DistanceTable {
            num_detectors: self.num_detectors,
            num_observables: self.num_observables,
            scale: 1.0,
            distances: d,
            parities: parity,
        })
    }

    /// PyMatching's integer distances (module docs); `DistanceOverflow` if a useful entry
    /// exceeds `u32::MAX - 1`.
    pub fn fine_table(&self) -> Result<DistanceTable<u32>, GraphError> {
        self.check_size()?;
        let scale = self.pymatching_scale();
        self.integer_table(scale, u64::from(u32::MAX) - 1)
            .map(|t| t.narrow(|v| v as u32))
            .ok_or(GraphError::DistanceOverflow(32))
    }

    /// The 16-bit table for the GPU (module docs).
    pub fn compact_table(&self) -> Result<DistanceTable<u16>, GraphError> {
        let float = self.float_table()?;
        let n = self.num_detectors;
        let s = n + 1;
        let mut max_useful = 0f64;
        for i in 0..=n {
            for j in 0..=n {
                let d = float.distances[i * s + j];
                if d.is_finite() && useful(&float.distances, s, n, i, j, f64::INFINITY) {
                    max_useful = max_useful.max(d);
                }
            }
        }
        let mut scale = if max_useful > 0.0 { COMPACT_MAX as f64 / max_useful } else { 1.0 };
        for _ in 0..200 {
            if let Some(t) = self.integer_table(scale, COMPACT_MAX) {
                return Ok(t.narrow(|v| v as u16));
            }
            scale *= 0.98;
        }
        Err(GraphError::DistanceOverflow(16))
    }

    /// Integer Dijkstra on `round(w * scale)`; entries above `limit` become "never" when the
    /// matcher may skip them, else the build fails (`None`).
    fn integer_table(&self, scale: f64, limit: u64) -> Option<DistanceTable<u64>> {
        let w: Vec<u64> =
            self.edges.iter().map(|e| (e.weight * scale).round().clamp(0.0, MAX_EDGE_UNITS) as u64).collect();
        let (mut d, parity) = self.all_pairs(&w);
        let n = self.num_detectors;
        let s = n + 1;
        let snapshot = d.clone();
        for i in 0..=n {
            for j in 0..=n {
                let v = snapshot[i * s + j];
                if v == u64::MAX || v <= limit {
                    continue;
                }
                if useful(&snapshot, s, n, i, j, u64::MAX) {
                    return None;
                }
                d[i * s + j] = u64::MAX;
            }
        }
        Some(DistanceTable {
            num_detectors: n,
            num_observables: self.num_observables,
            scale,
            distances: d,
            parities: parity,
        })
    }

    /// Dijkstra from every detector; returns (distances, parities), symmetric, with the
    /// boundary as row/column `n`. `C::INF` where unreachable.
    fn all_pairs<C: PathCost>(&self, w: &[C]) -> (Vec<C>, Vec<u64>) {
        let n = self.num_detectors;
        let s = n + 1;
        // CSR adjacency over detectors; boundary edges point at node n (a sink).
        let mut deg = vec![0usize; n + 1];
        for e in &self.edges {
            deg[e.a as usize] += 1;
            if e.b != BOUNDARY {
                deg[e.b as usize] += 1;
            }
        }
        let mut start = vec![0usize; n + 2];
        for v in 0..=n {
            start[v + 1] = start[v] + deg[v];
        }
        let mut fill = start.clone();
        let mut adj = vec![(0u32, 0u32); start[n + 1]];
        for (k, e) in self.edges.iter().enumerate() {
            let b = if e.b == BOUNDARY { n as u32 } else { e.b };
            adj[fill[e.a as usize]] = (b, k as u32);
            fill[e.a as usize] += 1;
            if e.b != BOUNDARY {
                adj[fill[b as usize]] = (e.a, k as u32);
                fill[b as usize] += 1;
            }
        }

        let mut dist = vec![C::INF; s * s];
        let mut par = vec![0u64; s * s];
        let mut d = vec![C::INF; s];
        let mut p = vec![0u64; s];
        let mut done = vec![false; s];
        let mut heap = BinaryHeap::new();
        for src in 0..n {
            d.fill(C::INF);
            p.fill(0);
            done.fill(false);
            d[src] = C::ZERO;
            heap.push(Reverse((C::ZERO.key(), src as u32)));
            while let Some(Reverse((_, u))) = heap.pop() {
                let u = u as usize;
                if done[u] {
                    continue;
                }
                done[u] = true;
                if u == n {
                    continue; // the boundary is a sink
                }
                for &(v, k) in &adj[start[u]..start[u + 1]] {
                    let v = v as usize;
                    let cand = d[u] + w[k as usize];
                    if !done[v] && cand < d[v] {
                        d[v] = cand;
                        p[v] = p[u] ^ self.edges[k as usize].observables;
                        heap.push(Reverse((cand.key(), v as u32)));
                    }
                }
            }
            // Keep the i < j half (and the boundary column) from this source.
            for t in src..=n {
                dist[src * s + t] = d[t];
                par[src * s + t] = p[t];
            }
        }
        for i in 0..=n {
            for j in 0..i {
                dist[i * s + j] = dist[j * s + i];
                par[i * s + j] = par[j * s + i];
            }
        }
        dist[n * s + n] = C::ZERO;
        (dist, par)
    }
}

/// Whether the matcher may need entry (i, j): boundary entries always; a pair only when it
/// is no longer than both going to the boundary (else two boundary matches are strictly
/// better).
fn useful<C: PartialOrd + Copy + Add<Output = C>>(d: &[C], s: usize, n: usize, i: usize, j: usize, inf: C) -> bool {
    if i == n || j == n || i == j {
        return true;
    }
    let (ib, jb) = (d[i * s + n], d[j * s + n]);
    ib == inf || jb == inf || d[i * s + j] <= ib + jb
}

/// Path lengths for Dijkstra: `f64` (non-negative) or `u64`.
trait PathCost: Copy + PartialOrd + Add<Output = Self> {
    const ZERO: Self;
    const INF: Self;
    /// A `u64` that orders like the value (for the heap).
    fn key(self) -> u64;
}

impl PathCost for f64 {
    const ZERO: f64 = 0.0;
    const INF: f64 = f64::INFINITY;
    fn key(self) -> u64 {
        // Non-negative floats order like their bit patterns.
        self.to_bits()
    }
}

impl PathCost for u64 {
    const ZERO: u64 = 0;
    const INF: u64 = u64::MAX;
    fn key(self) -> u64 {
        self
    }
}

/// An entry type of a distance table, and how the matcher adds entries up.
pub trait TableWeight: Copy + PartialEq + Debug + Send + Sync + 'static {
    /// The sum of entries (wide enough for 20 of them).
    type Acc: Copy + PartialOrd + Add<Output = Self::Acc> + Debug + Send + Sync;
    /// "No path" (or "never match", see the module docs).
    const UNREACHABLE: Self;
    /// Zero.
    const ACC_ZERO: Self::Acc;
    /// Larger than any finite sum.
    const ACC_INF: Self::Acc;
    /// Widens an entry.
    fn to_acc(self) -> Self::Acc;
    /// The sum as a float, in table units.
    fn acc_to_f64(a: Self::Acc) -> f64;
    /// `self + r`, or [`Self::ACC_INF`] when the entry is [`Self::UNREACHABLE`] or `r` is
    /// infinite: a DP option's cost, without a branch on the data (the exact matcher's
    /// options), as the GPU stage computes it.
    fn option_cost(self, r: Self::Acc) -> Self::Acc;
    /// The entry as an exact matcher's integer weight (`matching::PerfectMatching`), or None
    /// for a float table, which has none.
    fn matching_weight(self) -> Option<i64>;
}

impl TableWeight for f64 {
    type Acc = f64;
    const UNREACHABLE: f64 = f64::INFINITY;
    const ACC_ZERO: f64 = 0.0;
    const ACC_INF: f64 = f64::INFINITY;
    fn to_acc(self) -> f64 {
        self
    }
    fn acc_to_f64(a: f64) -> f64 {
        a
    }
    fn option_cost(self, r: f64) -> f64 {
        self + r // infinities stay infinite; no entry is negative
    }
    fn matching_weight(self) -> Option<i64> {
        None
    }
}

/// The integer tables: unreachable is the type's largest value, sums are taken in `u64`.
macro_rules! integer_table_weight {
    ($($t:ty),*) => {$(
        impl TableWeight for $t {
            type Acc = u64;
            const UNREACHABLE: $t = <$t>::MAX;
            const ACC_ZERO: u64 = 0;
            const ACC_INF: u64 = u64::MAX;
            fn to_acc(self) -> u64 {
                u64::from(self)
            }
            fn acc_to_f64(a: u64) -> f64 {
                a as f64
            }
            fn option_cost(self, r: u64) -> u64 {
                let e = if self == <$t>::MAX { u64::MAX } else { u64::from(self) };
                e.saturating_add(r)
            }
            fn matching_weight(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    )*};
}
integer_table_weight!(u16, u32, u64);

/// All-pairs shortest-path distances and observable parities, boundary included (module
/// docs). Flat row-major `Vec`s the GPU copies verbatim: entry (i, j) at `i * stride() + j`.
#[derive(Debug, Clone, PartialEq)]
pub struct DistanceTable<W> {
    /// Detectors; the boundary is index `num_detectors`.
    pub num_detectors: usize,
    /// Observables (bits used in the parities).
    pub num_observables: usize,
    /// Table units per unit of ln((1-p)/p): weight = entry / scale.
    pub scale: f64,
    /// D, `stride()^2` entries.
    pub distances: Vec<W>,
    /// P, the observables flipped along the chosen shortest path, `stride()^2` entries.
    pub parities: Vec<u64>,
}

impl<W: TableWeight> DistanceTable<W> {
    /// Row length: detectors plus the boundary.
    pub fn stride(&self) -> usize {
        self.num_detectors + 1
    }

    /// The boundary's index.
    pub fn boundary(&self) -> usize {
        self.num_detectors
    }

    /// `D[i][j]`; `UNREACHABLE` outside the table.
    #[inline]
    pub fn distance(&self, i: usize, j: usize) -> W {
        self.distances.get(i * self.stride() + j).copied().unwrap_or(W::UNREACHABLE)
    }

    /// `P[i][j]`; 0 outside the table.
    #[inline]
    pub fn parity(&self, i: usize, j: usize) -> u64 {
        self.parities.get(i * self.stride() + j).copied().unwrap_or(0)
    }

    /// P as 32-bit masks for a kernel that keeps 4 bytes per entry; `None` above 32
    /// observables.
    pub fn parities_u32(&self) -> Option<Vec<u32>> {
        (self.num_observables <= 32).then(|| self.parities.iter().map(|&p| p as u32).collect())
    }

    /// The largest finite entry (the u16 table's is at most 65534).
    pub fn max_entry(&self) -> Option<W> {
        self.distances.iter().copied().filter(|&d| d != W::UNREACHABLE).reduce(|a, b| {
            if W::acc_to_f64(b.to_acc()) > W::acc_to_f64(a.to_acc()) {
                b
            } else {
                a
            }
        })
    }

    /// `D[i][j]` in ln((1-p)/p) units; infinite when unreachable.
    pub fn weight(&self, i: usize, j: usize) -> f64 {
        let d = self.distance(i, j);
        if d == W::UNREACHABLE {
            f64::INFINITY
        } else {
            W::acc_to_f64(d.to_acc()) / self.scale
        }
    }
}

impl DistanceTable<u64> {
    fn narrow<V>(self, f: impl Fn(u64) -> V) -> DistanceTable<V>
    where
        V: TableWeight,
    {
        DistanceTable {
            num_detectors: self.num_detectors,
            num_observables: self.num_observables,
            scale: self.scale,
            distances: self.distances.into_iter().map(|v| if v == u64::MAX { V::UNREACHABLE } else { f(v) }).collect(),
            parities: self.parities,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(text: &str) -> MatchingGraph {
        MatchingGraph::from_dem_text(text).unwrap()
    }

    #[test]
    fn merge_weights_is_the_independent_merge() {
        let (p1, p2) = (0.1f64, 0.2f64);
        let w = |p: f64| ((1.0 - p) / p).ln();
        let p = p1 * (1.0 - p2) + p2 * (1.0 - p1);
        assert!((merge_weights(w(p1), w(p2)) - w(p)).abs() < 1e-12);
        // PyMatching's value for this pair (printed by Matching.edges()).
        assert!((merge_weights(w(0.2), w(0.1)) - 1.0459685551826876).abs() < 1e-14);
    }

    #[test]
    fn parallel_edges_keep_the_first_observables() {
        // What PyMatching 2.4 builds from the same DEM (checked with Matching.edges()):
        // (0, 1) weight 1.04597 p 0.26 observables {0}; (2, boundary) weight 0.66329 p 0.34
        // observables {0}.
        let g = graph("error(0.1) D0 D1 L0\nerror(0.2) D0 D1\nerror(0.1) D2 L0\nerror(0.3) D2\n");
        assert_eq!(g.edges.len(), 2);
        assert_eq!((g.edges[0].a, g.edges[0].b, g.edges[0].observables), (0, 1, 1));
        assert!((g.edges[0].weight - 1.0459685551826876).abs() < 1e-12);
        assert!((g.edges[0].probability - 0.26).abs() < 1e-12);
        assert_eq!((g.edges[1].a, g.edges[1].b, g.edges[1].observables), (2, BOUNDARY, 1));
        assert!((g.edges[1].weight - 0.6632942174102643).abs() < 1e-12);
        assert_eq!(g.stats.merged, 2);
        assert_eq!(g.stats.observable_conflicts, 2);
    }

    #[test]
    fn hyperedges_refused_or_ignored() {
        let dem = DetectorErrorModel::parse("error(0.1) D0 D1\nerror(0.1) D0 D1 D2 ^ D3\n").unwrap();
        let e = MatchingGraph::from_dem(&dem, GraphOptions::default()).unwrap_err();
        assert_eq!(e, GraphError::Hyperedge { line: 2, detectors: 3 });
        assert!(e.to_string().starts_with("DEM line 2: an error component flips 3 detectors"));
        let g = MatchingGraph::from_dem(&dem, GraphOptions { hyperedges: HyperedgePolicy::Ignore }).unwrap();
        assert_eq!((g.stats.hyperedges_ignored, g.stats.first_hyperedge_line), (1, Some(2)));
        assert_eq!(g.edges.len(), 2); // D0-D1 and D3-boundary
    }

    #[test]
    fn subnormal_probability_gives_a_finite_weight() {
        // (1-p)/p overflows for p = 5e-324; the weight is ln(1-p) - ln(p) = 744.44, and the
        // 0.1 edges keep their weight in the fine table (an infinite weight made the scale 0).
        let g = graph("error(5e-324) D0 L0\nerror(0.1) D0 D1\nerror(0.1) D1\n");
        let w = g.edges[0].weight;
        assert!((w - 744.440_071_921_381).abs() < 1e-9, "{w}");
        assert_eq!(g.edges[1].weight, ((1.0 - 0.1f64) / 0.1).ln(), "ordinary weights unchanged");
        let fine = g.fine_table().unwrap();
        assert!(fine.distance(0, 1) > 0);
        assert!(g.compact_table().is_ok());
    }

    #[test]
    fn huge_scaled_weights_do_not_overflow_the_integer_tables() {
        // Useful distances of ~4e-16 give the compact table a scale of ~1e20, so the 1e-300
        // edge scales past u64: capped, the Dijkstra's sums cannot overflow.
        let q = "0.4999999999999999";
        let g = graph(&format!("error({q}) D0\nerror({q}) D0 D1\nerror({q}) D1\nerror(1e-300) D1 D2\nerror({q}) D2\n"));
        let t = g.integer_table(1e20, u64::from(u16::MAX) - 1).expect("the heavy pair is not useful");
        // Row-major, 4 wide: (0, 2) and (1, 2) lead only through the heavy edge: never (an
        // overflowing sum wrapped (0, 2) to a short distance).
        assert_eq!((t.distances[2], t.distances[4 + 2]), (u64::MAX, u64::MAX));
        assert!(g.compact_table().is_ok());
    }

    #[test]
    fn negative_weights_only_off_the_tables_zero_probability_skipped() {
        // 0.6 and 0.3 in parallel merge to 0.6 * 0.7 + 0.4 * 0.3 = 0.54: still negative.
        let g = graph("error(0) D0\nerror(0.6) D0 D1\nerror(0.3) D1 D0\nerror(0.1) D1\n");
        assert_eq!(g.edges.len(), 2);
        assert!((g.edges[0].probability - 0.54).abs() < 1e-12 && g.edges[0].weight < 0.0);
        assert_eq!(g.integer_weights()[0], (g.edges[0].weight.abs() * g.pymatching_scale()).round() as u64);
        let refused = Err(GraphError::NegativeWeight { edge: "D0-D1".into(), p: g.edges[0].probability });
        assert_eq!(g.fine_table().map(|_| ()), refused);
        assert!(g.float_table().is_err() && g.compact_table().is_err());
        let dem = DetectorErrorModel::parse("error(0.2) D0\nerror(1) D0 D1\n").unwrap();
        assert_eq!(MatchingGraph::from_dem(&dem, GraphOptions::default()), Err(GraphError::CertainError { line: 2 }));
        let g = graph("error(0) D0\nerror(0.5) D0\n");
        assert_eq!(g.stats.zero_probability, 1);
        assert_eq!(g.edges[0].weight, 0.0);
        assert_eq!(g.pymatching_scale(), 1.0);
    }

    #[test]
    fn chain_distances_and_parities() {
        // boundary -0.1- D0 -0.1(L0)- D1 -0.01- D2 -0.1- boundary
        let g = graph("error(0.1) D0\nerror(0.1) D0 D1 L0\nerror(0.01) D1 D2\nerror(0.1) D2 L1\n");
        let t = g.float_table().unwrap();
        let w1 = (0.9f64 / 0.1).ln();
        let w2 = (0.99f64 / 0.01).ln();
        let b = t.boundary();
        assert_eq!(t.stride(), 4);
        assert!((t.weight(0, 1) - w1).abs() < 1e-12);
        assert_eq!(t.parity(0, 1), 1);
        assert!((t.weight(0, 2) - (w1 + w2)).abs() < 1e-12);
        assert_eq!(t.parity(2, 0), 1);
        assert!((t.weight(1, b) - 2.0 * w1).abs() < 1e-12);
        assert_eq!(t.parity(1, b), 1); // via D0 (L0), not via D2 (longer)
        assert_eq!(t.parity(b, 2), 2);
        assert_eq!(t.distance(b, b), 0.0);
        // Paths do not pass through the boundary: D0-D2 is not w1 + w1 via the boundary.
        assert!(t.weight(0, 2) > 2.0 * w1);

        let f = g.fine_table().unwrap();
        let scale = g.pymatching_scale();
        assert_eq!(f.scale, scale);
        assert_eq!(f.distance(0, 1), (w1 * scale).round() as u32);
        assert_eq!(f.distance(1, b), 2 * (w1 * scale).round() as u32);
        // Entries that fit are kept exactly, useful or not.
        assert_eq!(f.distance(0, 2), (w1 * scale).round() as u32 + (w2 * scale).round() as u32);
        let c = g.compact_table().unwrap();
        assert!(c.distances.iter().all(|&v| v == u16::MAX || v as u64 <= COMPACT_MAX));
        assert_eq!(c.parities, f.parities);
    }

    #[test]
    fn unreachable_nodes() {
        let g = graph("error(0.1) D0 D1\ndetector D2\n");
        let t = g.float_table().unwrap();
        assert_eq!(t.num_detectors, 3);
        assert!(t.weight(0, 2).is_infinite());
        assert!(t.weight(0, t.boundary()).is_infinite());
        let c = g.compact_table().unwrap();
        assert_eq!(c.distance(0, 2), u16::MAX);
        assert!(c.distance(0, 1) <= COMPACT_MAX as u16);
    }
}
