#include "engine/output_processor.h"

#include <algorithm>

namespace deepinfer::engine {

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer* tok, std::vector<int32_t> eos_ids, OnText on_text,
                                 OnFinish on_finish, Clock::time_point t_start)
    : tok_(tok),
      eos_ids_(std::move(eos_ids)),
      on_text_(std::move(on_text)),
      on_finish_(std::move(on_finish)),
      t_start_(t_start) {}

void OutputProcessor::add(const std::string& request_id, const std::string& prompt_text,
                          const std::vector<int32_t>& prompt_ids, const SamplingParams& params) {
  Request& R = requests_.emplace_back();
  R.params = &params;
  R.out.request_id = request_id;
  R.out.prompt = prompt_text;
  R.out.prompt_token_ids = prompt_ids;
  R.out.metrics.arrival_s = 0;
}

void OutputProcessor::fail(size_t r, const std::string& error) {
  RequestOutput& out = requests_[r].out;
  out.error = error;
  out.finished = true;
  out.metrics.finish_s = now();
}

void OutputProcessor::fail_running(size_t r, const std::string& error) {
  Request& R = requests_[r];
  if (R.out.finished) return;
  R.out.error = error;
  for (auto& c : R.comps) {
    if (c.out.finish_reason == FinishReason::kNone) c.out.finish_reason = FinishReason::kError;
  }
  R.remaining = 0;
  R.out.finished = true;
  R.out.metrics.finish_s = now();
  for (auto& cc : R.comps) R.out.outputs.push_back(std::move(cc.out));
  if (on_finish_) on_finish_(r, R.out);
}

void OutputProcessor::report_failed() const {
  if (!on_finish_) return;
  for (size_t r = 0; r < requests_.size(); ++r)
    if (requests_[r].out.finished) on_finish_(r, requests_[r].out);
}

void OutputProcessor::start(size_t r) {
  Request& R = requests_[r];
  const SamplingParams& p = *R.params;
  R.comps.resize(static_cast<size_t>(p.n));
  for (int k = 0; k < p.n; ++k) {
    Completion& c = R.comps[static_cast<size_t>(k)];
    c.out.index = k;
    if (tok_) c.detok = std::make_unique<tokenizer::IncrementalDetokenizer>(*tok_, p.skip_special_tokens);
  }
  R.remaining = p.n;
}

const std::vector<int32_t>& OutputProcessor::token_ids(size_t r, int k) const {
  return requests_[r].comps[static_cast<size_t>(k)].out.token_ids;
}

bool OutputProcessor::commit(size_t r, int k, int32_t tok, std::optional<TokenLogprob> logprob, bool grammar_done) {
  Request& R = requests_[r];
  Completion& c = R.comps[static_cast<size_t>(k)];
  const SamplingParams& p = *R.params;
  if (c.out.token_ids.empty() && R.out.metrics.first_token_s == 0) R.out.metrics.first_token_s = now();
  c.out.token_ids.push_back(tok);
  if (logprob) c.out.logprobs.push_back(std::move(*logprob));
  // Text, then the stop conditions in vLLM's order: stop string, EOS / stop token, length (a
  // completed grammar before the length).
  const bool is_eos = !p.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end();
  const bool is_stop_tok = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end();
  bool ended = true;
  if (c.detok && !is_eos && append_text(r, k, c, p, tok)) {
    finish(r, k, c, FinishReason::kStop, c.out.stop_reason);
  } else if (is_eos || is_stop_tok) {
    finish(r, k, c, FinishReason::kStop, is_stop_tok ? std::to_string(tok) : "");
  } else if (grammar_done) {
    finish(r, k, c, FinishReason::kStop, "");
  } else if (c.out.token_ids.size() >= static_cast<size_t>(p.max_tokens)) {
    finish(r, k, c, FinishReason::kLength, "");
  } else {
    ended = false;
  }
  if (R.out.finished && on_finish_) on_finish_(r, R.out);
  return ended;
}

bool OutputProcessor::append_text(size_t r, int k, Completion& c, const SamplingParams& p, int32_t tok) {
  const size_t before = c.out.text.size();
  c.out.text += c.detok->push(tok);
  // Streamed text stays behind any partial stop string (at most max_stop - 1 bytes).
  size_t max_stop = 0;
  for (const auto& st : p.stop) max_stop = std::max(max_stop, st.size());
  bool stopped = false;
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
  if (on_text_) {
    size_t safe = c.out.text.size();
    if (!stopped && max_stop > 1) safe = safe >= max_stop - 1 ? safe - (max_stop - 1) : 0;
    if (safe > c.streamed) {
      on_text_(r, k, c.out.text.substr(c.streamed, safe - c.streamed));
      c.streamed = safe;
    }
  }
  return stopped;
}

void OutputProcessor::finish(size_t r, int k, Completion& c, FinishReason why, const std::string& stop_reason) {
  if (c.detok) {
    // Flush held-back bytes unless a stop string already cut the text.
    if (why != FinishReason::kStop || stop_reason.empty() || c.out.stop_reason.empty()) c.out.text += c.detok->flush();
  }
  c.out.finish_reason = why;
  if (!stop_reason.empty()) c.out.stop_reason = stop_reason;
  if (on_text_ && c.out.text.size() > c.streamed) {
    on_text_(r, k, c.out.text.substr(c.streamed));
    c.streamed = c.out.text.size();
  }
  Request& R = requests_[r];
  if (--R.remaining == 0) {
    R.out.finished = true;
    R.out.metrics.finish_s = now();
    for (auto& cc : R.comps) R.out.outputs.push_back(std::move(cc.out));
  }
}

std::vector<RequestOutput> OutputProcessor::take() {
  std::vector<RequestOutput> outs;
  outs.reserve(requests_.size());
  for (auto& R : requests_) outs.push_back(std::move(R.out));
  return outs;
}

}  // namespace deepinfer::engine
