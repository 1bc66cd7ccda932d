#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/logits.h"
#include "core/thread_pool.h"
#include "sample/penalties.h"
#include "sample/rng.h"

namespace deepinfer::sample {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr double kPosInf = std::numeric_limits<double>::infinity();

// Argmax with ties to the lowest id; an all -inf row gives 0.
int32_t argmax(const double* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

using core::Ranked;
using core::ranks_before;

}  // namespace

struct Sampler::Workspace {
  std::vector<double> x;         // [vocab] fp64: processed logits, then x / T, then kept weights
  std::vector<Ranked> ranked;    // [<= vocab]: candidates for top-k / top-p ranking
  std::vector<double> lsm;       // [vocab] fp64: raw log-softmax (logprobs only)
  std::vector<float> masked;     // [vocab] fp32: the masked row (logprobs with a mask only)
  PenaltyCounts counts;          // sparse penalty counts

  void ensure(int64_t vocab) {
    const auto n = static_cast<size_t>(vocab);
    if (x.size() < n) x.resize(n);
    if (ranked.size() < n) ranked.resize(n);
  }
};

Sampler::Sampler() = default;
Sampler::~Sampler() = default;

namespace {

using Workspace = Sampler::Workspace;

// Step (0'): x [vocab] gets -inf where the structured-output mask disallows the token.
template <class T>
void apply_allowed_bitmask(const SampleRequest& r, T* x, int64_t vocab) {
  if (r.allowed_bitmask.empty()) return;
  const uint32_t* m = r.allowed_bitmask.data();
  const int64_t words = static_cast<int64_t>(r.allowed_bitmask.size());
  for (int64_t w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = w < words ? m[w] : 0u;
    if (bits == 0xFFFFFFFFu) continue;
    const int64_t end = std::min<int64_t>(vocab, (w + 1) * 32);
    for (int64_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) x[i] = -std::numeric_limits<T>::infinity();
  }
}

// Copies the row into ws.x (NaN -> -inf) and applies steps (0')-(2).
void process(const SampleRequest& r, Workspace& ws) {
  DI_CHECK(r.params != nullptr, "SampleRequest.params is null");
  DI_CHECK(!r.logits.empty(), "SampleRequest.logits is empty");
  const int64_t vocab = static_cast<int64_t>(r.logits.size());
  ws.ensure(vocab);
  double* x = ws.x.data();
  const float* l = r.logits.data();
  for (int64_t i = 0; i < vocab; ++i) x[i] = std::isnan(l[i]) ? kNegInf : static_cast<double>(l[i]);
  apply_allowed_bitmask(r, x, vocab);
  apply_min_tokens_and_penalties(r, x, ws.counts);
}

// Steps (3)-(4) on ws.x (already holding steps (1)-(2)). Returns the token when the row is
// decided without a draw (greedy, or nothing finite left), else -1 with ws.x = kept weights.
int32_t filter(const SampleRequest& r, Workspace& ws) {
  const SamplingParams& p = *r.params;
  const int64_t vocab = static_cast<int64_t>(r.logits.size());
  double* x = ws.x.data();
  if (!(p.temperature >= kGreedyTemperature)) return argmax(x, vocab);

  // (3) temperature.
  const double temp = static_cast<double>(p.temperature);
  double m = kNegInf;
  for (int64_t i = 0; i < vocab; ++i) {
    x[i] = x[i] / temp;
    m = std::max(m, x[i]);
  }
  if (m == kNegInf) return 0;
  if (m == kPosInf) {  // +inf logits share all the mass equally
    for (int64_t i = 0; i < vocab; ++i) x[i] = x[i] == kPosInf ? 0.0 : kNegInf;
    m = 0.0;
  }

  // (4a) min-p: p_i < min_p * p_max  <=>  x_i - m < log(min_p).
  if (p.min_p > 0.0f) {
    const double log_min_p = std::log(static_cast<double>(p.min_p));
    for (int64_t i = 0; i < vocab; ++i)
      if (x[i] - m < log_min_p) x[i] = kNegInf;
  }

  // (4b) top-k: threshold at the k-th largest x; ties with it stay (vLLM's `logits < kth` mask).
  if (p.top_k > 0 && p.top_k < vocab) {
    Ranked* cand = ws.ranked.data();
    size_t n = 0;
    for (int64_t i = 0; i < vocab; ++i)
      if (x[i] > kNegInf) cand[n++] = {x[i], static_cast<int32_t>(i)};
    const auto k = static_cast<size_t>(p.top_k);
    if (n > k) {
      std::nth_element(cand, cand + (k - 1), cand + n, ranks_before);
      const double kth = cand[k - 1].v;
      for (size_t j = k; j < n; ++j)
        if (cand[j].v < kth) x[cand[j].id] = kNegInf;
    }
  }

  // Weights (unnormalised probabilities); the argmax has weight 1 and survives every filter.
  for (int64_t i = 0; i < vocab; ++i) x[i] = x[i] == kNegInf ? 0.0 : std::exp(x[i] - m);

  // (4c) top-p over the renormalised survivors.
  if (p.top_p < 1.0f) core::keep_top_p(x, vocab, static_cast<double>(p.top_p), ws.ranked.data());
  return -1;
}

// (5) inverse CDF in ascending id order.
int32_t draw(const SampleRequest& r, const double* w, int64_t vocab) {
  return static_cast<int32_t>(core::inverse_cdf(w, vocab, draw_uniform(r.seed, r.step, r.stream)));
}

TokenLogprob make_logprob(const SampleRequest& r, int32_t token, Workspace& ws) {
  const int64_t vocab = static_cast<int64_t>(r.logits.size());
  if (ws.lsm.size() < static_cast<size_t>(vocab)) ws.lsm.resize(static_cast<size_t>(vocab));
  std::span<const float> row = r.logits;
  if (!r.allowed_bitmask.empty()) {  // logprobs of the masked row
    ws.masked.assign(r.logits.begin(), r.logits.end());
    apply_allowed_bitmask(r, ws.masked.data(), vocab);
    row = ws.masked;
  }
  core::log_softmax(row, std::span<double>(ws.lsm.data(), static_cast<size_t>(vocab)));
  const double* lp = ws.lsm.data();
  TokenLogprob out;
  out.token_id = token;
  out.logprob = static_cast<float>(lp[token]);
  for (const auto& [id, v] : core::top_n(std::span<const double>(lp, static_cast<size_t>(vocab)), *r.params->logprobs))
    out.top.emplace_back(id, static_cast<float>(v));
  return out;
}

SampleResult sample_row(const SampleRequest& r, Workspace& ws) {
  process(r, ws);
  SampleResult res;
  const int32_t decided = filter(r, ws);
  res.token = decided >= 0 ? decided : draw(r, ws.x.data(), static_cast<int64_t>(r.logits.size()));
  if (r.params->logprobs) res.logprob = make_logprob(r, res.token, ws);
  return res;
}

}  // namespace

SampleResult Sampler::sample(const SampleRequest& r) {
  if (ws_.empty()) ws_.push_back(std::make_unique<Workspace>());
  return sample_row(r, *ws_[0]);
}

void Sampler::sample_batch(std::span<const SampleRequest> reqs, std::span<SampleResult> out,
                           core::ThreadPool* pool) {
  DI_CHECK(out.size() == reqs.size(), "sample_batch: results and requests differ in length");
  const auto n = static_cast<int64_t>(reqs.size());
  if (n == 0) return;
  const int64_t parts = pool != nullptr ? std::min<int64_t>(pool->size(), n) : 1;
  while (static_cast<int64_t>(ws_.size()) < parts) ws_.push_back(std::make_unique<Workspace>());
  // Part q owns workspace q and rows [n*q/parts, n*(q+1)/parts); rows never share state.
  auto run = [&](int64_t qb, int64_t qe) {
    for (int64_t q = qb; q < qe; ++q) {
      Workspace& ws = *ws_[static_cast<size_t>(q)];
      for (int64_t i = n * q / parts; i < n * (q + 1) / parts; ++i)
        out[static_cast<size_t>(i)] = sample_row(reqs[static_cast<size_t>(i)], ws);
    }
  };
  if (parts == 1) {
    run(0, 1);
  } else {
    pool->parallel_for(parts, run, 1);
  }
}

void Sampler::processed_logits(const SampleRequest& r, std::span<float> out) {
  DI_CHECK(out.size() == r.logits.size(), "processed_logits: output size differs from vocab");
  if (ws_.empty()) ws_.push_back(std::make_unique<Workspace>());
  Workspace& ws = *ws_[0];
  process(r, ws);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(ws.x[i]);
}

void Sampler::distribution(const SampleRequest& r, std::span<double> out) {
  DI_CHECK(out.size() == r.logits.size(), "distribution: output size differs from vocab");
  if (ws_.empty()) ws_.push_back(std::make_unique<Workspace>());
  Workspace& ws = *ws_[0];
  process(r, ws);
  const int32_t decided = filter(r, ws);
  if (decided >= 0) {
    std::fill(out.begin(), out.end(), 0.0);
    out[static_cast<size_t>(decided)] = 1.0;
    return;
  }
  double total = 0.0;
  for (size_t i = 0; i < out.size(); ++i) total += ws.x[i];
  for (size_t i = 0; i < out.size(); ++i) out[i] = ws.x[i] / total;
}

std::optional<TokenLogprob> Sampler::logprob(const SampleRequest& r, int32_t token) {
  DI_CHECK(r.params != nullptr, "SampleRequest.params is null");
  if (!r.params->logprobs) return std::nullopt;
  if (ws_.empty()) ws_.push_back(std::make_unique<Workspace>());
  return make_logprob(r, token, *ws_[0]);
}

void sample_batch(std::span<const SampleRequest> reqs, std::span<SampleResult> out, core::ThreadPool* pool) {
  Sampler s;
  s.sample_batch(reqs, out, pool);
}

}  // namespace deepinfer::sample
