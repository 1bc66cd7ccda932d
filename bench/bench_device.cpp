// Forward throughput on a device (or the CPU) with random weights made in the backend's
// memory: decode step time at several batch sizes and a multi-prompt prefill (CED bounded
// replay and exact), each next to its hardware limit: bytes moved per decode step against the
// copy bandwidth, FLOPs per prefill against the bf16 tensor-core rate. A benchmark, not a test.
//
// Engram layers (a config with engram_layer_ids) hash with a synthetic compressed token map
// (token t -> t mod engram_compressed_vocab_size: the release tokenizer's map is not shipped),
// their tables in host memory (the engine's default) or in device memory (--engram-tables).
//
// usage: bench_device [--config DIR] [--device cuda] [--dtype bfloat16] [--format bf16|f32]
//                     [--context 4096] [--batches 1,64,256] [--batch-context 256] [--steps 8]
//                     [--prompts 8] [--prompt-len 4096] [--chunk 4096] [--seed 0]
//                     [--bandwidth 4.26e12] [--peak 790e12] [--invariant 1|0] [--graphs 1|0]
//                     [--engram-tables host|device]
//   batch 1 decodes at --context tokens of context; larger batches at --batch-context each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"
#include "model/engram.h"
#include "model/engram_rows.h"
#include "model/info.h"
#include "model/weights.h"
#include "runner/batch_runner.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(std::stoll(x));
  return v;
}

int64_t token(int64_t q, int64_t i, int64_t V) { return (q * 7919 + i * 104729 + 13) % V; }

// Engram's hash state on a synthetic compressed map of the config's size (null without Engram).
std::shared_ptr<const model::EngramHasher> synthetic_hasher(const loader::ModelConfig& c) {
  if (c.engram_layer_ids.empty()) return nullptr;
  const int64_t keys = c.engram_compressed_vocab_size;
  std::vector<int32_t> map(static_cast<size_t>(c.vocab_size));
  for (int64_t t = 0; t < c.vocab_size; ++t) map[static_cast<size_t>(t)] = static_cast<int32_t>(t % keys);
  return std::make_shared<const model::EngramHasher>(c, std::move(map), static_cast<int32_t>(keys));
}

// Prefills sequences [0, n) of `st` to `len` tokens each, `chunk` tokens per forward, with
// CED bounded replay (rows before the last `window` of each prompt skip the decoder layers)
// or exactly.
void prefill(runner::BatchRunner& r, std::vector<model::SequenceState>& st, int64_t len, int64_t chunk, bool replay) {
  const auto& c = r.model().config();
  const bool can_replay = replay && r.model().late_layer_start() < c.num_hidden_layers;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size) * st.size());
  std::vector<std::vector<int64_t>> toks(st.size());
  for (size_t q = 0; q < st.size(); ++q)
    for (int64_t i = 0; i < len; ++i) toks[q].push_back(token(static_cast<int64_t>(q), i, c.vocab_size));
  size_t q = 0;
  int64_t done = 0;  // tokens of sequence q already fed
  while (q < st.size()) {
    std::vector<runner::Chunk> batch;
    int64_t budget = chunk;
    while (budget > 0 && q < st.size()) {
      const int64_t n = std::min(budget, len - done);
      const int64_t tail_start = std::max<int64_t>(0, len - c.sliding_window);
      batch.push_back({.tokens = toks[q].data() + done, .n = n, .state = &st[q],
                       .replay_from = can_replay ? std::clamp<int64_t>(tail_start - done, 0, n) : 0,
                       .logits = done + n == len ? logits.data() + q * c.vocab_size : nullptr});
      budget -= n;
      done += n;
      if (done == len) {
        ++q;
        done = 0;
      }
    }
    r.forward(std::span<runner::Chunk>(batch));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_dir = std::string(DEEPINFER_BENCH_DIR) + "/configs/v41-flash-l16-e64";
  std::string device = "cuda", dtype = "bfloat16", format = "bf16", batches_s = "1,64,256";
  int64_t context = 4096, batch_context = 256, steps = 8, prompts = 8, prompt_len = 4096, chunk = 4096, seed = 0;
  double bandwidth = 4.26e12, peak = 790e12;
  bool invariant = true, graphs = true, host_tables = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--config") config_dir = v;
    else if (a == "--device") device = v;
    else if (a == "--dtype") dtype = v;
    else if (a == "--format") format = v;
    else if (a == "--batches") batches_s = v;
    else if (a == "--context") context = std::stoll(v);
    else if (a == "--batch-context") batch_context = std::stoll(v);
    else if (a == "--steps") steps = std::stoll(v);
    else if (a == "--prompts") prompts = std::stoll(v);
    else if (a == "--prompt-len") prompt_len = std::stoll(v);
    else if (a == "--chunk") chunk = std::stoll(v);
    else if (a == "--seed") seed = std::stoll(v);
    else if (a == "--invariant") invariant = v != "0";
    else if (a == "--graphs") graphs = v != "0";
    else if (a == "--bandwidth") bandwidth = std::stod(v);
    else if (a == "--peak") peak = std::stod(v);
    else if (a == "--engram-tables" && (v == "host" || v == "device")) host_tables = v == "host";
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const loader::ModelConfig cfg = loader::load_config(config_dir + "/config.json");
  const model::ParamCounts pc = model::count_params(cfg);
  auto be = kernels::make_backend(device, 0, dtype, invariant);
  const auto fmt = format == "bf16" ? kernels::WeightFormat::kBF16 : kernels::WeightFormat::kF32;
  auto t0 = Clock::now();
  model::Weights w = model::random_weights(cfg, static_cast<uint64_t>(seed), be.get(), fmt, host_tables);
  const double stored = static_cast<double>(w.stored_bytes());
  // Bytes a decode token reads as stored (K experts a layer, one embedding row), and one routed
  // expert's bytes over all layers: the bytes of a step follow from the experts it touches.
  double all_experts = 0;
  for (const auto& L : w.layers)
    for (const auto* v : {&L.ffn.w1, &L.ffn.w2, &L.ffn.w3})
      for (size_t e = 0; e + 1 < v->size(); ++e) all_experts += static_cast<double>(kernels::weight_bytes((*v)[e]));
  const double expert_bytes = all_experts / static_cast<double>(std::max<int64_t>(1, cfg.n_routed_experts));
  const double embed_row = static_cast<double>(kernels::weight_bytes(w.embed)) / static_cast<double>(cfg.vocab_size);
  // Engram: the rows a token hashes to, per layer (cols rows of its table), and the tables.
  const int64_t cols = (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads;
  std::vector<int64_t> engram_rows;
  double engram_tables = 0;
  for (int64_t l : cfg.engram_layer_ids) {
    const model::Mat& t = w.layers[static_cast<size_t>(l)].engram.table;
    engram_rows.push_back(cols * model::table_row_bytes(t));
    engram_tables += static_cast<double>(kernels::weight_bytes(t));
  }
  double engram_row_bytes = 0;
  for (int64_t b : engram_rows) engram_row_bytes += static_cast<double>(b);
  const double dense_bytes = static_cast<double>(model::active_weight_bytes(cfg, w)) -
                             expert_bytes * static_cast<double>(cfg.num_experts_per_tok) - embed_row - engram_row_bytes;
  const bool tables_on_host = w.engram_tables_on_host;
  model::DeepseekV41 m(cfg, std::move(w), *be, synthetic_hasher(cfg), model::ModelOptions{.engram_tables_on_host = host_tables});
  runner::BatchRunner batches(m);
  batches.set_graphs(graphs);
  be->synchronize();
  std::printf("model %s: %.2fB parameters (%.2fB active per token), weights %.1f GB (%s), made in %.1f s on %s, dtype %s, batch invariant %s, graphs %s\n",
              config_dir.c_str(), static_cast<double>(pc.total()) / 1e9, static_cast<double>(pc.active_per_token(cfg)) / 1e9,
              stored / 1e9, cfg.quantization.present ? "release formats" : format.c_str(), since(t0), device.c_str(), dtype.c_str(), invariant ? "on" : "off", batches.graphs() ? "on" : "off");
  std::printf("limits: %.2f TB/s memory bandwidth, %.0f TFLOP/s matmul peak\n", bandwidth / 1e12, peak / 1e12);
  if (!engram_rows.empty()) {
    // Per token: each layer's rows (from the table in device memory, or packed on the host and
    // copied with the step's block) and the gathers' row ids (8 bytes a row; one set shared by
    // the layers with host tables).
    const int64_t L = static_cast<int64_t>(engram_rows.size());
    const int64_t ids = 8 * cols * (tables_on_host ? 1 : L);
    std::string per_layer;
    for (size_t j = 0; j < engram_rows.size(); ++j)
      per_layer += (j ? ", layer " : "layer ") + std::to_string(cfg.engram_layer_ids[j]) + " " + std::to_string(engram_rows[j]) + " B";
    std::printf("engram: tables %.2f GB in %s memory; rows per token: %s (%lld rows x %lld B each), %.0f B in all; "
                "host to device per token: %.0f B (%s%lld B of row ids)\n",
                engram_tables / 1e9, be->host_memory() ? "the CPU backend's" : tables_on_host ? "host" : "device", per_layer.c_str(), static_cast<long long>(cols),
                static_cast<long long>(engram_rows[0] / cols), engram_row_bytes,
                (tables_on_host ? engram_row_bytes : 0.0) + static_cast<double>(ids), tables_on_host ? "the rows and " : "",
                static_cast<long long>(ids));
  }

  // Bytes one decode step reads: the non-expert weights once, each expert some token routes
  // to once (expected count under uniform routing), the embedding and Engram rows, and every
  // sequence's state (window rings, compressed KV and indexer keys, read as stored); weights as
  // stored.
  const model::StateBytes sb = model::state_bytes(cfg);
  for (int64_t B : parse_list(batches_s)) {
    const int64_t ctx = B == 1 ? context : batch_context;
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < B; ++q) st.push_back(m.new_state());
    auto tp = Clock::now();
    prefill(batches, st, ctx, chunk, true);  // --chunk tokens a forward (a long context in several)
    be->synchronize();
    const double t_fill = since(tp);
    std::vector<int64_t> step(static_cast<size_t>(B));
    std::vector<int32_t> drawn(static_cast<size_t>(B));
    std::vector<double> times;
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<runner::Chunk> batch;
      for (int64_t q = 0; q < B; ++q) {
        step[static_cast<size_t>(q)] = token(q, ctx + s, cfg.vocab_size);
        // A greedy draw on the backend, as the engine does by default (sample_on_backend): only
        // the ids come back (downloading every row's logits took 8.4 ms per step at batch 256).
        batch.push_back({.tokens = &step[static_cast<size_t>(q)], .n = 1, .state = &st[static_cast<size_t>(q)],
                         .token = &drawn[static_cast<size_t>(q)]});
      }
      auto ts = Clock::now();
      batches.forward(std::span<runner::Chunk>(batch));  // ends with the drawn ids' download
      times.push_back(since(ts));
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double E = static_cast<double>(cfg.n_routed_experts), K = static_cast<double>(cfg.num_experts_per_tok);
    const double touched = E * (1.0 - std::pow(1.0 - K / E, static_cast<double>(B)));
    const double bytes = dense_bytes + touched * expert_bytes +
                         static_cast<double>(B) *
                             (embed_row + engram_row_bytes + sb.fixed_stored + sb.per_token_stored * static_cast<double>(ctx));
    std::printf("decode batch %4lld, context %5lld: median step %8.2f ms (min %.2f) = %8.1f tokens/s; %.2f GB per step "
                "(%.1f experts touched) -> %.0f GB/s = %.1f%% of bandwidth (roofline step %.2f ms); prefill of the contexts %.1f s\n",
                static_cast<long long>(B), static_cast<long long>(ctx), t * 1e3, times.front() * 1e3,
                static_cast<double>(B) / t, bytes / 1e9, touched, bytes / t / 1e9, 100.0 * bytes / t / bandwidth,
                bytes / bandwidth * 1e3, t_fill);
  }

  // Prefill: `prompts` prompts of `prompt_len` tokens, `chunk` tokens per forward.
  const double act = static_cast<double>(pc.active_per_token(cfg));
  const double attn_per_tok = 4.0 * static_cast<double>(cfg.num_attention_heads * cfg.head_dim) *
                              static_cast<double>(cfg.sliding_window + cfg.index_topk) * static_cast<double>(cfg.num_hidden_layers);
  for (bool replay : {true, false}) {
    if (prompts <= 0) break;
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < prompts; ++q) st.push_back(m.new_state());
    auto tp = Clock::now();
    prefill(batches, st, prompt_len, chunk, replay);
    be->synchronize();
    const double t = since(tp), tokens = static_cast<double>(prompts * prompt_len);
    // FLOPs of the exact prefill (matmuls at 2 per active parameter, attention over window +
    // top-k); bounded replay skips part of them, so its figure is the exact-equivalent rate.
    const double flops = tokens * (2.0 * act + attn_per_tok);
    std::printf("prefill %lld x %lld (%s, %lld tokens per forward): %.2f s = %.0f tokens/s; %.1f TFLOP (exact) -> %.1f TFLOP/s "
                "= %.1f%% of peak\n",
                static_cast<long long>(prompts), static_cast<long long>(prompt_len), replay ? "CED bounded replay" : "exact",
                static_cast<long long>(chunk), t, tokens / t, flops / 1e12, flops / t / 1e12, 100.0 * flops / t / peak);
  }
  return 0;
}
