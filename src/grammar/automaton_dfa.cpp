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

void eps_closure(const Nfa& nfa, std::vector<int32_t>& set, std::vector<uint8_t>& mark) {
  std::vector<int32_t> stack(set.begin(), set.end());
  for (int32_t s : set) mark[static_cast<size_t>(s)] = 1;
  while (!stack.empty()) {
    int32_t s = stack.back();
    stack.pop_back();
    for (int32_t t : nfa.states[static_cast<size_t>(s)].eps) {
      if (!mark[static_cast<size_t>(t)]) {
        mark[static_cast<size_t>(t)] = 1;
        set.push_back(t);
        stack.push_back(t);
      }
    }
  }
  for (int32_t s : set) mark[static_cast<size_t>(s)] = 0;
  std::sort(set.begin(), set.end());
}

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

void append_dfa(const Nfa& nfa, int32_t rule, const InlinePlan& plan, RawTables* t, int64_t max_states) {
  const int32_t nc = t->n_classes;
  std::vector<uint8_t> mark(nfa.states.size(), 0);
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
  std::vector<std::vector<int32_t>> sets;
  const int32_t base = t->size();
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    eps_closure(nfa, set, mark);
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    int32_t id = base + static_cast<int32_t>(sets.size());
    if (id >= max_states) {
      throw Error("grammar too large: more than " + std::to_string(max_states) + " DFA states");
    }
    ids.emplace(set, id);
    sets.push_back(std::move(set));
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
      std::sort(b.begin(), b.end());
      b.erase(std::unique(b.begin(), b.end()), b.end());
      int32_t to = intern(b);
      t->next[static_cast<size_t>(id) * static_cast<size_t>(nc) + static_cast<size_t>(c)] = to;
    }
    for (auto& [grule, targets] : call_buckets) {
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      int32_t to = intern(targets);
      t->calls[static_cast<size_t>(id)].push_back({plan.compiled_id[static_cast<size_t>(grule)], to});
    }
  }
}

int32_t refine_partition(const RawTables& t, std::vector<int32_t>& cls, int64_t max_levels) {
  const int32_t n = t.size();
  const size_t nc = static_cast<size_t>(t.n_classes);
  auto count = [&](const std::vector<int32_t>& c) {
    int32_t m = -1;
    for (int32_t x : c) m = std::max(m, x);
    return m + 1;
  };
  // Renumber the initial classes densely.
  {
    std::unordered_map<int32_t, int32_t> remap;
    for (auto& c : cls) c = remap.emplace(c, static_cast<int32_t>(remap.size())).first->second;
  }
  int32_t n_cls = count(cls);
  std::vector<int32_t> sig;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
  std::vector<std::pair<int32_t, int32_t>> call_sig;
  for (int64_t level = 0; level < max_levels; ++level) {
    const std::vector<int32_t> prev = cls;
    const int32_t n_prev = n_cls;
    std::vector<int32_t> cur = cls;
    int32_t n_cur = n_cls;
    for (;;) {  // inner fixpoint: calls compare at the current level
      ids.clear();
      std::vector<int32_t> nxt(static_cast<size_t>(n));
      for (int32_t s = 0; s < n; ++s) {
        sig.clear();
        sig.push_back(cur[static_cast<size_t>(s)]);
        const int32_t* row = &t.next[static_cast<size_t>(s) * nc];
        for (size_t c = 0; c < nc; ++c) sig.push_back(row[c] < 0 ? -1 : prev[static_cast<size_t>(row[c])]);
        call_sig.clear();
        for (const auto& call : t.calls[static_cast<size_t>(s)]) call_sig.push_back({call.rule, cur[static_cast<size_t>(call.ret)]});
        std::sort(call_sig.begin(), call_sig.end());
        for (auto [r, c] : call_sig) {
          sig.push_back(r);
          sig.push_back(c);
        }
        nxt[static_cast<size_t>(s)] = ids.emplace(sig, static_cast<int32_t>(ids.size())).first->second;
      }
      int32_t n_nxt = static_cast<int32_t>(ids.size());
      cur = std::move(nxt);
      if (n_nxt == n_cur) break;
      n_cur = n_nxt;
    }
    cls = std::move(cur);
    n_cls = n_cur;
    if (n_cls == n_prev && level > 0) break;
  }
  return n_cls;
}

}  // namespace deepinfer::grammar::detail
