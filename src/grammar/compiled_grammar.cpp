#include "grammar/compiled_grammar.h"

#include <atomic>
#include <chrono>

#include "core/thread_pool.h"

namespace deepinfer::grammar {
namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& g, std::shared_ptr<const Vocabulary> vocab,
                                                                const CompileOptions& opts, core::ThreadPool* pool) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<CompiledGrammar> cg(new CompiledGrammar());
  BuildOptions bo;
  bo.max_token_bytes = vocab->max_token_bytes();
  bo.inline_budget = opts.inline_budget;
  bo.max_nfa_states = opts.max_nfa_states;
  bo.max_dfa_states = opts.max_dfa_states;
  cg->tables_ = build_pda(g, bo);
  cg->vocab_ = std::move(vocab);
  cg->opts_ = opts;
  const auto n_cls = static_cast<size_t>(cg->tables_.n_mask_classes());
  cg->once_ = std::make_unique<std::once_flag[]>(n_cls);
  cg->entries_.resize(n_cls);
  auto& s = cg->stats_;
  const auto& t = cg->tables_;
  s.n_rules = static_cast<int32_t>(t.rules.size());
  s.n_inlined_rules = t.n_inlined_rules;
  s.n_states = t.n_states;
  s.n_byte_classes = t.n_classes;
  s.n_mask_classes = t.n_mask_classes();
  s.table_bytes = t.next.size() * 4 + t.calls.size() * sizeof(PdaCall) + static_cast<size_t>(t.n_states) * 64;
  s.build_ms = ms_since(t0);
  if (opts.precompute) {
    auto t1 = std::chrono::steady_clock::now();
    cg->precompute(pool);
    s.precompute_ms = ms_since(t1);
  }
  return cg;
}

const MaskEntry& CompiledGrammar::mask_entry(int32_t state) const {
  const auto c = static_cast<size_t>(tables_.mask_class[static_cast<size_t>(state)]);
  std::call_once(once_[c], [&] {
    entries_[c] = std::make_unique<MaskEntry>(
        compute_mask_entry(tables_, *vocab_, tables_.class_rep[c], opts_.max_tag_depth));
  });
  return *entries_[c];
}

void CompiledGrammar::precompute(core::ThreadPool* pool) const {
  const int64_t n = tables_.n_mask_classes();
  std::atomic<int64_t> next{0};  // classes differ a lot in cost: hand them out one by one
  auto work = [&](int64_t, int64_t) {
    for (int64_t c = next++; c < n; c = next++) mask_entry(tables_.class_rep[static_cast<size_t>(c)]);
  };
  if (pool && n > 1 && pool->size() > 1) {
    pool->parallel_for(pool->size(), work, 1);
  } else {
    work(0, n);
  }
}

GrammarStats CompiledGrammar::stats() const { return stats_; }

size_t CompiledGrammar::cache_bytes() const {
  size_t b = 0;
  for (size_t c = 0; c < entries_.size(); ++c) {
    // Only entries whose once_flag has run are read: mask_entry() is the only writer, so
    // reading a non-null pointer here is safe after the callers' own synchronisation.
    if (entries_[c]) b += entries_[c]->memory_bytes();
  }
  return b;
}

}  // namespace deepinfer::grammar
