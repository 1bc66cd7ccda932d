// The engine subcommands: generate (streaming), chat (interactive), run-batch (JSONL files).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <iostream>
#include <nlohmann/json.hpp>

#include "api/batch_job.h"
#include "api/batch_output.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "deepinfer/llm.h"
#include "tokenizer/utf8.h"

namespace deepinfer::cli {

namespace {

const std::vector<std::string> kEngineFlags = {"model", "load-format", "seed", "device", "dtype", "batch-invariant", "threads", "max-num-batched-tokens",
                                               "max-num-seqs", "memory-budget", "memory-fraction", "exact-prefill", "max-model-len",
                                               "engram-tables", "speculative", "num-speculative-tokens",
                                               "draft-sampling", "no-adaptive-verification"};
const std::vector<std::string> kSamplingFlags = {"max-tokens", "min-tokens", "temperature", "top-k", "top-p", "min-p",
                                                 "repetition-penalty", "presence-penalty", "frequency-penalty", "stop",
                                                 "stop-token-ids", "ignore-eos", "request-seed", "logprobs", "n",
                                                 "skip-special-tokens"};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr int64_t kIntMax = INT32_MAX;  // int-typed fields

EngineConfig engine_config(std::map<std::string, std::string>& f) {
  if (!f.count("model")) throw Error("--model DIR is required");
  EngineConfig c;
  c.model = f["model"];
  if (f.count("load-format")) c.load_format = f["load-format"];
  if (f.count("seed")) c.seed = parse_uint64("seed", f["seed"]);
  if (f.count("device")) c.device = f["device"];
  if (f.count("dtype")) c.dtype = f["dtype"];
  if (f.count("batch-invariant")) c.batch_invariant = parse_bool("batch-invariant", f["batch-invariant"]);
  if (f.count("threads")) c.threads = static_cast<int>(parse_int("threads", f["threads"], 0, 1024));
  if (f.count("max-num-batched-tokens")) c.max_num_batched_tokens = parse_int("max-num-batched-tokens", f["max-num-batched-tokens"], 1, kIntMax);
  if (f.count("max-num-seqs")) c.max_num_seqs = parse_int("max-num-seqs", f["max-num-seqs"], 1, 1 << 20);
  if (f.count("memory-budget")) c.memory_budget_bytes = parse_int("memory-budget", f["memory-budget"], 0, INT64_MAX);
  if (f.count("memory-fraction")) c.memory_fraction = parse_float("memory-fraction", f["memory-fraction"], 0, 1);
  if (f.count("exact-prefill")) c.exact_prefill = parse_bool("exact-prefill", f["exact-prefill"]);
  if (f.count("engram-tables")) c.engram_tables = f["engram-tables"];
  if (f.count("max-model-len")) c.max_model_len = parse_int("max-model-len", f["max-model-len"], 1, INT64_MAX);
  if (f.count("speculative")) {
    if (f["speculative"] != "dspark") throw Error("flag --speculative: expected 'dspark', got '" + f["speculative"] + "'");
    c.speculative.method = f["speculative"];
  }
  if (f.count("num-speculative-tokens"))
    c.speculative.num_speculative_tokens = static_cast<int>(parse_int("num-speculative-tokens", f["num-speculative-tokens"], 1, 5));
  if (f.count("draft-sampling")) {
    if (f["draft-sampling"] != "greedy" && f["draft-sampling"] != "probabilistic")
      throw Error("flag --draft-sampling: expected 'greedy' or 'probabilistic', got '" + f["draft-sampling"] + "'");
    c.speculative.draft_sampling = f["draft-sampling"];
  }
  if (f.count("no-adaptive-verification")) c.speculative.adaptive = !parse_bool("no-adaptive-verification", f["no-adaptive-verification"]);
  return c;
}

// Text from the command line goes to the tokenizer: it must be UTF-8 (named by its flag).
void check_text_flag(const std::string& flag, const std::string& v) { tokenizer::check_utf8(v, "flag --" + flag); }

SamplingParams sampling_params(std::map<std::string, std::string>& f) {
  SamplingParams p;
  const double kFloatMax = 3.4028234663852886e38;
  if (f.count("max-tokens")) p.max_tokens = static_cast<int>(parse_int("max-tokens", f["max-tokens"], 1, kIntMax));
  if (f.count("min-tokens")) p.min_tokens = static_cast<int>(parse_int("min-tokens", f["min-tokens"], 0, kIntMax));
  if (f.count("temperature")) p.temperature = static_cast<float>(parse_float("temperature", f["temperature"], 0, kFloatMax));
  if (f.count("top-k")) p.top_k = static_cast<int>(parse_int("top-k", f["top-k"], -1, kIntMax));
  if (f.count("top-p")) p.top_p = static_cast<float>(parse_float("top-p", f["top-p"], 0, 1));
  if (f.count("min-p")) p.min_p = static_cast<float>(parse_float("min-p", f["min-p"], 0, 1));
  if (f.count("repetition-penalty")) p.repetition_penalty = static_cast<float>(parse_float("repetition-penalty", f["repetition-penalty"], 0, kFloatMax));
  if (f.count("presence-penalty")) p.presence_penalty = static_cast<float>(parse_float("presence-penalty", f["presence-penalty"], -2, 2));
  if (f.count("frequency-penalty")) p.frequency_penalty = static_cast<float>(parse_float("frequency-penalty", f["frequency-penalty"], -2, 2));
  if (f.count("stop")) {
    check_text_flag("stop", f["stop"]);
    p.stop = {f["stop"]};
  }
  if (f.count("stop-token-ids"))
    for (int64_t id : parse_int_list("stop-token-ids", f["stop-token-ids"], 0, kIntMax)) p.stop_token_ids.push_back(static_cast<int32_t>(id));
  if (f.count("ignore-eos")) p.ignore_eos = parse_bool("ignore-eos", f["ignore-eos"]);
  if (f.count("request-seed")) p.seed = parse_uint64("request-seed", f["request-seed"]);
  if (f.count("logprobs")) p.logprobs = static_cast<int>(parse_int("logprobs", f["logprobs"], 0, 20));
  if (f.count("n")) p.n = static_cast<int>(parse_int("n", f["n"], 1, 1024));
  if (f.count("skip-special-tokens")) p.skip_special_tokens = parse_bool("skip-special-tokens", f["skip-special-tokens"]);
  const std::string err = validate(p);
  if (!err.empty()) throw Error(err);
  return p;
}

constexpr const char* kSamplingHelp =
    "sampling: --max-tokens N --min-tokens N --temperature T --top-k K --top-p P --min-p P --n N\n"
    "          --repetition-penalty R --presence-penalty P --frequency-penalty F --stop TEXT\n"
    "          --stop-token-ids 1,2 --ignore-eos --request-seed S --logprobs N --skip-special-tokens B\n"
    "engine:   --load-format auto|random --seed S --device cpu|cuda[:N] --dtype float32|bfloat16 --batch-invariant true|false --threads N --max-num-batched-tokens N --max-num-seqs N\n"
    "          --max-model-len N (prompt + max_tokens at most; default: the model's max_position_embeddings)\n"
    "          --memory-budget BYTES --memory-fraction F --exact-prefill\n"
    "          --engram-tables host|device (GPU: Engram tables in host memory, rows uploaded per step; default host)\n"
    "          --speculative dspark --num-speculative-tokens K (speculative decoding: K = 1..5 drafts per step, default 5)\n"
    "          --draft-sampling greedy|probabilistic (how the drafts are drawn; default greedy)\n"
    "          --no-adaptive-verification (verify all K drafts every step instead of the confidence-scheduled k)\n";

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  auto f = parse_flags(args, concat(concat(kEngineFlags, kSamplingFlags), {"prompt", "prompt-ids"}), "generate",
                       {"exact-prefill", "ignore-eos", "no-adaptive-verification"});
  if (f.count("help")) {
    std::printf("deepinfer generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [flags]\n  Streams the completion.\n%s",
                kSamplingHelp);
    return 0;
  }
  if (f.count("prompt") == f.count("prompt-ids")) throw Error("deepinfer generate: give exactly one of --prompt or --prompt-ids");
  EngineConfig ec = engine_config(f);
  SamplingParams sp = sampling_params(f);
  Request r;
  r.request_id = "0";
  r.params = sp;
  if (f.count("prompt")) {
    check_text_flag("prompt", f["prompt"]);
    r.prompt.text = f["prompt"];
  } else {
    for (int64_t id : parse_int_list("prompt-ids", f["prompt-ids"], 0, kIntMax)) r.prompt.token_ids.push_back(static_cast<int32_t>(id));
  }
  LLM llm(ec);
  const bool stream = sp.n == 1;
  auto outs = llm.run({r}, nullptr, [&](size_t, int, const std::string& text) {
    if (stream) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  });
  const RequestOutput& o = outs[0];
  if (!o.error.empty()) throw Error(o.error);
  if (stream) {
    std::printf("\n");
  } else {
    for (const auto& c : o.outputs) std::printf("[%d] %s\n", c.index, c.text.c_str());
  }
  for (const auto& c : o.outputs)
    std::fprintf(stderr, "[completion %d: %zu tokens, finish %s%s%s]\n", c.index, c.token_ids.size(),
                 to_string(c.finish_reason), c.stop_reason.empty() ? "" : ", stop ", c.stop_reason.c_str());
  return 0;
}

int cmd_chat(const std::vector<std::string>& args) {
  auto f = parse_flags(args, concat(concat(kEngineFlags, kSamplingFlags), {"thinking", "reasoning-effort", "system"}), "chat",
                       {"exact-prefill", "ignore-eos", "thinking", "no-adaptive-verification"});
  if (f.count("help")) {
    std::printf("deepinfer chat --model DIR [--system TEXT] [--thinking] [--reasoning-effort E] [flags]\n"
                "  Interactive chat with DeepSeek-V4.1's chat encoding; an empty line or EOF ends it.\n%s",
                kSamplingHelp);
    return 0;
  }
  EngineConfig ec = engine_config(f);
  SamplingParams sp = sampling_params(f);
  ChatOptions co;
  if (f.count("thinking")) co.thinking = parse_bool("thinking", f["thinking"]);
  if (f.count("reasoning-effort")) co.reasoning_effort = f["reasoning-effort"];
  if (f.count("system")) check_text_flag("system", f["system"]);
  check_text_flag("reasoning-effort", co.reasoning_effort);
  LLM llm(ec);
  std::vector<ChatMessage> conv;
  if (f.count("system")) conv.push_back({"system", f["system"], ""});
  const bool tty = isatty(STDIN_FILENO) != 0;
  for (std::string line;;) {
    if (tty) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    if (const size_t at = tokenizer::find_invalid_utf8(line); at != std::string::npos) {
      // One bad line does not end the conversation: it is reported and left out.
      std::fprintf(stderr, "deepinfer: error: input line: invalid UTF-8 at byte offset %zu; line ignored\n", at);
      continue;
    }
    conv.push_back({"user", line, ""});
    Request r;
    r.messages = conv;
    r.chat_options = co;
    r.params = sp;
    auto outs = llm.run({r}, nullptr, [&](size_t, int, const std::string& text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    if (!outs[0].error.empty()) throw Error(outs[0].error);
    conv.push_back({"assistant", outs[0].outputs[0].text, ""});
  }
  return 0;
}

int cmd_run_batch(const std::vector<std::string>& args) {
  auto f = parse_flags(args, concat(kEngineFlags, {"input", "output", "metrics", "resume"}), "run-batch",
                       {"exact-prefill", "resume", "no-adaptive-verification"});
  if (f.count("help")) {
    std::printf("deepinfer run-batch --model DIR --input IN.jsonl --output OUT.jsonl [--resume] [--exact-prefill] [--metrics FILE]\n"
                "  One output line per input line, in input order, each written as soon as it and every earlier\n"
                "  line are done; malformed lines get an error line. --resume keeps OUT's complete lines (they must\n"
                "  be the results of IN's first lines, in order), drops a torn last line, and runs only the rest.\n%s",
                kSamplingHelp);
    return 0;
  }
  if (!f.count("input")) throw Error("deepinfer run-batch: --input IN.jsonl is required");
  if (!f.count("output")) throw Error("deepinfer run-batch: --output OUT.jsonl is required");
  EngineConfig ec = engine_config(f);
  api::BatchJobOptions jo;
  jo.input = f["input"];
  jo.output = f["output"];
  jo.resume = f.count("resume") && parse_bool("resume", f["resume"]);
  jo.engine_seed = ec.seed;
  // The metrics file is opened (and checked) before the batch runs, and written after it.
  api::OutputFile metrics_file;
  if (f.count("metrics")) {
    const std::string& mp = f["metrics"];
    for (const std::string& other : {jo.input, jo.output})
      if (api::same_file(mp, other)) throw Error(mp + ": --metrics is the same file as " + other);
  }
  std::signal(SIGPIPE, SIG_IGN);  // a closed pipe is a write error (EPIPE), reported as such
  if (f.count("metrics")) metrics_file.open_truncate(f["metrics"]);
  api::BatchJob job(jo);
  for (const auto& note : job.notes()) std::fprintf(stderr, "run-batch: %s\n", note.c_str());
  const bool progress = isatty(STDERR_FILENO) != 0;
  const size_t to_run = job.pending();
  size_t done = 0;
  std::vector<RequestOutput> outs;
  EngineStats st;
  const auto counts_line = [&](const char* prefix, const api::BatchCounts& c) {
    std::fprintf(stderr, "run-batch: %s%zu lines: %zu written (%zu succeeded, %zu failed), %zu skipped%s%s%s\n", prefix, c.lines,
                 c.written, c.succeeded, c.failed, c.skipped, jo.resume ? " (already in " : "", jo.resume ? jo.output.c_str() : "",
                 jo.resume ? ")" : "");
  };
  std::unique_ptr<LLM> llm;
  if (to_run > 0) {  // not loaded when --resume finds every line done
    llm = std::make_unique<LLM>(ec);
    std::fprintf(stderr, "run-batch: %s\n", llm->memory_report().c_str());
  }
  try {
    api::BatchHooks hooks;
    hooks.on_finish = [&](size_t) {
      ++done;
      if (progress) std::fprintf(stderr, "\r[%zu/%zu] requests done", done, to_run);
    };
    outs = job.run(llm.get(), hooks);
    if (llm) st = llm->last_stats();
  } catch (const Error&) {
    if (progress && done > 0) std::fprintf(stderr, "\n");
    counts_line("stopped: ", job.counts());
    throw;
  }
  if (progress && done > 0) std::fprintf(stderr, "\n");
  const api::BatchCounts& c = job.counts();
  std::vector<double> ttft;
  int64_t tok_in = 0, tok_out = 0;
  for (const auto& o : outs) {
    if (!o.error.empty()) continue;
    tok_in += static_cast<int64_t>(o.prompt_token_ids.size());
    for (const auto& comp : o.outputs) tok_out += static_cast<int64_t>(comp.token_ids.size());
    ttft.push_back(o.metrics.first_token_s);
  }
  nlohmann::json m = {{"lines", c.lines},
                      {"requests", outs.size()},
                      {"written", c.written},
                      {"succeeded", c.succeeded},
                      {"failed", c.failed},
                      {"skipped", c.skipped},
                      {"errors", c.failed},
                      {"prompt_tokens", tok_in},
                      {"completion_tokens", tok_out},
                      {"wall_s", st.wall_s},
                      {"prompt_tokens_per_s", st.wall_s > 0 ? static_cast<double>(tok_in) / st.wall_s : 0.0},
                      {"completion_tokens_per_s", st.wall_s > 0 ? static_cast<double>(tok_out) / st.wall_s : 0.0},
                      {"ttft_p50_s", percentile(ttft, 0.5)},
                      {"ttft_p99_s", percentile(ttft, 0.99)},
                      {"steps", st.steps},
                      {"preemptions", st.preemptions},
                      {"time_schedule_s", st.schedule_s},
                      {"time_model_s", st.model_s},
                      {"time_sample_s", st.sample_s},
                      {"time_commit_s", st.commit_s}};
  std::fprintf(stderr,
               "run-batch: %zu requests (%zu errors), %lld prompt + %lld completion tokens in %.2f s = %.1f + %.1f tokens/s; "
               "TTFT p50 %.3f s, p99 %.3f s\n",
               outs.size(), c.failed, static_cast<long long>(tok_in), static_cast<long long>(tok_out), st.wall_s,
               m["prompt_tokens_per_s"].get<double>(), m["completion_tokens_per_s"].get<double>(), percentile(ttft, 0.5),
               percentile(ttft, 0.99));
  if (!ec.speculative.method.empty()) {
    const auto hist = [](const std::vector<int64_t>& h) {
      std::string s;
      for (size_t i = 0; i < h.size(); ++i) {
        if (i > 0) s.push_back(' ');
        s.append(std::to_string(h[i]));
      }
      return s;
    };
    m["speculative"] = {{"method", ec.speculative.method},
                        {"num_speculative_tokens", ec.speculative.num_speculative_tokens},
                        {"adaptive", ec.speculative.adaptive},
                        {"draft_sampling", ec.speculative.draft_sampling},
                        {"rounds", st.spec_rounds},
                        {"drafted_tokens", st.spec_drafted},
                        {"accepted_tokens", st.spec_accepted},
                        {"mean_acceptance_length", st.mean_acceptance_length()},
                        {"accepted_hist", st.spec_accepted_hist},
                        {"chosen_k_hist", st.spec_chosen_hist},
                        {"skipped_steps", st.spec_skipped_steps},
                        {"time_draft_s", st.spec_draft_s},
                        {"time_verify_s", st.spec_verify_s}};
    std::fprintf(stderr,
                 "run-batch: speculative %s: %lld rounds, %lld of %lld drafts accepted, mean acceptance length %.2f; "
                 "accepted per round (0..K) [%s]; chosen k (0..K) [%s]; %lld steps without a draft round; drafting %.2f s, "
                 "verifying steps %.2f s\n",
                 ec.speculative.method.c_str(), static_cast<long long>(st.spec_rounds), static_cast<long long>(st.spec_accepted),
                 static_cast<long long>(st.spec_drafted), st.mean_acceptance_length(), hist(st.spec_accepted_hist).c_str(),
                 hist(st.spec_chosen_hist).c_str(), static_cast<long long>(st.spec_skipped_steps), st.spec_draft_s, st.spec_verify_s);
  }
  counts_line("", c);
  if (metrics_file.is_open()) {
    metrics_file.write(m.dump(2) + "\n");
    metrics_file.close();
  }
  return 0;
}

}  // namespace deepinfer::cli
