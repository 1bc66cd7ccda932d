// Chunking invariance beyond the fixtures: a random-weight model with a short window, both
// compress ratios, a Reindex layer and candidate blocks, fed 300 tokens in several chunkings,
// gives bitwise-identical logits (every op computes a row independently of the others).
// Also: `--load-format random` weights are a pure function of the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <span>

#include "kernels/backend.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"
#include "model/devices.h"
#include "runner/batch_runner.h"

using namespace deepinfer;

namespace {

loader::ModelConfig small_config() {
  return loader::parse_config(R"({
    "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 7, "num_attention_heads": 4,
    "head_dim": 32, "q_lora_rank": 32, "qk_rope_head_dim": 8, "o_groups": 2, "o_lora_rank": 16,
    "sliding_window": 16, "compress_ratios": [0, 2, 2, 2, 1, 1, 1],
    "kv_source_layer_ids": [1, 4], "index_source_layer_ids": [1, 4, 6], "candidate_source_layer_id": 4,
    "candidate_block_size": 4, "candidate_topk_blocks": 5, "index_n_heads": 4, "index_head_dim": 32,
    "index_topk": 8, "moe_intermediate_size": 32, "n_routed_experts": 6, "num_experts_per_tok": 2,
    "num_nextn_predict_layers": 0, "max_position_embeddings": 4096,
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 256,
                     "beta_fast": 32, "beta_slow": 1}
  })", "test-config");
}

std::vector<float> run(runner::BatchRunner& m, const std::vector<int64_t>& toks, const std::vector<int64_t>& chunks) {
  const int64_t V = m.model().config().vocab_size, n = static_cast<int64_t>(toks.size());
  std::vector<float> out(static_cast<size_t>(n * V));
  auto st = m.model().new_state();
  int64_t done = 0;
  size_t i = 0;
  while (done < n) {
    int64_t c = std::min(chunks[std::min(i++, chunks.size() - 1)], n - done);
    m.forward(toks.data() + done, c, st, out.data() + done * V);
    done += c;
  }
  return out;
}

// Tests that run on every built backend (bitwise invariance must hold on each).
class OnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<kernels::Backend> backend() const { return kernels::make_backend(GetParam(), 2); }
};

}  // namespace

TEST_P(OnDevice, ChunkingIsBitwiseIdentical) {
  auto cfg = small_config();
  auto be = backend();
  model::DeepseekV41 m_model(cfg, model::random_weights(cfg, 7), *be);
  runner::BatchRunner m(m_model);
  std::vector<int64_t> toks(300);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int64_t>((i * 37 + 11) % 300);
  auto one = run(m, toks, {300});
  for (float v : one) ASSERT_TRUE(std::isfinite(v));
  for (auto chunks : std::vector<std::vector<int64_t>>{{1}, {7}, {13, 9, 1}, {17, 64, 3}}) {
    auto other = run(m, toks, chunks);
    ASSERT_EQ(other.size(), one.size());
    EXPECT_EQ(std::memcmp(other.data(), one.data(), one.size() * sizeof(float)), 0) << "chunks " << chunks[0];
  }
  if (GetParam() != "cpu") return;  // below: the CPU's thread count
  // A different thread count gives the same bits too.
  auto be1 = kernels::make_cpu_backend(1);
  model::DeepseekV41 m1_model(cfg, model::random_weights(cfg, 7), *be1);
  runner::BatchRunner m1(m1_model);
  auto single = run(m1, toks, {300});
  EXPECT_EQ(std::memcmp(single.data(), one.data(), one.size() * sizeof(float)), 0);
}

// Head dims that do not divide into the FP8 windows' or the indexer keys' 32-channel blocks keep
// those caches as float32 rows (state.h): chunked prompts then read the cached rows back as
// copies, and must give the same bits as one call (CPU: the CUDA attention needs head dims of a
// multiple of 32).
TEST(Invariance, FloatCachesChunkingIsBitwiseIdentical) {
  auto cfg = loader::parse_config(R"({
    "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 5, "num_attention_heads": 2,
    "head_dim": 48, "q_lora_rank": 32, "qk_rope_head_dim": 8, "o_groups": 2, "o_lora_rank": 16,
    "sliding_window": 16, "compress_ratios": [0, 2, 2, 1, 1],
    "kv_source_layer_ids": [1, 3], "index_source_layer_ids": [1, 3], "candidate_source_layer_id": 3,
    "candidate_block_size": 4, "candidate_topk_blocks": 5, "index_n_heads": 2, "index_head_dim": 48,
    "index_topk": 8, "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "num_nextn_predict_layers": 0, "max_position_embeddings": 4096
  })", "test-config");
  auto be = kernels::make_cpu_backend(2);
  model::DeepseekV41 m_model(cfg, model::random_weights(cfg, 13), *be);
  runner::BatchRunner m(m_model);
  std::vector<int64_t> toks(120);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int64_t>((i * 41 + 5) % 300);
  auto one = run(m, toks, {120});
  for (float v : one) ASSERT_TRUE(std::isfinite(v));
  for (auto chunks : std::vector<std::vector<int64_t>>{{1}, {13, 9, 1}}) {
    auto other = run(m, toks, chunks);
    EXPECT_EQ(std::memcmp(other.data(), one.data(), one.size() * sizeof(float)), 0) << "chunks " << chunks[0];
  }
}

TEST(Invariance, RandomWeightsDependOnlyOnTheSeed) {
  auto cfg = small_config();
  auto a = model::random_weights(cfg, 3), b = model::random_weights(cfg, 3), c = model::random_weights(cfg, 4);
  const auto& wa = a.layers[2].attn.wq_b;
  EXPECT_EQ(std::memcmp(wa.data, b.layers[2].attn.wq_b.data, static_cast<size_t>(wa.rows * wa.cols) * 4), 0);
  EXPECT_NE(std::memcmp(wa.data, c.layers[2].attn.wq_b.data, static_cast<size_t>(wa.rows * wa.cols) * 4), 0);
}

TEST_P(OnDevice, BatchedSequencesMatchEachAlone) {
  auto cfg = small_config();
  auto be = backend();
  model::DeepseekV41 m_model(cfg, model::random_weights(cfg, 7), *be);
  runner::BatchRunner m(m_model);
  const int64_t V = cfg.vocab_size;
  // Three sequences: a long prompt, a short one, and one already 40 tokens in.
  std::vector<std::vector<int64_t>> toks(3);
  for (int64_t i = 0; i < 90; ++i) toks[0].push_back((i * 13 + 1) % V);
  for (int64_t i = 0; i < 5; ++i) toks[1].push_back((i * 29 + 3) % V);
  for (int64_t i = 0; i < 47; ++i) toks[2].push_back((i * 7 + 2) % V);
  // Alone: sequence 2 first runs 40 tokens, then its last 7 with all-row logits.
  std::vector<std::vector<float>> alone(3);
  std::vector<model::SequenceState> st_alone, st_batch;
  for (int q = 0; q < 3; ++q) {
    st_alone.push_back(m.model().new_state());
    st_batch.push_back(m.model().new_state());
  }
  std::vector<float> scratch(static_cast<size_t>(40 * V));
  m.forward(toks[2].data(), 40, st_alone[2], scratch.data());
  m.forward(toks[2].data(), 40, st_batch[2], scratch.data());
  const int64_t start[3] = {0, 0, 40};
  for (int q = 0; q < 3; ++q) {
    const int64_t n = static_cast<int64_t>(toks[q].size()) - start[q];
    alone[q].resize(static_cast<size_t>(n * V));
    m.forward(toks[q].data() + start[q], n, st_alone[q], alone[q].data());
  }
  std::vector<std::vector<float>> batched(3);
  std::vector<runner::Chunk> chunks;
  for (int q = 0; q < 3; ++q) {
    const int64_t n = static_cast<int64_t>(toks[q].size()) - start[q];
    batched[q].resize(static_cast<size_t>(n * V));
    chunks.push_back({.tokens = toks[q].data() + start[q], .n = n, .state = &st_batch[q], .replay_from = 0,
                      .all_logits = true, .logits = batched[q].data()});
  }
  m.forward(std::span<runner::Chunk>(chunks));
  for (int q = 0; q < 3; ++q) {
    ASSERT_EQ(alone[q].size(), batched[q].size());
    EXPECT_EQ(std::memcmp(alone[q].data(), batched[q].data(), alone[q].size() * sizeof(float)), 0) << "sequence " << q;
  }
}

TEST_P(OnDevice, BoundedReplayIsIndependentOfChunking) {
  // CED prefill: rows before the tail skip the decoder layers. Splitting the prompt so the
  // first chunk ends before the tail gives the same bits as one replayed call, and decoding
  // afterwards continues identically.
  auto cfg = small_config();
  auto be = backend();
  model::DeepseekV41 m_model(cfg, model::random_weights(cfg, 9), *be);
  runner::BatchRunner m(m_model);
  const int64_t V = cfg.vocab_size, W = cfg.sliding_window, n = 120;
  ASSERT_LT(m.model().late_layer_start(), cfg.num_hidden_layers);
  std::vector<int64_t> toks;
  for (int64_t i = 0; i < n + 3; ++i) toks.push_back((i * 31 + 5) % V);
  auto replayed = [&](const std::vector<int64_t>& split, std::vector<float>* decode_logits) {
    auto st = m.model().new_state();
    std::vector<float> last(static_cast<size_t>(V));
    int64_t done = 0;
    for (int64_t c : split) {
      const int64_t tail_start = n - W;  // prompt rows at or after this run every layer
      runner::Chunk ch{.tokens = toks.data() + done, .n = c, .state = &st,
                                      .replay_from = std::clamp<int64_t>(tail_start - done, 0, c), .all_logits = false,
                                      .logits = last.data()};
      m.forward(std::span<runner::Chunk>(&ch, 1));
      done += c;
    }
    for (int64_t i = 0; i < 3; ++i) {
      decode_logits->resize(static_cast<size_t>(V) * static_cast<size_t>(i + 2));
      m.forward(&toks[static_cast<size_t>(n + i)], 1, st, decode_logits->data() + (i + 1) * V);
    }
    std::memcpy(decode_logits->data(), last.data(), static_cast<size_t>(V) * sizeof(float));
  };
  std::vector<float> one, split, split2;
  replayed({n}, &one);
  replayed({50, 70}, &split);   // first chunk entirely before the tail
  replayed({100, 20}, &split2);  // the tail spans both chunks
  EXPECT_EQ(std::memcmp(one.data(), split.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.data(), split2.data(), one.size() * sizeof(float)), 0);
  // Replay is an approximation: the prompt's last logits move, but stay close to exact.
  auto st = m.model().new_state();
  std::vector<float> exact(static_cast<size_t>(V));
  m.forward(toks.data(), n, st, exact.data(), true);
  double max_ref = 0, max_diff = 0;
  for (int64_t i = 0; i < V; ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(exact[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(exact[i] - one[i])));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff / max_ref, 0.5);
}

INSTANTIATE_TEST_SUITE_P(Invariance, OnDevice, ::testing::ValuesIn(deepinfer::testing::devices()),
                         deepinfer::testing::device_name);

TEST_P(OnDevice, DecodeStepIsBitwiseTheSameInBatchesUpTo256) {
  // One sequence's decode logits alone, and inside decode batches of 2..256 sequences with
  // other prompt lengths (so other rows, other caches): the same bits.
  auto cfg = small_config();
  auto be = backend();
  model::DeepseekV41 m_model(cfg, model::random_weights(cfg, 5), *be);
  runner::BatchRunner m(m_model);
  const int64_t V = cfg.vocab_size;
  auto prompt = [&](int64_t q) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < 3 + (q * 7) % 29; ++i) t.push_back((q * 31 + i * 17 + 1) % V);
    return t;
  };
  const std::vector<int64_t> target = prompt(0);
  const int64_t next = 42;
  std::vector<float> alone(static_cast<size_t>(V)), scratch(static_cast<size_t>(64 * V));
  {
    auto st = m.model().new_state();
    m.forward(target.data(), static_cast<int64_t>(target.size()), st, scratch.data(), true);
    m.forward(&next, 1, st, alone.data(), true);
  }
  for (int64_t B : {2, 17, 64, 256}) {
    std::vector<model::SequenceState> st;
    std::vector<int64_t> step(static_cast<size_t>(B));
    for (int64_t q = 0; q < B; ++q) {
      st.push_back(m.model().new_state());
      const std::vector<int64_t> p = prompt(q);
      m.forward(p.data(), static_cast<int64_t>(p.size()), st.back(), scratch.data(), true);
      step[static_cast<size_t>(q)] = q == 0 ? next : (q * 11) % V;
    }
    std::vector<float> logits(static_cast<size_t>(B * V));
    std::vector<runner::Chunk> chunks;
    for (int64_t q = 0; q < B; ++q)
      chunks.push_back({.tokens = &step[static_cast<size_t>(q)], .n = 1, .state = &st[static_cast<size_t>(q)],
                        .logits = logits.data() + q * V});
    m.forward(std::span<runner::Chunk>(chunks));
    EXPECT_EQ(std::memcmp(logits.data(), alone.data(), static_cast<size_t>(V) * sizeof(float)), 0) << "batch of " << B;
  }
}

TEST_P(OnDevice, GraphsReplayTheEagerBits) {
  // Three sequences of other lengths decoding together (a padded bucket of 4 rows): with the
  // static pieces captured and replayed as graphs, every step's logits equal the eager run's.
  auto cfg = small_config();
  auto be_graphs = backend(), be_eager = backend();
  model::DeepseekV41 mg(cfg, model::random_weights(cfg, 11), *be_graphs), me(cfg, model::random_weights(cfg, 11), *be_eager);
  runner::BatchRunner g(mg), e(me);
  e.set_graphs(false);
  EXPECT_EQ(g.graphs(), be_graphs->graphs());
  EXPECT_FALSE(e.graphs());
  const int64_t V = cfg.vocab_size, B = 3;
  std::vector<model::SequenceState> sg, se;
  std::vector<float> lg(static_cast<size_t>(B * V)), le(lg.size());
  std::vector<int64_t> tok(static_cast<size_t>(B));
  for (int64_t q = 0; q < B; ++q) {
    sg.push_back(g.model().new_state());
    se.push_back(e.model().new_state());
    std::vector<int64_t> p;
    for (int64_t i = 0; i < 5 + 9 * q; ++i) p.push_back((q * 13 + i * 7 + 2) % V);
    g.forward(p.data(), static_cast<int64_t>(p.size()), sg.back(), lg.data(), true);
    e.forward(p.data(), static_cast<int64_t>(p.size()), se.back(), le.data(), true);
    EXPECT_EQ(std::memcmp(lg.data(), le.data(), static_cast<size_t>(V) * 4), 0) << "prompt " << q;
    tok[static_cast<size_t>(q)] = (q * 5 + 1) % V;
  }
  // Enough steps to cross compressed-group boundaries and the window while replaying.
  for (int step = 0; step < 24; ++step) {
    auto run = [&](runner::BatchRunner& m, std::vector<model::SequenceState>& st, std::vector<float>& out) {
      std::vector<runner::Chunk> chunks;
      for (int64_t q = 0; q < B; ++q)
        chunks.push_back({.tokens = &tok[static_cast<size_t>(q)], .n = 1, .state = &st[static_cast<size_t>(q)],
                          .logits = out.data() + q * V});
      m.forward(std::span<runner::Chunk>(chunks));
    };
    run(g, sg, lg);
    run(e, se, le);
    ASSERT_EQ(std::memcmp(lg.data(), le.data(), lg.size() * 4), 0) << "step " << step;
    for (int64_t q = 0; q < B; ++q)  // greedy next tokens
      tok[static_cast<size_t>(q)] = std::max_element(lg.begin() + q * V, lg.begin() + (q + 1) * V) - (lg.begin() + q * V);
  }
}
