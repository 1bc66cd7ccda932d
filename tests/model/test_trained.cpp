// A checkpoint trained by tools/train (PyTorch) in the release formats, against the PyTorch
// evaluation's dump (tools/train/evaluate.py): the engine's per-token negative log-likelihood of
// held-out windows within 1e-3 of PyTorch's (float32, CPU), and its greedy continuations of
// held-out prompts identical. This ties the training code's forward to the engine's on weights
// that have learned something (a random fixture exercises other values). The checkpoint is
// tests/data/v41/trained-tiny (tools/train/smoke.sh --fixture); the bundled model's dump is read
// the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/npy.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "model/deepseek_v41.h"
#include "runner/batch_runner.h"

using namespace deepinfer;

namespace {

struct Trained {
  std::string dir;
  std::unique_ptr<kernels::Backend> be;
  engine::LoadedModel lm;
  std::unique_ptr<runner::BatchRunner> run;
  explicit Trained(const std::string& name) : dir(std::string(DEEPINFER_TEST_DATA) + "/v41/" + name) {
    be = kernels::make_backend("cpu", 2);
    lm = engine::load_model(dir, *be);
    run = std::make_unique<runner::BatchRunner>(*lm.model);
  }
  std::string dump(const std::string& f) const { return dir + "/dump/" + f; }
  int64_t vocab() const { return lm.model->config().vocab_size; }
};

TEST(Trained, HeldOutNllMatchesPyTorch) {
  Trained t("trained-tiny");
  std::vector<int64_t> tshape, nshape;
  const std::vector<int64_t> tokens = core::read_npy_ints(t.dump("nll_tokens.npy"), &tshape);
  const std::vector<float> ref = core::read_npy_f32(t.dump("nll.npy"), &nshape);
  ASSERT_EQ(tshape.size(), 2u);
  const int64_t K = tshape[0], L = tshape[1], V = t.vocab();
  ASSERT_GT(K, 0);
  ASSERT_EQ(nshape, (std::vector<int64_t>{K, L - 1}));
  double worst = 0;
  std::vector<float> logits(static_cast<size_t>(L * V));
  for (int64_t k = 0; k < K; ++k) {
    model::SequenceState st = t.lm.model->new_state();
    t.run->forward(tokens.data() + k * L, L, st, logits.data());
    for (int64_t p = 0; p + 1 < L; ++p) {
      const float* row = logits.data() + p * V;
      const double mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double nll = mx + std::log(sum) - row[tokens[static_cast<size_t>(k * L + p + 1)]];
      const double d = std::fabs(nll - ref[static_cast<size_t>(k * (L - 1) + p)]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  std::printf("%lld windows of %lld tokens: max |engine NLL - PyTorch NLL| = %.3g\n", static_cast<long long>(K),
              static_cast<long long>(L), worst);
  EXPECT_LE(worst, 1e-3);
}

TEST(Trained, GreedyMatchesPyTorch) {
  Trained t("trained-tiny");
  std::vector<int64_t> pshape, gshape;
  const std::vector<int64_t> prompts = core::read_npy_ints(t.dump("greedy_prompts.npy"), &pshape);
  const std::vector<int64_t> expect = core::read_npy_ints(t.dump("greedy_tokens.npy"), &gshape);
  ASSERT_EQ(pshape.size(), 2u);
  ASSERT_EQ(gshape.size(), 2u);
  ASSERT_EQ(pshape[0], gshape[0]);
  ASSERT_GT(pshape[0], 0);
  const int64_t V = t.vocab(), Lp = pshape[1], G = gshape[1];
  std::vector<float> logits(static_cast<size_t>(V));
  for (int64_t i = 0; i < pshape[0]; ++i) {
    model::SequenceState st = t.lm.model->new_state();
    t.run->forward(prompts.data() + i * Lp, Lp, st, logits.data(), /*last_only=*/true);
    std::vector<int64_t> got;
    for (int64_t j = 0; j < G; ++j) {
      int64_t tok = std::max_element(logits.begin(), logits.end()) - logits.begin();
      got.push_back(tok);
      t.run->forward(&tok, 1, st, logits.data());
    }
    EXPECT_EQ(got, std::vector<int64_t>(expect.begin() + i * G, expect.begin() + (i + 1) * G)) << "prompt " << i;
  }
}

}  // namespace
