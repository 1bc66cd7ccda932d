// State rollback (speculative decoding): a forward of an anchor and k draft tokens, of which
// the last k - a are wrong and rolled back (model::SequenceState::rollback), leaves the state
// that feeding only the accepted tokens leaves: every later logit is bitwise the same as plain
// decoding's. Checked for every k in 1..5 and every accepted count, at every phase of the
// compressors' groups (ratios 1, 2 and 4), with window rings full and not yet full (and a window
// shorter than a verify chunk), under CED bounded replay, with Engram, and in batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>

#include "engine/load_model.h"
#include "kernels/backend.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"
#include "model/devices.h"
#include "runner/batch_runner.h"

using namespace deepinfer;

namespace {

constexpr int64_t kMaxRollback = 5;

std::string config_text(int64_t window, const std::string& ratios) {
  return R"({
    "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 7, "num_attention_heads": 4,
    "head_dim": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "o_groups": 2, "o_lora_rank": 16,
    "sliding_window": )" + std::to_string(window) + R"(, "compress_ratios": )" + ratios + R"(,
    "kv_source_layer_ids": [1, 4], "index_source_layer_ids": [1, 4, 6], "candidate_source_layer_id": 4,
    "candidate_block_size": 4, "candidate_topk_blocks": 5, "index_n_heads": 4, "index_head_dim": 32,
    "index_topk": 8, "moe_intermediate_size": 32, "n_routed_experts": 6, "num_experts_per_tok": 2,
    "num_nextn_predict_layers": 0, "max_position_embeddings": 4096
  })";
}

// One verify step: k drafts after the anchor, the first `accepted` of them right.
struct Step {
  int64_t k = 0, accepted = 0;
};

// Every (k, accepted) pair with 1 <= k <= 5, in an order that also varies the step lengths.
std::vector<Step> all_steps() {
  std::vector<Step> s;
  for (int64_t k = 1; k <= kMaxRollback; ++k)
    for (int64_t a = 0; a <= k; ++a) s.push_back({k, (a * 3 + k) % (k + 1)});
  return s;
}

// The logits of positions [p0 - 1, n) of toks, each [vocab]. The prompt [0, p0) is one chunk (its
// rows before the last `tail` skip the decoder layers when tail > 0); then, with no steps, one
// token per forward; else verify chunks: the anchor and k drafts whose first `accepted` are
// toks' next tokens and the rest wrong, every row's logits, then a rollback of the wrong rows.
// Each sequence of a batch runs the same step pattern, starting at a different step.
std::vector<std::vector<float>> decode(runner::BatchRunner& m, const std::vector<std::vector<int64_t>>& toks, int64_t p0,
                                       int64_t tail, const std::vector<Step>& steps) {
  const int64_t V = m.model().config().vocab_size;
  const size_t B = toks.size();
  std::vector<model::SequenceState> st;
  std::vector<std::vector<float>> out(B);
  std::vector<float> last(static_cast<size_t>(B * V));
  std::vector<runner::Chunk> chunks;
  for (size_t q = 0; q < B; ++q) {
    st.push_back(m.model().new_state());
    st.back().set_rollback_rows(kMaxRollback);
  }
  for (size_t q = 0; q < B; ++q)
    chunks.push_back({.tokens = toks[q].data(), .n = p0, .state = &st[q],
                      .replay_from = tail > 0 ? std::max<int64_t>(0, p0 - tail) : 0, .logits = last.data() + q * V});
  m.forward(std::span<runner::Chunk>(chunks));
  std::vector<int64_t> done(B, p0);
  std::vector<size_t> at(B);
  for (size_t q = 0; q < B; ++q) {
    out[q].assign(last.begin() + static_cast<int64_t>(q) * V, last.begin() + static_cast<int64_t>(q + 1) * V);
    at[q] = q * 5;
  }
  const int64_t n = static_cast<int64_t>(toks[0].size());
  while (*std::min_element(done.begin(), done.end()) < n) {
    std::vector<std::vector<int64_t>> rows(B);
    std::vector<std::vector<float>> logits(B);
    std::vector<Step> step(B);
    chunks.clear();
    for (size_t q = 0; q < B; ++q) {
      if (done[q] == n) continue;
      step[q] = steps.empty() ? Step{} : steps[at[q]++ % steps.size()];
      const int64_t L = done[q];
      rows[q].push_back(toks[q][static_cast<size_t>(L)]);  // the anchor, at position L
      for (int64_t i = 1; i <= step[q].k; ++i) {
        const int64_t right = L + i < n ? toks[q][static_cast<size_t>(L + i)] : 0;
        rows[q].push_back(i <= step[q].accepted ? right : (right + 1 + i) % V);
      }
      logits[q].resize(rows[q].size() * static_cast<size_t>(V));
      chunks.push_back({.tokens = rows[q].data(), .n = static_cast<int64_t>(rows[q].size()), .state = &st[q],
                        .replay_from = 0, .all_logits = true, .logits = logits[q].data()});
    }
    m.forward(std::span<runner::Chunk>(chunks));
    for (size_t q = 0; q < B; ++q) {
      if (rows[q].empty()) continue;
      // Rows 0..accepted saw only right tokens: they are plain decoding's next logits.
      const int64_t keep = std::min(step[q].accepted + 1, n - done[q]);
      out[q].insert(out[q].end(), logits[q].begin(), logits[q].begin() + keep * V);
      st[q].rollback(static_cast<int64_t>(rows[q].size()) - keep);
      done[q] += keep;
      EXPECT_EQ(st[q].length(), done[q]);
    }
  }
  return out;
}

std::vector<int64_t> tokens(int64_t n, int64_t V, int64_t salt) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * 37 + salt * 11 + 5) % V);
  return t;
}

void expect_same(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& got,
                 const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  for (size_t q = 0; q < ref.size(); ++q) {
    ASSERT_EQ(ref[q].size(), got[q].size()) << what << ", sequence " << q;
    EXPECT_EQ(std::memcmp(ref[q].data(), got[q].data(), ref[q].size() * sizeof(float)), 0) << what << ", sequence " << q;
  }
}

class Rollback : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<kernels::Backend> backend() const { return kernels::make_backend(GetParam(), 2); }

  // Every prompt length in [p_lo, p_hi) (so every group phase) alone, then a batch of three.
  void check(const loader::ModelConfig& cfg, int64_t seed, int64_t p_lo, int64_t p_hi, int64_t tail) {
    auto be = backend();
    model::DeepseekV41 model(cfg, model::random_weights(cfg, static_cast<uint64_t>(seed)), *be);
    runner::BatchRunner m(model);
    const int64_t V = cfg.vocab_size, n = p_hi + 40;
    for (int64_t p0 = p_lo; p0 < p_hi; ++p0) {
      const std::vector<std::vector<int64_t>> t{tokens(n, V, p0)};
      expect_same(decode(m, t, p0, tail, {}), decode(m, t, p0, tail, all_steps()), "prompt " + std::to_string(p0));
    }
    const std::vector<std::vector<int64_t>> t{tokens(n, V, 1), tokens(n, V, 2), tokens(n, V, 3)};
    expect_same(decode(m, t, p_lo, tail, {}), decode(m, t, p_lo, tail, all_steps()), "batch of 3");
  }
};

}  // namespace

TEST_P(Rollback, RatiosOneAndTwo) {
  check(loader::parse_config(config_text(16, "[0, 2, 2, 2, 1, 1, 1]"), "rollback"), 7, 1, 8, 0);
}

TEST_P(Rollback, RatioFourAndAWindowShorterThanAVerifyChunk) {
  check(loader::parse_config(config_text(4, "[0, 4, 4, 4, 1, 1, 1]"), "rollback"), 8, 1, 9, 0);
}

TEST_P(Rollback, AfterBoundedReplay) {
  const auto cfg = loader::parse_config(config_text(16, "[0, 2, 2, 2, 1, 1, 1]"), "rollback");
  auto be = backend();
  model::DeepseekV41 probe(cfg, model::random_weights(cfg, 9), *be);
  ASSERT_LT(probe.late_layer_start(), cfg.num_hidden_layers);  // rows before the tail skip layers
  check(cfg, 9, 40, 43, cfg.sliding_window);
}

TEST_P(Rollback, WithEngram) {
  // The "full" fixture: Engram layers, both compress ratios, a window of 8.
  auto be = backend();
  auto lm = engine::load_model(std::string(DEEPINFER_TEST_DATA) + "/v41/full", *be);
  ASSERT_FALSE(lm.model->config().engram_layer_ids.empty());
  runner::BatchRunner m(*lm.model);
  const int64_t V = lm.model->config().vocab_size;
  for (int64_t p0 : {3, 10, 11}) {
    const std::vector<std::vector<int64_t>> t{tokens(60, V, p0)};
    expect_same(decode(m, t, p0, 0, {}), decode(m, t, p0, 0, all_steps()), "prompt " + std::to_string(p0));
  }
}

INSTANTIATE_TEST_SUITE_P(State, Rollback, ::testing::ValuesIn(deepinfer::testing::devices()), deepinfer::testing::device_name);
