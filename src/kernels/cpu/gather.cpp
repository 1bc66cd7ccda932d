// CPU reference of the data-movement ops: weight-row gathers (embedding, Engram tables),
// row gathers (MoE permutation), the MoE combine, scaling and packed-row dequantisation.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/cpu/cpu_ops.h"

namespace deepinfer::kernels::cpu {

void gather_weight_rows(core::ThreadPool& pool, const GatherWeightRowsArgs& a) {
  const int64_t cols = a.w.cols, ldo = a.ldo ? a.ldo : a.copies * cols;
  for (int64_t i = 0; i < a.rows; ++i) DI_CHECK(a.ids[i] >= 0 && a.ids[i] < a.w.rows, "gathered weight row outside the matrix");
  pool.parallel_for(a.rows, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t id = a.ids[i];
      float* o = a.out + i * ldo;
      dequant_row(a.w, id, o);
      for (int64_t c = 1; c < a.copies; ++c) std::memcpy(o + c * cols, o, static_cast<size_t>(cols) * sizeof(float));
    }
  });
}

void scale(core::ThreadPool&, const ScaleArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) a.x[i] *= a.s;
}

void gather_rows(core::ThreadPool& pool, const GatherRowsArgs& a) {
  pool.parallel_for(a.rows, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      std::memcpy(a.dst + i * a.width, a.src + static_cast<int64_t>(a.idx[i]) * a.width,
                  static_cast<size_t>(a.width) * sizeof(float));
  });
}

void moe_combine(core::ThreadPool& pool, const MoeCombineArgs& a) {
  const int64_t K = a.k, D = a.dim;
  pool.parallel_for(a.n, [&](int64_t t0, int64_t t1) {
    std::vector<int64_t> order(static_cast<size_t>(K));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t k = 0; k < K; ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a.ids[t * K + x] < a.ids[t * K + y]; });
      float* yt = a.y + t * D;
      std::fill(yt, yt + D, 0.0f);
      for (int64_t k : order) {
        const float* src = a.expert_out + static_cast<int64_t>(a.slot_row[t * K + k]) * D;
        for (int64_t d = 0; d < D; ++d) yt[d] += src[d];
      }
      if (a.shared)
        for (int64_t d = 0; d < D; ++d) yt[d] += a.shared[t * D + d];
    }
  });
}

void dequant_packed(core::ThreadPool&, const DequantPackedArgs& a) {
  dequant_fake_quant(a.kind, a.codes, a.scales, a.rows, a.dim, a.block, a.out);
}

void copy_batch(core::ThreadPool&, const CopyBatchArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    if (a.descs[i].bytes > 0) std::memcpy(a.descs[i].dst, a.descs[i].src, static_cast<size_t>(a.descs[i].bytes));
}

void dequant_packed_batch(core::ThreadPool& pool, const DequantPackedBatchArgs& a) {
  pool.parallel_for(a.n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const PackedDesc& d = a.descs[i];
      if (d.rows > 0) dequant_fake_quant(a.kind, d.codes, d.scales, d.rows, a.dim, a.block, d.out);
    }
  });
}

void fill_random(core::ThreadPool& pool, const RandomFillArgs& a) {
  DI_CHECK(a.format == WeightFormat::kF32 || a.format == WeightFormat::kBF16, "fill_random stores float32 or bf16");
  pool.parallel_for(a.n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float z = core::normal01(a.seed, static_cast<uint64_t>(a.first + i));
      const float v = a.mean == 0.0f ? a.std * z : a.mean + a.std * z;
      if (a.format == WeightFormat::kF32) static_cast<float*>(a.out)[i] = v;
      else static_cast<uint16_t*>(a.out)[i] = core::f32_to_bf16(v);
    }
  }, 4096);
}

}  // namespace deepinfer::kernels::cpu
