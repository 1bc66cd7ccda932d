// DSpark draft stages (spec section 3.11): the taps and the stages' context rings, filled by
// every forward of a model made with ModelOptions.dspark.
//
// The taps are the hc mean of the input of each dspark_target_layer_ids layer (after its
// Engram), for every row that runs the layer: under bounded replay the late layers run on the
// prompt's tail only, so a prompt's rings get the keys of its tail's rows (the last
// sliding_window positions, whose taps are approximate in the same way as the late layers'
// windows). main_x = RMS(taps · main_projᵀ; main_norm), and each stage's key of a row is
// FP8(RoPE_main(RMS(main_x · wkvᵀ; kv_norm))) at its position; a stage's ring keeps the last
// sliding_window of them.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/deepseek_v41.h"

namespace deepinfer::model {

using kernels::FakeQuant;

void DeepseekV41::tap_layout(ForwardBatch& b, kernels::Uploads& up) {
  const int64_t np = b.n_pad, hc = cfg_.hc_mult, D = cfg_.hidden_size, hd = cfg_.head_dim;
  const int64_t taps = static_cast<int64_t>(cfg_.dspark_target_layer_ids.size()), stages = cfg_.num_nextn_predict_layers;
  b.taps.resize(taps * np * D);
  b.dkv.resize(stages * np * hd);
  const bool packed = hd % 32 == 0;
  b.dkv_codes.resize(packed ? stages * np * hd : 0);
  b.dkv_scales.resize(packed ? stages * np * hd / 32 : 0);
  // The mean over the streams as a collapse with weights 1/hc (a power of two at hc = 4, so
  // exactly the sum times 1/hc).
  up.add(b.tap_pre, std::vector<float>(static_cast<size_t>(np * hc), 1.0f / static_cast<float>(hc)));
  std::vector<int32_t> concat(static_cast<size_t>(np * taps));
  for (int64_t r = 0; r < np; ++r)
    for (int64_t t = 0; t < taps; ++t) concat[static_cast<size_t>(r * taps + t)] = static_cast<int32_t>(t * np + r);
  up.add(b.tap_concat, concat);
}

void DeepseekV41::tap(int64_t l, ForwardBatch& b) {
  const auto& ids = cfg_.dspark_target_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), l);
  if (it == ids.end()) return;
  const int64_t t = it - ids.begin(), np = b.n_pad, D = cfg_.hidden_size;
  be_.hc_collapse({.x = b.X.data(), .pre = b.tap_pre.data(), .y = b.taps.data() + t * np * D, .rows = np,
                   .hc = cfg_.hc_mult, .dim = D});
}

void DeepseekV41::draft_keys(ForwardBatch& b) {
  const auto& c = cfg_;
  const DraftWeights& d = w_.draft;
  const int64_t np = b.n_pad, D = c.hidden_size, hd = c.head_dim, stages = c.num_nextn_predict_layers;
  const int64_t taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  // The taps side by side ([np, taps * D], in layer order), main_x, then every stage's keys.
  kernels::Buf<float> cat(be_, np * taps * D), main_x(be_, np * D);
  be_.gather_rows({.src = b.taps.data(), .idx = b.tap_concat.data(), .dst = cat.data(), .rows = np * taps, .width = D});
  linear(cat.data(), np, d.main_proj, main_x.data());
  rms(main_x.data(), d.main_norm, main_x.data(), np, D);
  const bool packed = hd % 32 == 0;
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<kernels::NormRopeQuantArgs> finish;
  for (int64_t s0 = 0; s0 < stages; s0 += kernels::kMaxMatmulOuts) {
    std::vector<std::pair<const Mat*, float*>> outs;
    for (int64_t s = s0; s < std::min(stages, s0 + kernels::kMaxMatmulOuts); ++s)
      outs.emplace_back(&d.stages[static_cast<size_t>(s)].attn.wkv, b.dkv.data() + s * np * hd);
    linears(main_x.data(), np, outs);
  }
  for (int64_t s = 0; s < stages; ++s)
    finish.push_back({.x = b.dkv.data() + s * np * hd, .w = d.stages[static_cast<size_t>(s)].attn.kv_norm,
                      .cos = b.cos_main.data(), .sin = b.sin_main.data(),
                      .codes = packed ? b.dkv_codes.data() + s * np * hd : nullptr,
                      .scales = packed ? b.dkv_scales.data() + s * np * hd / 32 : nullptr, .rows = np, .dim = hd,
                      .rope_dim = c.qk_rope_head_dim, .block = 32, .eps = eps, .kind = FakeQuant::kFp8Pow2});
  be_.norm_rope_quant({.items = finish.data(), .n = static_cast<int64_t>(finish.size())});
}

void DeepseekV41::fill_draft_rings(ForwardBatch& b) {
  const auto& c = cfg_;
  const int64_t np = b.n_pad, hd = c.head_dim, W = c.sliding_window, stages = c.num_nextn_predict_layers;
  std::vector<kernels::CopyDesc> copies;
  struct Append {
    WindowRing* ring;
    const float* values;
    int64_t rows, first;  // rows appended, the batch row of the first
  };
  std::vector<Append> appends;
  for (size_t q = 0; q < b.states.size(); ++q) {
    const int64_t m = std::min(b.rows[q], W), first = b.row0[q] + b.rows[q] - m;
    if (m == 0) continue;
    for (int64_t s = 0; s < stages; ++s) {
      WindowRing& ring = b.states[q]->draft_ring(s);
      const int64_t at = s * np + first;
      if (ring.kv.packed()) {
        const int64_t blk = ring.kv.block();
        copies.push_back({ring.kv.code_slot(m), b.dkv_codes.data() + at * hd, m * hd});
        copies.push_back({ring.kv.scale_slot(m), b.dkv_scales.data() + at * hd / blk, m * hd / blk});
      }
      appends.push_back({&ring, b.dkv.data() + at * hd, m, first});
    }
  }
  kernels::copy_batch(be_, copies);
  for (const Append& a : appends) {
    a.ring->kv.append(a.values, a.rows);
    a.ring->pos.insert(a.ring->pos.end(), b.pos.begin() + a.first, b.pos.begin() + a.first + a.rows);
    const int64_t drop = std::max<int64_t>(0, static_cast<int64_t>(a.ring->pos.size()) - W);
    a.ring->kv.drop_front(drop);
    a.ring->pos.erase(a.ring->pos.begin(), a.ring->pos.begin() + drop);
  }
}

}  // namespace deepinfer::model
