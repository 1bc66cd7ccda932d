// CompiledGrammar: a Grammar's pushdown tables plus its token-mask cache for one vocabulary.
//
// Purpose: compile once, share across every request that uses the same source: the
// tables (grammar/automaton.h) and one MaskEntry per mask class (grammar/token_mask_cache.h),
// computed at compile time (CompileOptions::precompute, optionally spread over a thread
// pool) or lazily on first use. Matchers (grammar/matcher.h) hold a shared_ptr to it.
// Invariants: immutable except for lazily filled cache entries, each written exactly once.
// Threading: all methods are safe from many threads (std::call_once per entry).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_mask_cache.h"
#include "grammar/vocabulary.h"

namespace deepinfer::core {
class ThreadPool;
}

namespace deepinfer::grammar {

struct CompileOptions {
  int max_tag_depth = 3;     // return-site levels resolved at compile time (then: byte check)
  bool precompute = true;    // compute every mask entry now (else on first use)
  int inline_budget = 4096;  // see BuildOptions
  // Size limits (a grammar above them is an error, so one request cannot stall the engine).
  int max_nfa_states = 1000000;
  int max_dfa_states = 100000;
};

struct GrammarStats {
  int32_t n_rules = 0, n_inlined_rules = 0, n_states = 0, n_byte_classes = 0, n_mask_classes = 0;
  double build_ms = 0, precompute_ms = 0;
  size_t table_bytes = 0;
};

class CompiledGrammar {
 public:
  // Throws deepinfer::Error for an invalid grammar (see build_pda).
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, std::shared_ptr<const Vocabulary> vocab,
                                                        const CompileOptions& opts = {},
                                                        core::ThreadPool* pool = nullptr);

  const PdaTables& tables() const { return tables_; }
  const Vocabulary& vocabulary() const { return *vocab_; }
  int max_tag_depth() const { return opts_.max_tag_depth; }
  // The cache entry of `state`'s mask class, computed on first use.
  const MaskEntry& mask_entry(int32_t state) const;
  // Computes every entry not computed yet.
  void precompute(core::ThreadPool* pool = nullptr) const;
  GrammarStats stats() const;
  // Bytes held by the computed cache entries.
  size_t cache_bytes() const;

  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

 private:
  CompiledGrammar() = default;

  PdaTables tables_;
  std::shared_ptr<const Vocabulary> vocab_;
  CompileOptions opts_;
  GrammarStats stats_;
  mutable std::unique_ptr<std::once_flag[]> once_;
  mutable std::vector<std::unique_ptr<MaskEntry>> entries_;  // [n_mask_classes]
};

}  // namespace deepinfer::grammar
