// CUDA: the bf16 GEMM (gemm_bf16, its kernel in linear_bf16.cuh): a bf16 tensor-core product
// (mma.sync m16n8k16 or wgmma, float32 accumulation), dense or with every expert in one launch
// (each block finding its expert and row tile from the device-side offsets), or several
// products of one x in one launch (parts); this file chooses the tiling and launches it.
// (grouped_gemm_any, the float32-math product for other formats: linear.cu.)
//
// Batch invariance: an output element is accumulated over k in one fixed order whatever the
// tile shape and the number of rows: k16 steps ascending within each k segment (gemm_bf16_split,
// a function of the product's shape alone), the segments' sums added in ascending order to 0.
// Few rows: one block per (tile, segment), partial sums in a workspace, the tile's last block
// adding them up (in the decode tiling the tile's blocks are one cluster instead, and its first
// block adds them through distributed shared memory); many rows: one block per tile folding
// the segments in registers.
#include <algorithm>
#include <cstdlib>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/linear_bf16_launch.cuh"

namespace deepinfer::kernels::cuda {

namespace detail {

int64_t lay_out_parts(Bf16Gemm& p, int64_t BM, int64_t BN) {
  const int64_t tiles = ceil_div(p.m, BM) + (p.offsets ? std::min<int64_t>(p.experts, p.m) : 0);
  int64_t unit = 0, counter = 0, off = 0;
  for (int i = 0; i < p.parts; ++i) {
    Bf16Part& q = p.part_list[i];
    q.ks = static_cast<int>(gemm_split_len(q.n, p.k, 1, p.offsets != nullptr));
    const int64_t S = ceil_div(p.k, q.ks), cols = ceil_div(q.n, BN);
    q.unit0 = static_cast<int>(unit);
    q.counter0 = static_cast<int>(counter);
    q.part_off = off;
    unit += cols * S;
    if (S > 1) {
      counter += tiles * cols;
      off += S * static_cast<int64_t>(p.m) * q.n;
    }
  }
  return p.counters || off == 0 ? (counter <= kGemmCounters ? off : -1) : -1;
}

// Weights stored as FP8 blocks or MXFP4: their own instantiations (linear_fp8.cu, linear_mxfp4.cu).
extern template void gemm_bf16_as<1>(Bf16Gemm, Stream);
extern template void gemm_bf16_as<2>(Bf16Gemm, Stream);

}  // namespace detail

using namespace detail;

bool gemm_bf16_fits(int64_t n, int64_t k) { return k % 32 == 0 && n % 2 == 0 && k > 0 && n > 0; }


int gemm_bf16_split(const Bf16Gemm& p) {
  return static_cast<int>(gemm_split_len(p.n, p.k, p.groups, p.offsets != nullptr));
}

bool gemm_bf16_parts_fit(const Bf16Gemm& p) {
  if (p.parts < 1 || p.parts > kMaxBf16Parts || p.groups != 1) return false;
  for (int i = 0; i < p.parts; ++i)
    if (!gemm_bf16_fits(p.part_list[i].n, p.k) || p.part_list[i].ldy % 2 != 0) return false;
  if (!p.offsets && (p.m > 16 || p.k % 128 != 0)) return false;
  Bf16Gemm q = p;
  return lay_out_parts(q) >= 0;
}

int64_t gemm_bf16_workspace(const Bf16Gemm& p) {
  if (p.parts > 0) {
    Bf16Gemm q = p;
    return std::max<int64_t>(lay_out_parts(q), 0);
  }
  const int64_t S = ceil_div(p.k, gemm_bf16_split(p));
  return S > 1 && rows_per_tile(p) <= kSplitRowsMax ? S * p.groups * static_cast<int64_t>(p.m) * p.n : 0;
}

// Grouped products keep the bf16 copy: their blocks run many k slices, and the float32 loads'
// latency (waited for once per slice) made the experts 10% slower at one token.
bool gemm_bf16_takes_f32(const Bf16Gemm& p) { return !p.offsets && rows_per_tile(p) <= 16 && p.k % 128 == 0; }

bool gemm_bf16_reads(WeightFormat f, const void* codes, const uint8_t* scale, int64_t row0, int64_t k) {
  if (reinterpret_cast<uintptr_t>(codes) % 16 != 0 || k % 32 != 0) return false;
  const bool scales_ok = scale != nullptr && reinterpret_cast<uintptr_t>(scale) % 4 == 0 && k % 128 == 0;
  switch (f) {
    case WeightFormat::kBF16: return true;
    case WeightFormat::kFP8Block32: return scales_ok && row0 % 32 == 0;
    case WeightFormat::kMXFP4: return scales_ok;
    default: return false;
  }
}

void gemm_bf16(const Bf16Gemm& pin, Stream s) {
  Bf16Gemm p = pin;
  p.stream_w = false;  // the decode tiling's choice (below)
  if (p.parts > 0) {
    if (!gemm_bf16_parts_fit(p) || (lay_out_parts(p) > 0 && !p.part)) {
      std::fprintf(stderr, "deepinfer: gemm_bf16: %d products do not fit one launch\n", p.parts);
      std::abort();
    }
    if (p.m == 0) return;
    p.n = p.part_list[0].n;  // the tiling below reads only rows, k and the grouping
  }
  if (p.m == 0 || p.n == 0) return;
  if (p.x_f32 && !gemm_bf16_takes_f32(p)) {
    std::fprintf(stderr, "deepinfer: gemm_bf16 reads float32 x only in its decode tiling\n");
    std::abort();
  }
  if (p.x_rows && (!p.offsets || p.x_f32)) {  // (read after the grouped launch's programmatic wait, through bf16 x)
    std::fprintf(stderr, "deepinfer: gemm_bf16 gathers rows only for grouped products of bf16 x\n");
    std::abort();
  }
  switch (p.w_format) {
    case WeightFormat::kBF16: return gemm_bf16_as<0>(p, s);
    case WeightFormat::kFP8Block32: return gemm_bf16_as<1>(p, s);
    case WeightFormat::kMXFP4: return gemm_bf16_as<2>(p, s);
    default:
      std::fprintf(stderr, "deepinfer: gemm_bf16: weights stored as format %d\n", static_cast<int>(p.w_format));
      std::abort();
  }
}

}  // namespace deepinfer::kernels::cuda
