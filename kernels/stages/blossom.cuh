/*
 * kernels/stages/blossom.cuh — exact minimum-weight matching with a boundary on one GPU warp:
 * the device twin of qec/src/matching.rs (`PerfectMatching::solve_with_boundary`), so that
 * both pick the same matching on the same edge list and boundary costs (ties included). The
 * QEC stage uses it for a cluster of three defects or more that enumeration does not settle
 * (qec.cuh rl_qec_solve_cluster): the cluster's defects are the vertices, each with its
 * boundary distance, and any number of them may go to the boundary.
 *
 * Read it beside matching.rs: every function here has the name of the method it mirrors
 * (rl_pm_<method>), and the Rust's Vec buffers are fixed arrays in a scratch area of shared
 * or global memory (struct rl_pm), sized by the caller for `nmax` vertices and `emax`
 * edges: every push is bounded by the same invariants the Rust relies on (at most 2n
 * blossom ids, each vertex queued once per stage, live lists within the pool of 4 entries
 * per edge), and the pool is compacted when full exactly when the Rust's is (its capacity
 * is reserved to 4 entries per edge there too).
 *
 * The warp: the Rust's loops whose steps are independent (clearing, the duals' moves) run
 * over the lanes; its searches for a first least (a delta step's candidates, a scan's
 * bests) are reductions over the lanes by (value, the Rust's order), so they pick what the
 * Rust picks; its order-dependent steps (labelling, shrinking, expanding, augmenting: the
 * functions without a lane argument) run on lane 0, which alone keeps the struct's counters
 * (queue, pool, free ids, stamp). A scan runs its edges 32 at a time up to the first that
 * changes labels or blossoms, which lane 0 then takes.
 *
 * Contract: vertices 0..n, the caller has written the edges into ends[2e], ends[2e+1] and
 * wt[e] = 2 * weight (weights in 0..2^40, u != v, both < n, no two edges on one pair), e < m,
 * each vertex's boundary cost into cap[v] = 2 * cost (RL_PM_NO_CAP: none), and the struct,
 * with n and m, at the head of the scratch area (rl_pm_place); then all 32
 * lanes of a warp call rl_pm_solve with that one struct. Integer arithmetic only; no
 * recursion; no allocation.
 *
 * The struct lives in the scratch area, beside its arrays, not on each lane's stack: the
 * functions below read its pointers and counters at every step, and with the transceiver's
 * shared-memory carve-out a local (stack) load costs 120-290 cycles against 34 for shared
 * memory (scripts/probes/mem_latency.cu). Lanes other than 0 only read it (and write the
 * same values as lane 0 where they all reset a counter, before a __syncwarp).
 */
#ifndef ROCELINK_STAGE_BLOSSOM_CUH
#define ROCELINK_STAGE_BLOSSOM_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

#define RL_PM_NONE 0xFFFFFFFFu
#define RL_PM_FREE 0u
#define RL_PM_S 1u
#define RL_PM_T 2u
#define RL_PM_I64_MAX 0x7FFFFFFFFFFFFFFFll
/* mate[v] of a vertex matched to the boundary (matching.rs BOUNDARY); cap[v] without one */
#define RL_PM_BOUNDARY 0xFFFFFFFEu
#define RL_PM_NO_CAP RL_PM_I64_MAX

/* A phase mark (the QEC stage's profiler defines it; measurement only). */
#ifndef RL_PM_MARK
#define RL_PM_MARK(i) \
    do {              \
    } while (0)
#endif

/* rl_pm_stage's outcomes (matching.rs Stage) */
#define RL_PM_PERFECT 0
#define RL_PM_AUGMENTED 1
#define RL_PM_INFEASIBLE 2

/** The solver's state (matching.rs PerfectMatching): pointers into the scratch area, each
 * array of the capacity noted. The functions below take it through a restrict pointer: its
 * arrays never overlap the struct, so the compiler keeps their pointers in registers across
 * the arrays' stores. */
struct rl_pm {
    uint32_t n, m;             /* vertices, undirected edges */
    uint32_t *ends;            /* [2 emax] */
    long long *wt;             /* [emax] doubled weights */
    long long *cap;            /* [nmax] doubled boundary costs */
    uint32_t *adj_start;       /* [nmax + 1] */
    uint32_t *adj;             /* [2 emax] */
    long long *y;              /* [nmax] */
    long long *z;              /* [2 nmax] */
    uint32_t *mate, *top;      /* [nmax] */
    uint32_t *parent, *base;   /* [2 nmax] */
    uint8_t *label;            /* [2 nmax] */
    uint32_t *label_dir;       /* [2 nmax] */
    uint32_t *best_to_s;       /* [nmax] */
    uint32_t *best_ss;         /* [2 nmax] */
    uint8_t *has_list;         /* [2 nmax] */
    uint32_t *list_start, *list_len; /* [2 nmax] */
    uint32_t *pool;            /* [4 emax] */
    uint32_t pool_len, pool_cap;
    uint32_t *first_child, *next, *prev, *edge_next; /* [2 nmax] */
    uint8_t *in_use;           /* [2 nmax] */
    uint32_t *free_ids;        /* [2 nmax] */
    uint32_t nfree;
    uint32_t *queue;           /* [2 nmax] */
    uint32_t nqueue;
    uint32_t *mark;            /* [2 nmax] */
    uint32_t stamp;
    uint32_t *best_to;         /* [2 nmax] */
    uint32_t *touched;         /* [2 nmax] */
    uint32_t ntouched;
    uint32_t *stack;           /* [2 nmax] */
    uint32_t *leaves;          /* [2 nmax] */
    uint32_t *path_v, *path_w; /* [2 nmax] */
    uint2 *tasks;              /* [2 nmax] */
    uint32_t *work;            /* [2 nmax] */
    uint2 *order;              /* [2 nmax] */
};

/** Bytes of the struct at the head of the scratch area (a multiple of 16). */
#define RL_PM_HEAD_BYTES ((sizeof(struct rl_pm) + 15ull) & ~15ull)

/** Points the solver's arrays into `mem` (16-byte aligned) for nmax vertices and emax edges,
 * after the struct's own place at its head (RL_PM_HEAD_BYTES), each array on a 16-byte
 * boundary, and returns the bytes the area takes: with `mem` 0 it only measures
 * (rl_pm_bytes), so the size and the layout have one definition. */
__host__ __device__ __forceinline__ unsigned long long rl_pm_carve(struct rl_pm *p, uint8_t *mem, uint32_t nmax, uint32_t emax) {
    const unsigned long long v = nmax, b = 2ull * nmax, e = emax;
    unsigned long long at = RL_PM_HEAD_BYTES;
#define RL_PM_TAKE(ptr, type, count)                                            \
    do {                                                                        \
        ptr = (type *)((unsigned long long)mem + at);                           \
        at += ((unsigned long long)sizeof(type) * (count) + 15ull) & ~15ull;    \
    } while (0)
    RL_PM_TAKE(p->ends, uint32_t, 2 * e);
    RL_PM_TAKE(p->wt, long long, e);
    RL_PM_TAKE(p->cap, long long, v);
    RL_PM_TAKE(p->adj_start, uint32_t, v + 1);
    RL_PM_TAKE(p->adj, uint32_t, 2 * e);
    RL_PM_TAKE(p->y, long long, v);
    RL_PM_TAKE(p->z, long long, b);
    RL_PM_TAKE(p->mate, uint32_t, v);
    RL_PM_TAKE(p->top, uint32_t, v);
    RL_PM_TAKE(p->parent, uint32_t, b);
    RL_PM_TAKE(p->base, uint32_t, b);
    RL_PM_TAKE(p->label, uint8_t, b);
    RL_PM_TAKE(p->label_dir, uint32_t, b);
    RL_PM_TAKE(p->best_to_s, uint32_t, v);
    RL_PM_TAKE(p->best_ss, uint32_t, b);
    RL_PM_TAKE(p->has_list, uint8_t, b);
    RL_PM_TAKE(p->list_start, uint32_t, b);
    RL_PM_TAKE(p->list_len, uint32_t, b);
    RL_PM_TAKE(p->pool, uint32_t, 4 * e);
    RL_PM_TAKE(p->first_child, uint32_t, b);
    RL_PM_TAKE(p->next, uint32_t, b);
    RL_PM_TAKE(p->prev, uint32_t, b);
    RL_PM_TAKE(p->edge_next, uint32_t, b);
    RL_PM_TAKE(p->in_use, uint8_t, b);
    RL_PM_TAKE(p->free_ids, uint32_t, b);
    RL_PM_TAKE(p->queue, uint32_t, b);
    RL_PM_TAKE(p->mark, uint32_t, b);
    RL_PM_TAKE(p->best_to, uint32_t, b);
    RL_PM_TAKE(p->touched, uint32_t, b);
    RL_PM_TAKE(p->stack, uint32_t, b);
    RL_PM_TAKE(p->leaves, uint32_t, b);
    RL_PM_TAKE(p->path_v, uint32_t, b);
    RL_PM_TAKE(p->path_w, uint32_t, b);
    RL_PM_TAKE(p->tasks, uint2, b);
    RL_PM_TAKE(p->work, uint32_t, b);
    RL_PM_TAKE(p->order, uint2, b);
#undef RL_PM_TAKE
    p->pool_cap = (uint32_t)(4 * e);
    return at;
}

/** Bytes of scratch the solver takes for nmax vertices and emax edges (its struct included). */
__host__ __device__ __forceinline__ unsigned long long rl_pm_bytes(uint32_t nmax, uint32_t emax) {
    struct rl_pm p;
    return rl_pm_carve(&p, (uint8_t *)0, nmax, emax);
}

/** Lane 0: the struct `p` (carved from `mem`, n and m set) into its place at the head of
 * `mem`; returns that place, which every lane passes to rl_pm_solve after a __syncwarp. */
__device__ __forceinline__ struct rl_pm *rl_pm_place(const struct rl_pm &p, uint8_t *mem, uint32_t lane) {
    struct rl_pm *const at = (struct rl_pm *)mem;
    if (lane == 0) *at = p;
    return at;
}

__device__ __forceinline__ uint32_t rl_pm_tail(const struct rl_pm *__restrict__ p, uint32_t d) { return p->ends[d]; }
__device__ __forceinline__ uint32_t rl_pm_head(const struct rl_pm *__restrict__ p, uint32_t d) { return p->ends[d ^ 1u]; }
__device__ __forceinline__ long long rl_pm_slack(const struct rl_pm *__restrict__ p, uint32_t d) {
    return p->wt[d >> 1] - p->y[rl_pm_tail(p, d)] - p->y[rl_pm_head(p, d)];
}
__device__ __forceinline__ bool rl_pm_is_top(const struct rl_pm *__restrict__ p, uint32_t b) { return p->parent[b] == RL_PM_NONE && (b < p->n || p->in_use[b]); }

/** push_leaves: appends the vertices of blossom b to out[*len]. */
__device__ __forceinline__ void rl_pm_push_leaves(struct rl_pm *p, uint32_t b, uint32_t *out, uint32_t *len) {
    uint32_t sp = 0;
    p->stack[sp++] = b;
    while (sp > 0) {
        const uint32_t x = p->stack[--sp];
        if (x < p->n) {
            out[(*len)++] = x;
        } else {
            const uint32_t first = p->first_child[x];
            uint32_t c = first;
            do {
                p->stack[sp++] = c;
                c = p->next[c];
            } while (c != first);
        }
    }
}

__device__ __forceinline__ uint32_t rl_pm_position(const struct rl_pm *__restrict__ p, uint32_t b, uint32_t c) {
    uint32_t x = p->first_child[b], i = 0;
    while (x != c) {
        x = p->next[x];
        i++;
    }
    return i;
}

/* Warp helpers: every lane of the warp calls them (mask all lanes). */
#define RL_PM_WARP 0xFFFFFFFFu
__device__ __forceinline__ long long rl_pm_wmin(long long v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const long long u = __shfl_xor_sync(RL_PM_WARP, v, o);
        v = u < v ? u : v;
    }
    return v;
}
__device__ __forceinline__ uint32_t rl_pm_wmin32(uint32_t v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_min_sync(RL_PM_WARP, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t u = __shfl_xor_sync(RL_PM_WARP, v, o);
        v = u < v ? u : v;
    }
    return v;
#endif
}
/** Lanes below `lane` (for a lane's place among the ballot's lanes before it). */
__device__ __forceinline__ uint32_t rl_pm_below(uint32_t lane) { return (1u << lane) - 1u; }

/** setup (warp): the adjacency from the edges already in ends/wt, each vertex's edges in the
 * order of their directed ids as the Rust's push order gives; false when a vertex has none
 * and no boundary. */
__device__ __noinline__ bool rl_pm_setup(struct rl_pm *__restrict__ p, uint32_t lane) {
    const uint32_t n = p->n, nb = 2u * n, m2 = 2u * p->m;
    for (uint32_t v = lane; v <= n; v += 32u) p->adj_start[v] = 0;
    __syncwarp();
    for (uint32_t d = lane; d < m2; d += 32u) atomicAdd(p->adj_start + p->ends[d] + 1u, 1u);
    __syncwarp();
    /* the starts: a running sum 32 vertices at a time; best_to_s holds each fill cursor */
    uint32_t carry = 0;
    bool empty = false;
    for (uint32_t v0 = 0; v0 < n; v0 += 32u) {
        const uint32_t v = v0 + lane;
        const uint32_t c = v < n ? p->adj_start[v + 1u] : 0u;
        empty |= __any_sync(RL_PM_WARP, v < n && c == 0u && p->cap[v] == RL_PM_NO_CAP);
        uint32_t sum = c;
#pragma unroll
        for (uint32_t o = 1; o < 32u; o <<= 1) {
            const uint32_t a = __shfl_up_sync(RL_PM_WARP, sum, o);
            if (lane >= o) sum += a;
        }
        if (v < n) {
            p->adj_start[v + 1u] = carry + sum;
            p->best_to_s[v] = carry + sum - c;
        }
        carry += __shfl_sync(RL_PM_WARP, sum, 31);
    }
    if (empty) return false;
    __syncwarp();
    /* the fill, 32 directed edges at a time in id order: lanes of one tail take their places
     * in lane order, and the lowest moves the tail's cursor past them */
    for (uint32_t d0 = 0; d0 < m2; d0 += 32u) {
        const uint32_t d = d0 + lane;
        const uint32_t t = d < m2 ? p->ends[d] : RL_PM_NONE;
        const uint32_t same = __match_any_sync(RL_PM_WARP, t);
        const uint32_t at = d < m2 ? p->best_to_s[t] : 0u;
        __syncwarp();
        if (d < m2) {
            p->adj[at + (uint32_t)__popc(same & rl_pm_below(lane))] = d;
            if (lane == (uint32_t)__ffs(same) - 1u) p->best_to_s[t] = at + (uint32_t)__popc(same);
        }
        __syncwarp();
    }
    for (uint32_t v = lane; v < n; v += 32u) {
        p->y[v] = 0;
        p->mate[v] = RL_PM_NONE;
        p->top[v] = v;
        /* free_ids = (n..nb).rev(): popped from the end, n first */
        p->free_ids[v] = nb - 1u - v;
    }
    for (uint32_t b = lane; b < nb; b += 32u) {
        p->z[b] = 0;
        p->parent[b] = RL_PM_NONE;
        p->base[b] = b;
        p->label[b] = RL_PM_FREE;
        p->label_dir[b] = RL_PM_NONE;
        p->best_ss[b] = RL_PM_NONE;
        p->has_list[b] = 0;
        p->in_use[b] = 0;
        p->mark[b] = 0;
        p->best_to[b] = RL_PM_NONE;
        p->list_start[b] = p->list_len[b] = p->first_child[b] = p->next[b] = p->prev[b] = RL_PM_NONE;
        p->edge_next[b] = RL_PM_NONE;
    }
    p->stamp = 0;
    p->nfree = n;
    p->pool_len = 0;
    p->nqueue = 0;
    p->ntouched = 0;
    __syncwarp();
    return true;
}

/** init_duals (warp): each vertex's half-weight bound side by side; then, vertex by vertex as
 * the Rust goes, its tightened dual over its edges and its first tight free partner. */
__device__ __noinline__ void rl_pm_init_duals(struct rl_pm *__restrict__ p, uint32_t lane) {
    const uint32_t n = p->n;
    for (uint32_t v = lane; v < n; v += 32u) {
        long long m = RL_PM_I64_MAX;
        for (uint32_t i = p->adj_start[v]; i < p->adj_start[v + 1u]; i++) {
            const long long h = p->wt[p->adj[i] >> 1] / 2;
            m = h < m ? h : m;
        }
        const long long cv = p->cap[v];
        p->y[v] = (cv < m ? cv : m) & ~1ll;
    }
    __syncwarp();
    for (uint32_t v = 0; v < n; v++) {
        if (p->mate[v] != RL_PM_NONE) continue; /* warp-uniform */
        const uint32_t i0 = p->adj_start[v], i1 = p->adj_start[v + 1u];
        long long m = RL_PM_I64_MAX;
        for (uint32_t i = i0 + lane; i < i1; i += 32u) {
            const uint32_t d = p->adj[i];
            const long long r = p->wt[d >> 1] - p->y[rl_pm_head(p, d)];
            m = r < m ? r : m;
        }
        m = rl_pm_wmin(m);
        const long long cv = p->cap[v];
        m = cv < m ? cv : m;
        /* the first edge, in adjacency order, to a free vertex that is tight once y[v] = m */
        uint32_t found = RL_PM_NONE;
        for (uint32_t j0 = i0; j0 < i1 && found == RL_PM_NONE; j0 += 32u) {
            const uint32_t i = j0 + lane;
            bool ok = false;
            if (i < i1) {
                const uint32_t d = p->adj[i], u = rl_pm_head(p, d);
                ok = p->mate[u] == RL_PM_NONE && p->wt[d >> 1] - m - p->y[u] == 0;
            }
            const uint32_t bal = __ballot_sync(RL_PM_WARP, ok);
            if (bal != 0u) found = j0 + (uint32_t)__ffs(bal) - 1u;
        }
        if (lane == 0) {
            p->y[v] = m;
            if (found != RL_PM_NONE) {
                const uint32_t d = p->adj[found];
                p->mate[v] = d;
                p->mate[rl_pm_head(p, d)] = d ^ 1u;
            } else if (m == cv) {
                p->mate[v] = RL_PM_BOUNDARY;
            }
        }
        __syncwarp();
    }
}

__device__ __forceinline__ void rl_pm_label_s(struct rl_pm *__restrict__ p, uint32_t b, uint32_t d) {
    p->label[b] = RL_PM_S;
    p->label_dir[b] = d;
    p->best_ss[b] = RL_PM_NONE;
    p->has_list[b] = 0;
    rl_pm_push_leaves(p, b, p->queue, &p->nqueue);
}

__device__ __noinline__ void rl_pm_augment_blossom(struct rl_pm *__restrict__ p, uint32_t b0, uint32_t v0);
__device__ __noinline__ void rl_pm_augment_path(struct rl_pm *__restrict__ p, uint32_t s, uint32_t e);

/** label_t: T through d, its partner S; or, when its base is at the boundary, the augmenting
 * path through it flipped (true). */
__device__ __forceinline__ bool rl_pm_label_t(struct rl_pm *__restrict__ p, uint32_t b, uint32_t d) {
    const uint32_t md = p->mate[p->base[b]];
    if (md == RL_PM_BOUNDARY) {
        const uint32_t w = rl_pm_head(p, d);
        rl_pm_augment_path(p, rl_pm_tail(p, d), d);
        if (b >= p->n) rl_pm_augment_blossom(p, b, w);
        p->mate[w] = d ^ 1u;
        return true;
    }
    p->label[b] = RL_PM_T;
    p->label_dir[b] = d;
    const uint32_t partner = p->top[rl_pm_head(p, md)];
    rl_pm_label_s(p, partner, md);
    return false;
}

__device__ __forceinline__ uint32_t rl_pm_s_parent(const struct rl_pm *__restrict__ p, uint32_t b) {
    const uint32_t ld = p->label_dir[b];
    if (ld == RL_PM_NONE) return RL_PM_NONE;
    const uint32_t t = p->top[rl_pm_tail(p, ld)];
    return p->top[rl_pm_tail(p, p->label_dir[t])];
}

__device__ __forceinline__ void rl_pm_consider(struct rl_pm *__restrict__ p, uint32_t nb, uint32_t e) {
    const uint32_t bj = p->top[rl_pm_head(p, e)];
    if (bj != nb && p->label[bj] == RL_PM_S) {
        const uint32_t cur = p->best_to[bj];
        if (cur == RL_PM_NONE) {
            p->best_to[bj] = e;
            p->touched[p->ntouched++] = bj;
        } else if (rl_pm_slack(p, e) < rl_pm_slack(p, cur)) {
            p->best_to[bj] = e;
        }
    }
}

/** compact_pool: the live lists to the front, in order of their starts. */
__device__ __noinline__ void rl_pm_compact_pool(struct rl_pm *__restrict__ p) {
    uint32_t no = 0;
    for (uint32_t b = p->n; b < 2u * p->n; b++)
        if (p->in_use[b] && p->has_list[b]) p->order[no++] = make_uint2(p->list_start[b], b);
    /* insertion sort by (start, b): the keys are distinct */
    for (uint32_t i = 1; i < no; i++) {
        const uint2 x = p->order[i];
        uint32_t j = i;
        while (j > 0 && (p->order[j - 1u].x > x.x || (p->order[j - 1u].x == x.x && p->order[j - 1u].y > x.y))) {
            p->order[j] = p->order[j - 1u];
            j--;
        }
        p->order[j] = x;
    }
    uint32_t to = 0;
    for (uint32_t i = 0; i < no; i++) {
        const uint32_t start = p->order[i].x, b = p->order[i].y, len = p->list_len[b];
        for (uint32_t k = 0; k < len; k++) p->pool[to + k] = p->pool[start + k]; /* to <= start: copy_within forwards */
        p->list_start[b] = to;
        to += len;
    }
    p->pool_len = to;
}

__device__ __noinline__ void rl_pm_add_blossom(struct rl_pm *__restrict__ p, uint32_t lca, uint32_t d) {
    const uint32_t bv = p->top[rl_pm_tail(p, d)];
    const uint32_t bw = p->top[rl_pm_head(p, d)];
    uint32_t npv = 0, npw = 0;
    for (int side = 0; side < 2; side++) {
        uint32_t *path = side == 0 ? p->path_v : p->path_w;
        uint32_t *len = side == 0 ? &npv : &npw;
        uint32_t b = side == 0 ? bv : bw;
        while (b != lca) {
            path[(*len)++] = b;
            const uint32_t t = p->top[rl_pm_tail(p, p->label_dir[b])];
            path[(*len)++] = t;
            b = p->top[rl_pm_tail(p, p->label_dir[t])];
        }
    }
    const uint32_t nb = p->free_ids[--p->nfree];
    uint32_t last = lca;
#define RL_PM_LINK(c, e)           \
    do {                           \
        const uint32_t c_ = (c);   \
        p->next[last] = c_;        \
        p->edge_next[last] = (e);  \
        p->prev[c_] = last;        \
        last = c_;                 \
    } while (0)
    for (uint32_t i = npv; i > 0; i--) {
        const uint32_t q = p->path_v[i - 1u];
        RL_PM_LINK(q, p->label_dir[q]);
    }
    uint32_t pending = d;
    for (uint32_t i = 0; i < npw; i++) {
        const uint32_t q = p->path_w[i];
        RL_PM_LINK(q, pending);
        pending = p->label_dir[q] ^ 1u;
    }
    RL_PM_LINK(lca, pending);
#undef RL_PM_LINK
    p->first_child[nb] = lca;
    p->in_use[nb] = 1;
    p->parent[nb] = RL_PM_NONE;
    p->base[nb] = p->base[lca];
    p->z[nb] = 0;
    p->label[nb] = RL_PM_S;
    p->label_dir[nb] = p->label_dir[lca];
    uint32_t c = lca;
    do {
        p->parent[c] = nb;
        uint32_t nl = 0;
        rl_pm_push_leaves(p, c, p->leaves, &nl);
        for (uint32_t i = 0; i < nl; i++) p->top[p->leaves[i]] = nb;
        if (p->label[c] == RL_PM_T)
            for (uint32_t i = 0; i < nl; i++) p->queue[p->nqueue++] = p->leaves[i];
        c = p->next[c];
    } while (c != lca);
    p->ntouched = 0;
    c = lca;
    do {
        if (p->label[c] == RL_PM_S && p->has_list[c]) {
            const uint32_t start = p->list_start[c];
            for (uint32_t i = start; i < start + p->list_len[c]; i++) rl_pm_consider(p, nb, p->pool[i]);
        } else {
            uint32_t nl = 0;
            rl_pm_push_leaves(p, c, p->leaves, &nl);
            for (uint32_t i = 0; i < nl; i++) {
                const uint32_t x = p->leaves[i];
                for (uint32_t j = p->adj_start[x]; j < p->adj_start[x + 1u]; j++) rl_pm_consider(p, nb, p->adj[j]);
            }
        }
        p->has_list[c] = 0;
        p->best_ss[c] = RL_PM_NONE;
        c = p->next[c];
    } while (c != lca);
    if (p->pool_len + p->ntouched > p->pool_cap) rl_pm_compact_pool(p);
    p->list_start[nb] = p->pool_len;
    p->list_len[nb] = p->ntouched;
    uint32_t best = RL_PM_NONE;
    long long best_slack = RL_PM_I64_MAX;
    for (uint32_t i = 0; i < p->ntouched; i++) {
        const uint32_t bj = p->touched[i];
        const uint32_t e = p->best_to[bj];
        p->best_to[bj] = RL_PM_NONE;
        p->pool[p->pool_len++] = e;
        const long long s = rl_pm_slack(p, e);
        if (s < best_slack) {
            best_slack = s;
            best = e;
        }
    }
    p->has_list[nb] = 1;
    p->best_ss[nb] = best;
}

__device__ __noinline__ void rl_pm_dissolve(struct rl_pm *__restrict__ p, uint32_t b) {
    const uint32_t first = p->first_child[b];
    uint32_t c = first;
    do {
        p->parent[c] = RL_PM_NONE;
        uint32_t nl = 0;
        rl_pm_push_leaves(p, c, p->leaves, &nl);
        for (uint32_t i = 0; i < nl; i++) p->top[p->leaves[i]] = c;
        c = p->next[c];
    } while (c != first);
    p->in_use[b] = 0;
    p->has_list[b] = 0;
    p->label[b] = RL_PM_FREE;
    p->free_ids[p->nfree++] = b;
}

__device__ __noinline__ void rl_pm_expand_t(struct rl_pm *__restrict__ p, uint32_t b) {
    rl_pm_dissolve(p, b);
    const uint32_t first = p->first_child[b];
    uint32_t c = first;
    do {
        p->label[c] = RL_PM_FREE;
        c = p->next[c];
    } while (c != first);
    const uint32_t ld = p->label_dir[b];
    p->label_dir[b] = RL_PM_NONE;
    const uint32_t entry = p->top[rl_pm_head(p, ld)];
    p->label[entry] = RL_PM_T;
    p->label_dir[entry] = ld;
    const bool forward = rl_pm_position(p, b, entry) % 2u == 1u;
    uint32_t x = entry;
    while (x != first) {
        uint32_t x1, e1, x2, e2;
        if (forward) {
            x1 = p->next[x];
            e1 = p->edge_next[x];
            x2 = p->next[x1];
            e2 = p->edge_next[x1];
        } else {
            x1 = p->prev[x];
            e1 = p->edge_next[x1] ^ 1u;
            x2 = p->prev[x1];
            e2 = p->edge_next[x2] ^ 1u;
        }
        rl_pm_label_s(p, x1, e1);
        p->label[x2] = RL_PM_T;
        p->label_dir[x2] = e2;
        x = x2;
    }
}

__device__ __noinline__ void rl_pm_expand_zero_blossoms(struct rl_pm *__restrict__ p) {
    const uint32_t n = p->n;
    uint32_t nw = 0;
    for (uint32_t b = n; b < 2u * n; b++)
        if (p->in_use[b] && p->parent[b] == RL_PM_NONE && p->z[b] == 0) p->work[nw++] = b;
    while (nw > 0) {
        const uint32_t b = p->work[--nw];
        rl_pm_dissolve(p, b);
        const uint32_t first = p->first_child[b];
        uint32_t c = first;
        do {
            if (c >= n && p->z[c] == 0) p->work[nw++] = c;
            c = p->next[c];
        } while (c != first);
    }
}

__device__ __noinline__ void rl_pm_augment_blossom(struct rl_pm *__restrict__ p, uint32_t b0, uint32_t v0) {
    const uint32_t n = p->n;
    uint32_t nt = 0;
    p->tasks[nt++] = make_uint2(b0, v0);
    while (nt > 0) {
        const uint2 t = p->tasks[--nt];
        const uint32_t b = t.x, v = t.y;
        uint32_t c = v;
        while (p->parent[c] != b) c = p->parent[c];
        if (c >= n) p->tasks[nt++] = make_uint2(c, v);
        const uint32_t first = p->first_child[b];
#define RL_PM_FLIP(xx)                                                 \
    do {                                                               \
        const uint32_t x_ = (xx);                                      \
        const uint32_t e_ = p->edge_next[x_];                          \
        const uint32_t tx_ = rl_pm_tail(p, e_), hy_ = rl_pm_head(p, e_); \
        p->mate[tx_] = e_;                                             \
        p->mate[hy_] = e_ ^ 1u;                                        \
        const uint32_t y_ = p->next[x_];                               \
        if (x_ >= n) p->tasks[nt++] = make_uint2(x_, tx_);             \
        if (y_ >= n) p->tasks[nt++] = make_uint2(y_, hy_);             \
    } while (0)
        if (c != first) {
            if (rl_pm_position(p, b, c) % 2u == 1u) {
                uint32_t x = p->next[c];
                for (;;) {
                    RL_PM_FLIP(x);
                    if (p->next[x] == first) break;
                    x = p->next[p->next[x]];
                }
            } else {
                uint32_t x = p->prev[p->prev[c]];
                for (;;) {
                    RL_PM_FLIP(x);
                    if (x == first) break;
                    x = p->prev[p->prev[x]];
                }
            }
        }
#undef RL_PM_FLIP
        p->first_child[b] = c;
        p->base[b] = v;
    }
}

/** augment_path: flips the path from S vertex s up to its root, s taking e (an edge from s,
 * or RL_PM_BOUNDARY). */
__device__ __noinline__ void rl_pm_augment_path(struct rl_pm *__restrict__ p, uint32_t s, uint32_t e) {
    for (;;) {
        const uint32_t bs = p->top[s];
        if (bs >= p->n) rl_pm_augment_blossom(p, bs, s);
        p->mate[s] = e;
        const uint32_t ld = p->label_dir[bs];
        if (ld == RL_PM_NONE) break;
        const uint32_t bt = p->top[rl_pm_tail(p, ld)];
        const uint32_t ld2 = p->label_dir[bt];
        const uint32_t t2 = rl_pm_head(p, ld2);
        if (bt >= p->n) rl_pm_augment_blossom(p, bt, t2);
        p->mate[t2] = ld2 ^ 1u;
        s = rl_pm_tail(p, ld2);
        e = ld2;
    }
}

__device__ __noinline__ void rl_pm_augment(struct rl_pm *__restrict__ p, uint32_t d) {
    rl_pm_augment_path(p, rl_pm_tail(p, d), d);
    rl_pm_augment_path(p, rl_pm_head(p, d), d ^ 1u);
}

/** tight_ss: shrink if both ends are in one tree, else augment (true). */
__device__ __noinline__ bool rl_pm_tight_ss(struct rl_pm *__restrict__ p, uint32_t d) {
    const uint32_t bv = p->top[rl_pm_tail(p, d)];
    const uint32_t bw = p->top[rl_pm_head(p, d)];
    p->stamp++;
    if (p->stamp == 0) {
        for (uint32_t b = 0; b < 2u * p->n; b++) p->mark[b] = 0;
        p->stamp = 1;
    }
    uint32_t b = bv;
    for (;;) {
        p->mark[b] = p->stamp;
        const uint32_t q = rl_pm_s_parent(p, b);
        if (q == RL_PM_NONE) break;
        b = q;
    }
    b = bw;
    for (;;) {
        if (p->mark[b] == p->stamp) {
            rl_pm_add_blossom(p, b, d);
            return false;
        }
        const uint32_t q = rl_pm_s_parent(p, b);
        if (q == RL_PM_NONE) break;
        b = q;
    }
    rl_pm_augment(p, d);
    return true;
}

/** scan (warp): the edges of a new S vertex, 32 at a time; true if it augmented. The edges
 * before a chunk's first event (a tight edge to an S or a free blossom: it changes the
 * labels or the blossoms) only lower bests, side by side: best_to_s by their own head (the
 * graph has no parallel edges, so the heads differ), best_ss[top v] as their first least;
 * then lane 0 takes the event as the Rust does, and the next chunk starts after it. */
__device__ __noinline__ bool rl_pm_scan(struct rl_pm *__restrict__ p, uint32_t v, uint32_t lane) {
    const uint32_t end = p->adj_start[v + 1u];
    uint32_t i0 = p->adj_start[v];
    while (i0 < end) { /* warp-uniform */
        const uint32_t idx = i0 + lane;
        const uint32_t bv = p->top[v];
        bool live = false, ev = false, ss = false;
        uint32_t d = RL_PM_NONE, w = 0;
        long long s = RL_PM_I64_MAX;
        if (idx < end) {
            d = p->adj[idx];
            w = rl_pm_head(p, d);
            const uint32_t bw = p->top[w];
            if (bw != bv) {
                live = true;
                s = rl_pm_slack(p, d);
                const uint8_t l = p->label[bw];
                ss = l == RL_PM_S;
                ev = s == 0 && l != RL_PM_T;
            }
        }
        const uint32_t evs = __ballot_sync(RL_PM_WARP, ev);
        const uint32_t f = evs != 0u ? (uint32_t)__ffs(evs) - 1u : 32u;
        const bool plain = live && lane < f;
        if (plain && !ss) {
            const uint32_t cur = p->best_to_s[w];
            if (cur == RL_PM_NONE || s < rl_pm_slack(p, cur)) p->best_to_s[w] = d;
        }
        const long long sm = rl_pm_wmin(plain && ss ? s : RL_PM_I64_MAX);
        const uint32_t cand = __ballot_sync(RL_PM_WARP, plain && ss && s == sm);
        const uint32_t dm = __shfl_sync(RL_PM_WARP, d, cand != 0u ? (uint32_t)__ffs(cand) - 1u : 0u);
        const uint32_t de = __shfl_sync(RL_PM_WARP, d, f & 31u);
        __syncwarp();
        int aug = 0;
        if (lane == 0) {
            if (cand != 0u) {
                const uint32_t cur = p->best_ss[bv];
                if (cur == RL_PM_NONE || sm < rl_pm_slack(p, cur)) p->best_ss[bv] = dm;
            }
            if (evs != 0u) {
                const uint32_t we = rl_pm_head(p, de), bw = p->top[we];
                if (p->label[bw] == RL_PM_S) {
                    aug = rl_pm_tight_ss(p, de);
                } else {
                    const uint32_t cur = p->best_to_s[we];
                    if (cur == RL_PM_NONE || 0 < rl_pm_slack(p, cur)) p->best_to_s[we] = de;
                    aug = rl_pm_label_t(p, bw, de);
                }
            }
        }
        aug = __shfl_sync(RL_PM_WARP, aug, 0);
        __syncwarp();
        if (aug) return true;
        i0 += evs != 0u ? f + 1u : 32u;
    }
    return false;
}

/** delta_step (warp): 1 augmented, 0 not, -1 no step is bounded. The Rust's scan order (the
 * vertices' boundary edges, the vertices, then the blossoms) is each candidate's rank, so the
 * least (delta, rank) over the lanes is the one it picks; the duals move side by side; lane 0
 * takes the step. */
__device__ __noinline__ int rl_pm_delta_step(struct rl_pm *__restrict__ p, uint32_t lane) {
    const uint32_t n = p->n, nb = 2u * n;
    long long delta = RL_PM_I64_MAX;
    uint32_t rank = RL_PM_NONE, kind = 0, arg = RL_PM_NONE;
    for (uint32_t v = lane; v < n; v += 32u) {
        const long long cv = p->cap[v];
        if (cv != RL_PM_NO_CAP && p->label[p->top[v]] == RL_PM_S) {
            const long long s = cv - p->y[v];
            if (s < delta) {
                delta = s;
                rank = v;
                kind = 1;
                arg = v;
            }
        }
    }
    for (uint32_t v = lane; v < n; v += 32u) {
        const uint32_t d = p->best_to_s[v];
        if (d != RL_PM_NONE && p->label[p->top[v]] == RL_PM_FREE) {
            const long long s = rl_pm_slack(p, d);
            if (s < delta) {
                delta = s;
                rank = n + v;
                kind = 2;
                arg = d;
            }
        }
    }
    for (uint32_t b = lane; b < nb; b += 32u) {
        if (!rl_pm_is_top(p, b)) continue;
        if (p->label[b] == RL_PM_S) {
            const uint32_t d = p->best_ss[b];
            if (d != RL_PM_NONE) {
                const long long s = rl_pm_slack(p, d);
                if (s / 2 < delta) {
                    delta = s / 2;
                    rank = 2u * n + b;
                    kind = 3;
                    arg = d;
                }
            }
        } else if (p->label[b] == RL_PM_T && b >= n) {
            const long long h = p->z[b] / 2;
            if (h < delta) {
                delta = h;
                rank = 2u * n + b;
                kind = 4;
                arg = b;
            }
        }
    }
    const long long dm = rl_pm_wmin(delta);
    const uint32_t rm = rl_pm_wmin32(delta == dm ? rank : RL_PM_NONE);
    const uint32_t src = (uint32_t)__ffs(__ballot_sync(RL_PM_WARP, delta == dm && rank == rm)) - 1u;
    kind = __shfl_sync(RL_PM_WARP, kind, src);
    arg = __shfl_sync(RL_PM_WARP, arg, src);
    if (kind == 0) return -1;
    if (dm > 0) {
        for (uint32_t v = lane; v < n; v += 32u) {
            const uint8_t l = p->label[p->top[v]];
            if (l == RL_PM_S)
                p->y[v] += dm;
            else if (l == RL_PM_T)
                p->y[v] -= dm;
        }
        for (uint32_t b = n + lane; b < nb; b += 32u) {
            if (p->in_use[b] && p->parent[b] == RL_PM_NONE) {
                if (p->label[b] == RL_PM_S)
                    p->z[b] += 2 * dm;
                else if (p->label[b] == RL_PM_T)
                    p->z[b] -= 2 * dm;
            }
        }
    }
    __syncwarp();
    int r = 0;
    if (lane == 0) {
        if (kind == 1) {
            rl_pm_augment_path(p, arg, RL_PM_BOUNDARY);
            r = 1;
        } else if (kind == 2) {
            r = rl_pm_label_t(p, p->top[rl_pm_head(p, arg)], arg) ? 1 : 0;
        } else if (kind == 3) {
            r = rl_pm_tight_ss(p, arg) ? 1 : 0;
        } else {
            rl_pm_expand_t(p, arg);
        }
    }
    r = __shfl_sync(RL_PM_WARP, r, 0);
    __syncwarp();
    return r;
}

/** stage (warp): the labels cleared side by side; the free tops labelled S in id order (by
 * lane 0, from each chunk's ballot); then scans and delta steps until it augments. */
__device__ __noinline__ int rl_pm_stage(struct rl_pm *__restrict__ p, uint32_t lane) {
    const uint32_t n = p->n, nb = 2u * n;
    for (uint32_t b = lane; b < nb; b += 32u) {
        p->label[b] = RL_PM_FREE;
        p->label_dir[b] = RL_PM_NONE;
        p->best_ss[b] = RL_PM_NONE;
        p->has_list[b] = 0;
    }
    for (uint32_t v = lane; v < n; v += 32u) p->best_to_s[v] = RL_PM_NONE;
    p->pool_len = 0;
    p->nqueue = 0;
    __syncwarp();
    bool any_free = false;
    for (uint32_t b0 = 0; b0 < nb; b0 += 32u) {
        const uint32_t b = b0 + lane;
        /* label_s changes none of what this reads (parent, in_use, base, mate) */
        uint32_t bal = __ballot_sync(RL_PM_WARP, b < nb && rl_pm_is_top(p, b) && p->mate[p->base[b]] == RL_PM_NONE);
        any_free |= bal != 0u;
        if (lane == 0) {
            while (bal != 0u) {
                rl_pm_label_s(p, b0 + (uint32_t)__ffs(bal) - 1u, RL_PM_NONE);
                bal &= bal - 1u;
            }
        }
        __syncwarp();
    }
    if (!any_free) return RL_PM_PERFECT;
    for (;;) {
        for (;;) {
            /* the queue is lane 0's */
            uint32_t v = RL_PM_NONE;
            if (lane == 0 && p->nqueue > 0) v = p->queue[--p->nqueue];
            v = __shfl_sync(RL_PM_WARP, v, 0);
            if (v == RL_PM_NONE) break;
            if (rl_pm_scan(p, v, lane)) return RL_PM_AUGMENTED;
        }
        const int r = rl_pm_delta_step(p, lane);
        if (r == 1) return RL_PM_AUGMENTED;
        if (r < 0) return RL_PM_INFEASIBLE;
    }
}

/** solve (warp: all 32 lanes call it, each with the same arrays): false when no matching
 * covers every vertex; else mate[v] holds the directed edge from v to its partner
 * (rl_pm_head(p, mate[v]) is the partner) or RL_PM_BOUNDARY. The total is the caller's to
 * sum (matching.rs sums wt/2 over the matched edges and cap/2 over the boundary's). */
__device__ __noinline__ bool rl_pm_solve(struct rl_pm *__restrict__ p, uint32_t lane) {
    if (p->n == 0) return true;
    if (!rl_pm_setup(p, lane)) return false;
    rl_pm_init_duals(p, lane);
    RL_PM_MARK(10);
    for (;;) {
        const int st = rl_pm_stage(p, lane);
        if (st == RL_PM_PERFECT) return true;
        if (st == RL_PM_INFEASIBLE) return false;
        if (lane == 0) rl_pm_expand_zero_blossoms(p);
        __syncwarp();
    }
}

#endif /* __CUDACC__ || __CUDACC_RTC__ */

#endif /* ROCELINK_STAGE_BLOSSOM_CUH */
