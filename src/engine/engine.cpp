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
#include "sample/verify.h"

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
  std::vector<float> draft_probs;             // [seq.draft.size(), vocab]: a probabilistic draft's q
  bool ended = false;                         // finished (or its request failed)
};

// A token to commit and its logprobs.
struct Emitted {
  int32_t token = 0;
  std::optional<TokenLogprob> logprob;
};

// One sampled chunk's outcome: the kept drafts then the target's token, in commit order.
struct ChunkResult {
  std::vector<Emitted> tokens;
  int64_t accepted = 0;   // drafts kept (the first `accepted` of tokens)
  // Non-empty: the row after `tokens` had a NaN logit (or nothing finite), where it was found;
  // the request fails after those tokens.
  std::string nan_where;
};

struct Engine::Live {
  EngineRequest req;
  std::vector<std::unique_ptr<Completion>> comps;  // [params.n]; empty when the request failed
  bool failed = false;                             // failed while it ran (the others go on)
};

struct Engine::RunState {
  RunState(sched::Scheduler& s, cache::StateCache& c, OutputProcessor& o) : scheduler(s), cache(c), outputs(o) {}
  sched::Scheduler& scheduler;
  cache::StateCache& cache;
  OutputProcessor& outputs;
  std::vector<std::unique_ptr<Live>> live;  // [request]
  // The current step's (reused across steps). Per output row: the sampler's request (rows that
  // came back as logits), its output ids when they end with draft tokens, the first NaN logit's
  // id (or -1), the sampler's result.
  std::vector<sample::SampleRequest> sreqs;
  std::vector<std::vector<int32_t>> row_outputs;
  std::vector<std::vector<uint32_t>> row_masks;  // grammar masks of draft rows
  std::vector<int64_t> nan_at;
  std::vector<sample::SampleResult> sres;
  std::vector<ChunkResult> results;        // per sampled chunk
  std::vector<sched::Sequence*> drafted;   // sequences given a draft this step
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
  for (size_t j = so.top_at[i]; j < so.top_at[i + 1]; ++j)
    if (so.top_ids[j] >= 0) lp.top.emplace_back(so.top_ids[j], so.top_logprobs[j]);
  return lp;
}

}  // namespace

Engine::Engine(runner::BatchRunner& batches, const tokenizer::Tokenizer* tok, EngineOptions opts)
    : batches_(batches), model_(batches.model()), tok_(tok), opts_(opts), grammars_(opts_.grammars) {
  const int64_t k = opts_.speculative.num_speculative_tokens;
  if (opts_.speculative.drafter && (k < 1 || k > spec::kMaxDraftTokens))
    throw Error("speculative: num_speculative_tokens must be in [1, " + std::to_string(spec::kMaxDraftTokens) + "], got " +
                std::to_string(k));
  if (opts_.speculative.drafter && opts_.speculative.adaptive)
    step_cost_ = opts_.speculative.step_cost ? opts_.speculative.step_cost : std::make_shared<spec::MeasuredStepCost>();
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
  const int64_t k = opts_.speculative.drafter ? opts_.speculative.num_speculative_tokens : 0;
  times_.spec_accepted_hist.assign(static_cast<size_t>(k + 1), 0);
  times_.spec_chosen_hist.assign(static_cast<size_t>(k + 1), 0);
  cache::StateCache cache(model_.config(), model_.backend(), opts_.memory_budget_bytes, k, model_.dspark());
  sched::Scheduler scheduler(opts_.sched, cache);
  runner::ModelRunner runner(batches_, cache);
  OutputProcessor outputs(tok_, eos_ids_, opts_.on_text, on_finish, t_start);
  RunState rs(scheduler, cache, outputs);
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
  const int64_t drafting = propose_drafts(rs);
  const double draft_s = since(t0);
  times_.draft_s += draft_s;
  const int64_t drafted0 = times_.spec_drafted, accepted0 = times_.spec_accepted;

  t0 = Clock::now();
  sched::StepPlan plan = rs.scheduler.schedule();
  times_.schedule_s += since(t0);
  if (plan.chunks.empty()) return false;
  times_.preemptions += plan.n_preempted;
  times_.computed_tokens += plan.n_tokens;
  ++times_.steps;
  if (opts_.speculative.drafter)
    for (const sched::Sequence* s : plan.preempted) opts_.speculative.drafter->release(s->id);

  const auto t_run = Clock::now();
  const auto draw_on_backend = [&](const sched::Sequence& s, int64_t j) { return backend_draw(rs, s, j); };
  runner::StepOutput so = runner.run(plan, draw_on_backend);
  const double run_s = since(t_run);
  times_.model_s += run_s;

  t0 = Clock::now();
  sample(rs, plan, so);
  const double sample_s = since(t0);
  times_.sample_s += sample_s;
  // The step-time curve of adaptive verification: the work that grows with the step's rows.
  if (step_cost_) step_cost_->record(plan.n_tokens, run_s + sample_s);

  t0 = Clock::now();
  commit(rs, plan);
  for (sched::Sequence* s : rs.drafted) {
    s->draft.clear();
    rs.live[s->request]->comps[static_cast<size_t>(s->completion)]->draft_probs.clear();
  }
  rs.drafted.clear();
  times_.commit_s += since(t0);
  if (std::any_of(plan.chunks.begin(), plan.chunks.end(), [](const sched::ScheduledChunk& c) { return c.n_draft > 0; }))
    times_.verify_s += since(t_run);
  if (drafting > 0 && step_cost_ && opts_.speculative.skip_unpaid_rounds)
    gate_.record(drafting, draft_s, times_.spec_drafted - drafted0, times_.spec_accepted - accepted0);
  return true;
}

int64_t Engine::propose_drafts(RunState& rs) {
  const SpeculativeOptions& sp = opts_.speculative;
  if (!sp.drafter) return 0;
  const int64_t V = model_.config().vocab_size;
  std::vector<spec::DraftQuery> queries;
  int64_t decoding = 0;  // sequences whose next chunk is a decode (one row each)
  for (sched::Sequence* s : rs.scheduler.running()) {
    if (s->num_computed + 1 != static_cast<int64_t>(s->tokens.size())) continue;  // its next chunk is no decode
    const Live& L = *rs.live[s->request];
    const Completion& c = *L.comps[static_cast<size_t>(s->completion)];
    if (c.ended) continue;
    ++decoding;
    // A step emits the kept drafts and one token more: no draft past max_tokens.
    const int64_t k = std::min<int64_t>(sp.num_speculative_tokens, L.req.params.max_tokens - s->generated() - 1);
    if (k <= 0) continue;
    DI_CHECK(rs.cache.holds(s->id), "a decoding sequence without state");
    queries.push_back({.seq_id = s->id, .request = s->request, .completion = s->completion, .seed = c.seed,
                       .tokens = s->tokens, .prompt_len = s->prompt_len, .k = k, .params = &L.req.params,
                       .state = &rs.cache.acquire(s->id)});
    rs.drafted.push_back(s);
  }
  if (queries.empty()) return 0;
  // Adaptive: no draft round where the recent rounds' kept tokens do not pay for one.
  if (step_cost_ && sp.skip_unpaid_rounds && !gate_.draft(static_cast<int64_t>(queries.size()), decoding, *step_cost_)) {
    ++times_.spec_skipped_steps;
    rs.drafted.clear();
    return 0;
  }
  std::vector<spec::Draft> drafts(queries.size());
  sp.drafter->propose(queries, drafts);
  for (size_t i = 0; i < queries.size(); ++i) {
    const spec::Draft& d = drafts[i];
    DI_CHECK(static_cast<int64_t>(d.tokens.size()) <= queries[i].k, "the drafter proposed more tokens than asked for");
    DI_CHECK(d.probs.empty() || static_cast<int64_t>(d.probs.size()) == static_cast<int64_t>(d.tokens.size()) * V,
             "a probabilistic draft needs one distribution per token");
    DI_CHECK(d.confidence.empty() || d.confidence.size() == d.tokens.size(), "a draft's confidences need one per token");
    for (int64_t t : d.tokens) DI_CHECK(t >= 0 && t < V, "the drafter proposed a token outside the vocabulary");
  }
  // Adaptive verification: each draft with confidences cut to the length the schedule chooses
  // (those without are verified whole).
  int64_t confident = 0;
  if (step_cost_) {
    std::vector<size_t> with;
    std::vector<std::vector<float>> conf;
    for (size_t i = 0; i < drafts.size(); ++i)
      if (!drafts[i].confidence.empty()) {
        with.push_back(i);
        conf.push_back(drafts[i].confidence);
      }
    confident = static_cast<int64_t>(with.size());
    const std::vector<int64_t> k = spec::verify_lengths(conf, decoding, decoding, *step_cost_);
    for (size_t w = 0; w < with.size(); ++w) {
      spec::Draft& d = drafts[with[w]];
      const auto keep = static_cast<size_t>(k[w]);
      d.tokens.resize(keep);
      d.confidence.resize(keep);
      if (!d.probs.empty()) d.probs.resize(keep * static_cast<size_t>(V));
    }
  }
  for (size_t i = 0; i < queries.size(); ++i) {
    spec::Draft& d = drafts[i];
    sched::Sequence& s = *rs.drafted[i];
    ++times_.spec_chosen_hist[d.tokens.size()];
    s.draft = std::move(d.tokens);
    rs.live[s.request]->comps[static_cast<size_t>(s.completion)]->draft_probs = std::move(d.probs);
  }
  return confident;
}

// A row the backend can draw: nothing changes its logits before the sampler's draw (no
// penalties, mask, pending min_tokens) and no draft distribution is compared with them; its
// logprobs (of the raw row) come from there too. The uniform is the one the sampler would use
// for this token (the request's seed, output position and completion).
std::optional<kernels::DrawParams> Engine::backend_draw(const RunState& rs, const sched::Sequence& s, int64_t j) const {
  if (!opts_.sample_on_backend) return std::nullopt;
  const Live& L = *rs.live[s.request];
  const Completion& c = *L.comps[static_cast<size_t>(s.completion)];
  const SamplingParams& p = L.req.params;
  const auto generated = static_cast<int64_t>(rs.outputs.token_ids(s.request, s.completion).size());
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f || c.matcher ||
      generated < p.min_tokens || !c.draft_probs.empty())
    return std::nullopt;
  return draw_params(p, c.seed, static_cast<uint64_t>(s.generated() + j), static_cast<uint64_t>(s.completion));
}

void Engine::sample(RunState& rs, const sched::StepPlan& plan, const runner::StepOutput& so) {
  const int64_t V = model_.config().vocab_size;
  const size_t n_rows = so.token.size();
  rs.sreqs.assign(n_rows, {});
  rs.row_outputs.resize(n_rows);
  rs.row_masks.resize(n_rows);
  rs.nan_at.assign(n_rows, -1);
  rs.sres.assign(n_rows, {});
  // Rows that came back as logits: row j of a chunk is sampled as plain decoding samples its
  // position (its output ids end with the draft's first j tokens). The sampler draws those of
  // deterministic drafts (and of chunks without a draft) in one batch.
  std::vector<size_t> batch_rows;
  for (size_t i = 0; i < so.sampled.size(); ++i) {
    const sched::Sequence& s = *plan.chunks[so.sampled[i]].seq;
    const Live& L = *rs.live[s.request];
    Completion& c = *L.comps[static_cast<size_t>(s.completion)];
    const std::vector<int32_t>& out_ids = rs.outputs.token_ids(s.request, s.completion);
    // The grammar follows the draft to give each row its mask, then rolls back; past a draft
    // token the grammar refuses (or one that ends it), rows keep the last mask: the draw before
    // them cannot keep that draft, so they are never used.
    int advanced = 0;
    bool stuck = false;
    const uint32_t* last_mask = nullptr;
    for (size_t r = so.first[i], j = 0; r < so.first[i + 1]; ++r, ++j) {
      if (so.logits_row[r] < 0) continue;  // drawn on the backend
      auto& sr = rs.sreqs[r];
      sr.logits = std::span<const float>(so.logits.data() + so.logits_row[r] * V, static_cast<size_t>(V));
      sr.params = &L.req.params;
      sr.seed = c.seed;
      sr.step = static_cast<uint64_t>(s.generated()) + j;
      sr.stream = static_cast<uint64_t>(s.completion);
      sr.prompt_ids = L.req.prompt_ids;
      sr.output_ids = out_ids;
      if (j > 0) {
        std::vector<int32_t>& o = rs.row_outputs[r];
        o.assign(out_ids.begin(), out_ids.end());
        o.insert(o.end(), s.draft.begin(), s.draft.begin() + static_cast<int64_t>(j));
        sr.output_ids = o;
      }
      sr.eos_ids = eos_ids_;
      if (c.matcher) {
        std::vector<uint32_t>& m = j == 0 ? c.mask : rs.row_masks[r];
        m.resize(c.mask.size());
        if (stuck) {
          std::copy(last_mask, last_mask + m.size(), m.begin());
        } else {
          c.matcher->fill_next_token_bitmask(m);
          if (static_cast<int64_t>(j) < plan.chunks[so.sampled[i]].n_draft) {
            stuck = !c.matcher->accept_token(static_cast<int32_t>(s.draft[j]));
            advanced += !stuck;
            stuck = stuck || c.matcher->is_terminated();
          }
        }
        last_mask = m.data();
        sr.allowed_bitmask = m;
      }
      // A NaN logit fails its request at commit (the sampler would read it as -inf and could
      // draw a token the grammar forbids, or token 0 from an all-NaN row).
      for (size_t t = 0; t < sr.logits.size(); ++t)
        if (std::isnan(sr.logits[t])) {
          rs.nan_at[r] = static_cast<int64_t>(t);
          break;
        }
      if (c.draft_probs.empty()) batch_rows.push_back(r);
    }
    if (advanced > 0) c.matcher->rollback(advanced);
  }
  std::vector<sample::SampleRequest> batch(batch_rows.size());
  std::vector<sample::SampleResult> drawn(batch_rows.size());
  for (size_t d = 0; d < batch_rows.size(); ++d) batch[d] = rs.sreqs[batch_rows[d]];
  sampler_.sample_batch(batch, drawn, pool_.get());
  for (size_t d = 0; d < batch_rows.size(); ++d) rs.sres[batch_rows[d]] = std::move(drawn[d]);
  rs.results.assign(so.sampled.size(), {});
  for (size_t i = 0; i < so.sampled.size(); ++i) verify(rs, plan.chunks[so.sampled[i]], so, i);
}

// Chunk i's tokens: the drafts the verification keeps (deterministic drafts, or none: while they
// equal the rows' draws; probabilistic ones: the rejection rule), then the target's token; a
// row with a NaN logit among those the verification read ends them.
void Engine::verify(RunState& rs, const sched::ScheduledChunk& ch, const runner::StepOutput& so, size_t i) {
  const sched::Sequence& s = *ch.seq;
  const Completion& c = *rs.live[s.request]->comps[static_cast<size_t>(s.completion)];
  const SamplingParams& p = rs.live[s.request]->req.params;
  const size_t f = so.first[i], n = static_cast<size_t>(ch.n_draft);
  const std::span<const int64_t> draft(s.draft.data(), n);
  const bool probabilistic = !c.draft_probs.empty();
  sample::Verdict v;
  if (probabilistic) {
    const auto V = static_cast<size_t>(model_.config().vocab_size);
    v = sample::verify_probabilistic(sampler_, std::span<const sample::SampleRequest>(rs.sreqs.data() + f, n + 1), draft,
                                     std::span<const float>(c.draft_probs.data(), n * V));
  } else {
    std::vector<int32_t> drawn(n + 1);
    for (size_t j = 0; j <= n; ++j) drawn[j] = so.logits_row[f + j] >= 0 ? rs.sres[f + j].token : so.token[f + j];
    v.accepted = sample::accepted_prefix(draft, drawn);
    v.token = drawn[static_cast<size_t>(v.accepted)];
  }
  ChunkResult& res = rs.results[i];
  res.accepted = v.accepted;
  for (size_t j = 0, r = f; j <= static_cast<size_t>(v.accepted); ++j, ++r) {
    const bool host = so.logits_row[r] >= 0;
    if (host && rs.nan_at[r] >= 0) res.nan_where = ", first at token id " + std::to_string(rs.nan_at[r]);
    if (!host && so.token[r] == kernels::kNoToken) res.nan_where = ", or no finite value; drawn on the device";
    if (!res.nan_where.empty()) {
      res.accepted = static_cast<int64_t>(j);
      return;
    }
    const int32_t tok = static_cast<int64_t>(j) < v.accepted ? static_cast<int32_t>(draft[j]) : v.token;
    std::optional<TokenLogprob> lp = probabilistic ? sampler_.logprob(rs.sreqs[r], tok)
                                     : host        ? std::move(rs.sres[r].logprob)
                                                   : backend_logprob(so, r, tok, p);
    res.tokens.push_back({tok, std::move(lp)});
  }
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
    if (opts_.speculative.drafter) opts_.speculative.drafter->release(c->seq.id);
  }
  rs.outputs.fail_running(r, error);
}

void Engine::commit(RunState& rs, const sched::StepPlan& plan) {
  const std::shared_ptr<spec::Drafter>& drafter = opts_.speculative.drafter;
  for (size_t i = 0, k = 0; i < plan.chunks.size(); ++i) {
    const sched::ScheduledChunk& ch = plan.chunks[i];
    if (!ch.sample) continue;
    ChunkResult& res = rs.results[k++];
    sched::Sequence& s = *ch.seq;
    Live& L = *rs.live[s.request];
    Completion& c = *L.comps[static_cast<size_t>(s.completion)];
    if (ch.n_draft > 0) {
      ++times_.spec_rounds;
      times_.spec_drafted += ch.n_draft;
      times_.spec_accepted += res.accepted;
      ++times_.spec_accepted_hist[static_cast<size_t>(res.accepted)];
    }
    if (L.failed) continue;  // an earlier row of this step failed the request
    bool ended = false;
    for (Emitted& e : res.tokens) {
      const int32_t tok = e.token;
      const int64_t step = s.generated();
      // The mask allowed `tok`, so the matcher accepts it, unless no allowed token could be drawn
      // (every allowed logit -inf, or min_tokens holding EOS back where only EOS is allowed).
      if (c.matcher && !c.matcher->accept_token(tok)) {
        fail_request(rs, s.request,
                     "structured_output: at step " + std::to_string(step) + " (completion " + std::to_string(s.completion) +
                         ") no token the grammar allows could be chosen (the allowed tokens' logits are all -inf, or "
                         "min_tokens " + std::to_string(L.req.params.min_tokens) +
                         " holds EOS back where the grammar can only end)");
        ended = true;
        break;
      }
      s.tokens.push_back(tok);
      ++times_.generated_tokens;
      const bool grammar_done = c.matcher && (c.matcher->is_terminated() || c.matcher->is_completed());
      if (rs.outputs.commit(s.request, s.completion, tok, std::move(e.logprob), grammar_done)) {
        c.ended = true;
        rs.scheduler.finish(&s);
        if (drafter) drafter->release(s.id);
        ended = true;
        break;
      }
    }
    if (!ended && !res.nan_where.empty()) {
      if (!nonfinite_weight_ && opts_.find_nonfinite_weight) nonfinite_weight_ = opts_.find_nonfinite_weight();
      const std::string found = nonfinite_weight_ && !nonfinite_weight_->empty()
                                    ? "; the checkpoint's tensor " + *nonfinite_weight_
                                    : "; check the checkpoint's weights (the output head 'head.weight' and the final "
                                      "norm 'norm.weight' first) for NaN or Inf values";
      fail_request(rs, s.request,
                   "NaN in the logits at step " + std::to_string(s.generated()) + " (completion " +
                       std::to_string(s.completion) + res.nan_where + "): the model's output is not finite" + found);
      ended = true;
    }
    if (ended || ch.n_draft == 0) continue;
    // The kept drafts' rows are now computed tokens; the rejected ones' leave the state.
    rs.cache.rollback(s.id, ch.n_draft - res.accepted);
    s.num_computed += res.accepted;
    if (drafter) drafter->verified(s.id, ch.n_draft, res.accepted);
  }
}

}  // namespace deepinfer::engine
