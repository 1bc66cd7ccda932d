// Test helper: an oracle drafter and an engine on a loaded model, for the speculative decoding
// tests. The oracle proposes the target's own continuation (taken from a run without
// speculation), cut to a chosen length and with wrong tokens at chosen positions, so that long
// acceptances and rejections at every position of a block are exercised; or (probabilistic) each
// token drawn from a distribution that mixes the oracle's token with the uniform one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "engine/engine.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "runner/batch_runner.h"
#include "sample/rng.h"
#include "sample/sampler.h"
#include "spec/drafter.h"

namespace deepinfer::testing_util {

class OracleDrafter : public spec::Drafter {
 public:
  // expected[request][completion]: that completion's output tokens without speculation.
  // wrong(request, position, i): draft i of a block whose first draft is output position
  // `position` is replaced by another token. length(request, position, k): how many of the k
  // asked-for drafts to propose. probabilistic: each draft drawn (seeded by the request's seed
  // and the position) from q = mix * one-hot(oracle token) + (1 - mix) / vocab.
  OracleDrafter(std::vector<std::vector<std::vector<int32_t>>> expected, int64_t vocab,
                std::function<bool(size_t, int64_t, int64_t)> wrong = nullptr,
                std::function<int64_t(size_t, int64_t, int64_t)> length = nullptr, bool probabilistic = false,
                double mix = 0.5)
      : expected_(std::move(expected)), vocab_(vocab), wrong_(std::move(wrong)), length_(std::move(length)),
        probabilistic_(probabilistic), mix_(mix) {}

  void propose(std::span<const spec::DraftQuery> queries, std::span<spec::Draft> out) override {
    for (size_t q = 0; q < queries.size(); ++q) {
      const spec::DraftQuery& d = queries[q];
      const std::vector<int32_t>& want = expected_[d.request][static_cast<size_t>(d.completion)];
      const int64_t pos = static_cast<int64_t>(d.tokens.size()) - d.prompt_len;
      const int64_t n = length_ ? std::min(d.k, length_(d.request, pos, d.k)) : d.k;
      for (int64_t i = 0; i < n; ++i) {
        const auto at = static_cast<size_t>(pos + i);
        int64_t tok = at < want.size() ? want[at] : (pos + i) % vocab_;
        if (wrong_ && wrong_(d.request, pos, i)) tok = wrong_token_ >= 0 ? wrong_token_ : (tok + 1 + i) % vocab_;
        if (probabilistic_) tok = draw(d, pos + i, tok, out[q]);
        out[q].tokens.push_back(tok);
        if (confidence_) out[q].confidence.push_back(confidence_(d.request, pos, i));
      }
      ++proposals_;
    }
  }
  void verified(int64_t, int64_t drafted, int64_t accepted) override {
    verified_drafts_ += drafted;
    accepted_ += accepted;
  }
  void release(int64_t) override { ++released_; }

  // Wrong drafts are this token (>= 0) instead of a neighbour of the right one.
  void set_wrong_token(int64_t t) { wrong_token_ = t; }
  // Each draft token i of a block whose first draft is output position `pos` gets
  // confidence(request, pos, i) (adaptive verification); unset: no confidences.
  void set_confidence(std::function<float(size_t, int64_t, int64_t)> f) { confidence_ = std::move(f); }

  int64_t proposals() const { return proposals_; }
  int64_t verified_drafts() const { return verified_drafts_; }
  int64_t accepted() const { return accepted_; }
  int64_t released() const { return released_; }

 private:
  // Draws from q = mix * one-hot(tok) + (1 - mix) / vocab with a uniform keyed by the request's
  // seed and the position, appending q to the draft's distributions.
  int64_t draw(const spec::DraftQuery& d, int64_t pos, int64_t tok, spec::Draft& out) const {
    const size_t V = static_cast<size_t>(vocab_);
    const size_t row = out.probs.size();
    out.probs.resize(row + V, static_cast<float>((1.0 - mix_) / static_cast<double>(vocab_)));
    out.probs[row + static_cast<size_t>(tok)] += static_cast<float>(mix_);
    const double u = sample::draw_uniform(core::splitmix64(d.seed ^ 0x5eedu), static_cast<uint64_t>(pos),
                                          static_cast<uint64_t>(d.completion));
    double acc = 0;
    for (size_t i = 0; i < V; ++i) {
      acc += out.probs[row + i];
      if (u < acc) return static_cast<int64_t>(i);
    }
    return tok;
  }

  std::vector<std::vector<std::vector<int32_t>>> expected_;
  int64_t vocab_;
  std::function<bool(size_t, int64_t, int64_t)> wrong_;
  std::function<int64_t(size_t, int64_t, int64_t)> length_;
  bool probabilistic_;
  double mix_;
  int64_t wrong_token_ = -1;
  std::function<float(size_t, int64_t, int64_t)> confidence_;
  int64_t proposals_ = 0, verified_drafts_ = 0, accepted_ = 0, released_ = 0;
};

// Sanitizer builds (about 10x slower) run fewer configurations and draws.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

inline engine::EngineRequest request(std::vector<int32_t> prompt, const SamplingParams& p, size_t i) {
  engine::EngineRequest r;
  r.request_id = std::to_string(i);
  r.prompt_ids = std::move(prompt);
  r.params = p;
  return r;
}

// Every request's outputs the same: error, tokens, text, finish and stop reasons, logprobs bitwise.
inline void expect_same(const std::vector<RequestOutput>& ref, const std::vector<RequestOutput>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(ref[i].error, got[i].error) << what << ": request " << i;
    ASSERT_EQ(ref[i].outputs.size(), got[i].outputs.size()) << what << ": request " << i;
    for (size_t k = 0; k < ref[i].outputs.size(); ++k) {
      const CompletionOutput& a = ref[i].outputs[k];
      const CompletionOutput& b = got[i].outputs[k];
      EXPECT_EQ(a.token_ids, b.token_ids) << what << ": request " << i << " completion " << k;
      EXPECT_EQ(a.text, b.text) << what << ": request " << i;
      EXPECT_EQ(a.finish_reason, b.finish_reason) << what << ": request " << i;
      EXPECT_EQ(a.stop_reason, b.stop_reason) << what << ": request " << i;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what << ": request " << i;
      for (size_t t = 0; t < a.logprobs.size(); ++t) {
        EXPECT_EQ(std::memcmp(&a.logprobs[t].logprob, &b.logprobs[t].logprob, sizeof(float)), 0)
            << what << ": request " << i << " token " << t;
        EXPECT_EQ(a.logprobs[t].top, b.logprobs[t].top) << what << ": request " << i << " token " << t;
      }
    }
  }
}

// A model loaded once, and engines run on it with given options (load.dspark: the model runs its
// DSpark stages).
struct EngineRig {
  EngineRig(const std::string& dir, engine::LoadFormat format, uint64_t seed = 0, const std::string& device = "cpu",
            const engine::MemoryOptions& load = {})
      : backend(kernels::make_backend(device, 2)), lm(engine::load_model(dir, *backend, format, seed, load)),
        batches(std::make_unique<runner::BatchRunner>(*lm.model)) {}

  engine::EngineOptions options() const {
    engine::EngineOptions o;
    o.sched.replay_tail = lm.model->config().sliding_window;
    o.sched.replay_supported = lm.model->late_layer_start() < lm.model->config().num_hidden_layers;
    return o;
  }
  std::vector<RequestOutput> run(const std::vector<engine::EngineRequest>& reqs, const engine::EngineOptions& o,
                                 engine::StepTimes* times = nullptr) {
    engine::Engine eng(*batches, lm.tokenizer.get(), o);
    auto outs = eng.run(reqs);
    if (times) *times = eng.times();
    return outs;
  }
  int64_t vocab() const { return lm.model->config().vocab_size; }

  std::unique_ptr<kernels::Backend> backend;
  engine::LoadedModel lm;
  std::unique_ptr<runner::BatchRunner> batches;
};

// The exact joint distribution of `tokens` sampled tokens after `prompt` under `p`: cell
// t_0 t_1 ... (base-V digits, the first token most significant) has the product of each
// prefix's probability of its next token (every prefix run alone through the sampler's
// distribution). For chi-square tests of speculative sampling on models of a tiny vocabulary V.
inline std::vector<double> exact_joint_distribution(EngineRig& rig, const std::vector<int32_t>& prompt, const SamplingParams& p,
                                                    int64_t tokens) {
  const int64_t V = rig.vocab();
  size_t cells = 1;
  for (int64_t i = 0; i < tokens; ++i) cells *= static_cast<size_t>(V);
  sample::Sampler sampler;
  std::vector<double> expected(cells, 0.0);
  for (size_t cell = 0; cell < cells; ++cell) {
    std::vector<int64_t> toks(prompt.begin(), prompt.end());
    double pr = 1;
    size_t rest = cell, div = cells;
    for (int64_t i = 0; i < tokens; ++i) {
      div /= static_cast<size_t>(V);
      const auto t = static_cast<int64_t>(rest / div);
      rest %= div;
      auto st = rig.lm.model->new_state();
      std::vector<float> logits(static_cast<size_t>(V));
      rig.batches->forward(toks.data(), static_cast<int64_t>(toks.size()), st, logits.data(), true);
      sample::SampleRequest r;
      r.logits = logits;
      r.params = &p;
      std::vector<double> d(static_cast<size_t>(V));
      sampler.distribution(r, d);
      pr *= d[static_cast<size_t>(t)];
      toks.push_back(t);
    }
    expected[cell] = pr;
  }
  return expected;
}

// Each request's completions' output tokens.
inline std::vector<std::vector<std::vector<int32_t>>> outputs_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<std::vector<int32_t>>> e;
  for (const auto& o : outs) {
    e.emplace_back();
    for (const auto& c : o.outputs) e.back().push_back(c.token_ids);
  }
  return e;
}

}  // namespace deepinfer::testing_util
