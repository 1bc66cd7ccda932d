// Internal stages of build_pda (grammar/automaton.h): inlining plan, Thompson NFA per
// compiled rule, subset construction, partition refinement. Not a public interface.
// Threading: stateless functions.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar::detail {

struct NfaByteEdge {
  uint8_t lo = 0, hi = 0;
  int32_t to = 0;
};
struct NfaCallEdge {
  int32_t rule = 0;  // grammar rule id
  int32_t to = 0;
};
struct NfaState {
  std::vector<int32_t> eps;
  std::vector<NfaByteEdge> bytes;
  std::vector<NfaCallEdge> calls;
};
struct Nfa {
  std::vector<NfaState> states;
  int32_t start = 0, end = 0;
};

struct InlinePlan {
  std::vector<int32_t> compiled;     // grammar rule ids that stay rules; the root first
  std::vector<int32_t> compiled_id;  // [grammar rules] index into compiled, or -1 (inlined / unused)
  std::vector<bool> recursive;       // [grammar rules]
};

InlinePlan plan_inlining(const Grammar& g, int budget);
// Thompson NFA of one compiled rule; inlined references are expanded. `total_states` counts
// across rules; above `max_states` it throws deepinfer::Error.
Nfa build_nfa(const Grammar& g, int32_t rule, const InlinePlan& plan, int64_t* total_states, int64_t max_states);

// Global tables before trimming and minimisation (same layout as PdaTables' fields).
struct RawTables {
  int32_t n_classes = 0;
  std::array<uint8_t, 256> byte_class{};
  std::vector<int32_t> next;      // [n * n_classes]
  std::vector<uint8_t> final;     // [n]
  std::vector<int32_t> rule_of;   // [n] compiled rule id
  std::vector<std::vector<PdaCall>> calls;  // [n] compiled rule ids, global ret
  std::vector<int32_t> rule_start;          // [compiled rules]
  int32_t size() const { return static_cast<int32_t>(final.size()); }
};

// Byte classes from every byte edge of every NFA (classes are byte intervals).
void compute_byte_classes(const std::vector<Nfa>& nfas, RawTables* t);
// Subset construction of nfas[r] appended to `t` (rule r's start recorded).
void append_dfa(const Nfa& nfa, int32_t rule, const InlinePlan& plan, RawTables* t, int64_t max_states);

// Exact minimisation (Hopcroft): `cls` [n] holds the initial classes and receives the
// final ones (numbered by first state). Returns the number of classes.
int32_t minimize_exact(const RawTables& t, std::vector<int32_t>& cls);

// Bounded partition refinement (Moore levels). `cls` [n]: the initial classes (refined in place). Each level
// splits by (class, classes of byte successors from the previous level, (rule, class of
// return state) of calls at the current level); stops after `max_levels` levels or when a
// level changes nothing. Returns the number of classes.
int32_t refine_partition(const RawTables& t, std::vector<int32_t>& cls, int64_t max_levels);

}  // namespace deepinfer::grammar::detail
