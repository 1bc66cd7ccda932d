// ForwardBatch: one forward's rows as the model reads them, and the model's activations.
//
// Purpose: the runner lays a step's chunks out here (which sequences, their rows in sequence
// order, absolute positions and RoPE tables, padding to a graph bucket); the model computes on
// it and keeps its per-forward tensors in it (streams, mixes, projections, what KV and index
// sources publish). Kept per graph row bucket, its buffers keep their addresses across
// forwards, so graphs captured over them stay valid.
// Invariants: rows [row0[q], row0[q] + rows[q]) are sequence q's, in sequence order, n in
// all; n_pad >= n rows are computed by the graphable stages (padding rows are token 0 at
// position 0, and every op is row-independent, so they never change a real row).
// Threading: one forward at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/staging.h"
#include "model/rope.h"
#include "model/state.h"

namespace deepinfer::model {

// Per sequence, per forward: what KV sources and index sources publish to later layers.
// Tensors are in the backend's memory.
struct Published {
  kernels::Buf<float> comp;     // [t_comp, hd] running compressed KV of the latest KV source
  int64_t t_comp = 0;
  kernels::Buf<float> index_k;  // [t_index, d_idx] running indexer keys
  int64_t t_index = 0;
  bool has_topk = false;
  kernels::Buf<uint8_t> topk;   // [rows, topk_t] 1 = selected
  int64_t topk_t = 0;
  bool has_candidates = false;
  kernels::Buf<uint8_t> candidates;  // [rows, cand_t]
  int64_t cand_t = 0;
};

struct ForwardBatch {
  explicit ForwardBatch(kernels::Backend& b)
      : be(&b), d_pos(b), d_tok(b), cos_main(b), sin_main(b), cos_comp(b), sin_comp(b), engram(b), X(b), pre(b), a_pre(b),
        a_post(b), a_comb(b), f_post(b), f_comb(b), xc(b), xn(b), y(b), q(b), kv(b), ckv(b), cgate(b), iq(b), iw(b), o(b),
        kv_codes(b), kv_scales(b), taps(b), tap_pre(b), tap_concat(b), dkv(b), dkv_codes(b), dkv_scales(b) {}
  ForwardBatch(const ForwardBatch&) = delete;
  ForwardBatch& operator=(const ForwardBatch&) = delete;
  kernels::Backend* be;

  // Layout (the runner's). Per sequence:
  std::vector<const int64_t*> tokens;   // host [rows at lay-out] token ids
  std::vector<SequenceState*> states;
  std::vector<int64_t> replay_from;     // rows [0, replay_from) skip the late layers
  std::vector<int64_t> row0, rows;      // first active row, active row count
  int64_t n = 0;                        // active rows
  int64_t n_pad = 0;                    // rows the graphable stages run on (n, or n's bucket)
  bool any_replay = false;
  std::vector<int64_t> pos;             // [n] absolute positions
  kernels::Buf<int64_t> d_pos;          // [n]
  kernels::Buf<int64_t> d_tok;          // [n] token ids
  kernels::Buf<float> cos_main, sin_main;  // [n_pad, rd/2] (padding rows at position 0)
  kernels::Buf<float> cos_comp, sin_comp;  // [n_pad, rd/2]

  // The model's, per forward.
  std::vector<Published> published;     // per sequence
  std::vector<int64_t> hash_ids;        // host [n, engram layers, cols] Engram hash ids
  int64_t hash_w = 0;                   // engram layers * cols
  kernels::Buf<uint8_t> engram;         // every Engram layer's row ids (and staged rows) for n_pad rows
  // Activations, [n_pad, ...]: streams and mixes, then the attention's inputs and output.
  kernels::Buf<float> X, pre, a_pre, a_post, a_comb, f_post, f_comb, xc, xn, y;
  kernels::Buf<float> q, kv, ckv, cgate, iq, iw, o;
  kernels::Buf<uint8_t> kv_codes, kv_scales;  // the window entries' FP8 codes and scales
  // DSpark (a model made with ModelOptions.dspark): the taps (the hc mean of each
  // dspark_target_layer_ids layer's input), then the draft stages' keys of every row.
  kernels::Buf<float> taps;              // [taps, n_pad, D] tap-major
  kernels::Buf<float> tap_pre;           // [n_pad, hc] 1/hc: the mean as a collapse
  kernels::Buf<int32_t> tap_concat;      // [n_pad * taps] row of `taps` for row r's tap t at r * taps + t
  kernels::Buf<float> dkv;               // [stages, n_pad, hd] each stage's keys (post-RoPE, post-FP8)
  kernels::Buf<uint8_t> dkv_codes, dkv_scales;  // [stages, n_pad, hd], [stages, n_pad, hd / 32] their FP8 form

  // Empties the layout for a new forward (buffers keep their memory).
  void clear();
  // Appends sequence `state`'s chunk of `count` tokens at positions state->length()...
  void add_sequence(const int64_t* toks, int64_t count, SequenceState* state, int64_t replay);
  // Adds pos, d_pos's upload and the RoPE tables of every row (padding rows at position 0) to up.
  void set_positions(const RopeTable& main, const RopeTable& compress, kernels::Uploads& up);
};

// One stage of a forward's layer program. A graphable stage only touches the batch's buffers,
// the weights and its own temporaries, on n_pad rows, and issues no host work that depends on
// the batch's contents: a runner may capture it (with its graphable neighbours) once per row
// bucket and replay it. An eager stage runs every time. prepare (optional, host side and eager
// backend ops such as sizing buffers) runs before the stage, or before the group of graphable
// stages it belongs to.
struct Stage {
  bool graphable = false;
  std::function<void()> prepare = nullptr;
  std::function<void()> run = nullptr;
};

}  // namespace deepinfer::model
