#include "grammar/grammar_cache.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"

namespace deepinfer::grammar {

Grammar grammar_of(const StructuredOutput& so) {
  JsonSchemaOptions jo;
  jo.any_whitespace = so.any_whitespace;
  jo.strict_keywords = so.strict_keywords;
  switch (so.kind) {
    case StructuredOutput::Kind::kJsonSchema: return json_schema_to_grammar(std::string_view(so.source), jo);
    case StructuredOutput::Kind::kRegex: return regex_to_grammar(so.source);
    case StructuredOutput::Kind::kGrammar: return parse_ebnf(so.source);
    case StructuredOutput::Kind::kJsonObject: return builtin_json_grammar(/*object_only=*/true, jo);
  }
  throw Error("structured_output: unknown kind");
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t capacity, CompileOptions opts)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(1, capacity)), opts_(opts) {}

GrammarCache::Result GrammarCache::get(const StructuredOutput& so, core::ThreadPool* pool) {
  std::string key;
  key += static_cast<char>('0' + static_cast<int>(so.kind));
  key += so.any_whitespace ? 'w' : 'c';
  key += so.strict_keywords ? 's' : 'l';
  key += so.source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
  }
  Result r;
  try {
    r.grammar = CompiledGrammar::compile(grammar_of(so), vocab_, opts_, pool);
  } catch (const Error& e) {
    r.error = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++compiles_;
  if (entries_.emplace(key, r).second) {
    order_.push_back(key);
    while (entries_.size() > capacity_) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
  }
  return r;
}

int64_t GrammarCache::compiles() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiles_;
}

}  // namespace deepinfer::grammar
