#include "spec/dspark_drafter.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/deepseek_v41.h"
#include "sample/rng.h"

namespace deepinfer::spec {

DraftSampling parse_draft_sampling(const std::string& s, const std::string& field) {
  if (s == "greedy") return DraftSampling::kGreedy;
  if (s == "probabilistic") return DraftSampling::kProbabilistic;
  throw Error(field + ": expected \"greedy\" or \"probabilistic\", got \"" + s + "\"");
}

DsparkDrafter::DsparkDrafter(model::DeepseekV41& model, DraftSampling sampling) : model_(model), sampling_(sampling) {
  if (!model_.dspark()) throw Error("DsparkDrafter: the model was made without ModelOptions.dspark (its draft stages do not run)");
}

namespace {
// The filters of p that a draft's draw applies (no penalties, masks or min_tokens).
SamplingParams draw_filters(const SamplingParams& p) {
  SamplingParams f;
  f.temperature = p.temperature;
  f.top_k = p.top_k;
  f.top_p = p.top_p;
  f.min_p = p.min_p;
  return f;
}
}  // namespace

void DsparkDrafter::propose(std::span<const DraftQuery> queries, std::span<Draft> out) {
  const loader::ModelConfig& c = model_.config();
  const int64_t B = c.dspark_block_size, V = c.vocab_size;
  DI_CHECK(out.size() == queries.size(), "DsparkDrafter: one draft per query");
  std::vector<model::DraftRequest> reqs(queries.size());
  std::vector<std::vector<kernels::DrawParams>> draws(queries.size());
  std::vector<bool> sampled(queries.size(), false);
  bool any_sampled = false;
  for (size_t q = 0; q < queries.size(); ++q) {
    const DraftQuery& d = queries[q];
    DI_CHECK(d.state && !d.tokens.empty(), "DsparkDrafter: a query without its sequence's state or tokens");
    DI_CHECK(d.state->length() + 1 == static_cast<int64_t>(d.tokens.size()),
             "DsparkDrafter: the state must hold every token but the anchor");
    reqs[q] = {.state = d.state, .anchor = d.tokens.back()};
    if (sampling_ != DraftSampling::kProbabilistic || !d.params || d.params->temperature < sample::kGreedyTemperature)
      continue;
    const SamplingParams& p = *d.params;
    const uint64_t seed = core::splitmix64(d.seed ^ kDraftSeedSalt);
    const auto generated = static_cast<uint64_t>(static_cast<int64_t>(d.tokens.size()) - d.prompt_len);
    std::vector<kernels::DrawParams>& dp = draws[q];
    dp.resize(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      kernels::DrawParams& x = dp[static_cast<size_t>(i)];
      x.temperature = p.temperature;
      x.top_k = p.top_k > 0 ? p.top_k : 0;
      x.top_p = p.top_p;
      if (p.min_p > 0.0f) x.log_min_p = std::log(static_cast<double>(p.min_p));
      x.u = sample::draw_uniform(seed, generated + static_cast<uint64_t>(i), static_cast<uint64_t>(d.completion));
    }
    reqs[q].draw = dp.data();
    sampled[q] = any_sampled = true;
  }
  const model::Drafts drafts = model_.draft(reqs);
  std::vector<float> logits;
  if (any_sampled) logits = drafts.logits.download();
  std::vector<double> dist(static_cast<size_t>(V));
  for (size_t q = 0; q < queries.size(); ++q) {
    const DraftQuery& d = queries[q];
    Draft& o = out[q];
    o.tokens.clear();
    o.probs.clear();
    o.confidence.clear();
    const int64_t n = std::min(d.k, B);
    const auto at = static_cast<size_t>(q) * static_cast<size_t>(B);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t tok = drafts.ids[static_cast<size_t>(q) * static_cast<size_t>(B + 1) + static_cast<size_t>(j) + 1];
      if (sampled[q]) {
        const SamplingParams f = draw_filters(*d.params);
        sample::SampleRequest r;
        r.logits = std::span<const float>(logits.data() + (at + static_cast<size_t>(j)) * static_cast<size_t>(V),
                                          static_cast<size_t>(V));
        r.params = &f;
        sampler_.distribution(r, dist);
        if (!(dist[static_cast<size_t>(tok)] > 0)) break;
        const size_t row = o.probs.size();
        o.probs.resize(row + static_cast<size_t>(V));
        for (int64_t t = 0; t < V; ++t) o.probs[row + static_cast<size_t>(t)] = static_cast<float>(dist[static_cast<size_t>(t)]);
        if (!(o.probs[row + static_cast<size_t>(tok)] > 0)) {  // (below float's range)
          o.probs.resize(row);
          break;
        }
      }
      o.tokens.push_back(tok);
      const double x = drafts.confidence[at + static_cast<size_t>(j)];
      o.confidence.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-x))));
    }
  }
}

}  // namespace deepinfer::spec
