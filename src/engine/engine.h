// Engine: the offline step loop — schedule, run, sample, commit — until every request ends.
//
// Purpose: turns requests (prompt ids + SamplingParams) into RequestOutputs. Each step
// (step()) the scheduler picks chunks under the token and memory budgets, the runner runs them
// as one batched forward, the sampler draws the next token of every sequence whose chunk
// reached its end (or the backend drew it), and commit appends it to the sequence and its
// grammar and hands it to the OutputProcessor (engine/output_processor.h), which builds the
// text, streams it and says when the completion ends (EOS, a stop token, a stop string, a
// completed grammar or max_tokens); the engine then frees the sequence. A request that is
// invalid fails alone with a message.
// Invariants: a sequence's tokens depend only on its prompt, its params and its seed — not on
// the batch, the chunking, the step budget or preemption (batch-invariant forward, counter-based
// sampling keyed by (seed, position, completion)).
// Speculative decoding (EngineOptions.speculative with a drafter): before each step the drafter
// proposes up to K tokens for every decoding sequence, adaptive verification cuts each draft to
// the length its confidences and the step-time curve pay for (spec/verify_schedule.h; the curve
// learns from every step's rows and time); the scheduler fits them into the step;
// the target runs each sequence's last token and its draft as one chunk; the sampler verifies
// the draft (sample/verify.h) row by row, each row sampled as plain decoding would sample that
// position; commit hands the kept tokens and the target's next token to the output processor
// one by one (so any stop condition may land inside the block) and rolls the rejected rows
// back (cache::StateCache::rollback). Deterministic drafts leave every output token, logprob
// and seeded draw exactly those of decoding without speculation.
// Threading: run() from one thread; the backend and the sampler parallelise inside.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/state_cache.h"
#include "core/thread_pool.h"
#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
#include "model/deepseek_v41.h"
#include "runner/batch_runner.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "spec/drafter.h"
#include "spec/verify_schedule.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {
class GrammarCache;
}
namespace deepinfer::runner {
class ModelRunner;
struct StepOutput;
}

namespace deepinfer::engine {

// The seed of request `index` (0-based, in run order) of a run whose params give none.
uint64_t request_seed(uint64_t engine_seed, uint64_t index);

// Speculative decoding: a drafter and how many tokens each sequence verifies per step.
struct SpeculativeOptions {
  std::shared_ptr<spec::Drafter> drafter;  // null: no speculation
  int64_t num_speculative_tokens = 0;      // K, 1..spec::kMaxDraftTokens (0: no speculation)
  // Confidence-scheduled verification (spec/verify_schedule.h): each sequence verifies the
  // prefix of its draft that spec::verify_lengths chooses from the drafter's confidences and the
  // step-time curve (drafts without confidences are verified whole). false: every draft whole.
  bool adaptive = true;
  // Adaptive: a step drafts nothing when the recent rounds' kept tokens do not pay for a draft
  // round (spec::DraftGate; learnt from drafts with confidences only). false: every step drafts.
  bool skip_unpaid_rounds = true;
  // The step-time curve; null: one measured online (spec::MeasuredStepCost) for this engine.
  // The engine records every step's rows and time (forward and sampling) into it.
  std::shared_ptr<spec::StepCost> step_cost = nullptr;
};

// The backend's draw for params (temperature, top-k, top-p, min-p, logprobs; the rest must not
// apply) and the uniform the sampler would use for (seed, step, stream): kernels::DrawParams.
kernels::DrawParams draw_params(const SamplingParams& p, uint64_t seed, uint64_t step, uint64_t stream);

struct EngineOptions {
  sched::SchedulerConfig sched;
  int64_t memory_budget_bytes = 0;  // state cache budget; <= 0 unlimited
  uint64_t seed = 0;                // seed of requests whose params have none
  int sampler_threads = 1;
  // Rows with nothing to apply before the draw (no penalties, structured output or pending
  // min_tokens) are drawn on the backend (kernels::DrawParams: greedy, temperature, top-k,
  // top-p, min-p, with the request's seeded uniform from the host): only the token and the
  // requested logprobs come back, no logits row. The CPU backend draws exactly the sampler's
  // token; CUDA sums in another fixed order (a token can differ only where a sum lands within
  // rounding of a threshold). false: every row through the sampler.
  bool sample_on_backend = true;
  SpeculativeOptions speculative;
  // Optional: each completion's newly decoded text as it is generated (request, completion, text).
  std::function<void(size_t, int, const std::string&)> on_text;
  // Optional: compiled structured-output grammars shared across runs (created on first use).
  std::shared_ptr<grammar::GrammarCache> grammars;
  // Optional: where the weights hold a value that is not finite ("" if nowhere it can look), for
  // the message of a request whose logits hold a NaN; called once, on the first such request.
  std::function<std::string()> find_nonfinite_weight;
};

struct EngineRequest {
  std::string request_id;
  std::string prompt_text;              // shown in the output; "" for id prompts
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  std::string error;                    // pre-failed (e.g. the prompt could not be encoded)
};

struct StepTimes {
  double schedule_s = 0, model_s = 0, sample_s = 0, commit_s = 0, draft_s = 0;
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, preemptions = 0, computed_tokens = 0;
  // Speculative decoding: chunks that verified a draft, their draft tokens, those kept, and
  // how many rounds kept j drafts ([j], j = 0..K); how often a drafting sequence was given k
  // drafts to verify ([k], k = 0..K: the adaptive choice, or the whole draft); the time of the
  // steps that verified a draft (their forward, sampling and commit: draft_s is the drafter's).
  int64_t spec_rounds = 0, spec_drafted = 0, spec_accepted = 0;
  std::vector<int64_t> spec_accepted_hist, spec_chosen_hist;
  int64_t spec_skipped_steps = 0;  // steps with decoding sequences whose draft round the gate skipped
  double verify_s = 0;
  double wall_s = 0;
};

class Engine {
 public:
  // tok may be null (then outputs have no text and stop strings are an error). The runner
  // (and its model) outlive the engine; its graphs stay with it across engines.
  Engine(runner::BatchRunner& batches, const tokenizer::Tokenizer* tok, EngineOptions opts);
  ~Engine();

  // Runs every request to completion; outputs in request order. on_finish (optional) is
  // called as each request ends (e.g. to stream results or show progress).
  std::vector<RequestOutput> run(std::vector<EngineRequest> requests,
                                 const std::function<void(size_t, const RequestOutput&)>& on_finish = nullptr);
  const StepTimes& times() const { return times_; }
  // Structured-output grammars compiled so far (one per distinct source, across runs).
  int64_t grammar_compiles() const;
  // The grammar cache (null until a structured request came), to share with a later engine.
  std::shared_ptr<grammar::GrammarCache> grammar_cache() const { return grammars_; }

 private:
  struct Live;      // per-request running state
  struct RunState;  // one run()'s requests, scheduler and output processor

  // The request's compiled grammar, or "" with an error message (structured outputs only).
  std::string structured_output_error(const SamplingParams& p);
  // "" when the request can run, else why not (its own error, params, prompt ids, stop strings
  // without a tokenizer, a grammar that does not compile).
  std::string request_error(const EngineRequest& req);
  // Every request into rs.live (and the output processor), in order; each valid one gets its
  // params.n sequences, seeds and grammar matchers.
  void admit(RunState& rs, std::vector<EngineRequest>& requests);
  // One step: draft -> schedule -> run -> sample -> commit. False when the scheduler had nothing
  // to run.
  bool step(RunState& rs, runner::ModelRunner& runner);
  // Speculative decoding: a draft for every running sequence whose next chunk is a decode
  // (adaptive: unless the gate skips this step's round). Returns the sequences whose drafts had
  // confidences (adaptive only: what the gate learns from).
  int64_t propose_drafts(RunState& rs);
  // How the backend draws the token after s's row j (0: its last token, j: its j-th draft), or
  // nullopt for the row's logits (sampled on the host).
  std::optional<kernels::DrawParams> backend_draw(const RunState& rs, const sched::Sequence& s, int64_t j) const;
  // Every sampled chunk's tokens (rs.results): the rows that came back as logits through the
  // sampler, then the draft's verification.
  void sample(RunState& rs, const sched::StepPlan& plan, const runner::StepOutput& so);
  // Sampled chunk i's tokens to commit: the draft's kept tokens, then the target's.
  void verify(RunState& rs, const sched::ScheduledChunk& ch, const runner::StepOutput& so, size_t i);
  void fail_request(RunState& rs, size_t r, const std::string& error);
  // Each sampled chunk's tokens onto its sequence and grammar, then through the output
  // processor; a completion that ended leaves the scheduler, one that goes on drops the rows of
  // its rejected drafts.
  void commit(RunState& rs, const sched::StepPlan& plan);

  runner::BatchRunner& batches_;
  model::DeepseekV41& model_;
  const tokenizer::Tokenizer* tok_;
  EngineOptions opts_;
  sample::Sampler sampler_;
  std::unique_ptr<core::ThreadPool> pool_;
  StepTimes times_;
  spec::DraftGate gate_;  // adaptive verification: whether a step drafts at all
  std::vector<int32_t> eos_ids_;
  std::optional<std::string> nonfinite_weight_;  // find_nonfinite_weight's answer, once asked
  std::shared_ptr<grammar::GrammarCache> grammars_;  // created on the first structured request
  std::shared_ptr<spec::StepCost> step_cost_;        // adaptive verification's curve
};

}  // namespace deepinfer::engine
