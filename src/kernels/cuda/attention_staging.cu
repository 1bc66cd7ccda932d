// CUDA attention's staging (attention.cu dispatches): the rows the tensor-core kernel reads,
// rounded to bf16 into one buffer (entries_bf16_k; packed window rows decoded on the way), and
// packed windows dequantised for the float32 kernels (unpack_windows_k).
#include <cuda_bf16.h>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/packed.cuh"

namespace deepinfer::kernels::cuda {

namespace {

using namespace detail;

// The rows a query can see, staged: window rows first, then the compressed rows when a
// selection may name them (the kernels' entries_of rule).
struct StagedRows {
  const float* win;
  const uint8_t *win_codes, *win_scales;  // packed windows (win_block > 0)
  const float* comp;
  int64_t t_win, t_comp;
};
__device__ inline StagedRows staged_rows(const AttentionArgs& a, int64_t si) {
  if (a.seqs) {
    const AttentionSeq& e = a.seqs[si];
    return {e.win, e.win_codes, e.win_scales, e.comp, e.t_win, (e.comp && e.comp_sel) ? e.t_comp : 0};
  }
  return {a.win, nullptr, nullptr, a.comp, a.t_win, (a.comp && a.comp_sel) ? a.t_comp : 0};
}

// With at most this many queries in the call (decode), only the compressed rows some query of
// the sequence selected are staged (the tensor-core kernel reads no other row: at 4k tokens and
// ratio 1, 512 of 4096); the rest of their room is left as it was.
constexpr int64_t kStageSelectedQueries = 8;
__device__ inline bool comp_row_selected(const AttentionArgs& a, int64_t si, int64_t j) {
  if (a.s > kStageSelectedQueries) return true;
  const uint8_t* sel = a.seqs ? a.seqs[si].comp_sel : a.comp_sel;
  const int64_t q0 = a.seqs ? a.seqs[si].q0 : 0, tc = a.seqs ? a.seqs[si].t_comp : a.t_comp;
  for (int64_t t = 0; t < a.s; ++t)
    if ((!a.seqs || a.q_seq[t] == si) && sel[(t - q0) * tc + j]) return true;
  return false;
}

// Block (chunk, sequence si): the sequence's first row e0 = the staged rows of the sequences
// before it (written to seq_e0 by the chunk-0 block), then its rows rounded to bf16 at e0.
__global__ void entries_bf16_k(AttentionArgs a, __nv_bfloat16* out, int64_t cap, int64_t* seq_e0) {
  DI_PDL_ENTRY();
  const int64_t si = blockIdx.y, D = a.head_dim, C8 = D / 8;
  __shared__ long long s_part[kThreads / 32];
  long long before = 0;
  for (int64_t i = threadIdx.x; i < si; i += blockDim.x) {
    const StagedRows r = staged_rows(a, i);
    before += r.t_win + r.t_comp;
  }
  const int64_t e0 = block_sum_ordered(before, s_part);
  const StagedRows r = staged_rows(a, si);
  const int64_t n = r.t_win + r.t_comp;
  if (e0 + n > cap) __trap();  // AttentionArgs.total_entries below the truth
  if (blockIdx.x == 0 && threadIdx.x == 0 && seq_e0) seq_e0[si] = e0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * C8;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / C8, c8 = i - row * C8;
    if (row >= r.t_win && !comp_row_selected(a, si, row - r.t_win)) continue;
    __nv_bfloat16* dst = out + (e0 + row) * D + c8 * 8;
    if (row < r.t_win && a.seqs && a.win_block > 0) {  // a packed window row: decoded as dequant_packed does
      float v[8];
      fp8_pow2_at8(r.win_codes + row * D, r.win_scales + row * (D / a.win_block), c8, a.win_block, v);
      *reinterpret_cast<uint4*>(dst) = pack_bf16x8(make_float4(v[0], v[1], v[2], v[3]), make_float4(v[4], v[5], v[6], v[7]));
      continue;
    }
    const float* src = (row < r.t_win ? r.win + row * D : r.comp + (row - r.t_win) * D) + c8 * 8;
    *reinterpret_cast<uint4*>(dst) = pack_bf16x8(*reinterpret_cast<const float4*>(src), *reinterpret_cast<const float4*>(src + 4));
  }
}

// Packed windows for the float32 kernels: block (chunk, sequence si) dequantises the sequence's
// window into wins from row e0 = the window rows of the sequences before it (dequant_packed's
// values), and the chunk-0 block writes its AttentionSeq there with win set.
__global__ void unpack_windows_k(AttentionArgs a, AttentionSeq* seqs, float* wins, int64_t cap) {
  DI_PDL_ENTRY();
  const int64_t si = blockIdx.y, D = a.head_dim;
  __shared__ long long s_part[kThreads / 32];
  long long before = 0;
  for (int64_t i = threadIdx.x; i < si; i += blockDim.x) before += a.seqs[i].t_win;
  const int64_t e0 = block_sum_ordered(before, s_part);
  const AttentionSeq e = a.seqs[si];
  if (e0 + e.t_win > cap) __trap();  // the rows' bound (AttentionArgs.total_entries) below the truth
  float* win = wins + e0 * D;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    AttentionSeq u = e;
    u.win = win;
    u.win_codes = u.win_scales = nullptr;
    seqs[si] = u;
  }
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < e.t_win * D;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dequant_packed_at(static_cast<int>(FakeQuant::kFp8Pow2), e.win_codes, e.win_scales, win, i, a.win_block);
}

}  // namespace

namespace detail {

void stage_entries_bf16(const AttentionArgs& a, __nv_bfloat16* staged, int64_t total, int64_t* seq_e0, int64_t chunks,
                        Stream s) {
  const int64_t n_seqs = a.seqs ? a.n_seqs : 1;
  launch_k(entries_bf16_k, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(n_seqs)), kThreads, 0, s, a, staged, total, seq_e0);
  DI_CUDA_LAUNCHED();
}

void unpack_windows(const AttentionArgs& a, AttentionSeq* seqs, float* wins, int64_t rows, int64_t chunks, Stream s) {
  launch_k(unpack_windows_k, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(a.n_seqs)), kThreads, 0, s, a, seqs,
           wins, rows);
  DI_CUDA_LAUNCHED();
}

}  // namespace detail

}  // namespace deepinfer::kernels::cuda
