// Exact DFA minimisation (Hopcroft's algorithm) and bounded-depth refinement (mask classes).
//
// The rule DFAs plus their call edges form one deterministic automaton over the alphabet
// (byte classes) + (one "call rule r, continue at ret" symbol per rule): a state has at most
// one call edge per rule. Missing transitions go to an added sink state.
#include <algorithm>
#include <unordered_map>

#include "grammar/automaton_internal.h"

namespace deepinfer::grammar::detail {
namespace {

// Partition refinement with marking (Valmari-Lehtinen style).
struct Partition {
  std::vector<int32_t> elems, loc, blk, first, end, mid;
  std::vector<int32_t> touched;

  Partition(int32_t n, const std::vector<int32_t>& initial) : elems(static_cast<size_t>(n)), loc(static_cast<size_t>(n)), blk(static_cast<size_t>(n)) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return initial[static_cast<size_t>(a)] < initial[static_cast<size_t>(b)]; });
    for (int32_t i = 0; i < n; ++i) {
      const int32_t s = order[static_cast<size_t>(i)];
      elems[static_cast<size_t>(i)] = s;
      loc[static_cast<size_t>(s)] = i;
      if (i == 0 || initial[static_cast<size_t>(s)] != initial[static_cast<size_t>(order[static_cast<size_t>(i) - 1])]) {
        first.push_back(i);
        end.push_back(i);
        mid.push_back(i);
      }
      blk[static_cast<size_t>(s)] = static_cast<int32_t>(first.size()) - 1;
      ++end.back();
    }
  }
  int32_t n_blocks() const { return static_cast<int32_t>(first.size()); }
  int32_t size(int32_t b) const { return end[static_cast<size_t>(b)] - first[static_cast<size_t>(b)]; }

  void mark(int32_t s) {
    const auto b = static_cast<size_t>(blk[static_cast<size_t>(s)]);
    const int32_t i = loc[static_cast<size_t>(s)], j = mid[b];
    if (i < j) return;  // already marked
    if (j == first[b]) touched.push_back(static_cast<int32_t>(b));
    std::swap(elems[static_cast<size_t>(i)], elems[static_cast<size_t>(j)]);
    loc[static_cast<size_t>(elems[static_cast<size_t>(i)])] = i;
    loc[static_cast<size_t>(elems[static_cast<size_t>(j)])] = j;
    ++mid[b];
  }
  // Splits every touched block into its marked and unmarked parts; calls
  // on_split(old_block, new_block) where the new block holds the marked part.
  template <class F>
  void split(F&& on_split) {
    for (int32_t b : touched) {
      const auto bs = static_cast<size_t>(b);
      if (mid[bs] == end[bs]) {
        mid[bs] = first[bs];
        continue;
      }
      const auto nb = static_cast<int32_t>(first.size());
      first.push_back(first[bs]);
      end.push_back(mid[bs]);
      mid.push_back(first[bs]);
      for (int32_t i = first[bs]; i < mid[bs]; ++i) blk[static_cast<size_t>(elems[static_cast<size_t>(i)])] = nb;
      first[bs] = mid[bs];
      on_split(b, nb);
    }
    touched.clear();
  }
};

}  // namespace

int32_t minimize_exact(const RawTables& t, std::vector<int32_t>& cls) {
  const int32_t n = t.size(), nc = t.n_classes;
  const int32_t n_rules = static_cast<int32_t>(t.rule_start.size());
  const int32_t sink = n, total = n + 1, k = nc + n_rules;
  auto target = [&](int32_t s, int32_t a) -> int32_t {
    if (s == sink) return sink;
    if (a < nc) {
      int32_t to = t.next[static_cast<size_t>(s) * static_cast<size_t>(nc) + static_cast<size_t>(a)];
      return to < 0 ? sink : to;
    }
    for (const auto& c : t.calls[static_cast<size_t>(s)]) {
      if (c.rule == a - nc) return c.ret;
    }
    return sink;
  };
  // Inverse transitions in CSR form, keyed by (symbol, target).
  std::vector<int32_t> off(static_cast<size_t>(k) * static_cast<size_t>(total) + 1, 0);
  for (int32_t s = 0; s < total; ++s) {
    for (int32_t a = 0; a < k; ++a) ++off[static_cast<size_t>(a) * static_cast<size_t>(total) + static_cast<size_t>(target(s, a)) + 1];
  }
  for (size_t i = 1; i < off.size(); ++i) off[i] += off[i - 1];
  std::vector<int32_t> src(static_cast<size_t>(off.back()));
  {
    std::vector<int32_t> fill(off.begin(), off.end() - 1);
    for (int32_t s = 0; s < total; ++s) {
      for (int32_t a = 0; a < k; ++a) src[static_cast<size_t>(fill[static_cast<size_t>(a) * static_cast<size_t>(total) + static_cast<size_t>(target(s, a))]++)] = s;
    }
  }
  std::vector<int32_t> initial(cls.begin(), cls.end());
  int32_t max_cls = 0;
  for (int32_t c : initial) max_cls = std::max(max_cls, c);
  initial.push_back(max_cls + 1);  // the sink alone
  Partition p(total, initial);
  std::vector<uint8_t> in_work(static_cast<size_t>(p.n_blocks()), 1);
  std::vector<int32_t> work;
  for (int32_t b = 0; b < p.n_blocks(); ++b) work.push_back(b);
  std::vector<int32_t> snapshot;
  while (!work.empty()) {
    const int32_t b = work.back();
    work.pop_back();
    in_work[static_cast<size_t>(b)] = 0;
    snapshot.assign(p.elems.begin() + p.first[static_cast<size_t>(b)], p.elems.begin() + p.end[static_cast<size_t>(b)]);
    for (int32_t a = 0; a < k; ++a) {
      for (int32_t s : snapshot) {
        const size_t key = static_cast<size_t>(a) * static_cast<size_t>(total) + static_cast<size_t>(s);
        for (int32_t i = off[key]; i < off[key + 1]; ++i) p.mark(src[static_cast<size_t>(i)]);
      }
      p.split([&](int32_t old_b, int32_t new_b) {
        in_work.push_back(0);
        if (in_work[static_cast<size_t>(old_b)] || p.size(new_b) <= p.size(old_b)) {
          work.push_back(new_b);
          in_work[static_cast<size_t>(new_b)] = 1;
        } else {
          work.push_back(old_b);
          in_work[static_cast<size_t>(old_b)] = 1;
        }
      });
    }
  }
  // Renumber blocks by first state (deterministic), excluding the sink's.
  std::vector<int32_t> id(static_cast<size_t>(p.n_blocks()), -1);
  int32_t next_id = 0;
  for (int32_t s = 0; s < n; ++s) {
    auto& x = id[static_cast<size_t>(p.blk[static_cast<size_t>(s)])];
    if (x < 0) x = next_id++;
    cls[static_cast<size_t>(s)] = x;
  }
  return next_id;
}

int32_t refine_partition(const RawTables& t, std::vector<int32_t>& cls, int64_t max_levels) {
  const int32_t n = t.size();
  const size_t nc = static_cast<size_t>(t.n_classes);
  {
    std::unordered_map<int32_t, int32_t> remap;
    for (auto& c : cls) c = remap.emplace(c, static_cast<int32_t>(remap.size())).first->second;
  }
  int32_t n_cls = 0;
  for (int32_t c : cls) n_cls = std::max(n_cls, c + 1);
  // Signature of s: (cur[s], prev[next[s][c]] for all c, sorted (rule, cur[ret])).
  std::vector<int32_t> sig_a, sig_b;
  auto signature = [&](int32_t s, const std::vector<int32_t>& prev, const std::vector<int32_t>& cur, std::vector<int32_t>& sig) {
    sig.clear();
    sig.push_back(cur[static_cast<size_t>(s)]);
    const int32_t* row = &t.next[static_cast<size_t>(s) * nc];
    for (size_t c = 0; c < nc; ++c) sig.push_back(row[c] < 0 ? -1 : prev[static_cast<size_t>(row[c])]);
    const size_t at = sig.size();
    for (const auto& call : t.calls[static_cast<size_t>(s)]) {
      sig.push_back(call.rule);
      sig.push_back(cur[static_cast<size_t>(call.ret)]);
    }
    // calls are few: sort the (rule, class) pairs in place
    for (size_t i = at; i < sig.size(); i += 2) {
      for (size_t j = i + 2; j < sig.size(); j += 2) {
        if (sig[j] < sig[i] || (sig[j] == sig[i] && sig[j + 1] < sig[i + 1])) {
          std::swap(sig[i], sig[j]);
          std::swap(sig[i + 1], sig[j + 1]);
        }
      }
    }
  };
  auto hash = [](const std::vector<int32_t>& v) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull + (h >> 31);
    return h;
  };
  std::unordered_multimap<uint64_t, int32_t> rep;  // signature hash -> a representative state
  for (int64_t level = 0; level < max_levels; ++level) {
    const std::vector<int32_t> prev = cls;
    const int32_t n_prev = n_cls;
    std::vector<int32_t> cur = cls;
    int32_t n_cur = n_cls;
    for (;;) {  // inner fixpoint: calls compare at the current level
      rep.clear();
      std::vector<int32_t> nxt(static_cast<size_t>(n));
      int32_t n_nxt = 0;
      for (int32_t s = 0; s < n; ++s) {
        signature(s, prev, cur, sig_a);
        const uint64_t h = hash(sig_a);
        int32_t found = -1;
        auto [lo, hi] = rep.equal_range(h);
        for (auto it = lo; it != hi && found < 0; ++it) {
          signature(it->second, prev, cur, sig_b);
          if (sig_b == sig_a) found = nxt[static_cast<size_t>(it->second)];
        }
        if (found < 0) {
          found = n_nxt++;
          rep.emplace(h, s);
        }
        nxt[static_cast<size_t>(s)] = found;
      }
      cur = std::move(nxt);
      if (n_nxt == n_cur) break;
      n_cur = n_nxt;
    }
    cls = std::move(cur);
    n_cls = n_cur;
    if (n_cls == n_prev) break;
  }
  return n_cls;
}

}  // namespace deepinfer::grammar::detail
