// Matcher: one request's position in a compiled grammar.
//
// Purpose: the per-sequence object the engine drives: fill_next_token_bitmask() before
// sampling (allowed token ids as 32-bit words), accept_token() after; rollback(n) undoes
// the last n accepted tokens (speculative decoding), fork() copies the state (n > 1),
// find_jump_forward_string() gives the bytes the grammar forces next.
// Semantics: the grammar is matched against the concatenated token bytes, so a token may
// span rule boundaries and a UTF-8 character may be split across tokens. Excluded tokens
// (special tokens, tokens without bytes) are never allowed; the stop ids (EOS) are allowed
// exactly when the grammar can end, and accepting one terminates the matcher.
// Mask fill: for each kernel configuration, OR its cache entry's accepted tokens, match the
// entry's context tags against the real stack and OR the matching groups; tokens beyond
// the tag depth are checked byte by byte. EOS is added when the grammar can end.
// Invariants: the state is a small set of kernels (state, stack node) in a private arena;
// every accepted token pushes one history step (kernels, arena size), so rollback is exact.
// Threading: one thread at a time per matcher; matchers of one CompiledGrammar may run on
// different threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda.h"

namespace deepinfer::grammar {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // False (state unchanged) when the token is not allowed here.
  bool accept_token(int32_t id);
  // Raw bytes as one history step (tests, jump-forward text the caller tokenises later).
  bool accept_string(std::string_view bytes);
  // bitmask [>= vocabulary().bitmask_words()] uint32: bit id%32 of word id/32 = allowed.
  // Words past the vocabulary are cleared.
  void fill_next_token_bitmask(std::span<uint32_t> bitmask) const;
  // The exact answer for one token, byte by byte (slow; for tests and checks).
  bool is_token_allowed(int32_t id) const;

  void rollback(int n_tokens);
  Matcher fork() const { return *this; }
  void reset();

  bool is_terminated() const { return terminated_; }
  bool can_end() const { return can_end_; }
  // The grammar can end and no byte can follow: only a stop token remains.
  bool is_completed() const { return can_end_ && heads_.empty(); }
  int num_history_steps() const { return static_cast<int>(history_.size()); }
  // The bytes every continuation must start with (stops where there is a choice or the
  // grammar may end).
  std::string find_jump_forward_string(size_t max_bytes = 4096) const;
  // Fewest bytes that complete the grammar from here.
  int64_t min_bytes_to_end() const;
  // A canonical description of the state (kernels with their full stacks), for tests.
  std::string debug_state() const;

  const CompiledGrammar& grammar() const { return *g_; }

 private:
  struct Step {
    uint32_t kernels_begin = 0, kernels_count = 0;
    uint32_t arena_size = 0;
    bool terminated = false;
  };
  // From the current kernels over `bytes`; on success the new kernels replace them.
  bool advance(std::string_view bytes);
  // Whether `bytes` can be read from the single configuration `k` (arena restored).
  bool check_from(const Config& k, std::string_view bytes) const;
  void refresh();
  void push_history();

  std::shared_ptr<const CompiledGrammar> g_;
  const PdaTables* t_ = nullptr;
  mutable StackArena arena_;
  std::vector<Config> kernels_;
  std::vector<Config> heads_;  // closure of kernels_
  bool can_end_ = false;
  bool terminated_ = false;
  std::vector<Step> history_;
  std::vector<Config> history_kernels_;
  mutable ClosureScratch scratch_;
  mutable std::vector<Config> buf_a_, buf_b_, buf_heads_, check_a_, check_b_;
  mutable std::vector<int32_t> chain_;
  mutable std::vector<uint8_t> tag_match_;
};

}  // namespace deepinfer::grammar
