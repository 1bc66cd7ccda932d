// Automaton: a Grammar compiled to byte-level pushdown tables.
//
// Purpose: every rule that survives inlining becomes a minimal DFA over bytes whose states
// also carry call edges ("call rule Q, then continue at state T"); together they form a
// recursive transition network, run by a stack of return states (grammar/pda.h). Steps:
//   1. rules that are not recursive are inlined into their callers where that does not
//      copy much (a budget on states times copies), so a schema without recursion is one
//      DFA and its masks never depend on a stack;
//   2. each remaining rule: Thompson NFA (code-point classes as UTF-8 byte ranges) ->
//      subset construction over global byte classes -> trim (states that cannot finish)
//      -> Moore minimisation;
//   3. analysis: nullable rules, left recursion (an error naming the rule), the return
//      sites of every rule (where a finished rule continues), shortest completions, and the
//      mask classes: states that behave the same on every byte string of at most
//      `max_token_bytes` bytes share one token-mask cache entry (so long counted
//      repetitions such as maxLength 1000 need only about max_token_bytes entries).
// Invariants: state ids are global; next[] is -1 for a dead byte; every state can reach
// the end of its rule; the root rule's end is the end of the grammar.
// Threading: built once, then immutable and shared.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct BuildOptions {
  int max_token_bytes = 64;       // longest token of the vocabulary (bounds mask classes)
  int inline_budget = 4096;       // states x copies allowed when inlining a shared rule
  int max_nfa_states = 2000000;   // limits: a grammar above them is an error
  int max_dfa_states = 400000;
};

struct PdaCall {
  int32_t rule = 0;  // compiled rule id
  int32_t ret = 0;   // state to continue at when the callee ends
};

struct PdaRule {
  std::string name;
  int32_t start = 0;
  bool nullable = false;
  int32_t min_bytes = 0;             // shortest string the rule derives
  std::vector<int32_t> return_sites; // distinct `ret` states of every call to this rule
};

struct PdaTables {
  enum Flag : uint8_t { kFinal = 1, kHasBytes = 2, kHasCalls = 4 };

  int32_t n_states = 0;
  int32_t n_classes = 0;                 // byte equivalence classes
  std::array<uint8_t, 256> byte_class{};
  std::vector<int32_t> next;             // [n_states * n_classes] next state or -1
  std::vector<int32_t> rule_of;          // [n_states] compiled rule id
  std::vector<uint8_t> flags;            // [n_states] Flag bits
  std::vector<int32_t> call_begin;       // [n_states + 1] offsets into calls
  std::vector<PdaCall> calls;
  std::vector<std::array<uint64_t, 4>> first_bytes;  // [n_states] bytes with a transition
  std::vector<int32_t> min_bytes_to_end; // [n_states] shortest completion of the rule
  std::vector<PdaRule> rules;
  int32_t root = 0;                      // compiled rule id of the start rule
  std::vector<int32_t> mask_class;       // [n_states]
  std::vector<int32_t> class_rep;        // [n_mask_classes] a representative state
  int32_t n_inlined_rules = 0;

  int32_t step(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(n_classes) + byte_class[byte]];
  }
  bool has(int32_t state, Flag f) const { return (flags[static_cast<size_t>(state)] & f) != 0; }
  int32_t n_mask_classes() const { return static_cast<int32_t>(class_rep.size()); }
};

// Throws deepinfer::Error for an invalid grammar, left recursion, a grammar that accepts
// nothing, or one above the size limits.
PdaTables build_pda(const Grammar& g, const BuildOptions& opts = {});

}  // namespace deepinfer::grammar
