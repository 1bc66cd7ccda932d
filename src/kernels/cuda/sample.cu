// Sampling on the GPU: DrawParams' rule (backend.h), a block of 1024 threads per row, so only
// the token id comes back to the host.
//
// Every reduction has a fixed shape (a thread's ids in a fixed order, then a fixed tree over
// threads, no float atomics), so a row's token depends only on its logits and its params:
// the same alone or in any batch. The CPU backend sums in plain ascending id order, so the two
// can differ only where a sum lands within rounding of a threshold: the drawn target, top-p's
// limit (top_p times the total), or a logprob's last bit (the tests draw the same tokens on
// both). Columns: fewer than 2^26.
//
// Steps per row: the largest logit (greedy rows stop there); top-k's threshold by a radix
// select over the logits' order-preserving keys (x = logit / T is monotone in the logit); the
// weights w = exp(x - max) once, into a scratch row (fp64 division and exp are the costly
// part); top-p: the total, then a cut found by sorting the survivors (when at most kSortCap
// carry the mass it needs: ranked exactly like the CPU and summed in rank order), else by
// bisection over the weights' bit patterns; then the inverse CDF over contiguous per-thread
// chunks.
#include <cfloat>
#include <climits>
#include <cmath>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/block_select.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace deepinfer::kernels::cuda {

namespace {

constexpr int kT = 1024;        // threads per row
constexpr int kSortCap = 2048;  // survivors sorted in shared memory
constexpr int64_t kRowsPerLaunch = 128;  // rows per launch (their weights in the scratch)
constexpr int kLevels = 20;     // top-p narrowing thresholds 2^-2, 2^-4, ..., 2^-40
__constant__ double kLevel[kLevels] = {0x1p-2,  0x1p-4,  0x1p-6,  0x1p-8,  0x1p-10, 0x1p-12, 0x1p-14,
                                      0x1p-16, 0x1p-18, 0x1p-20, 0x1p-22, 0x1p-24, 0x1p-26, 0x1p-28,
                                      0x1p-30, 0x1p-32, 0x1p-34, 0x1p-36, 0x1p-38, 0x1p-40};

struct Shared {
  double part[32];
  int ipart[32];
  float bv[32];
  int64_t bi[32];
  int digit_count[kT / 32][16];
  int pick;
  int64_t rem;
  double chunk_sum[kT];
  double sw[kSortCap];
  int32_t sid[kSortCap];
  int count;
  int64_t token;
};

// f(i, p[i]) for this thread's ids i = threadIdx.x + j * kT, eight loads in flight at a time
// (a pass over a row is latency-bound otherwise: one block walks the whole row).
template <class T, class F>
__device__ __forceinline__ void for_strided(const T* p, int64_t n, F f) {
  constexpr int kU = 8;
  for (int64_t b = threadIdx.x; b < n; b += kU * kT) {
    T v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = b + u * kT;
      v[u] = i < n ? p[i] : T{};
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (b + u * kT < n) f(b + u * kT, v[u]);
  }
}

// The same over this thread's contiguous chunk [b0, b1) in ascending order.
template <class T, class F>
__device__ __forceinline__ void for_chunk(const T* p, int64_t b0, int64_t b1, F f) {
  constexpr int kU = 8;
  for (int64_t b = b0; b < b1; b += kU) {
    T v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = b + u < b1 ? p[b + u] : T{};
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (b + u < b1) f(b + u, v[u]);
  }
}

__device__ double block_sum_d(double v, Shared& sh) { return block_sum_ordered(v, sh.part); }

// Whether (v, i) ranks before (w, j): value descending, then id ascending; id -1 = none.
template <class V>
__device__ __forceinline__ bool better(V v, int64_t i, V w, int64_t j) {
  return j < 0 || (i >= 0 && (v > w || (v == w && i < j)));
}

// The warp's best of every lane's (bv, bi); every lane gets it.
template <class V>
__device__ void warp_best(V& bv, int64_t& bi) {
  for (int o = 16; o > 0; o >>= 1) {
    const V ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// The block's best of every thread's (bv, bi); every thread gets it. sv, si: [32] in shared
// memory.
template <class V>
__device__ void block_best(V& bv, int64_t& bi, V* sv, int64_t* si) {
  warp_best(bv, bi);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  bv = sv[0];
  bi = si[0];
  for (int w = 1; w < kT / 32; ++w)
    if (better(sv[w], si[w], bv, bi)) {
      bv = sv[w];
      bi = si[w];
    }
}

// The largest value with ties to the lowest id; id -1 when the row has a NaN or nothing is
// above -inf (no token).
__device__ void block_argmax(const float* x, int64_t n, float& best_v, int64_t& best_i, Shared& sh) {
  float bv = -INFINITY;
  int64_t bi = -1;
  int nan = 0;
  for_strided(x, n, [&](int64_t c, float v) {
    nan |= isnan(v);
    if (v > bv) {
      bv = v;
      bi = c;
    }
  });
  nan = __syncthreads_or(nan);
  block_best(bv, bi, sh.bv, sh.bi);
  best_v = bv;
  best_i = nan ? -1 : bi;
}

struct Row {
  const float* l;
  double* w;  // [n] scratch: the weights after min-p and top-k (0: dropped)
  int64_t n;
  double temp, m, log_min_p;
  bool inf_mode, topk_on;
  uint32_t kth_key;
  // top-p cut: kept iff w > cut_w, or w == cut_w and id <= cut_id (cut_on false: no cut).
  bool cut_on;
  double cut_w;
  int64_t cut_id;

  __device__ bool finite_x(float v) const { return inf_mode ? v == INFINITY : (v > -INFINITY && v < INFINITY); }
  // The weight of a logit after min-p and top-k, cheapest rejections first.
  __device__ double weight_of(float v) const {
    if (!finite_x(v)) return 0.0;
    if (inf_mode) return 1.0;  // x = 0 = max: min-p and top-k keep every +inf
    if (topk_on && order_key(v) < kth_key) return 0.0;
    const double x = static_cast<double>(v) / temp;
    if (x - m < log_min_p) return 0.0;
    return exp(x - m);
  }
  __device__ bool cut_keeps(double wi, int64_t i) const {
    return !cut_on || wi > cut_w || (wi == cut_w && i <= cut_id);
  }
};

// The k-th largest key among the finite x (ties with it all stay, so only its value matters),
// given more than k of them: eight 4-bit radix passes. Each thread counts its keys per digit in
// packed 16-bit register fields (no shared atomics: a row's keys share their top digits and
// same-address atomics serialise), then fixed-order sums over lanes and warps.
__device__ uint32_t kth_largest_key(const Row& r, int64_t k, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t prefix = 0u, mask = 0u;
  if (threadIdx.x == 0) sh.rem = k;
  for (int shift = 28; shift >= 0; shift -= 4) {
    uint64_t c[4] = {0, 0, 0, 0};  // digit d in bits 16 * (d % 4) of c[d / 4]
    for_strided(r.l, r.n, [&](int64_t, float v) {
      const uint32_t key = order_key(v);
      if (!r.finite_x(v) || (key & mask) != prefix) return;
      const unsigned d = (key >> shift) & 15u;
      const uint64_t inc = 1ull << (16 * (d & 3u));
#pragma unroll
      for (int q = 0; q < 4; ++q) c[q] += (d >> 2) == static_cast<unsigned>(q) ? inc : 0ull;
    });
    __syncthreads();  // the previous pass's pick is read
#pragma unroll
    for (int d = 0; d < 16; ++d) {
      const auto v = static_cast<unsigned>((c[d >> 2] >> (16 * (d & 3))) & 0xFFFFu);
      const unsigned t = __reduce_add_sync(0xffffffffu, v);
      if (lane == 0) sh.digit_count[warp][d] = static_cast<int>(t);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t rem = sh.rem;
      int pick = 0;
      for (int d = 15; d >= 0; --d) {
        int64_t tot = 0;
        for (int w = 0; w < kT / 32; ++w) tot += sh.digit_count[w][d];
        if (rem <= tot) {
          pick = d;
          break;
        }
        rem -= tot;
      }
      sh.rem = rem;
      sh.pick = pick;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sh.pick) << shift;
    mask |= 15u << shift;
  }
  return prefix;
}

// Rank order of top-p: weight descending, then id ascending.
__device__ inline bool ranks_before(double a, int32_t ia, double b, int32_t ib) { return a > b || (a == b && ia < ib); }

// The top-p cut over the current weights (sets r.cut_*).
__device__ void top_p_cut(Row& r, double top_p, Shared& sh) {
  double s = 0.0, lev[kLevels] = {};
  for_strided(r.w, r.n, [&](int64_t, double w) {
    s += w;
#pragma unroll
    for (int j = 0; j < kLevels; ++j)
      if (w >= kLevel[j]) lev[j] += w;
  });
  const double total = block_sum_d(s, sh);
  const double limit = top_p * total;
  // Tokens lighter than thr come after a mass >= limit in rank order: never kept. The margin
  // covers these sums' rounding against the rank-order sums.
  double thr = 0.0;
  for (int j = 0; j < kLevels; ++j) {
    const double mj = block_sum_d(lev[j], sh);
    if (thr == 0.0 && mj >= limit * (1.0 + 1e-9)) thr = kLevel[j];
  }
  int c = 0;
  for_strided(r.w, r.n, [&](int64_t, double w) { c += w > 0.0 && w >= thr; });
  const int64_t n_c = block_sum_i(c, sh.ipart);
  r.cut_on = true;
  if (n_c <= kSortCap) {
    // Sort the survivors in shared memory, then sum in rank order as the CPU does.
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for_strided(r.w, r.n, [&](int64_t i, double w) {
      if (w > 0.0 && w >= thr) {
        const int slot = atomicAdd(&sh.count, 1);
        sh.sw[slot] = w;
        sh.sid[slot] = static_cast<int32_t>(i);
      }
    });
    int p2 = 1;
    while (p2 < n_c) p2 <<= 1;
    __syncthreads();
    for (int i = static_cast<int>(n_c) + threadIdx.x; i < p2; i += kT) {
      sh.sw[i] = -1.0;
      sh.sid[i] = INT_MAX;
    }
    __syncthreads();
    for (int k = 2; k <= p2; k <<= 1)
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < p2; i += kT) {
          const int o = i ^ j;
          if (o <= i) continue;
          const bool up = (i & k) == 0;  // this run in rank order
          const bool swap = up ? ranks_before(sh.sw[o], sh.sid[o], sh.sw[i], sh.sid[i])
                               : ranks_before(sh.sw[i], sh.sid[i], sh.sw[o], sh.sid[o]);
          if (swap) {
            const double tw = sh.sw[i];
            sh.sw[i] = sh.sw[o];
            sh.sw[o] = tw;
            const int32_t ti = sh.sid[i];
            sh.sid[i] = sh.sid[o];
            sh.sid[o] = ti;
          }
        }
        __syncthreads();
      }
    if (threadIdx.x == 0) {
      double before = 0.0;
      int kept = 0;
      while (kept < n_c && before < limit) before += sh.sw[kept++];
      sh.part[0] = kept > 0 ? sh.sw[kept - 1] : INFINITY;
      sh.bi[0] = kept > 0 ? sh.sid[kept - 1] : -1;
    }
    __syncthreads();
    r.cut_w = sh.part[0];
    r.cut_id = sh.bi[0];
    __syncthreads();
    return;
  }
  // Many light survivors (a flat row): the smallest weight key K with mass above it < limit,
  // by bisection over the bit patterns (positive doubles order as their bits).
  auto mass_above = [&](uint64_t key) {
    double a = 0.0;
    for_strided(r.w, r.n, [&](int64_t, double w) {
      if (w > 0.0 && static_cast<uint64_t>(__double_as_longlong(w)) > key) a += w;
    });
    return block_sum_d(a, sh);
  };
  // The mass at or above thr reaches the limit: below its key is a valid lower end.
  const auto thr_key = static_cast<uint64_t>(__double_as_longlong(thr));
  uint64_t lo = thr_key > 0 ? thr_key - 1 : 0, hi = static_cast<uint64_t>(__double_as_longlong(1.0));
  double a_hi = 0.0;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const double a = mass_above(mid);
    if (a < limit) {
      hi = mid;
      a_hi = a;
    } else {
      lo = mid;
    }
  }
  const double v = __longlong_as_double(static_cast<long long>(hi));
  // Ties at v in ascending id order while the mass before them stays below the limit.
  int t = 0;
  const int64_t chunk = (r.n + kT - 1) / kT, b0 = threadIdx.x * chunk, b1 = min(r.n, b0 + chunk);
  for_chunk(r.w, b0, b1, [&](int64_t, double w) { t += w == v; });
  __syncthreads();
  sh.chunk_sum[threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t ties = 0;
    for (int j = 0; j < kT; ++j) ties += static_cast<int64_t>(sh.chunk_sum[j]);
    double before = a_hi;
    int64_t c_keep = 0;
    while (c_keep < ties && before < limit) {
      before += v;
      ++c_keep;
    }
    // The c_keep-th tie (1-based) in id order: its chunk, then its place there.
    int64_t seen = 0, cut = -1;
    for (int j = 0; j < kT && cut < 0; ++j) {
      const auto tj = static_cast<int64_t>(sh.chunk_sum[j]);
      if (seen + tj >= c_keep) {
        for (int64_t i = j * chunk; i < min(r.n, (j + 1) * chunk); ++i)
          if (r.w[i] == v && ++seen == c_keep) {
            cut = i;
            break;
          }
      } else {
        seen += tj;
      }
    }
    sh.bi[0] = cut;
  }
  __syncthreads();
  r.cut_w = v;
  r.cut_id = sh.bi[0];
  __syncthreads();
}

// The drawn token of a sampled row (temperature >= 1e-5, something finite): valid in thread 0
// (the others return -1); every thread must call it.
__device__ int64_t draw_token(const float* l, int64_t n, const DrawParams& p, float lmax, double* w_row, Shared& sh) {
  Row r{};
  r.l = l;
  r.n = n;
  r.temp = static_cast<double>(p.temperature);
  r.inf_mode = lmax == INFINITY;
  r.m = r.inf_mode ? 0.0 : static_cast<double>(lmax) / r.temp;
  r.log_min_p = p.log_min_p;
  if (p.top_k > 0 && p.top_k < r.n) {  // ties with the k-th all stay
    int c = 0;
    for_strided(r.l, r.n, [&](int64_t, float v) { c += r.finite_x(v); });
    if (block_sum_i(c, sh.ipart) > p.top_k) {
      r.kth_key = kth_largest_key(r, p.top_k, sh);
      r.topk_on = true;
    }
  }
  r.w = w_row;
  for_strided(r.l, r.n, [&](int64_t i, float v) { r.w[i] = r.weight_of(v); });
  __syncthreads();
  if (p.top_p < 1.0f) top_p_cut(r, static_cast<double>(p.top_p), sh);

  // Inverse CDF: contiguous chunks per thread (ascending ids), their sums, then the crossing.
  const int64_t chunk = (r.n + kT - 1) / kT, b0 = threadIdx.x * chunk, b1 = min(r.n, b0 + chunk);
  double s = 0.0;
  int64_t last = -1;
  for_chunk(r.w, b0, b1, [&](int64_t i, double w) {
    if (w > 0.0 && r.cut_keeps(w, i)) {
      s += w;
      last = i;
    }
  });
  __syncthreads();
  sh.chunk_sum[threadIdx.x] = s;
  __syncthreads();
  // The last kept id overall (for a target that rounding leaves at the total).
  for (int o = 16; o > 0; o >>= 1) last = max(last, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, last, o)));
  if (threadIdx.x % 32 == 0) sh.bi[threadIdx.x / 32] = last;
  __syncthreads();
  if (threadIdx.x >= 32) return -1;
  // Warp 0: lane l sums chunks [32 l, 32 l + 32) in order, lane 0 the lane sums in order; the
  // crossing is found the same way down, then in the chunk's ids.
  const int lane = static_cast<int>(threadIdx.x);
  double ls = 0.0;
  for (int j = 0; j < 32; ++j) ls += sh.chunk_sum[lane * 32 + j];
  sh.part[lane] = ls;
  __syncwarp();
  if (lane != 0) return -1;
  int64_t last_all = -1;
  for (int w = 0; w < kT / 32; ++w) last_all = max(last_all, sh.bi[w]);
  double total = 0.0;
  for (int l = 0; l < 32; ++l) total += sh.part[l];
  const double target = p.u * total;
  double cum = 0.0;
  int j = kT;
  for (int l = 0; l < 32; ++l) {
    if (cum + sh.part[l] > target) {
      for (j = l * 32; j < l * 32 + 31; ++j) {
        if (cum + sh.chunk_sum[j] > target) break;
        cum += sh.chunk_sum[j];
      }
      break;
    }
    cum += sh.part[l];
  }
  int64_t tok = last_all < 0 ? 0 : last_all;
  for (int64_t i = static_cast<int64_t>(j) * chunk; i <= last_all; ++i) {  // nothing is kept past last_all
    const double w = r.w[i];
    if (w > 0.0 && r.cut_keeps(w, i)) {
      cum += w;
      if (cum > target) {
        tok = i;
        break;
      }
    }
  }
  return tok;
}

// Logprobs of a row (core::log_softmax's rule: fp64, NaN as -inf, +inf values sharing the mass)
// for the drawn token and the best n (value descending, id ascending), by n block passes.
__device__ void row_logprobs(const float* l, int64_t n, float lmax, int64_t tok, int top,
                             float* tok_lp, int32_t* top_ids, float* top_lp, int64_t max_top, Shared& sh) {
  const bool none = !(lmax > -INFINITY), inf_mode = lmax == INFINITY;  // (a NaN row still ranks its values)
  double lse = 0.0, share = 0.0;
  if (inf_mode) {
    int c = 0;
    for_strided(l, n, [&](int64_t, float v) { c += v == INFINITY; });
    share = -log(static_cast<double>(block_sum_i(c, sh.ipart)));
  } else if (!none) {
    const double m = lmax;
    double sum = 0.0;
    for_strided(l, n, [&](int64_t, float v) { sum += isnan(v) ? 0.0 : exp(static_cast<double>(v) - m); });
    lse = m + log(block_sum_d(sum, sh));
  }
  auto lp = [&](float v) -> double {
    if (none || isnan(v)) return -INFINITY;
    if (inf_mode) return v == INFINITY ? share : -INFINITY;
    return static_cast<double>(v) - lse;
  };
  if (threadIdx.x == 0) *tok_lp = tok < 0 ? -INFINITY : static_cast<float>(lp(l[tok]));
  // Ranked by the logprob itself (tiny logits can share one), ties by id: core::top_n's order.
  auto key = [&](float v) -> double { return lp(v); };
  const int count = static_cast<int>(min(min(static_cast<int64_t>(top), max_top), n));
  double last_v = INFINITY;
  int64_t last_i = -1;
  for (int j = 0; j < count; ++j) {
    double bv = -INFINITY;
    int64_t bi = -1;
    for_strided(l, n, [&](int64_t i, float v) {
      const double kv = key(v);
      const bool after = kv < last_v || (kv == last_v && i > last_i);
      if (after && (bi < 0 || kv > bv)) {  // ascending ids per thread: the first of a tie stays
        bv = kv;
        bi = i;
      }
    });
    block_best(bv, bi, sh.part, sh.bi);
    if (threadIdx.x == 0) {
      top_ids[j] = static_cast<int32_t>(bi);
      top_lp[j] = static_cast<float>(lp(l[bi]));
    }
    last_v = bv;
    last_i = bi;
  }
  if (threadIdx.x == 0)
    for (int64_t j = count; j < max_top; ++j) {
      top_ids[j] = -1;
      top_lp[j] = 0.0f;
    }
}

__global__ void __launch_bounds__(kT) sample_rows_k(SampleRowsArgs a, double* scratch) {
  DI_PDL_ENTRY();
  __shared__ Shared sh;
  const int64_t row = blockIdx.x;
  const DrawParams p = a.params ? a.params[row] : DrawParams{};
  const float* l = a.x + row * a.cols;
  float lmax;
  int64_t imax;
  block_argmax(l, a.cols, lmax, imax, sh);
  int64_t tok = imax;  // greedy, or no token (kNoToken)
  if (p.temperature >= kDrawGreedyTemperature && imax >= 0) tok = draw_token(l, a.cols, p, lmax, scratch + row * a.cols, sh);
  if (threadIdx.x == 0) {
    a.ids[row] = static_cast<int32_t>(tok);
    sh.token = tok;
  }
  if (p.logprobs < 0 || !a.logprob) return;
  __syncthreads();
  row_logprobs(l, a.cols, lmax, sh.token, p.logprobs, a.logprob + row, a.top_ids + row * a.max_logprobs,
               a.top_logprobs + row * a.max_logprobs, a.max_logprobs, sh);
}

// Every row greedy (no params) and few rows: each row's argmax in kArgmaxParts blocks of one
// slice each, then one warp a row takes the best of the slices' bests. The largest value with
// ties to the lowest id (NaN as -inf) is the same whichever way the ids are split, so the token
// is block_argmax's; one block a row read 129,280 logits in 19 us, latency the step waits for.
constexpr int kArgmaxParts = 64;
constexpr int64_t kArgmaxSplitRows = 32;
struct ArgmaxPart {
  float v;
  int64_t i;
  int nan;  // the slice has a NaN
};
__global__ void __launch_bounds__(kT) argmax_part_k(const float* x, int64_t cols, ArgmaxPart* parts) {
  DI_PDL_ENTRY();
  __shared__ float sv[32];
  __shared__ int64_t si[32];
  const int64_t row = blockIdx.y, per = (cols + gridDim.x - 1) / gridDim.x;
  const int64_t c0 = blockIdx.x * per, c1 = std::min(cols, c0 + per);
  const float* l = x + row * cols;
  float bv = -INFINITY;
  int64_t bi = -1;
  int nan = 0;
  for (int64_t c = c0 + threadIdx.x; c < c1; c += kT) {
    const float v = l[c];
    nan |= isnan(v);
    if (v > bv) {
      bv = v;
      bi = c;
    }
  }
  nan = __syncthreads_or(nan);
  block_best(bv, bi, sv, si);
  if (threadIdx.x == 0) parts[row * gridDim.x + blockIdx.x] = {bv, bi, nan};
}
__global__ void argmax_final_k(const ArgmaxPart* parts, int32_t* ids) {
  DI_PDL_ENTRY();
  const int64_t row = blockIdx.x;
  float bv = -INFINITY;
  int64_t bi = -1;
  int nan = 0;
  for (int k = static_cast<int>(threadIdx.x); k < kArgmaxParts; k += 32) {
    const ArgmaxPart p = parts[row * kArgmaxParts + k];
    nan |= p.nan;
    if (better(p.v, p.i, bv, bi)) {
      bv = p.v;
      bi = p.i;
    }
  }
  warp_best(bv, bi);
  nan = __any_sync(0xffffffffu, nan);
  if (threadIdx.x == 0) ids[row] = nan ? kNoToken : static_cast<int32_t>(bi);
}
bool argmax_split(const SampleRowsArgs& a) { return !a.params && a.rows <= kArgmaxSplitRows && a.cols >= 64 * kArgmaxParts; }

}  // namespace

int64_t sample_rows_scratch_bytes(const SampleRowsArgs& a) {
  if (argmax_split(a)) return a.rows * kArgmaxParts * static_cast<int64_t>(sizeof(ArgmaxPart));
  if (!a.params) return 0;  // every row greedy: no weights
  return std::min<int64_t>(a.rows, kRowsPerLaunch) * a.cols * static_cast<int64_t>(sizeof(double));
}

void sample_rows(const SampleRowsArgs& a, void* scratch, Stream s) {
  if (a.rows == 0) return;
  // 16-bit digit counters per thread, int32 ids, the top-p margin's n * eps << 1e-9.
  if (a.cols >= (int64_t{1} << 26)) {
    std::fprintf(stderr, "deepinfer: CUDA sample_rows supports up to 2^26 columns, got %lld\n", static_cast<long long>(a.cols));
    std::abort();
  }
  if (a.cols == 0) {
    DI_CUDA_CHECK(cudaMemsetAsync(a.ids, 0xFF, static_cast<size_t>(a.rows) * sizeof(int32_t), s));  // kNoToken
    if (a.logprob) {  // nothing to rank: -inf, no top entries
      std::vector<float> lp(static_cast<size_t>(a.rows), -INFINITY);
      DI_CUDA_CHECK(cudaMemcpyAsync(a.logprob, lp.data(), lp.size() * sizeof(float), cudaMemcpyHostToDevice, s));
      DI_CUDA_CHECK(cudaMemsetAsync(a.top_ids, 0xFF, static_cast<size_t>(a.rows * a.max_logprobs) * sizeof(int32_t), s));
      DI_CUDA_CHECK(cudaMemsetAsync(a.top_logprobs, 0, static_cast<size_t>(a.rows * a.max_logprobs) * sizeof(float), s));
      DI_CUDA_CHECK(cudaStreamSynchronize(s));  // lp is a host temporary
    }
    return;
  }
  if (argmax_split(a)) {
    auto* parts = static_cast<ArgmaxPart*>(scratch);
    launch_k(argmax_part_k, dim3(kArgmaxParts, static_cast<unsigned>(a.rows)), kT, 0, s, a.x, a.cols, parts);
    DI_CUDA_LAUNCHED();
    launch_k(argmax_final_k, static_cast<unsigned>(a.rows), 32, 0, s, static_cast<const ArgmaxPart*>(parts), a.ids);
    DI_CUDA_LAUNCHED();
    return;
  }
  for (int64_t r0 = 0; r0 < a.rows; r0 += kRowsPerLaunch) {
    SampleRowsArgs part = a;
    part.x += r0 * a.cols;
    if (part.params) part.params += r0;
    part.ids += r0;
    if (part.logprob) {
      part.logprob += r0;
      part.top_ids += r0 * a.max_logprobs;
      part.top_logprobs += r0 * a.max_logprobs;
    }
    part.rows = std::min<int64_t>(kRowsPerLaunch, a.rows - r0);
    launch_k(sample_rows_k, static_cast<unsigned>(part.rows), kT, 0, s, part, static_cast<double*>(scratch));
    DI_CUDA_LAUNCHED();
  }
}

}  // namespace deepinfer::kernels::cuda
