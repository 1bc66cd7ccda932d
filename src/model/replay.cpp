#include "model/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::compact_to_tail(ForwardBatch& b) {
  // Keep, per sequence, only the rows at or after replay_from: the decoder layers run on the
  // tail. Per-row published tensors (top-k, candidates) are compacted with them.
  const int64_t D = cfg_.hidden_size, hc = cfg_.hc_mult, hash_w = b.hash_w;
  const std::vector<int64_t>& hash_ids = b.hash_ids;
  std::vector<int32_t> kept;
  std::vector<int64_t> pos;
  std::vector<int64_t> hashes;
  for (size_t q = 0; q < b.states.size(); ++q) {
    const int64_t skip = b.replay_from[q], keep = b.rows[q] - skip, from = b.row0[q] + skip;
    for (int64_t i = 0; i < keep; ++i) {
      kept.push_back(static_cast<int32_t>(from + i));
      pos.push_back(b.pos[static_cast<size_t>(from + i)]);
      if (hash_w)
        hashes.insert(hashes.end(), hash_ids.begin() + (from + i) * hash_w, hash_ids.begin() + (from + i + 1) * hash_w);
    }
    auto compact = [&](kernels::Buf<uint8_t>& m, int64_t width) {
      kernels::Buf<uint8_t> t(be_, keep * width);
      if (keep > 0) be_.copy(t.data(), m.data() + skip * width, keep * width);
      m = std::move(t);
    };
    Published& sh = b.published[q];
    if (sh.has_topk) compact(sh.topk, sh.topk_t);
    if (sh.has_candidates) compact(sh.candidates, sh.cand_t);
    b.row0[q] = static_cast<int64_t>(kept.size()) - keep;
    b.rows[q] = keep;
  }
  const int64_t n = static_cast<int64_t>(kept.size());
  kernels::Buf<int32_t> d_kept(be_);
  d_kept.upload(kept);
  kernels::Buf<float> X2(be_, n * hc * D), pre2(be_, n * hc);
  be_.gather_rows({.src = b.X.data(), .idx = d_kept.data(), .dst = X2.data(), .rows = n, .width = hc * D});
  be_.gather_rows({.src = b.pre.data(), .idx = d_kept.data(), .dst = pre2.data(), .rows = n, .width = hc});
  b.X = std::move(X2);
  b.pre = std::move(pre2);
  // DSpark: the taps of the early layers taken so far, kept for the same rows.
  if (dspark_) {
    const int64_t taps = static_cast<int64_t>(cfg_.dspark_target_layer_ids.size());
    std::vector<int32_t> rows_of(static_cast<size_t>(taps * n));
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t i = 0; i < n; ++i)
        rows_of[static_cast<size_t>(t * n + i)] = static_cast<int32_t>(t * b.n_pad) + kept[static_cast<size_t>(i)];
    kernels::Buf<int32_t> d_rows(be_);
    d_rows.upload(rows_of);
    kernels::Buf<float> taps2(be_, taps * n * D);
    be_.gather_rows({.src = b.taps.data(), .idx = d_rows.data(), .dst = taps2.data(), .rows = taps * n, .width = D});
    b.taps = std::move(taps2);
  }
  b.hash_ids = std::move(hashes);
  b.pos = std::move(pos);
  b.n = n;
  b.n_pad = n;
  kernels::Uploads up(be_);
  b.set_positions(rope_main_, rope_compress_, up);
  if (dspark_) tap_layout(b, up);
  up.send();
  // The tails' Engram rows for the Engram layers still to run, in place of the step's.
  const auto& el = cfg_.engram_layer_ids;
  if (std::any_of(el.begin(), el.end(), [&](int64_t l) { return l >= late_layer_start(); })) {
    stage_engram(b);
    be_.await_uploads();
  }
}

}  // namespace deepinfer::model
