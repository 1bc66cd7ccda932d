// bench_device's verify curve (bench/verify_curve.h): a verify step's chunks give every row the
// logits and the greedy token of plain decoding, and rolling the step back returns each
// sequence to its context (so the curve's steps all run at one context); the acceptance model
// and the computed speed-up. The benchmark's run itself is a ctest of bench/ (CPU, tiny config).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "engine/load_model.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "model/devices.h"
#include "model/dspark_fixture.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "tokenizer/tokenizer.h"
#include "verify_curve.h"

namespace deepinfer {
namespace {

using testing::dspark_checkpoint;

class VerifyCurve : public ::testing::TestWithParam<std::string> {};

// Bitwise equality of two float rows (NaN-safe, unlike ==).
bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0; }

int32_t argmax(const float* x, int64_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

TEST_P(VerifyCurve, VerifyRowsAreThoseOfPlainDecoding) {
  const std::string dir = dspark_checkpoint("verify_curve_" + GetParam());
  auto be = kernels::make_backend(GetParam(), 2);
  auto ck = loader::Checkpoint::open(dir);
  auto tok = tokenizer::Tokenizer::load(dir);
  model::DeepseekV41 m(ck->config(), model::load_weights(*ck), *be, engine::make_engram_hasher(ck->config(), tok.get(), dir),
                       model::ModelOptions{.dspark = true});
  runner::BatchRunner run(m);
  const int64_t V = m.config().vocab_size, kmax = m.config().dspark_block_size;
  const std::vector<int64_t> prompt = {9, 14, 21};  // three sequences' context lengths
  const int64_t S = static_cast<int64_t>(prompt.size());
  auto id = [&](int64_t q, int64_t i) { return (q * 389 + i * 97 + 5) % V; };
  auto prefilled = [&] {
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < S; ++q) {
      st.push_back(m.new_state());
      st.back().set_rollback_rows(kmax + 1);
      std::vector<int64_t> t;
      for (int64_t i = 0; i < prompt[static_cast<size_t>(q)]; ++i) t.push_back(id(q, i));
      std::vector<float> lg(static_cast<size_t>(V));
      run.forward(t.data(), static_cast<int64_t>(t.size()), st.back(), lg.data(), /*last_only=*/true);
    }
    return st;
  };
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{3}, kmax}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const int64_t n = 1 + k;
    // The verify step: row j of sequence q is its token at position prompt[q] + j.
    std::vector<model::SequenceState> st = prefilled();
    auto tokens = [&](int64_t q, int64_t j) { return id(q, prompt[static_cast<size_t>(q)] + j); };
    std::vector<float> got(static_cast<size_t>(S * n * V)), again(got.size());
    auto verify = [&](std::vector<float>& lg) {
      bench::VerifyBatch v = bench::verify_batch(st, k, tokens);
      EXPECT_EQ(v.chunks.size(), static_cast<size_t>(S));
      for (int64_t q = 0; q < S; ++q) {
        const runner::Chunk& c = v.chunks[static_cast<size_t>(q)];
        EXPECT_EQ(c.n, n);
        EXPECT_EQ(c.all_logits, k > 0);
        EXPECT_EQ(c.replay_from, 0);
        for (int64_t j = 0; j < n; ++j) EXPECT_EQ(c.tokens[j], tokens(q, j));
        v.chunks[static_cast<size_t>(q)].logits = lg.data() + q * n * V;
      }
      run.forward(std::span<runner::Chunk>(v.chunks));
      for (int64_t q = 0; q < S; ++q) EXPECT_EQ(st[static_cast<size_t>(q)].length(), prompt[static_cast<size_t>(q)] + n);
      return v.drawn;
    };
    const std::vector<int32_t> drawn = verify(got);
    // Plain decoding: the same tokens one step at a time, the three sequences in each batch.
    std::vector<model::SequenceState> ref = prefilled();
    std::vector<float> want(got.size());
    for (int64_t j = 0; j < n; ++j) {
      std::vector<int64_t> t(static_cast<size_t>(S));
      std::vector<runner::Chunk> batch;
      for (int64_t q = 0; q < S; ++q) {
        t[static_cast<size_t>(q)] = tokens(q, j);
        batch.push_back({.tokens = &t[static_cast<size_t>(q)], .n = 1, .state = &ref[static_cast<size_t>(q)],
                         .logits = want.data() + (q * n + j) * V});
      }
      run.forward(std::span<runner::Chunk>(batch));
    }
    for (int64_t q = 0; q < S; ++q)
      for (int64_t j = 0; j < n; ++j) {
        const float* w = want.data() + (q * n + j) * V;
        EXPECT_TRUE(same_bits(got.data() + (q * n + j) * V, w, V)) << "sequence " << q << " row " << j;
        EXPECT_EQ(drawn[static_cast<size_t>(q * n + j)], argmax(w, V)) << "sequence " << q << " row " << j;
      }
    // Rolled back, the same step again gives the same rows.
    for (auto& s : st) s.rollback(n);
    for (int64_t q = 0; q < S; ++q) EXPECT_EQ(st[static_cast<size_t>(q)].length(), prompt[static_cast<size_t>(q)]);
    EXPECT_EQ(verify(again), drawn);
    EXPECT_TRUE(same_bits(again.data(), got.data(), static_cast<int64_t>(got.size())));
  }
}

INSTANTIATE_TEST_SUITE_P(Bench, VerifyCurve, ::testing::ValuesIn(deepinfer::testing::devices()), deepinfer::testing::device_name);

TEST(VerifyCurveModel, ExpectedTokensOfARound) {
  EXPECT_DOUBLE_EQ(bench::expected_tokens(0.0, 5), 1.0);  // only the target's own token
  EXPECT_DOUBLE_EQ(bench::expected_tokens(1.0, 5), 6.0);  // every draft, then the bonus token
  EXPECT_DOUBLE_EQ(bench::expected_tokens(0.5, 2), 1.75);
  EXPECT_DOUBLE_EQ(bench::expected_tokens(0.9, 0), 1.0);
}

TEST(VerifyCurveModel, AcceptanceRateGivesTheAcceptanceLength) {
  for (double tau : {1.0, 2.0, 3.5, 5.5, 6.0}) {
    const double a = bench::acceptance_rate(tau, 5);
    EXPECT_GE(a, 0.0);
    EXPECT_LE(a, 1.0);
    EXPECT_NEAR(bench::expected_tokens(a, 5), tau, 1e-9) << tau;
  }
  // Fewer drafts keep fewer tokens at the same rate; one draft: 1 + a.
  const double a = bench::acceptance_rate(3.5, 5);
  EXPECT_LT(bench::expected_tokens(a, 3), 3.5);
  EXPECT_NEAR(bench::acceptance_rate(1.5, 1), 0.5, 1e-12);
  EXPECT_THROW(bench::acceptance_rate(0.9, 5), std::invalid_argument);
  EXPECT_THROW(bench::acceptance_rate(6.1, 5), std::invalid_argument);
  EXPECT_THROW(bench::acceptance_rate(1.5, 0), std::invalid_argument);
}

TEST(VerifyCurveModel, ComputedSpeedup) {
  // 3.5 tokens a round of a 12 ms verify step and a 3 ms draft, against 10 ms a token.
  EXPECT_NEAR(bench::computed_speedup(3.5, 12e-3, 3e-3, 10e-3), 3.5 * 10.0 / 15.0, 1e-12);
  EXPECT_DOUBLE_EQ(bench::computed_speedup(1.0, 10e-3, 0.0, 10e-3), 1.0);  // k = 0 at plain cost
  EXPECT_LT(bench::computed_speedup(1.0, 11e-3, 0.0, 10e-3), 1.0);
}

TEST(VerifyCurveModel, NegativeDraftCountIsRefused) {
  std::vector<model::SequenceState> none;
  EXPECT_THROW(bench::verify_batch(none, -1, [](int64_t, int64_t) { return int64_t{0}; }), std::invalid_argument);
}

}  // namespace
}  // namespace deepinfer
