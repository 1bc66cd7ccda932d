// OutputProcessor: the output side of the step loop — each request's RequestOutput, built as
// its completions' tokens are committed.
//
// Purpose: for every committed token it records the id and its logprobs, decodes the text
// incrementally (tokenizer::IncrementalDetokenizer), matches stop strings on that text (across
// token boundaries; the match and everything after it are cut), streams the newly decoded
// text (on_text), and ends the completion on the first of vLLM's stop conditions: a stop
// string, EOS or a stop token id, a completed grammar, max_tokens. A request is finished when
// its last completion ends: its outputs are gathered in completion order and on_finish is
// called. It decides nothing about which token comes next (the sampler and the grammar do) and
// frees nothing (commit() says when a completion ended; the engine tells the scheduler).
// Invariants: requests are added in order (the r-th add() is request r) and their params
// outlive the processor; the streamed text of a completion is always a prefix of its final
// text, held back by at most the longest stop string - 1 bytes until the completion ends; an
// EOS token (unless ignore_eos) adds no text; without a tokenizer there is no text (and stop
// strings were refused at admission).
// Threading: engine thread only; on_text and on_finish are called on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {

class OutputProcessor {
 public:
  using Clock = std::chrono::steady_clock;
  using OnText = std::function<void(size_t, int, const std::string&)>;     // (request, completion, text)
  using OnFinish = std::function<void(size_t, const RequestOutput&)>;      // (request, its output)

  // tok may be null (then no text). eos_ids: the engine's EOS ids. Metrics are in seconds since
  // t_start. on_text and on_finish may be empty.
  OutputProcessor(const tokenizer::Tokenizer* tok, std::vector<int32_t> eos_ids, OnText on_text, OnFinish on_finish,
                  Clock::time_point t_start);

  // Request r = the number of earlier add() calls: its id, prompt and prompt ids; params must
  // outlive the processor. No completion runs until start(r).
  void add(const std::string& request_id, const std::string& prompt_text, const std::vector<int32_t>& prompt_ids,
           const SamplingParams& params);
  // Request r failed before it ran (its error; finished, no outputs). on_finish is not called
  // here: report_failed() calls it for every such request, in request order.
  void fail(size_t r, const std::string& error);
  void report_failed() const;
  // Request r failed while it ran (its error): every completion still running ends with
  // finish reason kError, keeping what it generated; on_finish is called. No-op when r has
  // already finished.
  void fail_running(size_t r, const std::string& error);
  // Request r runs its params.n completions.
  void start(size_t r);

  // The tokens completion k of request r generated so far (its output ids).
  const std::vector<int32_t>& token_ids(size_t r, int k) const;
  // Appends tok (with its logprobs, when asked for) to completion k of request r: its text,
  // stop strings and streaming, then the stop conditions (grammar_done: the structured
  // output's grammar is complete). Returns true when the completion ended with this token.
  bool commit(size_t r, int k, int32_t tok, std::optional<TokenLogprob> logprob, bool grammar_done);

  // Every request's output, in request order (moved out; the processor is spent).
  std::vector<RequestOutput> take();

 private:
  struct Completion {  // one completion's output side
    std::unique_ptr<tokenizer::IncrementalDetokenizer> detok;  // null without a tokenizer
    CompletionOutput out;
    size_t streamed = 0;  // bytes of out.text already passed to on_text
  };
  struct Request {
    const SamplingParams* params = nullptr;
    RequestOutput out;
    std::vector<Completion> comps;
    int remaining = 0;  // completions still running
  };

  // Decodes tok into c's text, cuts it at a stop string, streams what is safe to stream.
  // Returns true when a stop string matched.
  bool append_text(size_t r, int k, Completion& c, const SamplingParams& p, int32_t tok);
  // Ends c (flushing held-back text unless a stop string cut it, streaming the rest); the
  // request finishes with its last completion.
  void finish(size_t r, int k, Completion& c, FinishReason why, const std::string& stop_reason);
  double now() const { return std::chrono::duration<double>(Clock::now() - t_start_).count(); }

  const tokenizer::Tokenizer* tok_;
  std::vector<int32_t> eos_ids_;
  OnText on_text_;
  OnFinish on_finish_;
  Clock::time_point t_start_;
  std::vector<Request> requests_;
};

}  // namespace deepinfer::engine
