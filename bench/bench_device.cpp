// Forward throughput on a device (or the CPU) with random weights made in the backend's
// memory: decode step time at several batch sizes and a multi-prompt prefill (CED bounded
// replay and exact), each next to its hardware limit: bytes moved per decode step against the
// copy bandwidth, FLOPs per prefill against the bf16 tensor-core rate. A benchmark, not a test.
//
// Engram layers (a config with engram_layer_ids) hash with a synthetic compressed token map
// (token t -> t mod engram_compressed_vocab_size: the release tokenizer's map is not shipped),
// their tables in host memory (the engine's default) or in device memory (--engram-tables).
//
// The verify curve (--verify-curve 1; the config needs DSpark draft stages): at each batch size,
// the step time of a verify batch in which every sequence runs its anchor and k drafts as one
// chunk (bench/verify_curve.h; k = 0 is plain decoding), and the draft stages' round
// (DeepseekV41::draft for every sequence). The model is made a second time for it, with
// ModelOptions.dspark (every forward also takes the taps and fills the stages' rings), so plain
// decoding is measured both ways. Each step's rows are rolled back after it, so every step and k
// runs at the same context. With random weights no draft is ever kept: the speed-up printed is
// computed from the measured times at the given mean acceptance lengths, not measured.
//
// usage: bench_device [--config DIR] [--device cuda] [--dtype bfloat16] [--format bf16|f32]
//                     [--context 4096] [--batches 1,64,256] [--batch-context 256] [--steps 8]
//                     [--prompts 8] [--prompt-len 4096] [--chunk 4096] [--seed 0]
//                     [--bandwidth 4.26e12] [--peak 790e12] [--invariant 1|0] [--graphs 1|0]
//                     [--engram-tables host|device]
//                     [--verify-curve 0|1] [--draft-tokens 0,1,2,3,4,5] [--acceptance 3.5,5.5]
//   batch 1 decodes at --context tokens of context; larger batches at --batch-context each.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"
#include "model/engram.h"
#include "model/engram_rows.h"
#include "model/info.h"
#include "model/weights.h"
#include "runner/batch_runner.h"
#include "verify_curve.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A comma-separated list of numbers (flag `flag`; empty only when allowed); the exception says
// what was wrong.
template <class T>
std::vector<T> parse_list(const std::string& flag, const std::string& s, bool allow_empty = false) {
  std::vector<T> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) {
    if (x.empty()) continue;
    size_t used = 0;
    try {
      if constexpr (std::is_integral_v<T>) v.push_back(static_cast<T>(std::stoll(x, &used)));
      else v.push_back(static_cast<T>(std::stod(x, &used)));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != x.size()) throw std::invalid_argument("flag " + flag + ": '" + x + "' is not a number (in '" + s + "')");
  }
  if (v.empty() && !allow_empty) throw std::invalid_argument("flag " + flag + ": an empty list");
  return v;
}

// Stored bytes of a block's weights that every token reads (its products and its shared
// expert), and of one of its routed experts.
std::pair<double, double> block_bytes(const model::LayerWeights& L) {
  double fixed = 0, experts = 0;
  for (const model::Mat* m : {&L.hc_attn_fn, &L.hc_ffn_fn, &L.attn.wq_a, &L.attn.wq_b, &L.attn.wkv, &L.attn.wo_a, &L.attn.wo_b,
                              &L.ffn.gate})
    fixed += static_cast<double>(kernels::weight_bytes(*m));
  for (const auto* v : {&L.ffn.w1, &L.ffn.w2, &L.ffn.w3}) {
    for (size_t e = 0; e + 1 < v->size(); ++e) experts += static_cast<double>(kernels::weight_bytes((*v)[e]));
    if (!v->empty()) fixed += static_cast<double>(kernels::weight_bytes(v->back()));
  }
  const double E = static_cast<double>(std::max<size_t>(1, L.ffn.w1.size() - 1));
  return {fixed, experts / E};
}

// `x` printed with printf's `spec`.
std::string num(const char* spec, double x) {
  char b[64];
  std::snprintf(b, sizeof b, spec, x);
  return b;
}

// Expected experts that `tokens` tokens touch, each routed to K of E uniformly.
double touched(double E, double K, double tokens) { return E * (1.0 - std::pow(1.0 - K / E, tokens)); }

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

int run(int argc, char** argv) {
  std::string config_dir = std::string(DEEPINFER_BENCH_DIR) + "/configs/v41-flash-l16-e64";
  std::string device = "cuda", dtype = "bfloat16", format = "bf16", batches_s = "1,64,256";
  int64_t context = 4096, batch_context = 256, steps = 8, prompts = 8, prompt_len = 4096, chunk = 4096, seed = 0;
  double bandwidth = 4.26e12, peak = 790e12;
  bool invariant = true, graphs = true, host_tables = true, verify_curve = false;
  std::string draft_tokens_s = "0,1,2,3,4,5", acceptance_s = "3.5,5.5";
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
    else if (a == "--verify-curve") verify_curve = v != "0";
    else if (a == "--draft-tokens") draft_tokens_s = v;
    else if (a == "--acceptance") acceptance_s = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "flag %s has no value\n", argv[argc - 1]);
    return 2;
  }
  const loader::ModelConfig cfg = loader::load_config(config_dir + "/config.json");
  const std::vector<int64_t> batch_sizes = parse_list<int64_t>("--batches", batches_s, /*allow_empty=*/true);
  for (int64_t B : batch_sizes)
    if (B < 1) throw std::invalid_argument("flag --batches: batch size " + std::to_string(B) + " (must be >= 1)");
  if (!batch_sizes.empty() && steps < 1) throw std::invalid_argument("flag --steps: " + std::to_string(steps) + " (must be >= 1)");
  // The verify curve: k drafts a sequence (at most a draft block), the published acceptance
  // lengths as rounds of a full block emit them.
  const int64_t block = cfg.dspark_block_size;
  std::vector<int64_t> ks;
  std::vector<double> taus, rates;
  if (verify_curve) {
    if (cfg.num_nextn_predict_layers <= 0)
      throw std::invalid_argument("--verify-curve: " + config_dir + "/config.json has no DSpark draft stages (num_nextn_predict_layers is 0)");
    ks = parse_list<int64_t>("--draft-tokens", draft_tokens_s);
    for (int64_t k : ks)
      if (k < 0 || k > block)
        throw std::invalid_argument("flag --draft-tokens: " + std::to_string(k) + " drafts (a draft block holds 0.." + std::to_string(block) + ")");
    taus = parse_list<double>("--acceptance", acceptance_s);
    for (double tau : taus) rates.push_back(bench::acceptance_rate(tau, block));
  }
  const model::ParamCounts pc = model::count_params(cfg);
  auto be = kernels::make_backend(device, 0, dtype, invariant);
  const auto fmt = format == "bf16" ? kernels::WeightFormat::kBF16 : kernels::WeightFormat::kF32;
  auto t0 = Clock::now();
  auto make_weights = [&] { return model::random_weights(cfg, static_cast<uint64_t>(seed), be.get(), fmt, host_tables); };
  model::Weights w = make_weights();
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
  // The draft round's bytes (the verify curve): each stage's products and shared expert, its
  // routed experts, the taps' products of a forward (main_proj, each stage's wkv), the heads.
  std::vector<std::pair<double, double>> stage_bytes;
  double tap_bytes = 0;
  if (w.has_draft) {
    tap_bytes = static_cast<double>(kernels::weight_bytes(w.draft.main_proj));
    for (const auto& S : w.draft.stages) {
      stage_bytes.push_back(block_bytes(S));
      tap_bytes += static_cast<double>(kernels::weight_bytes(S.attn.wkv));
    }
  }
  const double head_bytes = static_cast<double>(kernels::weight_bytes(w.head));
  const double markov_head = w.has_draft ? static_cast<double>(kernels::weight_bytes(w.draft.markov_head)) : 0.0;
  const double markov_row = w.has_draft ? static_cast<double>(kernels::weight_bytes(w.draft.markov_embed)) / static_cast<double>(cfg.vocab_size) : 0.0;
  const auto hasher = synthetic_hasher(cfg);
  auto m = std::make_unique<model::DeepseekV41>(cfg, std::move(w), *be, hasher, model::ModelOptions{.engram_tables_on_host = host_tables});
  auto batches = std::make_unique<runner::BatchRunner>(*m);
  batches->set_graphs(graphs);
  be->synchronize();
  const std::string stages_note =
      pc.draft > 0 ? " + " + num("%.2f", static_cast<double>(pc.draft) / 1e9) + "B in the DSpark draft stages" : "";
  std::printf("model %s: %.2fB parameters (%.2fB active per token)%s, weights %.1f GB (%s), made in %.1f s on %s, dtype %s, batch invariant %s, graphs %s\n",
              config_dir.c_str(), static_cast<double>(pc.total()) / 1e9, static_cast<double>(pc.active_per_token(cfg)) / 1e9,
              stages_note.c_str(), stored / 1e9, cfg.quantization.present ? "release formats" : format.c_str(), since(t0), device.c_str(), dtype.c_str(), invariant ? "on" : "off", batches->graphs() ? "on" : "off");
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
  const double E = static_cast<double>(cfg.n_routed_experts), K = static_cast<double>(cfg.num_experts_per_tok);
  // Bytes a forward of `tokens` rows of `seqs` sequences at context `ctx` reads (as above).
  auto step_bytes = [&](double tokens, double seqs, int64_t ctx) {
    return dense_bytes + touched(E, K, tokens) * expert_bytes + tokens * (embed_row + engram_row_bytes) +
           seqs * (sb.fixed_stored + sb.per_token_stored * static_cast<double>(ctx));
  };
  std::map<int64_t, double> plain;  // batch size -> median decode step (dspark off)
  for (int64_t B : batch_sizes) {
    const int64_t ctx = B == 1 ? context : batch_context;
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < B; ++q) st.push_back(m->new_state());
    auto tp = Clock::now();
    prefill(*batches, st, ctx, chunk, true);  // --chunk tokens a forward (a long context in several)
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
      batches->forward(std::span<runner::Chunk>(batch));  // ends with the drawn ids' download
      times.push_back(since(ts));
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    plain[B] = t;
    const double bytes = step_bytes(static_cast<double>(B), static_cast<double>(B), ctx);
    std::printf("decode batch %4lld, context %5lld: median step %8.2f ms (min %.2f) = %8.1f tokens/s; %.2f GB per step "
                "(%.1f experts touched) -> %.0f GB/s = %.1f%% of bandwidth (roofline step %.2f ms); prefill of the contexts %.1f s\n",
                static_cast<long long>(B), static_cast<long long>(ctx), t * 1e3, times.front() * 1e3,
                static_cast<double>(B) / t, bytes / 1e9, touched(E, K, static_cast<double>(B)), bytes / t / 1e9, 100.0 * bytes / t / bandwidth,
                bytes / bandwidth * 1e3, t_fill);
  }

  // Prefill: `prompts` prompts of `prompt_len` tokens, `chunk` tokens per forward.
  const double act = static_cast<double>(pc.active_per_token(cfg));
  const double attn_per_tok = 4.0 * static_cast<double>(cfg.num_attention_heads * cfg.head_dim) *
                              static_cast<double>(cfg.sliding_window + cfg.index_topk) * static_cast<double>(cfg.num_hidden_layers);
  for (bool replay : {true, false}) {
    if (prompts <= 0) break;
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < prompts; ++q) st.push_back(m->new_state());
    auto tp = Clock::now();
    prefill(*batches, st, prompt_len, chunk, replay);
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
  if (!verify_curve) return 0;

  // The verify curve, on the model made again with the draft stages on (the same weights).
  batches.reset();
  m.reset();
  be->synchronize();
  t0 = Clock::now();
  m = std::make_unique<model::DeepseekV41>(cfg, make_weights(), *be, hasher,
                                           model::ModelOptions{.engram_tables_on_host = host_tables, .dspark = true});
  batches = std::make_unique<runner::BatchRunner>(*m);
  batches->set_graphs(graphs);
  be->synchronize();
  const int64_t stages = cfg.num_nextn_predict_layers, kmax = *std::max_element(ks.begin(), ks.end());
  std::printf("verify curve: the model made again with the draft stages on (every forward takes the taps and fills %lld "
              "stages' rings) in %.1f s; draft blocks of %lld; each step's rows rolled back after it\n",
              static_cast<long long>(stages), since(t0), static_cast<long long>(block));
  std::string model_line;
  for (size_t i = 0; i < taus.size(); ++i)
    model_line += std::string(i ? "; " : "") + "acceptance length " + num("%.2f", taus[i]) + " -> a = " + num("%.4f", rates[i]);
  std::printf("speed-up: computed, not measured (random weights accept no draft): a draft kept with probability a when the "
              "ones before it were, fitted so that rounds of %lld drafts emit the published mean acceptance length (%s); "
              "a round with k drafts emits 1 + a + ... + a^k tokens and takes the verify step, its rollback and (k > 0) the "
              "draft round; plain decoding: one token a step with the draft stages off\n",
              static_cast<long long>(block), model_line.c_str());
  const double Ed = static_cast<double>(cfg.dspark_n_routed_experts), Kd = static_cast<double>(cfg.dspark_num_experts_per_tok);
  const double hd = static_cast<double>(cfg.head_dim);
  const double ring_row = cfg.head_dim % 32 == 0 ? hd + hd / 32 : 4 * hd;  // FP8 + ue8m0 per 32, or float32
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v[v.size() / 2], v.front());
  };
  for (int64_t B : batch_sizes) {
    const int64_t ctx = B == 1 ? context : batch_context;
    const double Bd = static_cast<double>(B);
    std::vector<model::SequenceState> st;
    for (int64_t q = 0; q < B; ++q) {
      st.push_back(m->new_state());
      st.back().set_rollback_rows(kmax + 1);
    }
    prefill(*batches, st, ctx, chunk, true);
    be->synchronize();
    struct Row {
      int64_t k;
      double step, min, rollback;
    };
    std::vector<Row> rows;
    for (int64_t k : ks) {
      std::vector<double> times, rollbacks;
      bool warned = false;
      for (int64_t s = -1; s < steps; ++s) {  // (s = -1: a step untimed, so graph captures stay out)
        // The anchor and its drafts as the continuation the context's tokens follow.
        bench::VerifyBatch v = bench::verify_batch(st, k, [&](int64_t q, int64_t j) { return token(q, ctx + s + j, cfg.vocab_size); });
        auto ts = Clock::now();
        batches->forward(std::span<runner::Chunk>(v.chunks));  // ends with the drawn ids' download
        const double t_step = since(ts);
        // Rows without a token (non-finite logits): how many, and the first few (sequence, row).
        std::string bad;
        int64_t nbad = 0;
        for (size_t i = 0; i < v.drawn.size(); ++i)
          if (v.drawn[i] < 0 || v.drawn[i] >= cfg.vocab_size) {
            if (nbad++ < 8) bad += " (" + std::to_string(i / static_cast<size_t>(k + 1)) + ", " + std::to_string(i % static_cast<size_t>(k + 1)) + ")";
          }
        // Reported, not fatal: the time is the same, and random weights at full depth can give a row
        // non-finite logits (seen at l40-e128 release formats: 1 row of 384, data-dependent).
        if (nbad > 0 && !warned) {
          warned = true;
          std::fprintf(stderr, "bench_device: verify batch %lld, k %lld, step %lld: %lld of %zu rows drew no token (non-finite logits), "
                       "first (sequence, row):%s\n", static_cast<long long>(B), static_cast<long long>(k), static_cast<long long>(s),
                       static_cast<long long>(nbad), v.drawn.size(), bad.c_str());
        }
        auto tr = Clock::now();
        for (auto& q : st) q.rollback(k + 1);  // back to the context: every step at the same one
        if (s < 0) continue;
        times.push_back(t_step);
        rollbacks.push_back(since(tr));
      }
      const auto [t, tmin] = median(times);
      rows.push_back({k, t, tmin, median(rollbacks).first});
    }
    // The draft round: every sequence's block through the stages and the heads.
    std::vector<model::DraftRequest> reqs;
    for (int64_t q = 0; q < B; ++q) reqs.push_back({.state = &st[static_cast<size_t>(q)], .anchor = token(q, ctx, cfg.vocab_size)});
    std::vector<double> dtimes;
    for (int64_t s = -1; s < steps; ++s) {
      auto td = Clock::now();
      const model::Drafts d = m->draft(reqs);
      be->synchronize();
      if (s >= 0) dtimes.push_back(since(td));
    }
    const auto [td, tdmin] = median(dtimes);
    const double n_draft = Bd * static_cast<double>(block);
    double draft_bytes = head_bytes + static_cast<double>(block) * markov_head + n_draft * (embed_row + markov_row) +
                         Bd * static_cast<double>(stages) * static_cast<double>(cfg.sliding_window) * ring_row;
    for (const auto& [fixed, expert] : stage_bytes) draft_bytes += fixed + touched(Ed, Kd, n_draft) * expert;
    const double tp = plain[B];
    const auto k0 = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.k == 0; });
    std::printf("verify batch %4lld, context %5lld: plain decode %.2f ms with the draft stages off, %s on (k = 0 below); "
                "draft round %.2f ms (min %.2f) for %lld sequences' blocks of %lld: %.2f GB -> %.1f%% of bandwidth (roofline %.2f ms)\n",
                static_cast<long long>(B), static_cast<long long>(ctx), tp * 1e3,
                k0 == rows.end() ? "not measured (no k = 0)" : (num("%.2f", k0->step * 1e3) + " ms").c_str(), td * 1e3,
                tdmin * 1e3, static_cast<long long>(B), static_cast<long long>(block), draft_bytes / 1e9,
                100.0 * draft_bytes / td / bandwidth, draft_bytes / bandwidth * 1e3);
    std::vector<std::pair<int64_t, double>> best(taus.size(), {-1, 0.0});
    for (const Row& r : rows) {
      const double tokens = Bd * static_cast<double>(1 + r.k);
      const double bytes = step_bytes(tokens, Bd, ctx) + tap_bytes;
      std::string speedups;
      for (size_t i = 0; i < taus.size(); ++i) {
        const double x = bench::computed_speedup(bench::expected_tokens(rates[i], r.k), r.step + r.rollback, r.k > 0 ? td : 0.0, tp);
        if (x > best[i].second) best[i] = {r.k, x};
        speedups += std::string(i ? ", " : "") + num("%.2f", taus[i]) + ": x" + num("%.2f", x);
      }
      std::printf("verify batch %4lld k %lld: step %8.2f ms (min %.2f, rollback %.3f ms), %5lld tokens verified; %.2f GB per "
                  "step -> %.1f%% of bandwidth (roofline %.2f ms); speed-up at acceptance %s (computed, not measured)\n",
                  static_cast<long long>(B), static_cast<long long>(r.k), r.step * 1e3, r.min * 1e3, r.rollback * 1e3,
                  static_cast<long long>(tokens), bytes / 1e9, 100.0 * bytes / r.step / bandwidth, bytes / bandwidth * 1e3,
                  speedups.c_str());
    }
    std::string b;
    for (size_t i = 0; i < taus.size(); ++i)
      b += (i ? ", " : "") + std::string("acceptance ") + num("%.2f", taus[i]) + ": k " + std::to_string(best[i].first) + " x" +
           num("%.2f", best[i].second);
    std::printf("verify batch %4lld best k: %s (computed, not measured)\n", static_cast<long long>(B), b.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_device: %s\n", e.what());
    return 2;
  }
}
