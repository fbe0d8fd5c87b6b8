//! Exact minimum-weight perfect matching on general graphs (Edmonds' blossom algorithm).
//!
//! [`PerfectMatching::solve`] returns the minimum total weight over all perfect matchings of an
//! undirected multigraph given as an edge list, or `None` when the graph has no perfect matching.
//! [`PerfectMatching::solve_with_boundary`] also lets a vertex go to a boundary at its own cost (any number of
//! vertices may): the matching problem of a decoder, solved on the defects themselves rather than on a doubled
//! graph, so with half the vertices and half the edges.
//!
//! # Guarantees
//! - **Exact.** A primal-dual blossom algorithm in integer arithmetic only. Weights are doubled internally and
//!   all vertex duals start even, so every dual change (including the "half slack" step between two trees) is
//!   an integer. The result is optimal by LP duality; the tests verify the full dual certificate.
//! - **Complexity.** At most n/2 augmentations; each costs O(m + n^2) (every vertex is scanned once, and there
//!   are O(n) dual adjustments of O(n) each). Total O(n (m + n^2)), i.e. O(n^3) for dense graphs. Memory
//!   O(n + m).
//! - **No allocation after warm-up.** All scratch lives in the solver, is reserved up front to its worst case for
//!   the current `n` and edge count, and is reused; once the solver has handled a graph with at least as many
//!   vertices and as many edges, `solve` does not allocate (a test checks this with a counting allocator).
//! - **No recursion.** Nested blossoms are walked with explicit work stacks, so deep nesting (n in the
//!   thousands) cannot overflow the call stack.
//!
//! # Contract
//! Vertices are `0..n`; each edge is `(u, v, w)` with `u != v`, `u, v < n` and `0 <= w <= 2^40`. Parallel edges
//! are allowed (an optimal matching only ever uses the lightest of them). Edges with `u == v` or an endpoint
//! `>= n` are ignored rather than trusted. Ties and zero weights are fine.
//!
//! # Method
//! The LP is `min sum w_e x_e` with `x(delta(v)) = 1` for every vertex and `x(E(B)) <= (|B|-1)/2` for every odd
//! set `B`. The solver keeps a dual `y` per vertex and `z >= 0` per blossom, with reduced cost
//! `w_e - y_u - y_v + sum_{B containing u and v} z_B >= 0`, and grows alternating trees from every unmatched
//! vertex over tight edges. When the trees cannot grow, the duals move by the largest step that keeps
//! feasibility; each step makes an edge tight (grow, shrink a blossom, or augment) or drives a blossom dual to
//! zero (expand it). If no step is bounded, the trees certify a Tutte barrier and there is no perfect matching.
//!
//! With a boundary, vertex `v`'s edge to it (cost `c_v`, never inside a blossom) adds the constraint `y_v <= c_v`.
//! A vertex matched to the boundary is covered (not a root) and keeps `y_v = c_v`. Two more events end a stage
//! with an augmentation: an S vertex reaching `y_v = c_v` (the path from its root is flipped and `v` goes to the
//! boundary), and a tight edge from an S vertex to an unlabelled blossom whose base is at the boundary (the
//! path from the root is flipped through it, and the base leaves the boundary). Every other step is unchanged,
//! so without a boundary the solver takes exactly the steps it took before.

const NONE: u32 = u32::MAX;

/// In a [`PerfectMatching::solve_with_boundary`] result: the vertex is matched to the boundary. Internally the
/// same value marks `mate[v]` (no directed edge index reaches it).
pub const BOUNDARY: u32 = u32::MAX - 1;

/// In [`PerfectMatching::solve_with_boundary`]'s costs: the vertex has no edge to the boundary.
pub const NO_BOUNDARY: i64 = i64::MAX;

// Labels of top-level blossoms within a stage.
const FREE: u8 = 0;
const S: u8 = 1;
const T: u8 = 2;

enum Stage {
    Perfect,
    Augmented,
    Infeasible,
}

/// A reusable solver: holds its scratch buffers so that repeated solves of graphs up to the
/// largest size seen do not allocate.
///
/// Indexing: vertices are `0..n`, blossoms `n..2n` (a vertex is its own trivial blossom). Edge `k` has two
/// directed halves: `2k` runs `ends[2k] -> ends[2k+1]`, `2k+1` runs back; `d ^ 1` reverses a half.
#[derive(Debug, Default)]
pub struct PerfectMatching {
    n: usize,
    /// `ends[d]` is the tail of directed edge `d`; its head is `ends[d ^ 1]`.
    ends: Vec<u32>,
    /// Doubled edge weight, per undirected edge.
    wt: Vec<i64>,
    /// Doubled cost of each vertex's edge to the boundary, `NO_BOUNDARY` without one.
    cap: Vec<i64>,
    /// Whether some vertex has a boundary edge (the boundary events are looked for only then).
    has_caps: bool,
    adj_start: Vec<u32>,
    /// Directed edges grouped by tail.
    adj: Vec<u32>,
    /// Vertex duals, doubled units.
    y: Vec<i64>,
    /// Blossom duals, doubled units (always even), indexed by blossom id.
    z: Vec<i64>,
    /// `mate[v]`: directed edge from `v` to its partner, or `NONE`.
    mate: Vec<u32>,
    /// Top-level blossom containing each vertex.
    top: Vec<u32>,
    /// Enclosing blossom of every vertex/blossom, or `NONE` at top level.
    parent: Vec<u32>,
    base: Vec<u32>,
    label: Vec<u8>,
    /// Directed edge through which a labelled top-level blossom joined its tree (head inside); `NONE` at roots.
    label_dir: Vec<u32>,
    /// For vertices outside S-blossoms: least-slack directed edge from an S vertex to this vertex.
    best_to_s: Vec<u32>,
    /// For top-level S-blossoms: least-slack directed edge (tail inside) to another S-blossom.
    best_ss: Vec<u32>,
    /// Whether `pool[list_start[b]..][..list_len[b]]` holds, for each neighbouring S-blossom, the least-slack
    /// edge to it. Only blossoms shrunk in the current stage have one; for others the vertices are scanned.
    has_list: Vec<bool>,
    list_start: Vec<u32>,
    list_len: Vec<u32>,
    /// Storage of all lists. Live lists belong to disjoint blossoms, so they hold distinct directed edges and
    /// fit in 2m entries; the pool is compacted when full instead of grown.
    pool: Vec<u32>,
    /// Children of a blossom form a cycle through `next`/`prev` (a node is a child of at most one blossom, so
    /// per-node links suffice); `first_child` is the child holding the base. `edge_next[c]` is the directed
    /// edge from `c` to `next[c]`. Counting from the first child, edges at odd positions are matched, so every
    /// child's base is the endpoint of its matched cycle edge.
    first_child: Vec<u32>,
    next: Vec<u32>,
    prev: Vec<u32>,
    edge_next: Vec<u32>,
    in_use: Vec<bool>,
    free_ids: Vec<u32>,
    /// S vertices waiting to be scanned.
    queue: Vec<u32>,
    mark: Vec<u32>,
    stamp: u32,
    best_to: Vec<u32>,
    touched: Vec<u32>,
    stack: Vec<u32>,
    leaves: Vec<u32>,
    path_v: Vec<u32>,
    path_w: Vec<u32>,
    tasks: Vec<(u32, u32)>,
    work: Vec<u32>,
    order: Vec<(u32, u32)>,
}

/// Appends the vertices of blossom `b` to `out`.
fn push_leaves(first_child: &[u32], next: &[u32], n: usize, b: u32, stack: &mut Vec<u32>, out: &mut Vec<u32>) {
    stack.clear();
    stack.push(b);
    while let Some(x) = stack.pop() {
        if (x as usize) < n {
            out.push(x);
        } else {
            let first = first_child[x as usize];
            let mut c = first;
            loop {
                stack.push(c);
                c = next[c as usize];
                if c == first {
                    break;
                }
            }
        }
    }
}

impl PerfectMatching {
    pub fn new() -> Self {
        Self::default()
    }

    /// Minimum-weight perfect matching of the graph on `n` vertices (0..n) whose edges are
    /// `edges` (u, v, weight), u != v, weights non-negative integers (i64, each <= 2^40; the
    /// caller guarantees it). Parallel edges may appear: the lightest counts. Returns
    /// Some(total weight) and fills `mate` (resized to n) with `mate[v]` = the vertex matched
    /// to v, or None when the graph has no perfect matching (n odd, or structurally
    /// impossible). On `None`, `mate` is filled with `u32::MAX`.
    pub fn solve(&mut self, n: usize, edges: &[(u32, u32, i64)], mate: &mut Vec<u32>) -> Option<i64> {
        self.run(n, edges, None, mate)
    }

    /// Minimum-weight matching of the graph on `n` vertices (as in [`solve`](Self::solve)) in which every vertex
    /// is matched either to another vertex or to the boundary at cost `boundary[v]` (`0 <= boundary[v] <= 2^40`,
    /// or [`NO_BOUNDARY`]: that vertex must be matched to another). `boundary` has `n` entries. Returns Some(total
    /// weight) and fills `mate` with `mate[v]` = its partner or [`BOUNDARY`], or None when no such matching
    /// exists (then `mate` holds `u32::MAX`). Any number of vertices may go to the boundary, so `n` may be odd.
    pub fn solve_with_boundary(
        &mut self,
        n: usize,
        edges: &[(u32, u32, i64)],
        boundary: &[i64],
        mate: &mut Vec<u32>,
    ) -> Option<i64> {
        assert_eq!(boundary.len(), n, "one boundary cost per vertex");
        self.run(n, edges, Some(boundary), mate)
    }

    fn run(
        &mut self,
        n: usize,
        edges: &[(u32, u32, i64)],
        boundary: Option<&[i64]>,
        mate: &mut Vec<u32>,
    ) -> Option<i64> {
        mate.clear();
        mate.resize(n, NONE);
        if n == 0 {
            return Some(0);
        }
        if (boundary.is_none() && n % 2 == 1) || !self.setup(n, edges, boundary) {
            return None;
        }
        self.init_duals();
        loop {
            match self.stage() {
                Stage::Perfect => break,
                Stage::Augmented => self.expand_zero_blossoms(),
                Stage::Infeasible => return None,
            }
        }
        let mut total = 0i64;
        for (v, m) in mate.iter_mut().enumerate() {
            let d = self.mate[v];
            if d == BOUNDARY {
                *m = BOUNDARY;
                total += self.cap[v] / 2;
                continue;
            }
            let u = self.head(d);
            *m = u;
            if (v as u32) < u {
                total += self.wt[(d >> 1) as usize] / 2;
            }
        }
        Some(total)
    }

    /// After a successful solve: vertex `v`'s dual in doubled weight units (`2 y_v`). The duals certify the
    /// matching: an edge `(u, v, w)` that was not given leaves it optimal whenever `2 w >= 2 y_u + 2 y_v`, since
    /// every reduced cost is `w - y_u - y_v` plus blossom duals, which are non-negative; with a boundary, also
    /// `y_v <= c_v`.
    #[inline]
    pub fn vertex_dual_doubled(&self, v: usize) -> i64 {
        self.y.get(v).copied().unwrap_or(0)
    }

    #[inline]
    fn tail(&self, d: u32) -> u32 {
        self.ends[d as usize]
    }

    #[inline]
    fn head(&self, d: u32) -> u32 {
        self.ends[(d ^ 1) as usize]
    }

    /// Reduced cost of an edge between two different top-level blossoms (no common blossom dual applies).
    #[inline]
    fn slack(&self, d: u32) -> i64 {
        self.wt[(d >> 1) as usize] - self.y[self.tail(d) as usize] - self.y[self.head(d) as usize]
    }

    #[inline]
    fn is_top(&self, b: usize) -> bool {
        self.parent[b] == NONE && (b < self.n || self.in_use[b])
    }

    /// Appends the vertices of blossom `b` to `out` (which must not be `self.stack`).
    fn leaves_into(&mut self, b: u32, out: &mut Vec<u32>) {
        push_leaves(&self.first_child, &self.next, self.n, b, &mut self.stack, out);
    }

    /// Position of child `c` in the cycle of blossom `b`, counted from the base child.
    fn position(&self, b: u32, c: u32) -> usize {
        let mut x = self.first_child[b as usize];
        let mut i = 0;
        while x != c {
            x = self.next[x as usize];
            i += 1;
        }
        i
    }

    #[inline]
    fn adj_range(&self, v: u32) -> std::ops::Range<usize> {
        self.adj_start[v as usize] as usize..self.adj_start[v as usize + 1] as usize
    }

    /// Loads the graph and resets all state. Returns false when some vertex has no edge at all.
    fn setup(&mut self, n: usize, edges: &[(u32, u32, i64)], boundary: Option<&[i64]>) -> bool {
        assert!(n < (NONE / 2) as usize, "too many vertices");
        self.n = n;
        self.cap.clear();
        match boundary {
            Some(b) => self.cap.extend(b.iter().map(|&c| if (0..=1 << 40).contains(&c) { 2 * c } else { NO_BOUNDARY })),
            None => self.cap.resize(n, NO_BOUNDARY),
        }
        self.has_caps = self.cap.iter().any(|&c| c != NO_BOUNDARY);
        self.ends.clear();
        self.wt.clear();
        for &(u, v, w) in edges {
            if u != v && (u as usize) < n && (v as usize) < n {
                self.ends.push(u);
                self.ends.push(v);
                self.wt.push(2 * w);
            }
        }
        assert!(self.ends.len() < BOUNDARY as usize, "too many edges");
        self.adj_start.clear();
        self.adj_start.resize(n + 1, 0);
        for &t in &self.ends {
            self.adj_start[t as usize + 1] += 1;
        }
        for v in 0..n {
            if self.adj_start[v + 1] == 0 && self.cap[v] == NO_BOUNDARY {
                return false;
            }
            self.adj_start[v + 1] += self.adj_start[v];
        }
        self.adj.clear();
        self.adj.resize(self.ends.len(), 0);
        // `best_to_s` serves as the fill cursor here; stages reset it.
        self.best_to_s.clear();
        self.best_to_s.extend_from_slice(&self.adj_start[..n]);
        for (d, &t) in self.ends.iter().enumerate() {
            let pos = &mut self.best_to_s[t as usize];
            self.adj[*pos as usize] = d as u32;
            *pos += 1;
        }
        let nb = 2 * n;
        self.y.clear();
        self.y.resize(n, 0);
        self.mate.clear();
        self.mate.resize(n, NONE);
        self.top.clear();
        self.top.extend(0..n as u32);
        self.z.clear();
        self.z.resize(nb, 0);
        self.parent.clear();
        self.parent.resize(nb, NONE);
        self.base.clear();
        self.base.extend(0..nb as u32);
        self.label.clear();
        self.label.resize(nb, FREE);
        self.label_dir.clear();
        self.label_dir.resize(nb, NONE);
        self.best_ss.clear();
        self.best_ss.resize(nb, NONE);
        self.has_list.clear();
        self.has_list.resize(nb, false);
        self.in_use.clear();
        self.in_use.resize(nb, false);
        self.mark.clear();
        self.mark.resize(nb, 0);
        self.stamp = 0;
        self.best_to.clear();
        self.best_to.resize(nb, NONE);
        for v in [&mut self.list_start, &mut self.list_len, &mut self.first_child, &mut self.next, &mut self.prev] {
            v.clear();
            v.resize(nb, NONE);
        }
        self.edge_next.clear();
        self.edge_next.resize(nb, NONE);
        self.free_ids.clear();
        self.free_ids.extend((n as u32..nb as u32).rev());
        // Reserve every scratch buffer to its worst case now, so that nothing grows later in this solve.
        // Live lists never exceed 2m entries; twice that keeps compactions rare (amortised O(n) per shrink).
        self.pool.clear();
        self.pool.reserve(2 * self.ends.len());
        for v in [&mut self.queue, &mut self.leaves, &mut self.work] {
            v.clear();
            v.reserve(n);
        }
        for v in [&mut self.touched, &mut self.stack, &mut self.path_v, &mut self.path_w] {
            v.clear();
            v.reserve(nb);
        }
        self.tasks.clear();
        self.tasks.reserve(n);
        self.order.clear();
        self.order.reserve(n);
        true
    }

    /// Feasible even duals plus a greedy matching on tight edges, so that far fewer stages are needed.
    fn init_duals(&mut self) {
        let n = self.n;
        for v in 0..n {
            let mut m = i64::MAX;
            for &d in &self.adj[self.adj_range(v as u32)] {
                m = m.min(self.wt[(d >> 1) as usize] / 2);
            }
            // Even duals keep every slack between two tree vertices even (see `delta_step`).
            self.y[v] = m.min(self.cap[v]) & !1;
        }
        for v in 0..n as u32 {
            if self.mate[v as usize] != NONE {
                continue;
            }
            // Raise y[v] as far as feasibility allows; stays even since weights and duals are even.
            let mut m = i64::MAX;
            for idx in self.adj_range(v) {
                let d = self.adj[idx];
                m = m.min(self.wt[(d >> 1) as usize] - self.y[self.head(d) as usize]);
            }
            self.y[v as usize] = m.min(self.cap[v as usize]);
            for idx in self.adj_range(v) {
                let d = self.adj[idx];
                let u = self.head(d);
                if self.mate[u as usize] == NONE && self.slack(d) == 0 {
                    self.mate[v as usize] = d;
                    self.mate[u as usize] = d ^ 1;
                    break;
                }
            }
            if self.mate[v as usize] == NONE && self.y[v as usize] == self.cap[v as usize] {
                self.mate[v as usize] = BOUNDARY;
            }
        }
    }

    /// One stage: grow trees from all unmatched vertices until one augmentation happens.
    fn stage(&mut self) -> Stage {
        let n = self.n;
        let nb = 2 * n;
        self.label.fill(FREE);
        self.label_dir.fill(NONE);
        self.best_ss.fill(NONE);
        self.has_list.fill(false);
        self.pool.clear();
        self.best_to_s.clear();
        self.best_to_s.resize(n, NONE);
        self.queue.clear();
        let mut any_free = false;
        for b in 0..nb {
            if self.is_top(b) && self.mate[self.base[b] as usize] == NONE {
                any_free = true;
                self.label_s(b as u32, NONE);
            }
        }
        if !any_free {
            return Stage::Perfect;
        }
        loop {
            while let Some(v) = self.queue.pop() {
                if self.scan(v) {
                    return Stage::Augmented;
                }
            }
            match self.delta_step() {
                Some(true) => return Stage::Augmented,
                Some(false) => {}
                None => return Stage::Infeasible,
            }
        }
    }

    /// Scans the edges of a new S vertex. Returns true if it augmented.
    fn scan(&mut self, v: u32) -> bool {
        for idx in self.adj_range(v) {
            let d = self.adj[idx];
            let w = self.head(d);
            // Re-read: shrinking a blossom during this loop changes `top[v]`.
            let bv = self.top[v as usize];
            let bw = self.top[w as usize];
            if bv == bw {
                continue;
            }
            let s = self.slack(d);
            if self.label[bw as usize] == S {
                if s == 0 {
                    if self.tight_ss(d) {
                        return true;
                    }
                } else {
                    let cur = self.best_ss[bv as usize];
                    if cur == NONE || s < self.slack(cur) {
                        self.best_ss[bv as usize] = d;
                    }
                }
            } else {
                // Kept also for vertices inside T-blossoms: they matter once such a blossom is expanded.
                let cur = self.best_to_s[w as usize];
                if cur == NONE || s < self.slack(cur) {
                    self.best_to_s[w as usize] = d;
                }
                if s == 0 && self.label[bw as usize] == FREE && self.label_t(bw, d) {
                    return true;
                }
            }
        }
        false
    }

    /// Changes the duals by the largest feasible step and handles the event it creates.
    /// Returns Some(true) after an augmentation, Some(false) otherwise, None if no step is bounded.
    fn delta_step(&mut self) -> Option<bool> {
        let n = self.n;
        let nb = 2 * n;
        let mut delta = i64::MAX;
        let mut kind = 0u8;
        let mut arg = NONE;
        if self.has_caps {
            for v in 0..n {
                if self.cap[v] != NO_BOUNDARY && self.label[self.top[v] as usize] == S {
                    let s = self.cap[v] - self.y[v];
                    if s < delta {
                        delta = s;
                        kind = 1;
                        arg = v as u32;
                    }
                }
            }
        }
        for v in 0..n {
            let d = self.best_to_s[v];
            if d != NONE && self.label[self.top[v] as usize] == FREE {
                let s = self.slack(d);
                if s < delta {
                    delta = s;
                    kind = 2;
                    arg = d;
                }
            }
        }
        for b in 0..nb {
            if !self.is_top(b) {
                continue;
            }
            match self.label[b] {
                S => {
                    let d = self.best_ss[b];
                    if d != NONE {
                        // Both ends are tree vertices: tight paths to their roots, and all roots moved together
                        // from even starting duals, so the two duals have equal parity and the slack is even.
                        let s = self.slack(d);
                        debug_assert!(s >= 0 && s % 2 == 0, "odd or negative S-S slack {s}");
                        if s / 2 < delta {
                            delta = s / 2;
                            kind = 3;
                            arg = d;
                        }
                    }
                }
                T if b >= n => {
                    let h = self.z[b] / 2;
                    if h < delta {
                        delta = h;
                        kind = 4;
                        arg = b as u32;
                    }
                }
                _ => {}
            }
        }
        if kind == 0 {
            // Nothing can change: the S-blossoms are odd components left by removing the T vertices, and there
            // are more of them than T vertices (Tutte).
            return None;
        }
        debug_assert!(delta >= 0);
        if delta > 0 {
            for v in 0..n {
                match self.label[self.top[v] as usize] {
                    S => self.y[v] += delta,
                    T => self.y[v] -= delta,
                    _ => {}
                }
            }
            for b in n..nb {
                if self.in_use[b] && self.parent[b] == NONE {
                    match self.label[b] {
                        S => self.z[b] += 2 * delta,
                        T => self.z[b] -= 2 * delta,
                        _ => {}
                    }
                }
            }
        }
        match kind {
            1 => {
                self.augment_path(arg, BOUNDARY);
                Some(true)
            }
            2 => {
                let bw = self.top[self.head(arg) as usize];
                Some(self.label_t(bw, arg))
            }
            3 => Some(self.tight_ss(arg)),
            _ => {
                self.expand_t(arg);
                Some(false)
            }
        }
    }

    /// Labels top-level blossom `b` S (joined through `d`, or a root when `d == NONE`) and queues its vertices.
    fn label_s(&mut self, b: u32, d: u32) {
        let bu = b as usize;
        self.label[bu] = S;
        self.label_dir[bu] = d;
        self.best_ss[bu] = NONE;
        self.has_list[bu] = false;
        push_leaves(&self.first_child, &self.next, self.n, b, &mut self.stack, &mut self.queue);
    }

    /// Labels an unlabelled top-level blossom T through `d`, and its matched partner S. When the blossom's base
    /// is at the boundary, `d` ends an augmenting path instead: flips it and returns true.
    fn label_t(&mut self, b: u32, d: u32) -> bool {
        // Unlabelled blossoms are always matched: every unmatched one is a tree root.
        let md = self.mate[self.base[b as usize] as usize];
        debug_assert!(md != NONE);
        if md == BOUNDARY {
            let w = self.head(d);
            self.augment_path(self.tail(d), d);
            if b as usize >= self.n {
                self.augment_blossom(b, w);
            }
            self.mate[w as usize] = d ^ 1;
            return true;
        }
        self.label[b as usize] = T;
        self.label_dir[b as usize] = d;
        let partner = self.top[self.head(md) as usize];
        self.label_s(partner, md);
        false
    }

    /// Next S-blossom up the tree from S-blossom `b`, or `NONE` at the root.
    fn s_parent(&self, b: u32) -> u32 {
        let ld = self.label_dir[b as usize];
        if ld == NONE {
            return NONE;
        }
        let t = self.top[self.tail(ld) as usize];
        self.top[self.tail(self.label_dir[t as usize]) as usize]
    }

    /// Handles a tight edge between two S-blossoms: shrink if in one tree, else augment (returns true).
    fn tight_ss(&mut self, d: u32) -> bool {
        let bv = self.top[self.tail(d) as usize];
        let bw = self.top[self.head(d) as usize];
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.mark.fill(0);
            self.stamp = 1;
        }
        let mut b = bv;
        loop {
            self.mark[b as usize] = self.stamp;
            let p = self.s_parent(b);
            if p == NONE {
                break;
            }
            b = p;
        }
        let mut b = bw;
        loop {
            if self.mark[b as usize] == self.stamp {
                self.add_blossom(b, d);
                return false;
            }
            let p = self.s_parent(b);
            if p == NONE {
                break;
            }
            b = p;
        }
        self.augment(d);
        true
    }

    /// Least-slack bookkeeping while building a new blossom's list: `e` leaves blossom `nb`.
    fn consider(&mut self, nb: u32, e: u32) {
        let bj = self.top[self.head(e) as usize];
        if bj != nb && self.label[bj as usize] == S {
            let cur = self.best_to[bj as usize];
            if cur == NONE {
                self.best_to[bj as usize] = e;
                self.touched.push(bj);
            } else if self.slack(e) < self.slack(cur) {
                self.best_to[bj as usize] = e;
            }
        }
    }

    /// Shrinks the odd cycle closed by tight edge `d` (between S-blossoms of one tree) into a new S-blossom
    /// whose base child is `lca`.
    fn add_blossom(&mut self, lca: u32, d: u32) {
        let bv = self.top[self.tail(d) as usize];
        let bw = self.top[self.head(d) as usize];
        let mut pv = std::mem::take(&mut self.path_v);
        let mut pw = std::mem::take(&mut self.path_w);
        for (start, path) in [(bv, &mut pv), (bw, &mut pw)] {
            path.clear();
            let mut b = start;
            while b != lca {
                path.push(b);
                let t = self.top[self.tail(self.label_dir[b as usize]) as usize];
                path.push(t);
                b = self.top[self.tail(self.label_dir[t as usize]) as usize];
            }
        }
        let nb = self.free_ids.pop().expect("at most n/2 blossoms exist at once");
        let nbu = nb as usize;
        // Cycle: lca, down the v side to bv, across d, up the w side back to lca.
        let mut last = lca;
        let mut link = |this: &mut Self, c: u32, e: u32| {
            this.next[last as usize] = c;
            this.edge_next[last as usize] = e;
            this.prev[c as usize] = last;
            last = c;
        };
        for &p in pv.iter().rev() {
            link(self, p, self.label_dir[p as usize]);
        }
        let mut pending = d;
        for &q in pw.iter() {
            link(self, q, pending);
            pending = self.label_dir[q as usize] ^ 1;
        }
        link(self, lca, pending);
        self.path_v = pv;
        self.path_w = pw;

        self.first_child[nbu] = lca;
        self.in_use[nbu] = true;
        self.parent[nbu] = NONE;
        self.base[nbu] = self.base[lca as usize];
        self.z[nbu] = 0;
        self.label[nbu] = S;
        self.label_dir[nbu] = self.label_dir[lca as usize];
        let mut leaves = std::mem::take(&mut self.leaves);
        let mut c = lca;
        loop {
            self.parent[c as usize] = nb;
            leaves.clear();
            self.leaves_into(c, &mut leaves);
            for &x in &leaves {
                self.top[x as usize] = nb;
            }
            // Former T vertices are now S and must be scanned.
            if self.label[c as usize] == T {
                self.queue.extend_from_slice(&leaves);
            }
            c = self.next[c as usize];
            if c == lca {
                break;
            }
        }
        // Least-slack edge from the new blossom to each other S-blossom.
        self.touched.clear();
        let mut c = lca;
        loop {
            let cu = c as usize;
            if self.label[cu] == S && self.has_list[cu] {
                let start = self.list_start[cu] as usize;
                for idx in start..start + self.list_len[cu] as usize {
                    self.consider(nb, self.pool[idx]);
                }
            } else {
                leaves.clear();
                self.leaves_into(c, &mut leaves);
                for &x in &leaves {
                    for idx in self.adj_range(x) {
                        self.consider(nb, self.adj[idx]);
                    }
                }
            }
            self.has_list[cu] = false;
            self.best_ss[cu] = NONE;
            c = self.next[cu];
            if c == lca {
                break;
            }
        }
        self.leaves = leaves;
        if self.pool.len() + self.touched.len() > self.pool.capacity() {
            self.compact_pool();
        }
        self.list_start[nbu] = self.pool.len() as u32;
        self.list_len[nbu] = self.touched.len() as u32;
        let mut best = NONE;
        let mut best_slack = i64::MAX;
        for i in 0..self.touched.len() {
            let bj = self.touched[i] as usize;
            let e = self.best_to[bj];
            self.best_to[bj] = NONE;
            self.pool.push(e);
            let s = self.slack(e);
            if s < best_slack {
                best_slack = s;
                best = e;
            }
        }
        self.has_list[nbu] = true;
        self.best_ss[nbu] = best;
    }

    /// Moves the live lists to the front of the pool, in place.
    fn compact_pool(&mut self) {
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        for b in self.n..2 * self.n {
            if self.in_use[b] && self.has_list[b] {
                order.push((self.list_start[b], b as u32));
            }
        }
        order.sort_unstable();
        let mut to = 0usize;
        for &(start, b) in &order {
            let len = self.list_len[b as usize] as usize;
            self.pool.copy_within(start as usize..start as usize + len, to);
            self.list_start[b as usize] = to as u32;
            to += len;
        }
        self.pool.truncate(to);
        self.order = order;
    }

    /// Dissolves top-level blossom `b`: its children become top-level. Releases the id.
    fn dissolve(&mut self, b: u32) {
        let bu = b as usize;
        let mut leaves = std::mem::take(&mut self.leaves);
        let first = self.first_child[bu];
        let mut c = first;
        loop {
            self.parent[c as usize] = NONE;
            leaves.clear();
            self.leaves_into(c, &mut leaves);
            for &x in &leaves {
                self.top[x as usize] = c;
            }
            c = self.next[c as usize];
            if c == first {
                break;
            }
        }
        self.leaves = leaves;
        self.in_use[bu] = false;
        self.has_list[bu] = false;
        self.label[bu] = FREE;
        self.free_ids.push(b);
    }

    /// Expands a T-blossom whose dual reached zero, relabelling the even path from the entry child to the base
    /// child; the remaining children become unlabelled (tight edges to them are picked up by the next step).
    fn expand_t(&mut self, b: u32) {
        let bu = b as usize;
        self.dissolve(b);
        let first = self.first_child[bu];
        let mut c = first;
        loop {
            self.label[c as usize] = FREE;
            c = self.next[c as usize];
            if c == first {
                break;
            }
        }
        let ld = self.label_dir[bu];
        self.label_dir[bu] = NONE;
        let entry = self.top[self.head(ld) as usize];
        self.label[entry as usize] = T;
        self.label_dir[entry as usize] = ld;
        // The even-length way round from the entry child to the base child: forwards when the entry sits at an
        // odd position, backwards when even.
        let forward = self.position(b, entry) % 2 == 1;
        let step = |this: &Self, x: u32| -> (u32, u32) {
            if forward {
                (this.next[x as usize], this.edge_next[x as usize])
            } else {
                let p = this.prev[x as usize];
                (p, this.edge_next[p as usize] ^ 1)
            }
        };
        let mut x = entry;
        while x != first {
            let (x1, e1) = step(self, x);
            let (x2, e2) = step(self, x1);
            self.label_s(x1, e1);
            self.label[x2 as usize] = T;
            self.label_dir[x2 as usize] = e2;
            x = x2;
        }
    }

    /// End of stage: blossoms with zero dual carry no information, so dissolve them (recursively).
    fn expand_zero_blossoms(&mut self) {
        let n = self.n;
        let mut work = std::mem::take(&mut self.work);
        work.clear();
        for b in n..2 * n {
            if self.in_use[b] && self.parent[b] == NONE && self.z[b] == 0 {
                work.push(b as u32);
            }
        }
        while let Some(b) = work.pop() {
            self.dissolve(b);
            let first = self.first_child[b as usize];
            let mut c = first;
            loop {
                if c as usize >= n && self.z[c as usize] == 0 {
                    work.push(c);
                }
                c = self.next[c as usize];
                if c == first {
                    break;
                }
            }
        }
        self.work = work;
    }

    /// Makes vertex `v0` the base of blossom `b0` by flipping the even alternating path inside it, at every
    /// nesting level (explicit work list instead of recursion; each nested blossom gets at most one task).
    fn augment_blossom(&mut self, b0: u32, v0: u32) {
        let n = self.n;
        let mut tasks = std::mem::take(&mut self.tasks);
        tasks.clear();
        tasks.push((b0, v0));
        while let Some((b, v)) = tasks.pop() {
            let mut c = v;
            while self.parent[c as usize] != b {
                c = self.parent[c as usize];
            }
            if c as usize >= n {
                tasks.push((c, v));
            }
            let first = self.first_child[b as usize];
            // Along the even way round from `c` to the base child, the cycle edges at even positions (counted
            // from the base child) become matched.
            let mut flip = |this: &mut Self, x: u32| {
                let e = this.edge_next[x as usize];
                let (tx, hy) = (this.tail(e), this.head(e));
                this.mate[tx as usize] = e;
                this.mate[hy as usize] = e ^ 1;
                let y = this.next[x as usize];
                if x as usize >= n {
                    tasks.push((x, tx));
                }
                if y as usize >= n {
                    tasks.push((y, hy));
                }
            };
            if c != first {
                if self.position(b, c) % 2 == 1 {
                    let mut x = self.next[c as usize];
                    loop {
                        flip(self, x);
                        if self.next[x as usize] == first {
                            break;
                        }
                        x = self.next[self.next[x as usize] as usize];
                    }
                } else {
                    let mut x = self.prev[self.prev[c as usize] as usize];
                    loop {
                        flip(self, x);
                        if x == first {
                            break;
                        }
                        x = self.prev[self.prev[x as usize] as usize];
                    }
                }
            }
            self.first_child[b as usize] = c;
            self.base[b as usize] = v;
        }
        self.tasks = tasks;
    }

    /// Augments along the path root(v) .. v - w .. root(w) given by tight S-S edge `d` between two trees.
    fn augment(&mut self, d: u32) {
        self.augment_path(self.tail(d), d);
        self.augment_path(self.head(d), d ^ 1);
    }

    /// Flips the alternating path from S vertex `s` up to its tree's root, `s` taking `e` as its mate (a directed
    /// edge with tail `s`, or [`BOUNDARY`]).
    fn augment_path(&mut self, mut s: u32, mut e: u32) {
        loop {
            let bs = self.top[s as usize];
            if bs as usize >= self.n {
                self.augment_blossom(bs, s);
            }
            self.mate[s as usize] = e;
            let ld = self.label_dir[bs as usize];
            if ld == NONE {
                break;
            }
            let bt = self.top[self.tail(ld) as usize];
            let ld2 = self.label_dir[bt as usize];
            let t2 = self.head(ld2);
            if bt as usize >= self.n {
                self.augment_blossom(bt, t2);
            }
            self.mate[t2 as usize] = ld2 ^ 1;
            s = self.tail(ld2);
            e = ld2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    impl PerfectMatching {
        /// Verifies the LP optimality certificate of the last successful solve: dual feasibility of every edge,
        /// tight matched edges, nonnegative blossom duals, and full blossoms where the dual is positive.
        fn check_certificate(&self, total: i64) -> Result<(), String> {
            let n = self.n;
            let chain = |v: usize| {
                let mut out = Vec::new();
                let mut b = self.parent[v];
                while b != NONE {
                    out.push(b);
                    b = self.parent[b as usize];
                }
                out
            };
            let chains: Vec<Vec<u32>> = (0..n).map(chain).collect();
            for v in 0..n {
                if self.cap[v] == NO_BOUNDARY {
                    continue;
                }
                if self.y[v] > self.cap[v] {
                    return Err(format!("vertex {v}'s dual {} above its boundary cost {}", self.y[v], self.cap[v]));
                }
                if self.mate[v] == BOUNDARY && self.y[v] != self.cap[v] {
                    return Err(format!("vertex {v} at the boundary, not tight"));
                }
            }
            for k in 0..self.wt.len() {
                let (u, v) = (self.ends[2 * k] as usize, self.ends[2 * k + 1] as usize);
                let zsum: i64 = chains[u].iter().filter(|b| chains[v].contains(b)).map(|&b| self.z[b as usize]).sum();
                let red = self.wt[k] - self.y[u] - self.y[v] + zsum;
                if red < 0 {
                    return Err(format!("edge {k} ({u},{v}) infeasible: reduced cost {red}"));
                }
                if self.mate[u] >> 1 == k as u32 && red != 0 {
                    return Err(format!("matched edge {k} not tight: {red}"));
                }
            }
            let mut dual = self.y.iter().sum::<i64>();
            for b in n..2 * n {
                if !self.in_use[b] {
                    continue;
                }
                if self.z[b] < 0 || self.z[b] % 2 != 0 {
                    return Err(format!("blossom {b} dual {}", self.z[b]));
                }
                let mut inside = vec![false; n];
                let mut st = Vec::new();
                let mut lv = Vec::new();
                push_leaves(&self.first_child, &self.next, n, b as u32, &mut st, &mut lv);
                for &x in &lv {
                    inside[x as usize] = true;
                }
                let internal = lv
                    .iter()
                    .filter(|&&x| {
                        self.mate[x as usize] != BOUNDARY && inside[self.head(self.mate[x as usize]) as usize]
                    })
                    .count();
                if lv.len() % 2 == 0 || lv.len() < 3 {
                    return Err(format!("blossom {b} has {} vertices", lv.len()));
                }
                if self.z[b] > 0 && internal != lv.len() - 1 {
                    return Err(format!("blossom {b} with positive dual is not full"));
                }
                dual -= (lv.len() as i64 - 1) / 2 * self.z[b];
            }
            for v in 0..n {
                let d = self.mate[v];
                if d == BOUNDARY && self.cap[v] != NO_BOUNDARY {
                    continue;
                }
                if d == NONE || d == BOUNDARY || self.tail(d) as usize != v || self.mate[self.head(d) as usize] != d ^ 1
                {
                    return Err(format!("mate of {v} inconsistent"));
                }
            }
            if dual != 2 * total {
                return Err(format!("dual objective {dual} != 2 * {total}"));
            }
            Ok(())
        }
    }

    /// Lightest weight per vertex pair, `None` for a non-edge.
    type Dist = Vec<Vec<Option<i64>>>;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, k: u64) -> u64 {
            self.next() % k
        }
        fn chance(&mut self, p: f64) -> bool {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
        }
    }

    fn lightest(n: usize, edges: &[(u32, u32, i64)]) -> Vec<Vec<Option<i64>>> {
        let mut w = vec![vec![None; n]; n];
        for &(u, v, c) in edges {
            let (u, v) = (u as usize, v as usize);
            if u == v || u >= n || v >= n {
                continue;
            }
            let cur: Option<i64> = w[u][v];
            let best = cur.map_or(c, |x| x.min(c));
            w[u][v] = Some(best);
            w[v][u] = Some(best);
        }
        w
    }

    fn brute(w: &[Vec<Option<i64>>], used: &mut Vec<bool>) -> Option<i64> {
        let Some(i) = used.iter().position(|&u| !u) else {
            return Some(0);
        };
        used[i] = true;
        let mut best: Option<i64> = None;
        for j in i + 1..w.len() {
            if let (false, Some(c)) = (used[j], w[i][j]) {
                used[j] = true;
                if let Some(rest) = brute(w, used) {
                    best = Some(best.map_or(c + rest, |b| b.min(c + rest)));
                }
                used[j] = false;
            }
        }
        used[i] = false;
        best
    }

    /// Checks that `mate` is a perfect matching on given edges whose lightest-edge weight is `total`.
    fn check_mate(n: usize, w: &[Vec<Option<i64>>], mate: &[u32], total: i64) {
        assert_eq!(mate.len(), n);
        let mut sum = 0;
        for v in 0..n {
            let u = mate[v] as usize;
            assert!(u < n && u != v, "mate[{v}] = {u}");
            assert_eq!(mate[u] as usize, v, "mate not symmetric at {v}");
            let c = w[v][u].unwrap_or_else(|| panic!("matched non-edge ({v},{u})"));
            if v < u {
                sum += c;
            }
        }
        assert_eq!(sum, total, "mate weight differs from returned total");
    }

    fn random_graph(rng: &mut Rng, n: usize, density: f64, wmax: i64) -> Vec<(u32, u32, i64)> {
        let mut edges = Vec::new();
        for u in 0..n as u32 {
            for v in u + 1..n as u32 {
                if rng.chance(density) {
                    let (a, b) = if rng.chance(0.5) { (u, v) } else { (v, u) };
                    edges.push((a, b, rng.below(wmax as u64 + 1) as i64));
                    if rng.chance(0.1) {
                        edges.push((b, a, rng.below(wmax as u64 + 1) as i64));
                    }
                }
            }
        }
        // Shuffle so adjacency order is not sorted.
        for i in (1..edges.len()).rev() {
            edges.swap(i, rng.below(i as u64 + 1) as usize);
        }
        edges
    }

    fn iterations(release: usize) -> usize {
        if cfg!(debug_assertions) {
            release / 10
        } else {
            release
        }
    }

    #[test]
    fn trivial_cases() {
        let mut pm = PerfectMatching::new();
        let mut mate = vec![7; 3];
        assert_eq!(pm.solve(0, &[], &mut mate), Some(0));
        assert!(mate.is_empty());
        assert_eq!(pm.solve(2, &[], &mut mate), None);
        assert_eq!(mate, vec![u32::MAX; 2]);
        assert_eq!(pm.solve(2, &[(0, 1, 5)], &mut mate), Some(5));
        assert_eq!(mate, vec![1, 0]);
        assert_eq!(pm.solve(2, &[(1, 0, 7), (0, 1, 3), (0, 1, 4)], &mut mate), Some(3));
        assert_eq!(pm.solve(2, &[(1, 0, 0)], &mut mate), Some(0));
        assert_eq!(pm.solve(3, &[(0, 1, 1), (1, 2, 1), (0, 2, 1)], &mut mate), None);
        assert_eq!(pm.solve(4, &[(0, 1, 1), (0, 2, 1), (0, 3, 1)], &mut mate), None);
        // Self-loops and out-of-range endpoints are ignored.
        assert_eq!(pm.solve(2, &[(0, 0, 1), (0, 5, 1), (0, 1, 9)], &mut mate), Some(9));
        let big = 1i64 << 40;
        assert_eq!(
            pm.solve(4, &[(0, 1, big), (2, 3, big), (0, 2, big), (1, 3, big - 1)], &mut mate),
            Some(2 * big - 1)
        );
    }

    #[test]
    fn brute_force_random() {
        let mut rng = Rng(1);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        let (mut some, mut none) = (0usize, 0usize);
        for it in 0..iterations(30_000) {
            let n = if it % 50 == 0 { 2 * rng.below(6) as usize + 1 } else { 2 * rng.below(7) as usize };
            let density = [1.0, 0.8, 0.5, 0.3, 0.15][rng.below(5) as usize];
            let wmax = [0, 1, 3, 10, 1000, 1 << 40][rng.below(6) as usize];
            let edges = random_graph(&mut rng, n, density, wmax);
            let w = lightest(n, &edges);
            let expect = if n % 2 == 1 { None } else { brute(&w, &mut vec![false; n]) };
            let got = pm.solve(n, &edges, &mut mate);
            assert_eq!(got, expect, "iteration {it}: n={n} edges={edges:?}");
            if let Some(total) = got {
                check_mate(n, &w, &mate, total);
                if n > 0 {
                    pm.check_certificate(total).unwrap_or_else(|e| panic!("iteration {it}: {e}; edges={edges:?}"));
                }
                some += 1;
            } else {
                none += 1;
            }
        }
        println!("brute force: {some} feasible, {none} infeasible instances agree");
        assert!(some > 1000 && none > 100);
    }

    /// Defects 0..k, boundary copies k..2k: defect i to copy k+i at cost b[i], copies pairwise at 0, defect pairs
    /// at their distance (all pairs, or a random subset): a [`direct_instance`] with every boundary, doubled.
    fn boundary_instance(rng: &mut Rng, k: usize, sparse: bool) -> (Vec<(u32, u32, i64)>, Vec<i64>, Dist) {
        let (mut edges, bnd, dist) = direct_instance_with(rng, k, sparse, 0.0);
        for (i, &b) in bnd.iter().enumerate() {
            edges.push((i as u32, (k + i) as u32, b));
            for j in i + 1..k {
                edges.push(((k + i) as u32, (k + j) as u32, 0));
            }
        }
        for i in (1..edges.len()).rev() {
            edges.swap(i, rng.below(i as u64 + 1) as usize);
        }
        (edges, bnd, dist)
    }

    /// Independent optimum for the boundary structure: DP over subsets of unresolved defects.
    fn boundary_dp(bnd: &[i64], dist: &[Vec<Option<i64>>]) -> i64 {
        let k = bnd.len();
        let full = (1usize << k) - 1;
        let mut dp = vec![i64::MAX; 1 << k];
        dp[0] = 0;
        for mask in 1..=full {
            let i = mask.trailing_zeros() as usize;
            let rest = mask & !(1 << i);
            let mut best = bnd[i] + dp[rest];
            let mut r = rest;
            while r != 0 {
                let j = r.trailing_zeros() as usize;
                r &= r - 1;
                if let Some(d) = dist[i][j] {
                    best = best.min(d + dp[rest & !(1 << j)]);
                }
            }
            dp[mask] = best;
        }
        dp[full]
    }

    #[test]
    fn boundary_structure() {
        let mut rng = Rng(2);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        let mut dp_checked = 0;
        let mut cert_checked = 0;
        for it in 0..iterations(3_000) {
            let k = if it % 3 == 0 { 17 + rng.below(24) as usize } else { rng.below(17) as usize };
            let sparse = rng.chance(0.3);
            let (edges, bnd, dist) = boundary_instance(&mut rng, k, sparse);
            let n = 2 * k;
            let total = pm.solve(n, &edges, &mut mate).expect("boundary graphs always have a perfect matching");
            check_mate(n, &lightest(n, &edges), &mate, total);
            if n > 0 {
                pm.check_certificate(total).unwrap_or_else(|e| panic!("k={k}: {e}"));
                cert_checked += 1;
            }
            if k <= 16 {
                assert_eq!(total, boundary_dp(&bnd, &dist), "k={k} edges={edges:?}");
                dp_checked += 1;
            }
        }
        println!("boundary: {dp_checked} instances match the subset DP, {cert_checked} certificates verified");
    }

    /// A matching with a boundary: defects `0..k` at `dist` (pairs), each at `bnd[i]` from the boundary
    /// (`NO_BOUNDARY`: none). Returns the edges in random order.
    fn direct_instance(rng: &mut Rng, k: usize, sparse: bool) -> (Vec<(u32, u32, i64)>, Vec<i64>, Dist) {
        let none_chance = [0.0, 0.2, 0.9][rng.below(3) as usize];
        direct_instance_with(rng, k, sparse, none_chance)
    }

    /// [`direct_instance`], each defect without a boundary with chance `none_chance`.
    fn direct_instance_with(
        rng: &mut Rng,
        k: usize,
        sparse: bool,
        none_chance: f64,
    ) -> (Vec<(u32, u32, i64)>, Vec<i64>, Dist) {
        let pts: Vec<(i64, i64)> = (0..k).map(|_| (rng.below(30) as i64, rng.below(30) as i64)).collect();
        let metric = rng.chance(0.5);
        let mut bnd = vec![0; k];
        let mut dist = vec![vec![None; k]; k];
        let mut edges = Vec::new();
        for i in 0..k {
            bnd[i] = if rng.chance(none_chance) {
                NO_BOUNDARY
            } else if metric {
                pts[i].0.min(29 - pts[i].0) + 1
            } else {
                rng.below(20) as i64
            };
            for j in i + 1..k {
                if sparse && rng.chance(0.6) {
                    continue;
                }
                let d = if metric {
                    (pts[i].0 - pts[j].0).abs() + (pts[i].1 - pts[j].1).abs()
                } else {
                    rng.below(20) as i64
                };
                dist[i][j] = Some(d);
                dist[j][i] = Some(d);
                edges.push(if rng.chance(0.5) { (i as u32, j as u32, d) } else { (j as u32, i as u32, d) });
            }
        }
        for i in (1..edges.len()).rev() {
            edges.swap(i, rng.below(i as u64 + 1) as usize);
        }
        (edges, bnd, dist)
    }

    /// The optimum of a direct instance by the subset DP, `None` when every way leaves a defect out.
    fn direct_dp(bnd: &[i64], dist: &[Vec<Option<i64>>]) -> Option<i64> {
        let k = bnd.len();
        let full = (1usize << k) - 1;
        let mut dp = vec![None; 1 << k];
        dp[0] = Some(0i64);
        for mask in 1..=full {
            let i = mask.trailing_zeros() as usize;
            let rest = mask & !(1 << i);
            let mut best = match (bnd[i], dp[rest]) {
                (c, Some(r)) if c != NO_BOUNDARY => Some(c + r),
                _ => None,
            };
            let mut r = rest;
            while r != 0 {
                let j = r.trailing_zeros() as usize;
                r &= r - 1;
                if let (Some(d), Some(x)) = (dist[i][j], dp[rest & !(1 << j)]) {
                    best = Some(best.map_or(d + x, |b: i64| b.min(d + x)));
                }
            }
            dp[mask] = best;
        }
        dp[full]
    }

    /// Checks a boundary solve's `mate`: symmetric, on given edges or at the boundary where there is one, of
    /// weight `total`.
    fn check_boundary_mate(w: &[Vec<Option<i64>>], bnd: &[i64], mate: &[u32], total: i64) {
        let mut sum = 0;
        for v in 0..bnd.len() {
            if mate[v] == BOUNDARY {
                assert_ne!(bnd[v], NO_BOUNDARY, "vertex {v} at a boundary it has no edge to");
                sum += bnd[v];
                continue;
            }
            let u = mate[v] as usize;
            assert!(u < bnd.len() && u != v && mate[u] as usize == v, "mate[{v}] = {u}");
            let c = w[v][u].unwrap_or_else(|| panic!("matched non-edge ({v},{u})"));
            if v < u {
                sum += c;
            }
        }
        assert_eq!(sum, total, "mate weight differs from returned total");
    }

    #[test]
    fn boundary_equals_the_subset_dp_and_the_doubled_graph() {
        let mut rng = Rng(12);
        let (mut pm, mut doubled) = (PerfectMatching::new(), PerfectMatching::new());
        let (mut mate, mut mate2) = (Vec::new(), Vec::new());
        let (mut dp_checked, mut none, mut at_boundary, mut cert_checked) = (0, 0, 0, 0);
        for it in 0..iterations(20_000) {
            let k = if it % 5 == 0 { 15 + rng.below(40) as usize } else { rng.below(15) as usize };
            let sparse = rng.chance(0.4);
            let (edges, bnd, dist) = direct_instance(&mut rng, k, sparse);
            let got = pm.solve_with_boundary(k, &edges, &bnd, &mut mate);
            if k <= 14 {
                assert_eq!(got, direct_dp(&bnd, &dist), "iteration {it}: k={k} bnd={bnd:?} edges={edges:?}");
                dp_checked += 1;
            }
            // The doubled graph: two copies, each defect's copies joined by twice its boundary cost.
            let mut h: Vec<(u32, u32, i64)> =
                edges.iter().flat_map(|&(u, v, d)| [(u, v, d), (u + k as u32, v + k as u32, d)]).collect();
            h.extend((0..k).filter(|&i| bnd[i] != NO_BOUNDARY).map(|i| (i as u32, (i + k) as u32, 2 * bnd[i])));
            let twice = doubled.solve(2 * k, &h, &mut mate2);
            assert_eq!(got.map(|t| 2 * t), twice, "iteration {it}: k={k}, against the doubled graph");
            let Some(total) = got else {
                assert!(mate.iter().all(|&m| m == NONE));
                none += 1;
                continue;
            };
            check_boundary_mate(&lightest(k, &edges), &bnd, &mate, total);
            at_boundary += mate.iter().filter(|&&m| m == BOUNDARY).count();
            if k > 0 {
                pm.check_certificate(total)
                    .unwrap_or_else(|e| panic!("iteration {it}: {e}; bnd={bnd:?} edges={edges:?}"));
                cert_checked += 1;
            }
        }
        println!("boundary: {dp_checked} equal the subset DP, {cert_checked} certificates, {none} infeasible");
        assert!(none > 50 && at_boundary > 1000 && cert_checked > 1000);
    }

    #[test]
    fn boundary_cases() {
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        // One vertex, no edge: its boundary, or nothing.
        assert_eq!(pm.solve_with_boundary(1, &[], &[4], &mut mate), Some(4));
        assert_eq!(mate, vec![BOUNDARY]);
        assert_eq!(pm.solve_with_boundary(1, &[], &[NO_BOUNDARY], &mut mate), None);
        // A pair cheaper than both boundaries, and one dearer.
        assert_eq!(pm.solve_with_boundary(2, &[(0, 1, 5)], &[3, 3], &mut mate), Some(5));
        assert_eq!(mate, vec![1, 0]);
        assert_eq!(pm.solve_with_boundary(2, &[(0, 1, 7)], &[3, 3], &mut mate), Some(6));
        assert_eq!(mate, vec![BOUNDARY, BOUNDARY]);
        // An odd cycle whose cheapest cover takes one vertex to the boundary, inside a blossom.
        let tri = [(0, 1, 2), (1, 2, 2), (0, 2, 2)];
        assert_eq!(pm.solve_with_boundary(3, &tri, &[NO_BOUNDARY, 9, NO_BOUNDARY], &mut mate), Some(11));
        assert_eq!(mate, vec![2, BOUNDARY, 0]);
        pm.check_certificate(11).unwrap();
        // Out-of-range costs mean no boundary.
        assert_eq!(pm.solve_with_boundary(1, &[], &[-1], &mut mate), None);
        assert_eq!(pm.solve_with_boundary(1, &[], &[(1 << 40) + 1], &mut mate), None);
    }

    #[test]
    fn larger_random_certificates() {
        let mut rng = Rng(3);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        let mut count = 0;
        for it in 0..iterations(600) {
            let n = 2 * (7 + rng.below(100) as usize);
            let density = [1.0, 0.5, 0.1, 0.04][rng.below(4) as usize];
            let wmax = [0, 2, 50, 1 << 20, 1 << 40][rng.below(5) as usize];
            let mut edges = random_graph(&mut rng, n, density, wmax);
            // Plant a perfect matching so that the instance is feasible.
            let mut perm: Vec<u32> = (0..n as u32).collect();
            for i in (1..n).rev() {
                perm.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for p in perm.chunks(2) {
                edges.push((p[0], p[1], rng.below(wmax as u64 + 1) as i64));
            }
            let total = pm.solve(n, &edges, &mut mate).unwrap_or_else(|| panic!("iteration {it}: planted matching"));
            check_mate(n, &lightest(n, &edges), &mate, total);
            pm.check_certificate(total).unwrap_or_else(|e| panic!("iteration {it}: {e}"));
            count += 1;
        }
        println!("larger random: {count} certificates verified");
    }

    #[test]
    fn tutte_barrier_is_infeasible() {
        // Barrier X of size s; s + 2 odd components (triangles or single vertices) attached only to X.
        let mut rng = Rng(4);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        for _ in 0..iterations(300) {
            let s = 1 + rng.below(30) as usize;
            let mut edges = Vec::new();
            let mut n = s;
            for _ in 0..s + 2 {
                let size = if rng.chance(0.5) { 1 } else { 3 };
                let first = n as u32;
                for a in 0..size as u32 {
                    for b in a + 1..size as u32 {
                        edges.push((first + a, first + b, rng.below(5) as i64));
                    }
                    edges.push((first + a, rng.below(s as u64) as u32, rng.below(5) as i64));
                }
                n += size;
            }
            for a in 0..s as u32 {
                for b in a + 1..s as u32 {
                    if rng.chance(0.5) {
                        edges.push((a, b, rng.below(5) as i64));
                    }
                }
            }
            // n = s + (s + 2 odd sizes) is always even.
            assert_eq!(n % 2, 0);
            assert_eq!(pm.solve(n, &edges, &mut mate), None);
        }
    }

    #[test]
    fn reuse_matches_fresh_solver() {
        let mut rng = Rng(5);
        let mut reused = PerfectMatching::new();
        let (mut m1, mut m2) = (Vec::new(), Vec::new());
        for _ in 0..iterations(2_000) {
            let n = if rng.chance(0.05) { 2 * rng.below(300) as usize } else { 2 * rng.below(20) as usize };
            let density = [1.0, 0.5, 0.2][rng.below(3) as usize];
            let wmax = [3, 1000][rng.below(2) as usize];
            let edges = random_graph(&mut rng, n, density, wmax);
            let a = reused.solve(n, &edges, &mut m1);
            let b = PerfectMatching::new().solve(n, &edges, &mut m2);
            assert_eq!(a, b);
            assert_eq!(m1, m2);
        }
    }

    #[test]
    fn large_sparse_and_deep() {
        let mut rng = Rng(6);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        // Grid-like sparse graph, n = 2000, with ties.
        let side = 40;
        let n = side * 50;
        let mut edges = Vec::new();
        for r in 0..50 {
            for c in 0..side {
                let v = (r * side + c) as u32;
                if c + 1 < side {
                    edges.push((v, v + 1, rng.below(4) as i64));
                }
                if r + 1 < 50 {
                    edges.push((v, v + side as u32, rng.below(4) as i64));
                }
                if rng.chance(0.2) {
                    edges.push((v, rng.below(n as u64) as u32, rng.below(4) as i64));
                }
            }
        }
        let total = pm.solve(n, &edges, &mut mate).expect("grid with even side has a perfect matching");
        check_mate(n, &lightest(n, &edges), &mate, total);
        pm.check_certificate(total).unwrap();
        // Odd cycles chained together invite deeply nested blossoms.
        let n = 2001 + 1;
        let mut edges = Vec::new();
        for v in 0..2000u32 {
            edges.push((v, v + 1, 1 + (v % 3) as i64));
            if v >= 2 {
                edges.push((v, v - 2, 2));
            }
        }
        edges.push((2000, 2001, 1 << 40));
        let total = pm.solve(n, &edges, &mut mate).expect("path has a perfect matching");
        check_mate(n, &lightest(n, &edges), &mate, total);
        pm.check_certificate(total).unwrap();
    }

    /// Counts allocations made by the current thread while enabled, to check the no-allocation guarantee.
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        pub struct Counting;
        thread_local! {
            pub static ENABLED: Cell<bool> = const { Cell::new(false) };
            pub static COUNT: Cell<usize> = const { Cell::new(0) };
        }
        fn note() {
            if ENABLED.with(|e| e.get()) {
                COUNT.with(|c| c.set(c.get() + 1));
            }
        }
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                note();
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                note();
                unsafe { System.realloc(ptr, layout, new_size) }
            }
        }
        #[global_allocator]
        static GLOBAL: Counting = Counting;
    }

    #[test]
    fn no_allocation_after_warm_up() {
        let mut rng = Rng(8);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        let nmax = 200;
        let warm: Vec<_> = (0..nmax as u32).flat_map(|u| (u + 1..nmax as u32).map(move |v| (u, v, 1))).collect();
        pm.solve(nmax, &warm, &mut mate).unwrap();
        let mut solved = 0;
        for it in 0..iterations(300) {
            let n = 2 * rng.below(nmax as u64 / 2 + 1) as usize;
            let density = [1.0, 0.5, 0.1][rng.below(3) as usize];
            let wmax = [0, 3, 1000, 1 << 40][rng.below(4) as usize];
            let (edges, bnd_k) = if it % 2 == 0 {
                (random_graph(&mut rng, n, density, wmax), None)
            } else {
                let sparse = rng.chance(0.5);
                let (e, _, _) = boundary_instance(&mut rng, n / 2, sparse);
                (e, Some(n / 2))
            };
            if edges.len() > warm.len() {
                continue;
            }
            let sparse = rng.chance(0.5);
            let (direct, bnd, _) = direct_instance(&mut rng, n / 2, sparse);
            counting::COUNT.with(|c| c.set(0));
            counting::ENABLED.with(|e| e.set(true));
            let got = pm.solve(n, &edges, &mut mate);
            let with_boundary = pm.solve_with_boundary(n / 2, &direct, &bnd, &mut mate);
            counting::ENABLED.with(|e| e.set(false));
            assert_eq!(counting::COUNT.with(|c| c.get()), 0, "solve allocated (n={n}, boundary={bnd_k:?})");
            solved += got.is_some() as usize + with_boundary.is_some() as usize;
        }
        assert!(solved > iterations(300) / 6);
    }

    #[test]
    fn timing_complete_graphs() {
        let mut rng = Rng(7);
        let mut pm = PerfectMatching::new();
        let mut mate = Vec::new();
        for &n in &[50usize, 100, 200, 400] {
            let reps = if n <= 100 { 20 } else { 3 };
            let mut best = f64::MAX;
            let mut total_ms = 0.0;
            for _ in 0..reps {
                let mut edges = Vec::with_capacity(n * n / 2);
                for u in 0..n as u32 {
                    for v in u + 1..n as u32 {
                        edges.push((u, v, rng.below(1_000_000) as i64));
                    }
                }
                let t = Instant::now();
                let total = pm.solve(n, &edges, &mut mate).unwrap();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                best = best.min(ms);
                total_ms += ms;
                std::hint::black_box(total);
            }
            println!("complete random n={n:4}: best {best:8.3} ms, mean {:8.3} ms over {reps}", total_ms / reps as f64);
        }
    }
}
