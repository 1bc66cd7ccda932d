// Byte classes, subset construction and partition refinement (stage 2-3 of build_pda).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "grammar/automaton_internal.h"

namespace deepinfer::grammar::detail {
namespace {

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) {
      h ^= static_cast<uint32_t>(x);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace

void compute_byte_classes(const std::vector<Nfa>& nfas, RawTables* t) {
  std::array<bool, 257> boundary{};  // boundary[b]: a class starts at byte b
  boundary[0] = true;
  for (const auto& nfa : nfas) {
    for (const auto& s : nfa.states) {
      for (const auto& e : s.bytes) {
        boundary[e.lo] = true;
        boundary[static_cast<size_t>(e.hi) + 1] = true;
      }
    }
  }
  int cls = -1;
  for (int b = 0; b < 256; ++b) {
    if (boundary[static_cast<size_t>(b)]) ++cls;
    t->byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
  }
  t->n_classes = cls + 1;
}

// Total NFA states across the subsets of one rule's DFA.
constexpr int64_t kMaxSubsetEntries = 16'000'000;

void append_dfa(const Nfa& nfa, int32_t rule, const InlinePlan& plan, RawTables* t, int64_t max_states) {
  const int32_t nc = t->n_classes;
  const size_t n_nfa = nfa.states.size();
  // A DFA state is identified by the "important" NFA states of its closure: those with a
  // byte or call edge, and the end. Their epsilon closures are memoised per NFA state.
  auto important = [&](int32_t s) {
    const NfaState& ns = nfa.states[static_cast<size_t>(s)];
    return !ns.bytes.empty() || !ns.calls.empty() || s == nfa.end;
  };
  std::vector<std::vector<int32_t>> closure(n_nfa);
  std::vector<uint8_t> done(n_nfa, 0), mark(n_nfa, 0);
  std::vector<int32_t> stack, seen;
  auto closure_of = [&](int32_t s0) -> const std::vector<int32_t>& {
    auto& out = closure[static_cast<size_t>(s0)];
    if (done[static_cast<size_t>(s0)]) return out;
    done[static_cast<size_t>(s0)] = 1;
    stack.assign(1, s0);
    seen.assign(1, s0);
    mark[static_cast<size_t>(s0)] = 1;
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      if (important(s)) out.push_back(s);
      for (int32_t x : nfa.states[static_cast<size_t>(s)].eps) {
        if (!mark[static_cast<size_t>(x)]) {
          mark[static_cast<size_t>(x)] = 1;
          seen.push_back(x);
          stack.push_back(x);
        }
      }
    }
    for (int32_t x : seen) mark[static_cast<size_t>(x)] = 0;
    std::sort(out.begin(), out.end());
    return out;
  };
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
  std::vector<std::vector<int32_t>> sets;
  const int32_t base = t->size();
  std::vector<int32_t> merged;
  int64_t set_entries = 0;
  // `targets`: NFA states entered by one transition.
  auto intern = [&](const std::vector<int32_t>& targets) -> int32_t {
    merged.clear();
    for (int32_t x : targets) {
      const auto& c = closure_of(x);
      merged.insert(merged.end(), c.begin(), c.end());
    }
    std::sort(merged.begin(), merged.end());
    merged.erase(std::unique(merged.begin(), merged.end()), merged.end());
    auto it = ids.find(merged);
    if (it != ids.end()) return it->second;
    int32_t id = base + static_cast<int32_t>(sets.size());
    if (id >= max_states) {
      throw Error("grammar too large: more than " + std::to_string(max_states) + " DFA states");
    }
    // The subsets' total size bounds the work too: a search for a long run (".*a{100000}")
    // makes DFA states of ever larger subsets, quadratic in the run's length.
    set_entries += static_cast<int64_t>(merged.size());
    if (set_entries > kMaxSubsetEntries) {
      throw Error("grammar too large: the DFA construction holds more than " + std::to_string(kMaxSubsetEntries) +
                  " NFA-state entries (a long repetition inside an unanchored pattern?)");
    }
    ids.emplace(merged, id);
    sets.push_back(merged);
    t->next.resize(t->next.size() + static_cast<size_t>(nc), -1);
    t->final.push_back(0);
    t->rule_of.push_back(rule);
    t->calls.emplace_back();
    return id;
  };
  t->rule_start.push_back(intern({nfa.start}));
  std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(nc));
  std::map<int32_t, std::vector<int32_t>> call_buckets;
  for (size_t k = 0; k < sets.size(); ++k) {
    const int32_t id = base + static_cast<int32_t>(k);
    for (auto& b : buckets) b.clear();
    call_buckets.clear();
    bool is_final = false;
    for (int32_t s : sets[k]) {
      const NfaState& ns = nfa.states[static_cast<size_t>(s)];
      if (s == nfa.end) is_final = true;
      for (const auto& e : ns.bytes) {
        for (int c = t->byte_class[e.lo]; c <= t->byte_class[e.hi]; ++c) buckets[static_cast<size_t>(c)].push_back(e.to);
      }
      for (const auto& c : ns.calls) call_buckets[c.rule].push_back(c.to);
    }
    t->final[static_cast<size_t>(id)] = is_final ? 1 : 0;
    for (int32_t c = 0; c < nc; ++c) {
      auto& b = buckets[static_cast<size_t>(c)];
      if (b.empty()) continue;
      // Classes with the same target set share one intern.
      if (c > 0 && b == buckets[static_cast<size_t>(c) - 1]) {
        t->next[static_cast<size_t>(id) * static_cast<size_t>(nc) + static_cast<size_t>(c)] =
            t->next[static_cast<size_t>(id) * static_cast<size_t>(nc) + static_cast<size_t>(c) - 1];
        continue;
      }
      int32_t to = intern(b);
      t->next[static_cast<size_t>(id) * static_cast<size_t>(nc) + static_cast<size_t>(c)] = to;
    }
    for (auto& [grule, targets] : call_buckets) {
      int32_t to = intern(targets);
      t->calls[static_cast<size_t>(id)].push_back({plan.compiled_id[static_cast<size_t>(grule)], to});
    }
  }
}

}  // namespace deepinfer::grammar::detail
