// CPU forward throughput on a random-weight model (`--load-format random` shapes):
// prefill tokens/s, single-token decode step time, bytes of weights read per decode step,
// and the machine's memory bandwidth measured here, so the decode figure can be read
// against its roofline. This is a benchmark, not a test: it prints figures.
//
// usage: bench_forward [--config DIR] [--prompt N] [--steps N] [--threads N] [--seed N]
//                      [--format f32|bf16|release] [--save DIR] [--model DIR]
//   --format: store the random weights as float32, bf16, or the release formats (FP8 e4m3 with
//             32x32 ue8m0 blocks, MXFP4 experts, bf16 embedding/head);
//   --save DIR: also write them as a checkpoint (config.json + model.safetensors);
//   --model DIR: load a checkpoint instead (memory-mapped) and report resident memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "loader/config.h"
#include "model/deepseek_v41.h"
#include "loader/checkpoint.h"
#include "loader/safetensors.h"
#include "model/info.h"
#include "model/quantize.h"
#include "runner/batch_runner.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

namespace {

// Resident set size of this process in MB (VmRSS).
double rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0 * 1.048576;
  return 0;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Read bandwidth: every thread sums its slice of a buffer much larger than the caches.
double measure_read_bandwidth(core::ThreadPool& pool) {
  const size_t n = size_t{1} << 27;  // 512 MiB of floats
  std::vector<float> buf(n);
  pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(i & 7);
  });
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> partial(static_cast<size_t>(pool.size()), 0.0);
    auto t0 = Clock::now();
    pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
      float acc[16] = {};
      for (int64_t i = b; i + 16 <= e; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += buf[static_cast<size_t>(i + j)];
      double s = 0;
      for (float a : acc) s += a;
      partial[static_cast<size_t>(b * pool.size() / static_cast<int64_t>(n))] += s;
    });
    double dt = seconds_since(t0);
    double sum = std::accumulate(partial.begin(), partial.end(), 0.0);
    if (sum < 0) std::printf("impossible\n");
    best = std::max(best, static_cast<double>(n * sizeof(float)) / dt / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_dir = std::string(DEEPINFER_BENCH_DIR) + "/configs/bench-200m";
  int64_t prompt = 512, steps = 32, seed = 0;
  int threads = 0;
  std::string format = "f32", save_dir, model_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--config") config_dir = v;
    else if (a == "--format") format = v;
    else if (a == "--save") save_dir = v;
    else if (a == "--model") model_dir = v;
    else if (a == "--prompt") prompt = std::stoll(v);
    else if (a == "--steps") steps = std::stoll(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--seed") seed = std::stoll(v);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (!model_dir.empty()) config_dir = model_dir;
  loader::ModelConfig cfg = loader::load_config(config_dir + "/config.json");
  model::ParamCounts pc = model::count_params(cfg);
  std::printf("model: %s (%.1fM parameters, %.1fM active per token), %s\n", config_dir.c_str(),
              static_cast<double>(pc.total()) / 1e6, static_cast<double>(pc.active_per_token(cfg)) / 1e6,
              model_dir.empty() ? ("random weights (seed " + std::to_string(seed) + "), format " + format).c_str()
                                : "checkpoint");

  auto t_load = Clock::now();
  const double rss0 = rss_mb();
  std::unique_ptr<loader::Checkpoint> ck;
  model::Weights w;
  if (!model_dir.empty()) {
    ck = loader::Checkpoint::open(model_dir);
    w = model::load_weights(*ck);
  } else {
    w = model::random_weights(cfg, static_cast<uint64_t>(seed));
    if (format == "bf16") model::convert_matmul_weights(cfg, w, kernels::WeightFormat::kBF16);
    else if (format == "release") model::quantize_release(cfg, w);
    else if (format != "f32") {
      std::fprintf(stderr, "--format: expected f32, bf16 or release\n");
      return 2;
    }
    if (!save_dir.empty()) {
      std::filesystem::create_directories(save_dir);
      loader::write_safetensors(save_dir + "/model.safetensors", model::export_tensors(cfg, w));
      std::filesystem::copy_file(config_dir + "/config.json", save_dir + "/config.json",
                                 std::filesystem::copy_options::overwrite_existing);
      std::printf("wrote %s\n", save_dir.c_str());
    }
  }
  const int64_t stored = w.stored_bytes(), active = model::active_weight_bytes(cfg, w);
  auto backend = kernels::make_cpu_backend(threads);
  model::DeepseekV41 m(cfg, std::move(w), *backend);
  runner::BatchRunner batches(m);
  std::printf("weights ready in %.1f s: %.1f MB stored, %.1f MB read per decode token\n", seconds_since(t_load),
              static_cast<double>(stored) / 1e6, static_cast<double>(active) / 1e6);

  core::ThreadPool pool(threads);
  const double bw = measure_read_bandwidth(pool);
  std::printf("machine: %u hardware threads, %d used; measured read bandwidth %.1f GB/s\n",
              std::thread::hardware_concurrency(), pool.size(), bw);

  std::vector<int64_t> tokens(static_cast<size_t>(prompt + steps));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7919 + 13) % static_cast<size_t>(cfg.vocab_size));
  const int64_t V = cfg.vocab_size;

  // Prefill: the whole prompt in one call (logits of the last row only).
  model::SequenceState st = m.new_state();
  std::vector<float> logits(static_cast<size_t>(V));
  auto t0 = Clock::now();
  batches.forward(tokens.data(), prompt, st, logits.data(), /*last_only=*/true);
  const double t_prefill = seconds_since(t0);
  const double act = static_cast<double>(pc.active_per_token(cfg));
  std::printf("prefill: %lld tokens in %.3f s = %.1f tokens/s (%.2f GFLOP/s at 2 x %.1fM active params per token, attention excluded)\n",
              static_cast<long long>(prompt), t_prefill, static_cast<double>(prompt) / t_prefill,
              2.0 * act * static_cast<double>(prompt) / t_prefill / 1e9, act / 1e6);

  // Decode: single-token steps after the prompt.
  std::vector<double> times;
  for (int64_t i = 0; i < steps; ++i) {
    auto ts = Clock::now();
    batches.forward(&tokens[static_cast<size_t>(prompt + i)], 1, st, logits.data(), true);
    times.push_back(seconds_since(ts));
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  // Bytes a decode step must read: every weight except the routed experts not chosen (one
  // embedding row), float32; plus the state it attends over.
  const double weight_bytes = static_cast<double>(active);
  model::StateBytes sb = model::state_bytes(cfg);
  const double state_read = sb.fixed_fp32 + sb.per_token_fp32 * static_cast<double>(prompt + steps / 2);
  const double bytes = weight_bytes + state_read;
  std::printf("decode: median step %.2f ms (min %.2f, max %.2f) = %.1f tokens/s at context %lld\n", med * 1e3,
              times.front() * 1e3, times.back() * 1e3, 1.0 / med, static_cast<long long>(prompt + steps / 2));
  if (!model_dir.empty()) {
    const double file_mb = static_cast<double>(std::filesystem::file_size(model_dir + "/model.safetensors")) / 1e6;
    const double state_mb = static_cast<double>(st.bytes()) / 1e6;
    std::printf("resident memory: %.1f MB after loading and running (%.1f MB before); checkpoint file %.1f MB + state %.1f MB "
                "= %.1f MB; ratio %.3f\n",
                rss_mb(), rss0, file_mb, state_mb, file_mb + state_mb, (rss_mb() - rss0) / (file_mb + state_mb));
  }
  std::printf("decode bytes per step: %.1f MB weights + %.1f MB state = %.1f MB; achieved %.1f GB/s = %.0f%% of the measured %.1f GB/s\n",
              weight_bytes / 1e6, state_read / 1e6, bytes / 1e6, bytes / med / 1e9, 100.0 * bytes / med / 1e9 / bw, bw);
  return 0;
}
