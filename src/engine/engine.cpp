#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "engine/output_processor.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "runner/model_runner.h"
#include "sample/rng.h"

namespace deepinfer::engine {

static_assert(kernels::kDrawGreedyTemperature == sample::kGreedyTemperature, "one greedy threshold");

uint64_t request_seed(uint64_t engine_seed, uint64_t index) {
  return core::splitmix64(engine_seed ^ core::splitmix64(index + 1));
}

kernels::DrawParams draw_params(const SamplingParams& p, uint64_t seed, uint64_t step, uint64_t stream) {
  kernels::DrawParams d;
  d.logprobs = p.logprobs ? *p.logprobs : -1;
  if (p.temperature < sample::kGreedyTemperature) return d;
  d.temperature = p.temperature;
  d.top_k = p.top_k > 0 ? p.top_k : 0;
  d.top_p = p.top_p;
  if (p.min_p > 0.0f) d.log_min_p = std::log(static_cast<double>(p.min_p));
  d.u = sample::draw_uniform(seed, step, stream);
  return d;
}

using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

// One completion's sequence and sampling state (its output side is the OutputProcessor's).
struct Completion {
  sched::Sequence seq;
  uint64_t seed = 0;
  std::unique_ptr<grammar::Matcher> matcher;  // structured output only
  std::vector<uint32_t> mask;                 // [ceil(vocab / 32)] u32: the next token's allowed ids
  bool ended = false;                         // finished (or its request failed)
};

struct Engine::Live {
  EngineRequest req;
  std::vector<std::unique_ptr<Completion>> comps;  // [params.n]; empty when the request failed
  bool failed = false;                             // failed while it ran (the others go on)
};

struct Engine::RunState {
  RunState(sched::Scheduler& s, OutputProcessor& o) : scheduler(s), outputs(o) {}
  sched::Scheduler& scheduler;
  OutputProcessor& outputs;
  std::vector<std::unique_ptr<Live>> live;  // [request]
  // The sampler's rows of the current step (reused across steps).
  std::vector<sample::SampleRequest> sreqs;
  std::vector<sample::SampleResult> sres;
  std::vector<int64_t> nan_at;  // [drawn rows] the first NaN logit's id, or -1
};

namespace {

// The logprobs of a row the backend drew, when the request asks for them: the token's, and the
// best n ids (so's row i).
std::optional<TokenLogprob> backend_logprob(const runner::StepOutput& so, size_t i, int32_t tok,
                                            const SamplingParams& p) {
  if (!p.logprobs) return std::nullopt;
  TokenLogprob lp;
  lp.token_id = tok;
  lp.logprob = so.logprob[i];
  for (size_t j = 0; j < so.top_ids[i].size(); ++j)
    if (so.top_ids[i][j] >= 0) lp.top.emplace_back(so.top_ids[i][j], so.top_logprobs[i][j]);
  return lp;
}

}  // namespace

Engine::Engine(runner::BatchRunner& batches, const tokenizer::Tokenizer* tok, EngineOptions opts)
    : batches_(batches), model_(batches.model()), tok_(tok), opts_(opts), grammars_(opts_.grammars) {
  if (opts_.sampler_threads > 1) pool_ = std::make_unique<core::ThreadPool>(opts_.sampler_threads);
  for (int64_t e : model_.config().eos_token_ids) eos_ids_.push_back(static_cast<int32_t>(e));
  if (tok_ && tok_->eos_id() && std::find(eos_ids_.begin(), eos_ids_.end(), *tok_->eos_id()) == eos_ids_.end())
    eos_ids_.push_back(*tok_->eos_id());
}

Engine::~Engine() = default;

int64_t Engine::grammar_compiles() const { return grammars_ ? grammars_->compiles() : 0; }

std::string Engine::structured_output_error(const SamplingParams& p) {
  if (!tok_) return "structured_output: needs a tokenizer (the model has no tokenizer.json)";
  if (tok_->vocab_size() > model_.config().vocab_size)
    return "structured_output: the tokenizer has " + std::to_string(tok_->vocab_size()) +
           " tokens, more than the model's vocabulary (config.json vocab_size " + std::to_string(model_.config().vocab_size) +
           "); the grammar's token masks would not match the logits";
  if (!grammars_) {
    std::vector<int32_t> stops;  // the engine's EOS ids that the tokenizer knows
    for (int32_t e : eos_ids_)
      if (e >= 0 && e < tok_->vocab_size()) stops.push_back(e);
    grammars_ = std::make_shared<grammar::GrammarCache>(grammar::Vocabulary::from_tokenizer(*tok_, stops));
  }
  auto r = grammars_->get(*p.structured_output, pool_.get());
  return r.grammar ? std::string() : "structured_output: " + r.error;
}

std::string Engine::request_error(const EngineRequest& req) {
  const int64_t V = model_.config().vocab_size;
  const SamplingParams& p = req.params;
  std::string err = req.error;
  if (err.empty()) err = validate(p, V);
  if (err.empty() && req.prompt_ids.empty()) err = "prompt: empty (at least one token is needed)";
  if (err.empty())
    for (size_t i = 0; i < req.prompt_ids.size(); ++i)
      if (req.prompt_ids[i] < 0 || req.prompt_ids[i] >= V) {
        err = "prompt_token_ids[" + std::to_string(i) + "]: token id " + std::to_string(req.prompt_ids[i]) +
              " is outside the vocabulary [0, " + std::to_string(V) + ")";
        break;
      }
  if (err.empty() && !tok_ && !p.stop.empty()) err = "stop: stop strings need a tokenizer (the model has no tokenizer.json)";
  if (err.empty() && p.min_tokens > 0)
    for (int32_t e : eos_ids_)
      if (e < 0 || e >= V) {
        err = "min_tokens: the EOS token id " + std::to_string(e) +
              " (config.json eos_token_id or the tokenizer's EOS) is outside the model's vocabulary [0, " + std::to_string(V) +
              "), so it cannot be held back";
        break;
      }
  if (err.empty() && p.structured_output) err = structured_output_error(p);
  return err;
}

void Engine::admit(RunState& rs, std::vector<EngineRequest>& requests) {
  const int64_t V = model_.config().vocab_size;
  rs.live.reserve(requests.size());
  int64_t next_id = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    auto L = std::make_unique<Live>();
    L->req = std::move(requests[r]);
    const SamplingParams& p = L->req.params;
    rs.outputs.add(L->req.request_id, L->req.prompt_text, L->req.prompt_ids, p);
    if (const std::string err = request_error(L->req); !err.empty()) {
      rs.outputs.fail(r, err);
      rs.live.push_back(std::move(L));
      continue;
    }
    const uint64_t base_seed = p.seed ? *p.seed : request_seed(opts_.seed, r);
    for (int k = 0; k < p.n; ++k) {
      auto c = std::make_unique<Completion>();
      c->seq.id = next_id++;
      c->seq.request = r;
      c->seq.completion = k;
      c->seq.tokens.assign(L->req.prompt_ids.begin(), L->req.prompt_ids.end());
      c->seq.prompt_len = static_cast<int64_t>(L->req.prompt_ids.size());
      c->seed = base_seed;
      if (p.structured_output) {  // compiled by request_error (cached): one matcher per completion
        c->matcher = std::make_unique<grammar::Matcher>(grammars_->get(*p.structured_output).grammar);
        c->mask.assign(static_cast<size_t>((V + 31) / 32), 0u);
      }
      L->comps.push_back(std::move(c));
    }
    rs.outputs.start(r);
    times_.prompt_tokens += static_cast<int64_t>(L->req.prompt_ids.size());
    rs.live.push_back(std::move(L));
  }
}

std::vector<RequestOutput> Engine::run(std::vector<EngineRequest> requests,
                                       const std::function<void(size_t, const RequestOutput&)>& on_finish) {
  const auto t_start = Clock::now();
  times_ = StepTimes{};
  cache::StateCache cache(model_.config(), model_.backend(), opts_.memory_budget_bytes);
  sched::Scheduler scheduler(opts_.sched, cache);
  runner::ModelRunner runner(batches_, cache);
  OutputProcessor outputs(tok_, eos_ids_, opts_.on_text, on_finish, t_start);
  RunState rs(scheduler, outputs);
  admit(rs, requests);
  for (auto& L : rs.live)
    for (auto& c : L->comps) scheduler.add(&c->seq);
  outputs.report_failed();
  while (scheduler.has_work())
    if (!step(rs, runner)) break;  // cannot happen: the scheduler always runs something
  times_.wall_s = since(t_start);
  return outputs.take();
}

bool Engine::step(RunState& rs, runner::ModelRunner& runner) {
  auto t0 = Clock::now();
  sched::StepPlan plan = rs.scheduler.schedule();
  times_.schedule_s += since(t0);
  if (plan.chunks.empty()) return false;
  times_.preemptions += plan.n_preempted;
  times_.computed_tokens += plan.n_tokens;
  ++times_.steps;

  t0 = Clock::now();
  const auto draw_on_backend = [&](const sched::Sequence& s) { return backend_draw(rs, s); };
  runner::StepOutput so = runner.run(plan, draw_on_backend);
  times_.model_s += since(t0);

  t0 = Clock::now();
  sample(rs, plan, so);
  times_.sample_s += since(t0);

  t0 = Clock::now();
  commit(rs, plan, so);
  times_.commit_s += since(t0);
  return true;
}

// A row the backend can draw: nothing changes its logits before the sampler's draw (no
// penalties, mask, pending min_tokens); its logprobs (of the raw row) come from there too. The
// uniform is the one the sampler would use for this token (the request's seed, output position
// and completion).
std::optional<kernels::DrawParams> Engine::backend_draw(const RunState& rs, const sched::Sequence& s) const {
  if (!opts_.sample_on_backend) return std::nullopt;
  const Live& L = *rs.live[s.request];
  const Completion& c = *L.comps[static_cast<size_t>(s.completion)];
  const SamplingParams& p = L.req.params;
  const auto generated = static_cast<int64_t>(rs.outputs.token_ids(s.request, s.completion).size());
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || c.matcher ||
      generated < p.min_tokens)
    return std::nullopt;
  return draw_params(p, c.seed, static_cast<uint64_t>(s.generated()), static_cast<uint64_t>(s.completion));
}

void Engine::sample(RunState& rs, const sched::StepPlan& plan, const runner::StepOutput& so) {
  const int64_t V = model_.config().vocab_size;
  // Rows the sampler draws (the rest came back as the backend's tokens).
  std::vector<size_t> drawn;
  for (size_t i = 0; i < so.sampled.size(); ++i)
    if (so.logits_row[i] >= 0) drawn.push_back(i);
  const size_t nd = drawn.size();
  rs.sreqs.assign(nd, {});
  rs.sres.assign(nd, {});
  for (size_t d = 0; d < nd; ++d) {
    const size_t i = drawn[d];
    const sched::Sequence& s = *plan.chunks[so.sampled[i]].seq;
    const Live& L = *rs.live[s.request];
    Completion& c = *L.comps[static_cast<size_t>(s.completion)];
    auto& sr = rs.sreqs[d];
    sr.logits = std::span<const float>(so.logits.data() + so.logits_row[i] * V, static_cast<size_t>(V));
    sr.params = &L.req.params;
    sr.seed = c.seed;
    sr.step = static_cast<uint64_t>(s.generated());
    sr.stream = static_cast<uint64_t>(s.completion);
    sr.prompt_ids = L.req.prompt_ids;
    sr.output_ids = rs.outputs.token_ids(s.request, s.completion);
    sr.eos_ids = eos_ids_;
    if (c.matcher) {
      c.matcher->fill_next_token_bitmask(c.mask);
      sr.allowed_bitmask = c.mask;
    }
  }
  // A NaN logit fails its request at commit (the sampler would read it as -inf and could
  // draw a token the grammar forbids, or token 0 from an all-NaN row).
  rs.nan_at.assign(nd, -1);
  for (size_t d = 0; d < nd; ++d) {
    const auto& l = rs.sreqs[d].logits;
    for (size_t j = 0; j < l.size(); ++j)
      if (std::isnan(l[j])) {
        rs.nan_at[d] = static_cast<int64_t>(j);
        break;
      }
  }
  sampler_.sample_batch(rs.sreqs, rs.sres, pool_.get());
}

// Request r fails while running: its output keeps what was generated, with `error`; its
// sequences leave the scheduler; the rest of the batch goes on.
void Engine::fail_request(RunState& rs, size_t r, const std::string& error) {
  Live& L = *rs.live[r];
  if (L.failed) return;
  L.failed = true;
  for (auto& c : L.comps) {
    if (c->ended) continue;
    c->ended = true;
    rs.scheduler.finish(&c->seq);
  }
  rs.outputs.fail_running(r, error);
}

void Engine::commit(RunState& rs, const sched::StepPlan& plan, const runner::StepOutput& so) {
  for (size_t i = 0, d = 0; i < so.sampled.size(); ++i) {
    sched::Sequence& s = *plan.chunks[so.sampled[i]].seq;
    Live& L = *rs.live[s.request];
    Completion& c = *L.comps[static_cast<size_t>(s.completion)];
    const size_t row = d;
    sample::SampleResult* drawn = so.logits_row[i] >= 0 ? &rs.sres[d++] : nullptr;
    if (L.failed) continue;  // an earlier row of this step failed the request
    const int64_t step = s.generated();
    const bool nan = drawn ? rs.nan_at[row] >= 0 : so.token[i] == kernels::kNoToken;
    if (nan) {
      const std::string where = drawn ? ", first at token id " + std::to_string(rs.nan_at[row])
                                      : ", or no finite value; drawn on the device";
      if (!nonfinite_weight_ && opts_.find_nonfinite_weight) nonfinite_weight_ = opts_.find_nonfinite_weight();
      const std::string found = nonfinite_weight_ && !nonfinite_weight_->empty()
                                    ? "; the checkpoint's tensor " + *nonfinite_weight_
                                    : "; check the checkpoint's weights (the output head 'head.weight' and the final "
                                      "norm 'norm.weight' first) for NaN or Inf values";
      fail_request(rs, s.request,
                   "NaN in the logits at step " + std::to_string(step) + " (completion " + std::to_string(s.completion) +
                       where + "): the model's output is not finite" + found);
      continue;
    }
    const int32_t tok = drawn ? drawn->token : so.token[i];
    // The mask allowed `tok`, so the matcher accepts it, unless no allowed token could be drawn
    // (every allowed logit -inf, or min_tokens holding EOS back where only EOS is allowed).
    if (c.matcher && !c.matcher->accept_token(tok)) {
      fail_request(rs, s.request,
                   "structured_output: at step " + std::to_string(step) + " (completion " + std::to_string(s.completion) +
                       ") no token the grammar allows could be chosen (the allowed tokens' logits are all -inf, or "
                       "min_tokens " + std::to_string(L.req.params.min_tokens) +
                       " holds EOS back where the grammar can only end)");
      continue;
    }
    std::optional<TokenLogprob> lp = drawn ? std::move(drawn->logprob) : backend_logprob(so, i, tok, L.req.params);
    s.tokens.push_back(tok);
    ++times_.generated_tokens;
    const bool grammar_done = c.matcher && (c.matcher->is_terminated() || c.matcher->is_completed());
    if (rs.outputs.commit(s.request, s.completion, tok, std::move(lp), grammar_done)) {
      c.ended = true;
      rs.scheduler.finish(&s);
    }
  }
}

}  // namespace deepinfer::engine
