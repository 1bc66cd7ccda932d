// CUDA: shared-latent attention (window + selected compressed entries, sink), indexer
// scores, candidate blocks, top-k selection and the MoE router. First versions: a warp per
// (query, head) with an online softmax; one thread per row for the selections.
#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

constexpr int kMaxHeadDim = 1024;  // per-lane registers: head_dim / 32 values

__global__ void attention_k(AttentionArgs a) {
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= a.s * a.heads) return;
  const int64_t t = warp / a.heads, h = warp % a.heads, d = a.head_dim, per = d / 32;
  const float* q = a.q + warp * d;
  const int64_t p = a.q_pos[t];
  float acc[kMaxHeadDim / 32];
  for (int64_t i = 0; i < per; ++i) acc[i] = 0.0f;
  float mx = a.sink[h], den = 1.0f;  // the sink starts the running softmax (its exp term = 1 at mx)
  auto visit = [&](const float* k) {
    float dt = 0.0f;
    for (int64_t i = 0; i < per; ++i) dt += q[lane + 32 * i] * k[lane + 32 * i];
    const float l = warp_sum(dt) * a.scale;
    const float nm = fmaxf(mx, l), cold = expf(mx - nm), e = expf(l - nm);
    den = den * cold + e;
    for (int64_t i = 0; i < per; ++i) acc[i] = acc[i] * cold + e * k[lane + 32 * i];
    mx = nm;
  };
  for (int64_t j = 0; j < a.t_win; ++j) {
    const int64_t kp = a.win_pos[j];
    if (kp > p || kp <= p - a.window) continue;
    visit(a.win + j * d);
  }
  if (a.comp && a.comp_sel)
    for (int64_t j = 0; j < a.t_comp; ++j)
      if (a.comp_sel[t * a.t_comp + j]) visit(a.comp + j * d);
  for (int64_t i = 0; i < per; ++i) a.out[warp * d + lane + 32 * i] = acc[i] / den;
}

__global__ void indexer_scores_k(IndexerScoreArgs a) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= a.s * a.t) return;
  const int64_t s = i / a.t, j = i % a.t;
  if (j >= (a.q_pos[s] + 1) / a.ratio) {
    a.scores[i] = -INFINITY;
    return;
  }
  float acc = 0.0f;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* q = a.q + (s * a.heads + h) * a.dim;
    const float* k = a.k + j * a.dim;
    float dt = 0.0f;
    for (int64_t c = 0; c < a.dim; ++c) dt += q[c] * k[c];
    acc += fmaxf(dt, 0.0f) * a.score_scale * a.w[s * a.heads + h];
  }
  a.scores[i] = acc;
}

// k best of v[0..n) (ties: lower index), -inf excluded, written as 1s into sel (0 elsewhere).
__device__ void select_topk(const float* v, int64_t n, int64_t k, uint8_t* sel, const uint8_t* restrict_to) {
  for (int64_t j = 0; j < n; ++j) sel[j] = 0;
  for (int64_t r = 0; r < k; ++r) {
    int64_t best = -1;
    float bv = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      if (sel[j] || (restrict_to && !restrict_to[j])) continue;
      if (best < 0 || v[j] > bv) {
        best = j;
        bv = v[j];
      }
    }
    if (best < 0 || !(bv > -INFINITY)) break;
    sel[best] = 1;
  }
}

__global__ void topk_mask_k(TopkMaskArgs a) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  select_topk(a.scores + s * a.t, a.t, a.k, a.selected + s * a.t, a.restrict_to ? a.restrict_to + s * a.t : nullptr);
}

__global__ void candidate_blocks_k(CandidateBlocksArgs a, float* block_scores, uint8_t* block_sel) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= a.s) return;
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = block_scores + s * nb;
  uint8_t* bsel = block_sel + s * nb;
  const float* sc = a.scores + s * a.t;
  for (int64_t b = 0; b < nb; ++b) {
    float m = -INFINITY;
    for (int64_t j = b * a.block_size; j < min(a.t, (b + 1) * a.block_size); ++j) m = fmaxf(m, sc[j]);
    bs[b] = m;
  }
  const int64_t len = (a.q_pos[s] + 1) / a.ratio;
  const int64_t last = len - 1 >= 0 ? (len - 1) / a.block_size : -1;
  if (last >= 0 && last < nb) bs[last] = INFINITY;
  select_topk(bs, nb, a.topk_blocks, bsel, nullptr);
  for (int64_t j = 0; j < a.t; ++j) a.keep[s * a.t + j] = bsel[j / a.block_size];
}

__global__ void router_k(RouterArgs a, float* scratch) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.rows) return;
  const float* z = a.logits + r * a.experts;
  float* sc = scratch + r * a.experts * 2;
  float* biased = sc + a.experts;
  float mx = -INFINITY, den = 0.0f;
  if (a.func == ScoringFunc::kSoftmax) {
    for (int64_t e = 0; e < a.experts; ++e) mx = fmaxf(mx, z[e] / a.temp);
    for (int64_t e = 0; e < a.experts; ++e) den += expf(z[e] / a.temp - mx);
  }
  for (int64_t e = 0; e < a.experts; ++e) {
    const float v = z[e] / a.temp;
    sc[e] = a.func == ScoringFunc::kSoftmax ? expf(v - mx) / den
            : a.func == ScoringFunc::kSigmoid ? 1.0f / (1.0f + expf(-v))
                                               : sqrtf(v > 20.0f ? v : log1pf(expf(v)));
    biased[e] = sc[e] + (a.bias ? a.bias[e] : 0.0f);
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < a.top_k; ++i) {
    int64_t best = -1;
    for (int64_t e = 0; e < a.experts; ++e) {
      bool taken = false;
      for (int64_t p = 0; p < i; ++p) taken = taken || a.ids[r * a.top_k + p] == e;
      if (!taken && (best < 0 || biased[e] > biased[best])) best = e;
    }
    a.ids[r * a.top_k + i] = static_cast<int32_t>(best);
    sum += sc[best];
  }
  for (int64_t i = 0; i < a.top_k; ++i) {
    float w = sc[a.ids[r * a.top_k + i]];
    if (a.normalize && a.top_k > 1) w = w / (sum + 1e-20f);
    a.weights[r * a.top_k + i] = w * a.routed_scaling;
  }
}

constexpr int kThreads = 256;
unsigned grid(int64_t n) { return static_cast<unsigned>(ceil_div(n, kThreads)); }

}  // namespace

void attention(const AttentionArgs& a, cudaStream_t s) {
  if (a.s * a.heads == 0) return;
  if (a.head_dim % 32 != 0 || a.head_dim > kMaxHeadDim) {
    std::fprintf(stderr, "deepinfer: CUDA attention needs head_dim a multiple of 32 up to %d, got %lld\n", kMaxHeadDim,
                 static_cast<long long>(a.head_dim));
    std::abort();
  }
  attention_k<<<grid(a.s * a.heads * 32), kThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}
void indexer_scores(const IndexerScoreArgs& a, cudaStream_t s) {
  if (a.s * a.t == 0) return;
  indexer_scores_k<<<grid(a.s * a.t), kThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}
void topk_mask(const TopkMaskArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  topk_mask_k<<<grid(a.s), kThreads, 0, s>>>(a);
  DI_CUDA_LAUNCHED();
}
void candidate_blocks(const CandidateBlocksArgs& a, cudaStream_t s) {
  if (a.s == 0) return;
  const int64_t nb = (a.t + a.block_size - 1) / a.block_size;
  float* bs = nullptr;
  uint8_t* bsel = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&bs, static_cast<size_t>(a.s * nb) * sizeof(float), s));
  DI_CUDA_CHECK(cudaMallocAsync(&bsel, static_cast<size_t>(a.s * nb), s));
  candidate_blocks_k<<<grid(a.s), kThreads, 0, s>>>(a, bs, bsel);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(bs, s));
  DI_CUDA_CHECK(cudaFreeAsync(bsel, s));
}
void router(const RouterArgs& a, cudaStream_t s) {
  if (a.rows == 0) return;
  float* scratch = nullptr;
  DI_CUDA_CHECK(cudaMallocAsync(&scratch, static_cast<size_t>(a.rows * a.experts * 2) * sizeof(float), s));
  router_k<<<grid(a.rows), kThreads, 0, s>>>(a, scratch);
  DI_CUDA_LAUNCHED();
  DI_CUDA_CHECK(cudaFreeAsync(scratch, s));
}

}  // namespace deepinfer::kernels::cuda
