// LLM: the public offline API on top of the engine (load once, generate many).
#include "deepinfer/llm.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "engine/engine.h"
#include "engine/load_model.h"
#include "engine/state_budget.h"
#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/config.h"
#include "runner/batch_runner.h"
#include "spec/drafter.h"
#include "spec/dspark_drafter.h"
#include "spec/verify_schedule.h"
#include "tokenizer/chat_encoding.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

struct LLM::Impl {
  EngineConfig cfg;
  std::unique_ptr<kernels::Backend> backend;
  engine::LoadedModel lm;
  std::unique_ptr<runner::BatchRunner> batches;  // the model's forwards (its graphs live across runs)
  EngineStats stats;
  int64_t max_model_len = 0;  // resolved: EngineConfig.max_model_len or max_position_embeddings
  std::shared_ptr<grammar::GrammarCache> grammars;  // structured-output grammars, kept across runs
  std::string memory_report;  // the memory plan checked at load and the state budget, one line
  int64_t state_budget = 0;   // bytes of per-sequence state every run may hold (0: unlimited)
  std::shared_ptr<spec::Drafter> drafter;  // speculative decoding's (null: off)
  std::shared_ptr<spec::StepCost> step_cost;  // adaptive verification's curve, measured across runs

  std::vector<RequestOutput> run(std::vector<engine::EngineRequest> reqs,
                                 const std::function<void(size_t, const RequestOutput&)>& on_finish = nullptr,
                                 const std::function<void(size_t, int, const std::string&)>& on_text = nullptr) {
    engine::EngineOptions o;
    o.sched.max_num_batched_tokens = cfg.max_num_batched_tokens;
    o.sched.max_num_seqs = cfg.max_num_seqs;
    o.sched.exact_prefill = cfg.exact_prefill;
    o.sched.replay_tail = lm.model->config().sliding_window;
    o.sched.replay_supported = lm.model->late_layer_start() < lm.model->config().num_hidden_layers;
    o.memory_budget_bytes = state_budget;
    o.seed = cfg.seed;
    o.sample_on_backend = cfg.sample_on_backend;
    o.on_text = on_text;
    o.grammars = grammars;
    if (drafter)
      o.speculative = {.drafter = drafter, .num_speculative_tokens = cfg.speculative.num_speculative_tokens,
                       .adaptive = cfg.speculative.adaptive, .step_cost = step_cost};
    if (lm.checkpoint) o.find_nonfinite_weight = [ck = lm.checkpoint.get()] { return loader::first_nonfinite_tensor(*ck); };
    engine::Engine eng(*batches, lm.tokenizer.get(), o);
    auto outs = eng.run(std::move(reqs), on_finish);
    grammars = eng.grammar_cache();
    const auto& t = eng.times();
    stats = EngineStats{};
    stats.requests = static_cast<int64_t>(outs.size());
    stats.prompt_tokens = t.prompt_tokens;
    stats.generated_tokens = t.generated_tokens;
    stats.steps = t.steps;
    stats.preemptions = t.preemptions;
    stats.wall_s = t.wall_s;
    stats.schedule_s = t.schedule_s;
    stats.model_s = t.model_s;
    stats.sample_s = t.sample_s;
    stats.commit_s = t.commit_s;
    stats.grammar_compiles = eng.grammar_compiles();
    stats.spec_rounds = t.spec_rounds;
    stats.spec_drafted = t.spec_drafted;
    stats.spec_accepted = t.spec_accepted;
    stats.spec_accepted_hist = t.spec_accepted_hist;
    stats.spec_chosen_hist = t.spec_chosen_hist;
    stats.spec_skipped_steps = t.spec_skipped_steps;
    stats.spec_draft_s = t.draft_s;
    stats.spec_verify_s = t.verify_s;
    return outs;
  }
};

LLM::LLM(const EngineConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = config;
  if (config.model.empty()) throw Error("EngineConfig.model: a checkpoint directory is required");
  if (config.load_format != "auto" && config.load_format != "random")
    throw Error("EngineConfig.load_format: expected \"auto\" or \"random\", got \"" + config.load_format + "\"");
  if (config.max_num_batched_tokens < 1) throw Error("EngineConfig.max_num_batched_tokens: must be >= 1");
  if (config.max_num_seqs < 1) throw Error("EngineConfig.max_num_seqs: must be >= 1");
  if (config.max_model_len < 0) throw Error("EngineConfig.max_model_len: must be >= 0 (0 = the model's max_position_embeddings)");
  if (config.memory_budget_bytes < 0) throw Error("EngineConfig.memory_budget_bytes: must be >= 0 (0 = unlimited)");
  if (config.threads < 0) throw Error("EngineConfig.threads: must be >= 0 (0 = automatic)");
  if (config.memory_fraction < 0 || config.memory_fraction > 1) throw Error("EngineConfig.memory_fraction: must be in [0, 1]");
  if (config.engram_tables != "host" && config.engram_tables != "device")
    throw Error("EngineConfig.engram_tables: expected \"host\" or \"device\", got \"" + config.engram_tables + "\"");
  const SpeculativeConfig& sp = config.speculative;
  if (!sp.method.empty() && sp.method != "dspark")
    throw Error("EngineConfig.speculative.method: expected \"\" (off) or \"dspark\", got \"" + sp.method + "\"");
  if (!sp.method.empty() && (sp.num_speculative_tokens < 1 || sp.num_speculative_tokens > spec::kMaxDraftTokens))
    throw Error("EngineConfig.speculative.num_speculative_tokens: must be in [1, " + std::to_string(spec::kMaxDraftTokens) +
                "], got " + std::to_string(sp.num_speculative_tokens));
  const spec::DraftSampling draft_sampling = spec::parse_draft_sampling(sp.draft_sampling, "EngineConfig.speculative.draft_sampling");
  if (sp.method == "dspark" && loader::load_config(config.model + "/config.json").num_nextn_predict_layers <= 0)
    throw Error("EngineConfig.speculative.method \"dspark\": the checkpoint " + config.model +
                " has no DSpark draft stages (config.json num_nextn_predict_layers is 0, no mtp.* weights)");
  impl_->backend = kernels::make_backend(config.device, config.threads, config.dtype, config.batch_invariant);
  engine::MemoryOptions memory;
  memory.state_tokens = config.max_model_len;
  memory.state_budget_bytes = config.memory_budget_bytes;
  memory.memory_fraction = config.memory_budget_bytes > 0 ? 0.0 : config.memory_fraction;
  memory.device = config.device;
  memory.engram_tables_on_host = config.engram_tables == "host";
  memory.dspark = sp.method == "dspark";  // (a checkpoint without mtp.* tensors is an Error there)
  impl_->lm = engine::load_model(config.model, *impl_->backend,
                                 config.load_format == "random" ? engine::LoadFormat::kRandom : engine::LoadFormat::kAuto,
                                 config.seed, memory);

  impl_->batches = std::make_unique<runner::BatchRunner>(*impl_->lm.model);
  if (sp.method == "dspark") {
    impl_->drafter = std::make_shared<spec::DsparkDrafter>(*impl_->lm.model, draft_sampling);
    impl_->step_cost = std::make_shared<spec::MeasuredStepCost>();
  }
  const int64_t positions = impl_->lm.model->config().max_position_embeddings;
  if (config.max_model_len > positions)
    throw Error("EngineConfig.max_model_len = " + std::to_string(config.max_model_len) +
                " is longer than the model's max_position_embeddings = " + std::to_string(positions));
  impl_->max_model_len = config.max_model_len > 0 ? config.max_model_len : positions;
  // Taken once, after loading: a step's working set stays in the backend's pool, so later runs
  // see less free memory but the same room for state.
  const engine::StateBudget budget = engine::plan_state_budget(
      *impl_->batches, {.bytes = config.memory_budget_bytes,
                        .fraction = config.memory_fraction,
                        .warmup_tokens = std::min(config.max_num_batched_tokens, impl_->max_model_len)});
  impl_->state_budget = budget.bytes;
  impl_->memory_report = model::memory_plan_summary(impl_->lm.memory, impl_->lm.available, budget.how);
}

LLM::~LLM() = default;

int64_t LLM::vocab_size() const { return impl_->lm.model->config().vocab_size; }
int64_t LLM::max_model_len() const { return impl_->max_model_len; }
const EngineStats& LLM::last_stats() const { return impl_->stats; }
const std::string& LLM::memory_report() const { return impl_->memory_report; }
int64_t LLM::state_budget_bytes() const { return impl_->state_budget; }

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts, const SamplingParams& params) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params) {
  if (params.size() != prompts.size())
    throw Error("generate: " + std::to_string(params.size()) + " SamplingParams for " + std::to_string(prompts.size()) + " prompts");
  std::vector<Request> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs[i].request_id = std::to_string(i);
    reqs[i].prompt = prompts[i];
    reqs[i].params = params[i];
  }
  return run(std::move(reqs));
}

namespace {
nlohmann::ordered_json to_json(const std::vector<ChatMessage>& conv) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const auto& m : conv) {
    nlohmann::ordered_json j;
    j["role"] = m.role;
    j["content"] = m.content;
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    msgs.push_back(j);
  }
  return msgs;
}
tokenizer::ChatOptions to_options(const ChatOptions& o) {
  tokenizer::ChatOptions t;
  t.thinking = o.thinking;
  t.reasoning_effort = o.reasoning_effort;
  t.add_generation_prompt = o.add_generation_prompt;
  return t;
}
}  // namespace

std::string LLM::apply_chat_template(const std::vector<ChatMessage>& conversation, const ChatOptions& options) const {
  return tokenizer::encode_chat(to_json(conversation), to_options(options));
}

std::vector<RequestOutput> LLM::chat(const std::vector<std::vector<ChatMessage>>& conversations, const SamplingParams& params,
                                     const ChatOptions& options) {
  std::vector<Request> reqs(conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    reqs[i].request_id = std::to_string(i);
    reqs[i].messages = conversations[i];
    reqs[i].chat_options = options;
    reqs[i].params = params;
  }
  return run(std::move(reqs));
}

std::vector<RequestOutput> LLM::run(std::vector<Request> requests,
                                    const std::function<void(size_t, const RequestOutput&)>& on_finish,
                                    const std::function<void(size_t, int, const std::string&)>& on_text) {
  std::vector<engine::EngineRequest> reqs(requests.size());
  const tokenizer::Tokenizer* tok = impl_->lm.tokenizer.get();
  const int64_t max_len = impl_->max_model_len;
  const std::string limit = " the maximum model length (max_model_len) = " + std::to_string(max_len);
  // Text of more bytes than this cannot fit in max_model_len tokens: rejected before tokenizing it.
  const std::optional<size_t> max_bytes = tok ? tok->max_bytes_for(static_cast<size_t>(max_len)) : std::nullopt;
  auto encode = [&](const std::string& text, bool add_special, const std::string& what) {
    if (max_bytes && text.size() > *max_bytes)
      throw Error("prompt too long: " + what + " of " + std::to_string(text.size()) + " bytes encodes to more than" + limit + " tokens");
    std::vector<int32_t> ids = tok->encode(text, add_special, static_cast<size_t>(max_len));
    if (static_cast<int64_t>(ids.size()) > max_len)
      throw Error("prompt too long: " + what + " encodes to more than" + limit + " tokens");
    return ids;
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    Request& in = requests[i];
    engine::EngineRequest& r = reqs[i];
    r.request_id = in.request_id;
    r.params = in.params;
    r.error = in.error;
    if (!r.error.empty()) continue;
    try {
      for (size_t k = 0; k < in.params.stop.size(); ++k) tokenizer::check_utf8(in.params.stop[k], "stop[" + std::to_string(k) + "]");
      const bool is_chat = !in.messages_json.empty() || !in.messages.empty();
      if (is_chat) {
        if (!tok) throw Error("messages: chat needs a tokenizer (the model directory has no tokenizer.json)");
        tokenizer::check_utf8(in.chat_options.reasoning_effort, "reasoning_effort");
        nlohmann::ordered_json msgs;
        if (!in.messages_json.empty()) {
          msgs = parse_json_input<nlohmann::ordered_json>(in.messages_json, "messages");
        } else {
          for (size_t m = 0; m < in.messages.size(); ++m) {
            const std::string f = "messages[" + std::to_string(m) + "].";
            tokenizer::check_utf8(in.messages[m].role, f + "role");
            tokenizer::check_utf8(in.messages[m].content, f + "content");
            tokenizer::check_utf8(in.messages[m].reasoning_content, f + "reasoning_content");
          }
          msgs = to_json(in.messages);
        }
        r.prompt_text = tokenizer::encode_chat(msgs, to_options(in.chat_options));
        r.prompt_ids = encode(r.prompt_text, /*add_special=*/false, "the conversation");
      } else if (!in.prompt.token_ids.empty()) {
        r.prompt_ids = in.prompt.token_ids;
      } else {
        if (!tok) throw Error("prompt: text prompts need a tokenizer (the model directory has no tokenizer.json)");
        tokenizer::check_utf8(in.prompt.text, "prompt");
        r.prompt_text = in.prompt.text;
        r.prompt_ids = encode(in.prompt.text, /*add_special=*/true, "the prompt");
      }
      // As vLLM: the prompt and the tokens asked for must fit in the model's length.
      const int64_t n_prompt = static_cast<int64_t>(r.prompt_ids.size());
      if (n_prompt > max_len)
        throw Error("prompt too long: " + std::to_string(n_prompt) + " prompt tokens, more than" + limit);
      if (n_prompt + in.params.max_tokens > max_len)
        throw Error("prompt too long: " + std::to_string(n_prompt) + " prompt tokens + max_tokens " +
                    std::to_string(in.params.max_tokens) + " = " + std::to_string(n_prompt + in.params.max_tokens) +
                    " tokens, more than" + limit);
    } catch (const Error& e) {
      r.error = e.what();
    } catch (const std::exception& e) {  // e.g. a JSON value nlohmann cannot render: this request fails alone
      r.error = std::string("request ") + in.request_id + ": " + e.what();
    }
  }
  return impl_->run(std::move(reqs), on_finish, on_text);
}

}  // namespace deepinfer
