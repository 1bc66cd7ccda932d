// Shared by the libFuzzer targets: compile a grammar against a small byte vocabulary with
// tight size limits and drive a matcher with bytes from the input. Bad input must end in
// deepinfer::Error; anything else (a crash, a sanitizer report, another exception) is a bug.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar::fuzz {

inline std::shared_ptr<const Vocabulary> small_vocab() {
  static auto v = [] {
    std::vector<std::string> toks;
    for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"\"", "\":", "{\"", "\"}", "[1", ",\"", "true", "null", "\xC3", "\xA9\"", "ab", "  ", "\n"}) toks.push_back(t);
    toks.push_back("<eos>");
    std::vector<uint8_t> special(toks.size(), 0);
    special.back() = 1;
    return Vocabulary::from_tokens(toks, special, {static_cast<int32_t>(toks.size() - 1)});
  }();
  return v;
}

// Compiles and exercises `g`; `drive` supplies token choices.
inline void exercise(const Grammar& g, const uint8_t* drive, size_t n) {
  CompileOptions o;
  o.max_nfa_states = 20000;
  o.max_dfa_states = 4000;
  o.precompute = false;
  auto cg = CompiledGrammar::compile(g, small_vocab(), o);
  Matcher m(cg);
  std::vector<uint32_t> bits(static_cast<size_t>(small_vocab()->bitmask_words()));
  for (size_t i = 0; i < n && i < 64 && !m.is_terminated(); ++i) {
    m.fill_next_token_bitmask(bits);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < small_vocab()->size(); ++id) {
      if (bits[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    int32_t t = allowed[drive[i] % allowed.size()];
    if (!m.accept_token(t)) __builtin_trap();  // an allowed token must be accepted
    if (drive[i] % 7 == 0) m.rollback(1);
  }
  (void)m.find_jump_forward_string(64);
}

}  // namespace deepinfer::grammar::fuzz
