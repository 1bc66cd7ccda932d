// The mHC expand of one element (row r, channel d) of the streams, given the sublayer's output
// yd there: hc_expand_k's arithmetic, shared with the fused MoE combine (gather.cu) so both give
// the same bits.
#pragma once

#include "kernels/backend.h"

namespace deepinfer::kernels::cuda {

constexpr int kMaxStreams = 8;

// HC: the stream count when known at compile time (4: the streams in registers; a runtime
// count indexes a local array), else 0 (at most kMaxStreams).
template <int HC>
__device__ __forceinline__ void hc_expand_at(const HcExpandArgs& a, int64_t r, int64_t d, float yd) {
  const int64_t hc = HC ? HC : a.hc;
  constexpr int N = HC ? HC : kMaxStreams;
  float res[N];
#pragma unroll
  for (int j = 0; j < N; ++j) res[j] = j < hc ? a.x[(r * hc + j) * a.dim + d] : 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (k >= hc) break;
    float mixed = 0.0f;
#pragma unroll
    for (int j = 0; j < N; ++j)
      if (j < hc) mixed += a.comb[r * hc * hc + j * hc + k] * res[j];
    a.x[(r * hc + k) * a.dim + d] = a.post[r * hc + k] * yd + mixed;
  }
}

}  // namespace deepinfer::kernels::cuda
