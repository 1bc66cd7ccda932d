// Public API: DeepInfer's offline LLM, shaped like vLLM's `LLM.generate`.
//
//   deepinfer::LLM llm(deepinfer::EngineConfig{.model = "DIR"});
//   auto outs = llm.generate({deepinfer::Prompt::from_text("Hello")}, deepinfer::SamplingParams{.max_tokens = 32});
//   // outs[0].outputs[0].text, .token_ids, .finish_reason; outs[0].error if the request failed
//
// A bad request (invalid params, an out-of-vocabulary id, an empty prompt, text that is not
// valid UTF-8, a prompt + max_tokens longer than max_model_len) fails alone: its
// RequestOutput carries `error` naming the field and the rest of the batch runs. Configuration errors (a
// missing or corrupt checkpoint) throw deepinfer::Error from the constructor.
// Threading: one generate()/chat() at a time per LLM object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

// Speculative decoding: a drafter proposes tokens that the model verifies, several per step.
// Greedy output is identical with and without it; sampled output has the same distribution.
struct SpeculativeConfig {
  std::string method;                      // "" = off; "dspark": the checkpoint's DSpark draft stages
  int num_speculative_tokens = 5;          // draft tokens verified per sequence and step, 1..5
  // How the drafter picks its tokens: "greedy" (the draft's argmax: deterministic, so greedy and
  // seeded outputs are exactly those without speculation) or "probabilistic" (a sampled
  // request's drafts drawn from the draft distribution, verified by the rejection rule).
  std::string draft_sampling = "greedy";
  // Confidence-scheduled verification: each sequence verifies as many of its drafts as pay off
  // (expected accepted tokens per second of step time, from the drafter's confidences and the
  // step times measured so far); false: every step verifies all num_speculative_tokens.
  // Probabilistic drafts: a seeded request is reproducible only with this off (the verified
  // length decides which random numbers its tokens use).
  bool adaptive = true;
};

struct EngineConfig {
  std::string model;                       // checkpoint directory (config.json, safetensors, tokenizer.json)
  std::string load_format = "auto";        // "auto" or "random" (seeded random weights from config.json)
  uint64_t seed = 0;                       // engine seed: requests without their own seed derive from it
  std::string device = "cpu";              // "cpu", "cuda" or "cuda:N" (builds with DEEPINFER_CUDA=ON)
  std::string dtype = "float32";           // "float32" (exact reference math) or "bfloat16" (CUDA tensor cores)
  bool batch_invariant = true;             // CUDA: fixed-shape matmul tiles (a request's bits do not depend on the batch)
  int threads = 0;                         // CPU compute threads; 0 = DEEPINFER_THREADS or every core
  int64_t max_num_batched_tokens = 2048;   // tokens per step (chunked prefill budget)
  int64_t max_num_seqs = 64;               // sequences running at once
  int64_t memory_budget_bytes = 0;         // per-sequence state budget; 0 = unlimited
  double memory_fraction = 0.0;            // alternative: this fraction of physical RAM (CPU) or of the GPU
                                           // memory free after loading and a warm-up forward (CUDA);
                                           // 0 = none on the CPU, 0.9 on a GPU (state_budget_bytes())
  int64_t max_model_len = 0;               // longest sequence (prompt + max_tokens) a request may ask for;
                                           // 0 = config.json's max_position_embeddings (it may not exceed it)
  bool exact_prefill = false;              // true: every layer on every prompt row (no CED replay)
  std::string engram_tables = "host";      // GPU: Engram hash-bucket tables in "host" memory (each step uploads
                                           // the rows it reads) or on the "device"; CPU: host memory either way
  bool sample_on_backend = true;           // tokens drawn on the backend where nothing precedes the draw
                                           // (no penalties, grammar): only ids and logprobs leave the GPU
  SpeculativeConfig speculative;           // off by default
};

struct Prompt {
  std::string text;                        // used when token_ids is empty
  std::vector<int32_t> token_ids;
  static Prompt from_text(std::string t) { return Prompt{std::move(t), {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) { return Prompt{{}, std::move(ids)}; }
};

struct ChatMessage {
  std::string role;                        // system, user, assistant, tool, developer
  std::string content;
  std::string reasoning_content;           // assistant turns (thinking mode)
};

struct ChatOptions {
  bool thinking = false;
  std::string reasoning_effort;            // "" (default), "low", "high", "max", or "1".."100"
  bool add_generation_prompt = true;
};

// One request of a mixed batch (what run-batch files hold).
struct Request {
  std::string request_id;
  Prompt prompt;                           // text or token ids, unless a conversation is given
  std::vector<ChatMessage> messages;       // non-empty: a conversation (chat encoding)
  std::string messages_json;               // or: an OpenAI-style messages array as JSON text
                                           // (tool calls, tool results, ...); wins over `messages`
  ChatOptions chat_options;
  SamplingParams params;
  std::string error;                       // non-empty: the request fails with this message
};

struct EngineStats {
  int64_t requests = 0, prompt_tokens = 0, generated_tokens = 0, steps = 0, preemptions = 0;
  double wall_s = 0, schedule_s = 0, model_s = 0, sample_s = 0, commit_s = 0;
  int64_t grammar_compiles = 0;  // structured-output grammars compiled by this LLM so far
  // Speculative decoding: verification rounds (a sequence's step that verified drafts), their
  // draft tokens, and the drafts kept; spec_accepted_hist[j]: rounds that kept j drafts (j = 0..K);
  // spec_chosen_hist[k]: drafting sequences' steps given k drafts to verify (the adaptive choice,
  // k = 0..K); time drafting (the drafter and the choice) and in the steps that verified drafts.
  int64_t spec_rounds = 0, spec_drafted = 0, spec_accepted = 0;
  std::vector<int64_t> spec_accepted_hist, spec_chosen_hist;
  int64_t spec_skipped_steps = 0;  // adaptive: steps that drafted nothing, the recent rounds not paying for one
  double spec_draft_s = 0, spec_verify_s = 0;
  // Tokens a verification round emits on average: kept drafts + the target's one (0 without rounds).
  double mean_acceptance_length() const {
    return spec_rounds > 0 ? static_cast<double>(spec_accepted + spec_rounds) / static_cast<double>(spec_rounds) : 0.0;
  }
};

class LLM {
 public:
  explicit LLM(const EngineConfig& config);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const SamplingParams& params);
  // One SamplingParams per prompt.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params);
  // Conversations rendered with DeepSeek-V4.1's chat encoding.
  std::vector<RequestOutput> chat(const std::vector<std::vector<ChatMessage>>& conversations, const SamplingParams& params,
                                  const ChatOptions& options = {});
  // Prompt text for a conversation (the chat encoding), for inspection.
  std::string apply_chat_template(const std::vector<ChatMessage>& conversation, const ChatOptions& options = {}) const;

  // Runs a mixed batch; outputs in request order. on_finish (optional) sees each request as it
  // ends (progress, streaming to a file).
  // on_text (optional) streams each completion's new text: (request, completion, text).
  std::vector<RequestOutput> run(std::vector<Request> requests,
                                 const std::function<void(size_t, const RequestOutput&)>& on_finish = nullptr,
                                 const std::function<void(size_t, int, const std::string&)>& on_text = nullptr);

  int64_t vocab_size() const;
  int64_t max_model_len() const;  // EngineConfig.max_model_len as resolved against the model
  const EngineStats& last_stats() const;
  // The memory plan checked at load, one line: weight bytes per format on the device, Engram
  // tables, the state of one sequence at max_model_len, the state budget, host bytes, and the
  // memory available then. (A model that does not fit throws from the constructor instead.)
  const std::string& memory_report() const;
  // Bytes of per-sequence state a run may hold (0: unlimited): memory_budget_bytes, or
  // memory_fraction (on a GPU by default 0.9) of the memory free after loading and a warm-up
  // forward of the step's token budget, so that a step's working set always fits beside it.
  int64_t state_budget_bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
