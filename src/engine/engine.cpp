#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "grammar/grammar_cache.h"
#include "grammar/matcher.h"
#include "runner/model_runner.h"
#include "sample/rng.h"
#include "tokenizer/detokenizer.h"

namespace deepinfer::engine {

static_assert(kernels::kDrawGreedyTemperature == sample::kGreedyTemperature, "one greedy threshold");

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

// One completion's text state: incremental detokenizer and stop-string scanning.
struct Completion {
  sched::Sequence seq;
  uint64_t seed = 0;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detok;
  CompletionOutput out;
  size_t streamed = 0;  // bytes of out.text already passed to on_text
  bool done = false;
  std::unique_ptr<grammar::Matcher> matcher;  // structured output only
  std::vector<uint32_t> mask;                 // [ceil(vocab / 32)] u32: the next token's allowed ids
};

struct Engine::Live {
  EngineRequest req;
  RequestOutput out;
  std::vector<std::unique_ptr<Completion>> comps;
  int remaining = 0;
};

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
  if (!grammars_) {
    std::vector<int32_t> stops;  // the engine's EOS ids that the tokenizer knows
    for (int32_t e : eos_ids_)
      if (e >= 0 && e < tok_->vocab_size()) stops.push_back(e);
    grammars_ = std::make_shared<grammar::GrammarCache>(grammar::Vocabulary::from_tokenizer(*tok_, stops));
  }
  auto r = grammars_->get(*p.structured_output, pool_.get());
  return r.grammar ? std::string() : "structured_output: " + r.error;
}

std::vector<RequestOutput> Engine::run(std::vector<EngineRequest> requests,
                                       const std::function<void(size_t, const RequestOutput&)>& on_finish) {
  const auto t_start = Clock::now();
  times_ = StepTimes{};
  const int64_t V = model_.config().vocab_size;
  cache::StateCache cache(model_.config(), model_.backend(), opts_.memory_budget_bytes);
  sched::Scheduler scheduler(opts_.sched, cache);
  runner::ModelRunner runner(batches_, cache);
  std::vector<std::unique_ptr<Live>> live;
  live.reserve(requests.size());
  int64_t next_id = 0;

  auto fail = [&](Live& L, const std::string& msg) {
    L.out.error = msg;
    L.out.finished = true;
    L.out.metrics.finish_s = since(t_start);
  };
  for (size_t r = 0; r < requests.size(); ++r) {
    auto L = std::make_unique<Live>();
    L->req = std::move(requests[r]);
    L->out.request_id = L->req.request_id;
    L->out.prompt = L->req.prompt_text;
    L->out.prompt_token_ids = L->req.prompt_ids;
    L->out.metrics.arrival_s = 0;
    const SamplingParams& p = L->req.params;
    std::string err = L->req.error;
    if (err.empty()) err = validate(p, V);
    if (err.empty() && L->req.prompt_ids.empty()) err = "prompt: empty (at least one token is needed)";
    if (err.empty())
      for (size_t i = 0; i < L->req.prompt_ids.size(); ++i)
        if (L->req.prompt_ids[i] < 0 || L->req.prompt_ids[i] >= V) {
          err = "prompt_token_ids[" + std::to_string(i) + "]: token id " + std::to_string(L->req.prompt_ids[i]) +
                " is outside the vocabulary [0, " + std::to_string(V) + ")";
          break;
        }
    if (err.empty() && !tok_ && !p.stop.empty()) err = "stop: stop strings need a tokenizer (the model has no tokenizer.json)";
    if (err.empty() && p.structured_output) err = structured_output_error(p);
    if (!err.empty()) {
      fail(*L, err);
      live.push_back(std::move(L));
      continue;
    }
    const uint64_t base_seed = p.seed ? *p.seed : core::splitmix64(opts_.seed ^ core::splitmix64(r + 1));
    for (int k = 0; k < p.n; ++k) {
      auto c = std::make_unique<Completion>();
      c->seq.id = next_id++;
      c->seq.request = r;
      c->seq.completion = k;
      c->seq.tokens.assign(L->req.prompt_ids.begin(), L->req.prompt_ids.end());
      c->seq.prompt_len = static_cast<int64_t>(L->req.prompt_ids.size());
      c->seed = base_seed;
      c->out.index = k;
      if (tok_) c->detok = std::make_unique<tokenizer::IncrementalDetokenizer>(*tok_, p.skip_special_tokens);
      if (p.structured_output) {  // compiled above (cached): one matcher per completion
        c->matcher = std::make_unique<grammar::Matcher>(grammars_->get(*p.structured_output).grammar);
        c->mask.assign(static_cast<size_t>((V + 31) / 32), 0u);
      }
      L->comps.push_back(std::move(c));
    }
    L->remaining = p.n;
    times_.prompt_tokens += static_cast<int64_t>(L->req.prompt_ids.size());
    live.push_back(std::move(L));
  }
  for (auto& L : live)
    for (auto& c : L->comps) scheduler.add(&c->seq);
  for (size_t r = 0; r < live.size(); ++r)
    if (live[r]->out.finished && on_finish) on_finish(r, live[r]->out);

  auto finish_completion = [&](Live& L, Completion& c, FinishReason why, const std::string& stop_reason) {
    c.done = true;
    if (c.detok) {
      // Flush held-back bytes unless a stop string already cut the text.
      if (why != FinishReason::kStop || stop_reason.empty() || c.out.stop_reason.empty()) c.out.text += c.detok->flush();
    }
    c.out.finish_reason = why;
    if (!stop_reason.empty()) c.out.stop_reason = stop_reason;
    if (opts_.on_text && c.out.text.size() > c.streamed) {
      opts_.on_text(c.seq.request, c.seq.completion, c.out.text.substr(c.streamed));
      c.streamed = c.out.text.size();
    }
    scheduler.finish(&c.seq);
    if (--L.remaining == 0) {
      L.out.finished = true;
      L.out.metrics.finish_s = since(t_start);
      for (auto& cc : L.comps) L.out.outputs.push_back(std::move(cc->out));
    }
  };

  // A row the backend can draw: nothing changes its logits before the sampler's draw (no
  // penalties, mask, pending min_tokens); its logprobs (of the raw row) come from there too. The
  // uniform is the one the sampler would use for this token (the request's seed, output position
  // and completion).
  const auto draw_on_backend = [&](const sched::Sequence& s) -> std::optional<kernels::DrawParams> {
    if (!opts_.sample_on_backend) return std::nullopt;
    const Live& L = *live[s.request];
    const Completion& c = *L.comps[static_cast<size_t>(s.completion)];
    const SamplingParams& p = L.req.params;
    if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
        c.matcher || static_cast<int64_t>(c.out.token_ids.size()) < p.min_tokens)
      return std::nullopt;
    return draw_params(p, c.seed, static_cast<uint64_t>(s.generated()), static_cast<uint64_t>(s.completion));
  };
  std::vector<sample::SampleRequest> sreqs;
  std::vector<sample::SampleResult> sres;
  std::vector<std::vector<int32_t>> prompt32, output32;
  while (scheduler.has_work()) {
    auto t0 = Clock::now();
    sched::StepPlan plan = scheduler.schedule();
    times_.schedule_s += since(t0);
    if (plan.chunks.empty()) break;  // cannot happen: the scheduler always runs something
    times_.preemptions += plan.n_preempted;
    times_.computed_tokens += plan.n_tokens;
    ++times_.steps;

    t0 = Clock::now();
    runner::StepOutput so = runner.run(plan, draw_on_backend);
    times_.model_s += since(t0);

    t0 = Clock::now();
    const size_t m = so.sampled.size();
    // Rows the sampler draws (the rest came back as the backend's tokens).
    std::vector<size_t> drawn;
    for (size_t i = 0; i < m; ++i)
      if (so.token[i] < 0) drawn.push_back(i);
    const size_t nd = drawn.size();
    sreqs.assign(nd, {});
    sres.assign(nd, {});
    prompt32.resize(nd);
    output32.resize(nd);
    for (size_t d = 0; d < nd; ++d) {
      const size_t i = drawn[d];
      const sched::Sequence& s = *plan.chunks[so.sampled[i]].seq;
      Live& L = *live[s.request];
      Completion& c = *L.comps[static_cast<size_t>(s.completion)];
      output32[d].assign(c.out.token_ids.begin(), c.out.token_ids.end());
      auto& sr = sreqs[d];
      sr.logits = std::span<const float>(so.logits.data() + so.logits_row[i] * V, static_cast<size_t>(V));
      sr.params = &L.req.params;
      sr.seed = c.seed;
      sr.step = static_cast<uint64_t>(s.generated());
      sr.stream = static_cast<uint64_t>(s.completion);
      sr.prompt_ids = L.req.prompt_ids;
      sr.output_ids = output32[d];
      sr.eos_ids = eos_ids_;
      if (c.matcher) {
        c.matcher->fill_next_token_bitmask(c.mask);
        sr.allowed_bitmask = c.mask;
      }
    }
    sampler_.sample_batch(sreqs, sres, pool_.get());
    times_.sample_s += since(t0);

    t0 = Clock::now();
    for (size_t i = 0, d = 0; i < m; ++i) {
      sched::Sequence& s = *plan.chunks[so.sampled[i]].seq;
      Live& L = *live[s.request];
      Completion& c = *L.comps[static_cast<size_t>(s.completion)];
      const SamplingParams& p = L.req.params;
      const sample::SampleResult* drawn_r = so.token[i] < 0 ? &sres[d++] : nullptr;
      const int32_t tok = drawn_r ? drawn_r->token : so.token[i];
      if (c.out.token_ids.empty() && L.out.metrics.first_token_s == 0) L.out.metrics.first_token_s = since(t_start);
      c.out.token_ids.push_back(tok);
      if (drawn_r && drawn_r->logprob) {
        c.out.logprobs.push_back(*drawn_r->logprob);
      } else if (!drawn_r && p.logprobs) {  // drawn on the backend with its logprobs
        TokenLogprob lp;
        lp.token_id = tok;
        lp.logprob = so.logprob[i];
        for (size_t j = 0; j < so.top_ids[i].size(); ++j)
          if (so.top_ids[i][j] >= 0) lp.top.emplace_back(so.top_ids[i][j], so.top_logprobs[i][j]);
        c.out.logprobs.push_back(std::move(lp));
      }
      s.tokens.push_back(tok);
      ++times_.generated_tokens;
      // The mask allowed `tok`, so the matcher accepts it (EOS only where the grammar can end).
      if (c.matcher) DI_CHECK(c.matcher->accept_token(tok), "structured output: a masked-in token was rejected");
      // Text, then the stop conditions in vLLM's order: EOS / stop token, stop string, length.
      bool stopped = false;
      const bool is_eos = !p.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end();
      const bool is_stop_tok = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
      if (c.detok && !is_eos) {
        const size_t before = c.out.text.size();
        c.out.text += c.detok->push(tok);
        // Streamed text stays behind any partial stop string (at most max_stop - 1 bytes).
        size_t max_stop = 0;
        for (const auto& st : p.stop) max_stop = std::max(max_stop, st.size());
        if (!p.stop.empty() && c.out.text.size() > before) {
          const size_t from = before >= max_stop ? before - max_stop + 1 : 0;
          size_t best = std::string::npos;
          std::string which;
          for (const auto& st : p.stop) {
            const size_t at = c.out.text.find(st, from);
            if (at != std::string::npos && at < best) {
              best = at;
              which = st;
            }
          }
          if (best != std::string::npos) {
            c.out.text.resize(best);
            c.out.stop_reason = which;
            stopped = true;
          }
        }
        if (opts_.on_text) {
          size_t safe = c.out.text.size();
          if (!stopped && max_stop > 1) safe = safe >= max_stop - 1 ? safe - (max_stop - 1) : 0;
          if (safe > c.streamed) {
            opts_.on_text(s.request, s.completion, c.out.text.substr(c.streamed, safe - c.streamed));
            c.streamed = safe;
          }
        }
        if (stopped) finish_completion(L, c, FinishReason::kStop, c.out.stop_reason);
      }
      if (stopped) {
      } else if (is_eos || is_stop_tok) {
        finish_completion(L, c, FinishReason::kStop, is_stop_tok ? std::to_string(tok) : "");
      } else if (c.matcher && (c.matcher->is_terminated() || c.matcher->is_completed())) {
        finish_completion(L, c, FinishReason::kStop, "");  // the grammar is complete
      } else if (c.out.token_ids.size() >= static_cast<size_t>(p.max_tokens)) {
        finish_completion(L, c, FinishReason::kLength, "");
      }
      if (L.out.finished && on_finish) on_finish(s.request, L.out);
    }
    times_.commit_s += since(t0);
  }
  times_.wall_s = since(t_start);
  std::vector<RequestOutput> outs;
  outs.reserve(live.size());
  for (auto& L : live) outs.push_back(std::move(L->out));
  return outs;
}

}  // namespace deepinfer::engine
