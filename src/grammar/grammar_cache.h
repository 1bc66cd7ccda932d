// GrammarCache: compiled grammars by source, for the engine's structured outputs.
//
// Purpose: turn a request's StructuredOutput (JSON Schema / regex / EBNF grammar / any JSON
// object) into a CompiledGrammar once per distinct (kind, layout, source), so a batch of
// 10,000 requests with one schema compiles once; a source that fails to compile is cached as
// its error message (the request fails alone). Oldest entries are dropped past `capacity`;
// matchers keep their grammar alive through shared_ptr.
// Threading: get() is safe from many threads (one mutex; compiles run outside it, and two
// threads asking for the same new source may both compile it).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "deepinfer/sampling_params.h"
#include "grammar/compiled_grammar.h"
#include "grammar/vocabulary.h"

namespace deepinfer::core {
class ThreadPool;
}

namespace deepinfer::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity = 256, CompileOptions opts = {});

  struct Result {
    std::shared_ptr<const CompiledGrammar> grammar;  // null on error
    std::string error;                               // "" on success
  };
  // `pool` (optional) spreads the mask-cache precomputation.
  Result get(const StructuredOutput& so, core::ThreadPool* pool = nullptr);

  const Vocabulary& vocabulary() const { return *vocab_; }
  int64_t compiles() const;  // grammars compiled so far (cache misses)

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  size_t capacity_;
  CompileOptions opts_;
  mutable std::mutex mu_;
  std::map<std::string, Result> entries_;
  std::deque<std::string> order_;  // insertion order, for eviction
  int64_t compiles_ = 0;
};

// The Grammar of a structured-output request (throws deepinfer::Error on bad input).
Grammar grammar_of(const StructuredOutput& so);

}  // namespace deepinfer::grammar
