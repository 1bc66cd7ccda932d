// Helpers for the grammar tests: vocabularies, compiled grammars, brute-force masks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/ebnf_parser.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar::testing {

inline std::string test_data(const std::string& rel) { return std::string(DEEPINFER_TEST_DATA) + "/" + rel; }

// Every single byte as a token (ids 0..255), then `extra` tokens, then EOS (special).
inline std::shared_ptr<const Vocabulary> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
  for (const auto& e : extra) toks.push_back(e);
  toks.push_back("</s>");
  std::vector<uint8_t> special(toks.size(), 0);
  special.back() = 1;
  return Vocabulary::from_tokens(toks, special, {static_cast<int32_t>(toks.size() - 1)});
}

inline std::shared_ptr<const Vocabulary> fixture_vocab() {
  static auto v = Vocabulary::from_tokenizer(*tokenizer::Tokenizer::load(test_data("tokenizer/fixture/tokenizer.json")));
  return v;
}

inline std::shared_ptr<const Vocabulary> deepseek_vocab() {
  static auto v = Vocabulary::from_tokenizer(*tokenizer::Tokenizer::load(test_data("tokenizer/deepseek/tokenizer.json")));
  return v;
}

inline std::shared_ptr<const CompiledGrammar> compile_ebnf(const std::string& text, std::shared_ptr<const Vocabulary> v,
                                                           CompileOptions o = {}) {
  return CompiledGrammar::compile(parse_ebnf(text), std::move(v), o);
}

// True when the whole string is accepted and the grammar can end there.
inline bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& s) {
  Matcher m(g);
  if (!s.empty() && !m.accept_string(s)) return false;
  return m.can_end();
}

inline std::vector<uint32_t> bitmask_of(const Matcher& m) {
  std::vector<uint32_t> bits(static_cast<size_t>(m.grammar().vocabulary().bitmask_words()));
  m.fill_next_token_bitmask(bits);
  return bits;
}

inline bool bit(const std::vector<uint32_t>& bits, int32_t id) { return (bits[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; }

// The mask must equal the byte-by-byte answer for every token.
inline void expect_mask_exact(const Matcher& m, const std::string& where) {
  auto bits = bitmask_of(m);
  const int32_t n = m.grammar().vocabulary().size();
  int bad = 0;
  for (int32_t id = 0; id < n && bad < 5; ++id) {
    bool want = m.is_token_allowed(id);
    if (bit(bits, id) != want) {
      ++bad;
      ADD_FAILURE() << where << ": token " << id << " '" << m.grammar().vocabulary().token(id) << "' mask=" << bit(bits, id)
                    << " exact=" << want;
    }
  }
}

}  // namespace deepinfer::grammar::testing

namespace deepinfer::grammar::testing {

// A random walk through the matcher: for `budget` tokens, a temperature-1 draw among the
// allowed tokens (Gumbel-max over fixed random logits when given, else uniform); then it
// completes along the shortest completion (single-byte tokens and a few random ones are
// tried, the one that leaves the fewest bytes to the end wins), and stops with a stop token.
// Returns the text; *finished = the matcher terminated within budget + max_extra tokens.
inline std::string random_walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937_64& rng, int budget,
                               const std::vector<float>* logits, bool* finished, int max_extra = 100000) {
  const Vocabulary& v = g->vocabulary();
  Matcher m(g);
  std::vector<uint32_t> bits(static_cast<size_t>(v.bitmask_words()));
  std::vector<int32_t> allowed;
  std::string out;
  std::uniform_real_distribution<double> uni(1e-12, 1.0);
  for (int step = 0; step < budget + max_extra; ++step) {
    m.fill_next_token_bitmask(bits);
    allowed.clear();
    for (size_t w = 0; w < bits.size(); ++w) {
      for (uint32_t x = bits[w]; x; x &= x - 1) allowed.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(x))));
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "empty mask after: " << out;
      break;
    }
    int32_t pick = -1;
    if (step < budget) {
      if (logits) {
        double best = -1e300;
        for (int32_t id : allowed) {
          double gumbel = -std::log(-std::log(uni(rng)));
          double s = (*logits)[static_cast<size_t>(id)] + gumbel;
          if (s > best) best = s, pick = id;
        }
      } else {
        pick = allowed[rng() % allowed.size()];
      }
    } else if (m.can_end()) {
      pick = v.stop_ids()[0];
    } else {
      std::vector<int32_t> cands;
      for (int32_t id : allowed) {
        if (v.token(id).size() == 1) cands.push_back(id);
      }
      for (int i = 0; i < 16; ++i) cands.push_back(allowed[rng() % allowed.size()]);
      int64_t best = INT64_MAX;
      for (int32_t c : cands) {
        if (!m.accept_token(c)) {
          ADD_FAILURE() << "allowed token rejected: " << v.token(c);
          continue;
        }
        int64_t d = m.min_bytes_to_end();
        m.rollback(1);
        if (d < best) best = d, pick = c;
      }
    }
    const bool is_stop = std::find(v.stop_ids().begin(), v.stop_ids().end(), pick) != v.stop_ids().end();
    if (!m.accept_token(pick)) {
      ADD_FAILURE() << "allowed token " << pick << " rejected after: " << out;
      break;
    }
    if (is_stop) break;
    out += v.token(pick);
  }
  *finished = m.is_terminated();
  return out;
}

// Fixed random "model" logits over a vocabulary (a temperature-1 preference).
inline std::vector<float> random_logits(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = nd(rng);
  return l;
}

}  // namespace deepinfer::grammar::testing
