/*
 * kernels/stages/stage.cuh — the contract every device stage keeps (DESIGN.md, "Stages").
 *
 * A stage `rl_stage_X` turns a request into an answer. It gets the request in shared memory
 * (`req`, `len` bytes, 16-byte aligned) and an output buffer (`resp`, `cap` bytes, 16-byte
 * aligned, shared memory, not overlapping `req`), and returns the answer's length, or -1 to
 * drop the request (no answer). Its three forms:
 *
 *   rl_stage_X(req, len, resp, cap[, state])        every thread of the block calls it; the
 *       same return value in every thread; it ends with the answer complete and visible to the
 *       whole block (a block barrier at the end).
 *   rl_stage_X_warp(req, len, resp, cap[, state])   warp 0 alone calls it (all 32 lanes; the
 *       other warps may be anywhere, so no block barrier inside); the same return value in
 *       every lane; the answer complete and visible to the warp (__syncwarp at the end). It
 *       may instead return RL_STAGE_TO_BLOCK: the request needs the whole block, which then
 *       calls the block continuation below with the same arguments.
 *   rl_stage_X_block(req, len, resp, cap[, state])  every thread, after warp 0's
 *       RL_STAGE_TO_BLOCK for this request and a block barrier: finishes what the warp form
 *       started; returns as the full form does.
 *
 *   rl_stage_X_regs(c, len)                         optional; warp 0 alone, all 32 lanes, the
 *       request in registers: lane m holds its bytes [16m, 16m+16) in `c` (len <= 256, lanes
 *       0..15; bytes past len are undefined); returns the answer's length (<= 256) with the
 *       answer in `c` in the same layout, or -1 to drop; the same return value in every lane.
 *       No state, no memory. A chain whose stages all have it (rl_run_chain_regs) answers a
 *       request that the poll brought into registers without a shared-memory round trip.
 *   rl_stage_X_idle([state])                      optional; warp 0 alone, all 32 lanes, between
 *       messages: after an answer's doorbell and before the next poll, and only while messages
 *       do not queue (the one just answered was not already waiting at its poll's first read),
 *       so its time comes out of the wait for the next message. It may prepare work for a later
 *       request in the stage's own state (never `req` or `resp`); a stage answers every request
 *       the same whether or not it ran (the transceiver skips it under load, the launch-per-
 *       message probe never calls it). rl_run_chain_idle calls those the chain has.
 *
 * The persistent transceiver runs the warp forms, so a message the warp can answer costs no
 * block barrier (kernels/transceiver.cu). `state` is the chain's device state blob for
 * stages that take one (kernels.rs stage_code). Every read of `req` is bounded by `len`,
 * every write of `resp` by `cap`.
 */
#ifndef ROCELINK_STAGE_CUH
#define ROCELINK_STAGE_CUH

/** rl_stage_X_warp: the request needs the block (rl_stage_X_block). */
#define RL_STAGE_TO_BLOCK (-2)

#endif /* ROCELINK_STAGE_CUH */
