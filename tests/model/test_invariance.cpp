// Chunking invariance beyond the fixtures: a random-weight model with a short window, both
// compress ratios, a Reindex layer and candidate blocks, fed 300 tokens in several chunkings,
// gives bitwise-identical logits (every op computes a row independently of the others).
// Also: `--load-format random` weights are a pure function of the seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/backend.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"

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

std::vector<float> run(model::DeepseekV41& m, const std::vector<int64_t>& toks, const std::vector<int64_t>& chunks) {
  const int64_t V = m.config().vocab_size, n = static_cast<int64_t>(toks.size());
  std::vector<float> out(static_cast<size_t>(n * V));
  auto st = m.new_state();
  int64_t done = 0;
  size_t i = 0;
  while (done < n) {
    int64_t c = std::min(chunks[std::min(i++, chunks.size() - 1)], n - done);
    m.forward(toks.data() + done, c, st, out.data() + done * V);
    done += c;
  }
  return out;
}

}  // namespace

TEST(Invariance, ChunkingIsBitwiseIdentical) {
  auto cfg = small_config();
  auto be = kernels::make_cpu_backend(2);
  model::DeepseekV41 m(cfg, model::random_weights(cfg, 7), *be);
  std::vector<int64_t> toks(300);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int64_t>((i * 37 + 11) % 300);
  auto one = run(m, toks, {300});
  for (float v : one) ASSERT_TRUE(std::isfinite(v));
  for (auto chunks : std::vector<std::vector<int64_t>>{{1}, {7}, {13, 9, 1}, {17, 64, 3}}) {
    auto other = run(m, toks, chunks);
    ASSERT_EQ(other.size(), one.size());
    EXPECT_EQ(std::memcmp(other.data(), one.data(), one.size() * sizeof(float)), 0) << "chunks " << chunks[0];
  }
  // A different thread count gives the same bits too.
  auto be1 = kernels::make_cpu_backend(1);
  model::DeepseekV41 m1(cfg, model::random_weights(cfg, 7), *be1);
  auto single = run(m1, toks, {300});
  EXPECT_EQ(std::memcmp(single.data(), one.data(), one.size() * sizeof(float)), 0);
}

TEST(Invariance, RandomWeightsDependOnlyOnTheSeed) {
  auto cfg = small_config();
  auto a = model::random_weights(cfg, 3), b = model::random_weights(cfg, 3), c = model::random_weights(cfg, 4);
  const auto& wa = a.layers[2].attn.wq_b;
  EXPECT_EQ(std::memcmp(wa.p, b.layers[2].attn.wq_b.p, static_cast<size_t>(wa.rows * wa.cols) * 4), 0);
  EXPECT_NE(std::memcmp(wa.p, c.layers[2].attn.wq_b.p, static_cast<size_t>(wa.rows * wa.cols) * 4), 0);
}
