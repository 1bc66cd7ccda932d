// Token-mask cache entry: which tokens one parser state accepts, computed once.
//
// Purpose: the adaptive token-mask cache (xgrammar's idea, our construction). For a state
// s, every grammar-eligible token is run through the pushdown tables starting from the
// configuration (s, bottom) by a depth-first walk of the vocabulary trie (a rejected prefix
// skips its subtree). A token is
//   - accepted: it is consumed without leaving s's rule, or it ends exactly where the rule
//     may end: valid whatever lies below in the stack;
//   - rejected: it dies without ever leaving the rule;
//   - context-dependent: it leaves the rule (pops below the bottom) with bytes left. Then
//     the walk continues at every return site T of the rule, tagging the configuration
//     with the path of return sites taken (T1, T2, ...), up to `max_tag_depth` levels. The
//     token is accepted at run time iff one of its surviving tags is a prefix of the real
//     stack's return states; beyond the depth limit it is checked byte by byte
//     (`full_check`). Tokens are grouped by their tag set, so a mask fill ORs the
//     accepted set, matches the few tags against the stack and ORs whole groups.
// States in the same mask class (grammar/automaton.h) share one entry.
// Invariants: accepted tokens are stored as a dense bitmask (bitmask_words() words) or as
// a sparse id list, whichever is smaller; tags hold return states, innermost first.
// Threading: an entry is immutable once computed.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

struct MaskEntry {
  struct Group {
    std::vector<int32_t> tags;    // indices into MaskEntry::tags; any match accepts
    bool full_check = false;      // if no tag matches, check each token against the real stack
    std::vector<int32_t> tokens;  // token ids
  };
  std::vector<uint32_t> accepted_bits;  // dense form, or empty
  std::vector<int32_t> accepted_ids;    // sparse form (when accepted_bits is empty)
  std::vector<std::vector<int32_t>> tags;
  std::vector<Group> groups;
  int64_t n_accepted = 0, n_rejected = 0, n_uncertain = 0;

  size_t memory_bytes() const;
};

MaskEntry compute_mask_entry(const PdaTables& t, const Vocabulary& vocab, int32_t state, int max_tag_depth);

}  // namespace deepinfer::grammar
