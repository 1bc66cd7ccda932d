// Top-k selection: candidate blocks (level one) and the top-k mask (level two).
#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Python floor division for the pinned-block index (compress_len may be 0).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Indices of the k largest values (ties: lower index first), restricted to finite picks
// when drop_neg_inf is set.
void top_indices(const float* v, int64_t n, int64_t k, std::vector<int64_t>& idx) {
  idx.resize(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  auto better = [&](int64_t x, int64_t y) { return v[x] > v[y] || (v[x] == v[y] && x < y); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
}
}  // namespace

void candidate_blocks(core::ThreadPool& pool, const CandidateBlocksArgs& a) {
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  pool.parallel_for(a.s, [&](int64_t s0, int64_t s1) {
    std::vector<float> bs(static_cast<size_t>(nb));
    std::vector<int64_t> idx;
    for (int64_t s = s0; s < s1; ++s) {
      const float* sc = a.scores + s * a.t;
      for (int64_t b = 0; b < nb; ++b) {
        float m = kNegInf;
        for (int64_t j = b * a.block_size; j < std::min(a.t, (b + 1) * a.block_size); ++j) m = std::max(m, sc[j]);
        bs[b] = m;
      }
      const int64_t compress_len = (a.q_pos[s] + 1) / a.ratio;
      const int64_t last = floor_div(compress_len - 1, a.block_size);
      if (last >= 0 && last < nb) bs[last] = std::numeric_limits<float>::infinity();
      top_indices(bs.data(), nb, a.topk_blocks, idx);
      uint8_t* keep = a.keep + s * a.t;
      std::fill(keep, keep + a.t, uint8_t{0});
      for (int64_t b : idx) {
        if (!(bs[b] > kNegInf)) continue;
        for (int64_t j = b * a.block_size; j < std::min(a.t, (b + 1) * a.block_size); ++j) keep[j] = 1;
      }
    }
  }, 1);
}

void topk_mask(core::ThreadPool& pool, const TopkMaskArgs& a) {
  pool.parallel_for(a.s, [&](int64_t s0, int64_t s1) {
    std::vector<float> v(static_cast<size_t>(a.t));
    std::vector<int64_t> idx;
    for (int64_t s = s0; s < s1; ++s) {
      const float* sc = a.scores + s * a.t;
      const uint8_t* rs = a.restrict_to ? a.restrict_to + s * a.t : nullptr;
      for (int64_t j = 0; j < a.t; ++j) v[j] = (rs && !rs[j]) ? kNegInf : sc[j];
      top_indices(v.data(), a.t, a.k, idx);
      uint8_t* sel = a.selected + s * a.t;
      std::fill(sel, sel + a.t, uint8_t{0});
      for (int64_t j : idx)
        if (v[j] > kNegInf) sel[j] = 1;
    }
  }, 1);
}

}  // namespace deepinfer::kernels::cpu
