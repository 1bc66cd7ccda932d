// End-to-end offline throughput of the engine on the CPU with a random-weight model
// (`--load-format random`): prompt and generated tokens/s, and the split of a step into
// scheduling, model, sampling and commit; then what CED bounded replay saves on long prompts
// and how far its logits move from exact prefill. A benchmark: it prints figures.
//
// usage: bench_engine [--config DIR] [--requests N] [--prompt N] [--gen N] [--long N] [--threads N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "engine/load_model.h"
#include "kernels/backend.h"
#include "runner/batch_runner.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string dir = std::string(DEEPINFER_BENCH_DIR) + "/configs/bench-small";
  int requests = 64, prompt = 128, gen = 32, long_prompt = 2048, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--config") dir = argv[i + 1];
    else if (a == "--requests") requests = std::stoi(argv[i + 1]);
    else if (a == "--prompt") prompt = std::stoi(argv[i + 1]);
    else if (a == "--gen") gen = std::stoi(argv[i + 1]);
    else if (a == "--long") long_prompt = std::stoi(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  EngineConfig ec;
  ec.model = dir;
  ec.load_format = "random";
  ec.threads = threads;
  ec.max_num_seqs = requests;
  LLM llm(ec);
  const int64_t V = llm.vocab_size();
  std::vector<Prompt> prompts;
  for (int r = 0; r < requests; ++r) {
    std::vector<int32_t> ids;
    for (int t = 0; t < prompt; ++t) ids.push_back(static_cast<int32_t>(3 + (r * 7919 + t * 104729) % (V - 3)));
    prompts.push_back(Prompt::from_ids(ids));
  }
  SamplingParams p;
  p.max_tokens = gen;
  p.ignore_eos = true;
  p.temperature = 0.8f;
  p.seed = 7;
  for (bool exact : {false, true}) {
    ec.exact_prefill = exact;
    LLM l(ec);
    auto outs = l.generate(prompts, p);
    const EngineStats& s = l.last_stats();
    const double step = s.schedule_s + s.model_s + s.sample_s + s.commit_s;
    std::printf("%s: %d requests x (%d prompt + %d generated) tokens in %.2f s: %.1f prompt tokens/s, %.1f generated tokens/s "
                "(overall %.1f tokens/s), %lld steps\n",
                exact ? "exact prefill" : "CED replay   ", requests, prompt, gen, s.wall_s,
                static_cast<double>(s.prompt_tokens) / s.wall_s, static_cast<double>(s.generated_tokens) / s.wall_s,
                static_cast<double>(s.prompt_tokens + s.generated_tokens) / s.wall_s, static_cast<long long>(s.steps));
    std::printf("  step split: schedule %.2f%%, model %.2f%%, sample %.2f%%, commit %.2f%%\n", 100 * s.schedule_s / step,
                100 * s.model_s / step, 100 * s.sample_s / step, 100 * s.commit_s / step);
  }

  // Bounded replay on one long prompt: work saved and how far the last logits move.
  auto be = kernels::make_cpu_backend(threads);
  auto lm = engine::load_model(dir, *be, engine::LoadFormat::kRandom, 0);
  auto& m = *lm.model;
  runner::BatchRunner batches(m);
  const auto& c = m.config();
  std::vector<int64_t> toks;
  for (int t = 0; t < long_prompt; ++t) toks.push_back(3 + (t * 104729) % (V - 3));
  std::vector<float> exact(static_cast<size_t>(V)), replay(static_cast<size_t>(V));
  auto st = m.new_state();
  auto t0 = Clock::now();
  batches.forward(toks.data(), long_prompt, st, exact.data(), true);
  const double t_exact = std::chrono::duration<double>(Clock::now() - t0).count();
  auto st2 = m.new_state();
  runner::Chunk ch{.tokens = toks.data(), .n = long_prompt, .state = &st2,
                                  .replay_from = std::max<int64_t>(0, long_prompt - c.sliding_window), .all_logits = false,
                                  .logits = replay.data()};
  t0 = Clock::now();
  batches.forward(std::span<runner::Chunk>(&ch, 1));
  const double t_replay = std::chrono::duration<double>(Clock::now() - t0).count();
  double max_ref = 0, max_diff = 0;
  int64_t am_e = 0, am_r = 0;
  for (int64_t i = 0; i < V; ++i) {
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(exact[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(exact[i] - replay[i])));
    if (exact[i] > exact[am_e]) am_e = i;
    if (replay[i] > replay[am_r]) am_r = i;
  }
  const int64_t late = c.num_hidden_layers - m.late_layer_start();
  const double rows_saved = static_cast<double>(late) * static_cast<double>(long_prompt - c.sliding_window) /
                            (static_cast<double>(c.num_hidden_layers) * static_cast<double>(long_prompt));
  std::printf("CED bounded replay, one %d-token prompt (window %lld, %lld of %lld layers replayed on the tail):\n", long_prompt,
              static_cast<long long>(c.sliding_window), static_cast<long long>(late),
              static_cast<long long>(c.num_hidden_layers));
  std::printf("  prefill %.2f s exact vs %.2f s replayed (%.0f%% less time; %.0f%% of layer-rows skipped)\n", t_exact, t_replay,
              100 * (1 - t_replay / t_exact), 100 * rows_saved);
  std::printf("  last-position logits: max|replay - exact| / max|exact| = %.3g; argmax %s\n", max_diff / max_ref,
              am_e == am_r ? "identical" : "differs");
  return 0;
}
