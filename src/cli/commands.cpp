#include "cli/commands.h"
#include "cli/flags.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "core/npy.h"
#include "loader/checkpoint.h"
#include "model/deepseek_v41.h"
#include "engine/load_model.h"
#include "model/quantize.h"
#include "loader/safetensors.h"
#include <nlohmann/json.hpp>
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "model/info.h"
#include "model/memory_plan.h"
#include "runner/batch_runner.h"

namespace deepinfer::cli {

std::vector<int64_t> parse_chunks(const std::string& s) {
  return parse_int_list("chunks", s, 1, INT32_MAX);
}

std::vector<int64_t> chunk_plan(int64_t n, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> plan;
  int64_t done = 0;
  size_t i = 0;
  while (done < n) {
    int64_t c = std::min(sizes[std::min(i, sizes.size() - 1)], n - done);
    plan.push_back(c);
    done += c;
    ++i;
  }
  return plan;
}

int cmd_logits(const std::vector<std::string>& args) {
  auto f = parse_flags(args, {"model", "tokens", "chunks", "out", "top", "load-format", "seed", "device", "dtype", "threads"}, "logits");
  if (f.count("help")) {
    std::printf(
        "deepinfer logits --model DIR --tokens IDS.npy [--chunks 13,9,1] [--out LOGITS.npy] [--top K]\n"
        "  Runs the token ids (1-D int32/int64 .npy) through the model, fed in the given chunk sizes\n"
        "  (the last size repeats; default one chunk), writes float32 logits [n_tokens, vocab] to --out\n"
        "  and prints the top K (default 5) next tokens after the last position.\n"
        "  --load-format auto|random: random = seeded random weights from config.json alone (--seed).\n"
        "  --device cpu|cuda|cuda:N: where the model runs (default cpu; cuda needs a DEEPINFER_CUDA build).\n"
        "  --dtype float32|bfloat16: matmul precision (bfloat16: tensor cores, CUDA only; default float32).\n");
    return 0;
  }
  if (!f.count("model")) throw Error("deepinfer logits: --model DIR is required");
  if (!f.count("tokens")) throw Error("deepinfer logits: --tokens IDS.npy is required");
  const std::string fmt = f.count("load-format") ? f["load-format"] : "auto";
  if (fmt != "auto" && fmt != "random") throw Error("flag --load-format: expected 'auto' or 'random', got '" + fmt + "'");
  std::vector<int64_t> shape;
  std::vector<int64_t> ids = core::read_npy_ints(f["tokens"], &shape);
  if (shape.size() != 1) throw Error(f["tokens"] + ": expected a 1-D array of token ids, got " + std::to_string(shape.size()) + " dimensions");
  if (ids.empty()) throw Error(f["tokens"] + ": no token ids");
  std::vector<int64_t> sizes = f.count("chunks") ? parse_chunks(f["chunks"]) : std::vector<int64_t>{static_cast<int64_t>(ids.size())};
  const int64_t top = f.count("top") ? parse_int("top", f["top"], 0, INT32_MAX) : 5;
  const int threads = f.count("threads") ? static_cast<int>(parse_int("threads", f["threads"], 0, 1024)) : 0;

  auto t0 = std::chrono::steady_clock::now();
  const std::string device = f.count("device") ? f["device"] : "cpu";
  auto backend = kernels::make_backend(device, threads, f.count("dtype") ? f["dtype"] : "float32");
  engine::MemoryOptions memory;
  memory.state_tokens = static_cast<int64_t>(ids.size());
  memory.device = device;
  engine::LoadedModel lm = engine::load_model(
      f["model"], *backend, fmt == "random" ? engine::LoadFormat::kRandom : engine::LoadFormat::kAuto,
      f.count("seed") ? parse_uint64("seed", f["seed"]) : 0, memory);
  model::DeepseekV41& m = *lm.model;
  runner::BatchRunner batches(m);
  const int64_t V = m.config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= V)
      throw Error(f["tokens"] + ": token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(V) + ")");
  auto t1 = std::chrono::steady_clock::now();
  model::SequenceState st = m.new_state();
  // Without --out only the last row is computed; with --out each chunk's rows are written as
  // they come, so memory holds one chunk's logits, checked against what is available first.
  const std::vector<int64_t> plan = chunk_plan(static_cast<int64_t>(ids.size()), sizes);
  const bool all_rows = f.count("out") != 0;
  const int64_t rows = all_rows ? *std::max_element(plan.begin(), plan.end()) : 1;
  const double need = static_cast<double>(rows) * static_cast<double>(V) * sizeof(float);
  const int64_t avail = model::host_memory_available();
  if (avail >= 0 && need > static_cast<double>(avail))
    throw Error("deepinfer logits: a chunk of " + std::to_string(rows) + " tokens needs " + model::human_bytes(need) +
                " for its logits (" + std::to_string(rows) + " x vocab " + std::to_string(V) + " x 4 bytes) but " +
                model::human_bytes(static_cast<double>(avail)) + " is available; pass smaller --chunks");
  std::vector<float> logits(static_cast<size_t>(rows * V));
  std::unique_ptr<core::NpyF32Writer> out;
  if (all_rows) out = std::make_unique<core::NpyF32Writer>(f["out"], std::vector<int64_t>{static_cast<int64_t>(ids.size()), V});
  int64_t done = 0, last_rows = 1;
  for (int64_t c : plan) {
    batches.forward(ids.data() + done, c, st, logits.data(), !all_rows);
    if (out) out->write(logits.data(), static_cast<size_t>(c * V));
    last_rows = all_rows ? c : 1;
    done += c;
  }
  if (out) out->finish();
  auto t2 = std::chrono::steady_clock::now();
  const float* last = logits.data() + (last_rows - 1) * V;
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = std::clamp<int64_t>(top, 0, V);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return last[a] > last[b] || (last[a] == last[b] && a < b);
  });
  std::printf("top %lld next tokens after position %zu:\n", static_cast<long long>(k), ids.size() - 1);
  for (int64_t i = 0; i < k; ++i) std::printf("  %6lld  %.6f\n", static_cast<long long>(order[i]), last[order[i]]);
  std::fprintf(stderr, "load %.3f s, forward %zu tokens %.3f s\n%s\n", std::chrono::duration<double>(t1 - t0).count(),
               ids.size(), std::chrono::duration<double>(t2 - t1).count(),
               model::memory_plan_summary(lm.memory, lm.available).c_str());
  return 0;
}

namespace {

// True when `dir` holds safetensors weights (one file or an index of shards).
bool has_weights(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "model.safetensors.index.json")) return true;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") return true;
  return false;
}

}  // namespace

int cmd_info(const std::vector<std::string>& args) {
  auto f = parse_flags(args, {"model", "device", "dtype", "load-format", "max-model-len", "memory-budget", "memory-fraction",
                                         "engram-tables"},
                       "info");
  if (f.count("help")) {
    std::printf(
        "deepinfer info --model DIR [--device cpu|cuda[:N]] [--dtype float32|bfloat16] [--load-format auto|random]\n"
        "               [--max-model-len N] [--memory-budget BYTES] [--memory-fraction F] [--engram-tables host|device]\n"
        "  Prints the derived layer schedule, parameter counts, state bytes and the memory plan: weight\n"
        "  bytes per stored format on the device (Engram tables apart), host allocations, the state of\n"
        "  one sequence at --max-model-len (default max_position_embeddings) and the state budget,\n"
        "  against the memory available now (--device cuda: the GPU's free memory; default cpu).\n");
    return 0;
  }
  if (!f.count("model")) throw Error("deepinfer info: --model DIR is required");
  if (!std::filesystem::is_directory(f["model"]))
    throw Error(f["model"] + ": not a directory (expected a checkpoint directory with config.json)");
  const std::string fmt = f.count("load-format") ? f["load-format"] : "auto";
  if (fmt != "auto" && fmt != "random") throw Error("flag --load-format: expected 'auto' or 'random', got '" + fmt + "'");
  const std::string device = f.count("device") ? f["device"] : "cpu", dtype = f.count("dtype") ? f["dtype"] : "float32";
  if (dtype != "float32" && dtype != "bfloat16") throw Error("flag --dtype: expected 'float32' or 'bfloat16', got '" + dtype + "'");
  const bool cuda = device.rfind("cuda", 0) == 0;
  if (!cuda && device != "cpu") throw Error("flag --device: expected 'cpu' or 'cuda[:N]', got '" + device + "'");
  loader::ModelConfig cfg = loader::load_config((std::filesystem::path(f["model"]) / "config.json").string());
  std::printf("%s", model::describe(cfg).c_str());

  // The checkpoint's header gives the stored formats; without weights files, the random ones.
  std::unique_ptr<loader::Checkpoint> ck;
  const bool random = fmt == "random" || !has_weights(f["model"]);
  if (!random) ck = loader::Checkpoint::open(f["model"]);
  model::PlanOptions o;
  o.host_backend = !cuda;
  o.precision = dtype == "bfloat16" ? kernels::Precision::kBF16 : kernels::Precision::kFloat32;
  o.device = device;
  const std::string tables = f.count("engram-tables") ? f["engram-tables"] : "host";
  if (tables != "host" && tables != "device")
    throw Error("flag --engram-tables: expected 'host' or 'device', got '" + tables + "'");
  o.engram_tables_on_host = tables == "host";
  if (f.count("max-model-len")) {
    o.state_tokens = parse_int("max-model-len", f["max-model-len"], 1, INT64_MAX);
    if (o.state_tokens > cfg.max_position_embeddings)
      throw Error("flag --max-model-len: " + std::to_string(o.state_tokens) + " is longer than the model's max_position_embeddings = " +
                  std::to_string(cfg.max_position_embeddings));
  }
  if (f.count("memory-budget")) o.state_budget_bytes = parse_int("memory-budget", f["memory-budget"], 0, INT64_MAX);
  const double fraction = f.count("memory-fraction") ? parse_float("memory-fraction", f["memory-fraction"], 0, 1) : 0.0;
  if (o.state_budget_bytes == 0) o.memory_fraction = fraction;  // the engine's rule: a byte budget wins
  model::MemoryAvailable avail;
  avail.host = model::host_memory_available();
  if (cuda && kernels::cuda_built()) avail.device = kernels::make_backend(device, 0, dtype)->memory_available();
  if (random && fmt != "random") std::printf("(no .safetensors in %s: planned as --load-format random)\n", f["model"].c_str());
  std::printf("%s", model::describe_memory_plan(model::plan_memory(cfg, ck.get(), o), avail).c_str());
  return 0;
}

int cmd_quantize(const std::vector<std::string>& args) {
  auto f = parse_flags(args, {"model", "out"}, "quantize");
  if (f.count("help")) {
    std::printf("deepinfer quantize --model IN --out OUT\n"
                "  Writes IN's weights in the release format: FP8 e4m3 with ue8m0 32x32 block scales for the\n"
                "  attention projections, indexer wq_b, shared experts and Engram wkv; MXFP4 routed experts;\n"
                "  FP8 Engram rows; BF16 embedding and head; release tensor names; a composite config.json\n"
                "  with quantization_config. Tokenizer files are copied.\n");
    return 0;
  }
  if (!f.count("model")) throw Error("deepinfer quantize: --model IN is required");
  if (!f.count("out")) throw Error("deepinfer quantize: --out OUT is required");
  namespace fs = std::filesystem;
  // Refuse before anything is written when OUT is IN (by any path) or lies inside it: the
  // output would overwrite the tensors that are still being read.
  {
    std::error_code ec;
    const fs::path in = fs::weakly_canonical(fs::path(f["model"]), ec);
    const fs::path outp = ec ? fs::path() : fs::weakly_canonical(fs::path(f["out"]), ec);
    if (ec) throw Error("deepinfer quantize: cannot resolve --model/--out paths: " + ec.message());
    if (in == outp)
      throw Error("flag --out: '" + f["out"] + "' is the --model directory ('" + f["model"] +
                  "'); quantize writes a new checkpoint and would overwrite its source");
    auto rel = outp.lexically_relative(in);
    if (!rel.empty() && *rel.begin() != "..")
      throw Error("flag --out: '" + f["out"] + "' is inside the --model directory ('" + f["model"] +
                  "'); choose a directory outside it");
    if (fs::exists(outp) && !fs::is_directory(outp))
      throw Error("flag --out: '" + f["out"] + "' exists and is not a directory");
  }
  auto ck = loader::Checkpoint::open(f["model"]);
  model::Weights w = model::load_weights(*ck);
  model::quantize_release(ck->config(), w);
  auto tensors = model::export_tensors(ck->config(), w);
  fs::create_directories(f["out"]);
  loader::write_safetensors((fs::path(f["out"]) / "model.safetensors").string(), tensors);
  // config.json: composite, with the release's quantization_config.
  const std::string in_config = (fs::path(f["model"]) / "config.json").string();
  std::ifstream in(in_config);
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(in_config + ": invalid JSON: " + e.what());
  }
  nlohmann::ordered_json text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
  nlohmann::ordered_json out = cfg.contains("text_config") ? cfg : nlohmann::ordered_json::object();
  if (!cfg.contains("text_config")) {
    out["architectures"] = {"DeepseekV41ForCausalLM"};
    out["model_type"] = "deepseek_v41";
    out["text_config"] = text;
  }
  out["quantization_config"] = {{"quant_method", "fp8"}, {"scale_fmt", "ue8m0"}, {"weight_block_size", {32, 32}},
                                {"activation_scheme", "dynamic"}, {"expert_dtype", "fp4"}};
  {
    const std::string out_config = (fs::path(f["out"]) / "config.json").string();
    std::ofstream oc(out_config);
    oc << out.dump(2) << "\n";
    oc.close();
    if (!oc) throw Error(out_config + ": write failed");
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    if (fs::exists(fs::path(f["model"]) / name))
      fs::copy_file(fs::path(f["model"]) / name, fs::path(f["out"]) / name, fs::copy_options::overwrite_existing);
  int64_t bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<int64_t>(t.bytes.size());
  std::printf("wrote %s: %zu tensors, %.2f MB\n", f["out"].c_str(), tensors.size(), static_cast<double>(bytes) / 1e6);
  return 0;
}

int cmd_tokenize(const std::vector<std::string>& args) {
  auto f = parse_flags(args, {"model", "text", "file", "add-special-tokens"}, "tokenize");
  if (f.count("help")) {
    std::printf("deepinfer tokenize --model DIR (--text TEXT | --file F) [--add-special-tokens true|false]\n"
                "  Prints the token ids of the text as a JSON array.\n");
    return 0;
  }
  if (!f.count("model")) throw Error("deepinfer tokenize: --model DIR is required");
  if (f.count("text") == f.count("file")) throw Error("deepinfer tokenize: give exactly one of --text TEXT or --file F");
  std::string text;
  if (f.count("text")) {
    text = f["text"];
    tokenizer::check_utf8(text, "flag --text");
  } else {
    if (std::filesystem::is_directory(f["file"])) throw Error(f["file"] + ": is a directory, expected a text file");
    std::ifstream in(f["file"], std::ios::binary);
    if (!in) throw Error(f["file"] + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    tokenizer::check_utf8(text, f["file"]);
  }
  auto tok = tokenizer::Tokenizer::load(f["model"]);
  const bool add = f.count("add-special-tokens") ? parse_bool("add-special-tokens", f["add-special-tokens"]) : false;
  std::vector<int32_t> ids = tok->encode(text, add);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  std::printf("%s]\n", out.c_str());
  return 0;
}

int cmd_detokenize(const std::vector<std::string>& args) {
  auto f = parse_flags(args, {"model", "ids", "skip-special-tokens"}, "detokenize");
  if (f.count("help")) {
    std::printf("deepinfer detokenize --model DIR --ids 1,2,3 [--skip-special-tokens true|false]\n"
                "  Prints the text of the token ids.\n");
    return 0;
  }
  if (!f.count("model")) throw Error("deepinfer detokenize: --model DIR is required");
  if (!f.count("ids")) throw Error("deepinfer detokenize: --ids 1,2,3 is required");
  auto tok = tokenizer::Tokenizer::load(f["model"]);
  std::vector<int32_t> ids;
  if (!f["ids"].empty())
    for (int64_t v : parse_int_list("ids", f["ids"], 0, tok->vocab_size() - 1)) ids.push_back(static_cast<int32_t>(v));
  const bool skip = f.count("skip-special-tokens") ? parse_bool("skip-special-tokens", f["skip-special-tokens"]) : false;
  std::printf("%s\n", tok->decode(ids, skip).c_str());
  return 0;
}

}  // namespace deepinfer::cli
