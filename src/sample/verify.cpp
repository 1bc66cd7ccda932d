#include "sample/verify.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/logits.h"
#include "sample/rng.h"

namespace deepinfer::sample {

int64_t accepted_prefix(std::span<const int64_t> draft, std::span<const int32_t> drawn) {
  DI_CHECK(drawn.size() == draft.size() + 1, "accepted_prefix: one draw per draft and one after them");
  int64_t a = 0;
  while (a < static_cast<int64_t>(draft.size()) && drawn[static_cast<size_t>(a)] == draft[static_cast<size_t>(a)]) ++a;
  return a;
}

Verdict verify_probabilistic(Sampler& sampler, std::span<const SampleRequest> rows, std::span<const int64_t> draft,
                             std::span<const float> q) {
  const size_t k = draft.size();
  DI_CHECK(rows.size() == k + 1, "verify_probabilistic: one row per draft and one after them");
  const size_t V = rows[0].logits.size();
  DI_CHECK(q.size() == k * V, "verify_probabilistic: one draft distribution per draft");
  std::vector<double> p(V);
  for (size_t j = 0; j < k; ++j) {
    const SampleRequest& r = rows[j];
    sampler.distribution(r, p);
    const float* qj = q.data() + j * V;
    const auto d = static_cast<size_t>(draft[j]);
    DI_CHECK(d < V && qj[d] > 0.0f, "a probabilistic draft token has no draft probability");
    if (accept_uniform(r.seed, r.step, r.stream) * static_cast<double>(qj[d]) < p[d]) continue;
    // Rejected: the residual's mass is where the target outweighs the draft. Rounding can leave
    // none (p == q up to rounding); then p itself.
    std::vector<double> w(V);
    double total = 0.0;
    for (size_t i = 0; i < V; ++i) {
      w[i] = std::max(0.0, p[i] - static_cast<double>(qj[i]));
      total += w[i];
    }
    const double u = draw_uniform(r.seed, r.step, r.stream);
    const int64_t tok = core::inverse_cdf(total > 0.0 ? w.data() : p.data(), static_cast<int64_t>(V), u);
    return {static_cast<int64_t>(j), static_cast<int32_t>(tok)};
  }
  return {static_cast<int64_t>(k), sampler.sample(rows[k]).token};
}

}  // namespace deepinfer::sample
