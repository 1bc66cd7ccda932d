// Pushdown runtime core: hash-consed return stacks and the closure/step of a set of
// configurations over the tables of grammar/automaton.h.
//
// Purpose: a configuration is (state, parent): the parser is in `state` of some rule, and
// `parent` is a stack node holding where to continue when that rule ends (-1: the bottom).
// Stack nodes are interned (same (state, parent) -> same id), so configuration sets
// deduplicate by value and a fork is a plain copy. A "kernel" is a configuration right
// after a byte (or the start); its closure expands calls (push) and rule ends (pop) to the
// "heads" that can read the next byte, and says whether the whole grammar can end.
// Invariants: node ids only grow except through truncate(n), which removes the newest
// nodes (callers truncate back to a size they recorded, so no live configuration refers
// to a removed node). Closure terminates because the tables have no left recursion.
// Threading: an arena belongs to one matcher (or one mask computation); not shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "grammar/automaton.h"

namespace deepinfer::grammar {

struct StackNode {
  int32_t state = 0;   // continue here when the callee ends
  int32_t parent = -1; // the node below, -1 = bottom
};

class StackArena {
 public:
  StackArena() { buckets_.assign(64, -1); }

  int32_t intern(int32_t state, int32_t parent) {
    size_t b = bucket(state, parent);
    for (int32_t id = buckets_[b]; id >= 0; id = chain_[static_cast<size_t>(id)]) {
      const StackNode& n = nodes_[static_cast<size_t>(id)];
      if (n.state == state && n.parent == parent) return id;
    }
    auto id = static_cast<int32_t>(nodes_.size());
    nodes_.push_back({state, parent});
    chain_.push_back(buckets_[b]);
    buckets_[b] = id;
    if (nodes_.size() > buckets_.size()) rehash(buckets_.size() * 4);
    return id;
  }
  const StackNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  // Removes the nodes with id >= n (the newest first, each the head of its bucket).
  void truncate(size_t n) {
    while (nodes_.size() > n) {
      const StackNode& last = nodes_.back();
      size_t b = bucket(last.state, last.parent);
      DI_CHECK(buckets_[b] == static_cast<int32_t>(nodes_.size() - 1), "stack arena truncated out of order");
      buckets_[b] = chain_.back();
      nodes_.pop_back();
      chain_.pop_back();
    }
  }
  void clear() {
    nodes_.clear();
    chain_.clear();
    buckets_.assign(64, -1);
  }

 private:
  size_t bucket(int32_t state, int32_t parent) const {
    uint64_t h = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) ^ static_cast<uint32_t>(parent);
    h *= 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>(h >> 32) & (buckets_.size() - 1);
  }
  void rehash(size_t n_buckets) {
    buckets_.assign(n_buckets, -1);
    for (size_t id = 0; id < nodes_.size(); ++id) {
      size_t b = bucket(nodes_[id].state, nodes_[id].parent);
      chain_[id] = buckets_[b];
      buckets_[b] = static_cast<int32_t>(id);
    }
  }

  std::vector<StackNode> nodes_;
  std::vector<int32_t> chain_;
  std::vector<int32_t> buckets_;
};

struct Config {
  int32_t state = 0;
  int32_t parent = -1;
  bool operator==(const Config&) const = default;
  bool operator<(const Config& o) const { return state != o.state ? state < o.state : parent < o.parent; }
};

struct ConfigHash {
  size_t operator()(const Config& c) const {
    return static_cast<size_t>((static_cast<uint64_t>(static_cast<uint32_t>(c.state)) << 32 | static_cast<uint32_t>(c.parent)) *
                               0x9E3779B97F4A7C15ull);
  }
};

// Reusable buffers for closure(): the visited set is a short list, then a hash set.
struct ClosureScratch {
  std::vector<Config> work;
  std::vector<Config> seen;
  std::unordered_set<Config, ConfigHash> seen_set;

  void clear() {
    seen.clear();
    seen_set.clear();
  }
  // True the first time `c` is offered.
  bool visit(const Config& c) {
    if (seen.size() < 32) {
      if (std::find(seen.begin(), seen.end(), c) != seen.end()) return false;
      seen.push_back(c);
      if (seen.size() == 32) seen_set.insert(seen.begin(), seen.end());
      return true;
    }
    return seen_set.insert(c).second;
  }
};

// Expands `kernels` into `heads` (configurations with a byte transition), appending; sets
// *can_end when the root rule can finish at the bottom.
inline void closure(const PdaTables& t, StackArena& arena, const std::vector<Config>& kernels,
                    std::vector<Config>& heads, bool* can_end, ClosureScratch& sc) {
  sc.work.assign(kernels.begin(), kernels.end());
  sc.clear();
  while (!sc.work.empty()) {
    Config c = sc.work.back();
    sc.work.pop_back();
    const uint8_t f = t.flags[static_cast<size_t>(c.state)];
    if (f == PdaTables::kHasBytes && kernels.size() == 1 && sc.seen.empty() && sc.work.empty()) {
      heads.push_back(c);  // the common case: nothing to expand
      return;
    }
    if (!sc.visit(c)) continue;
    if (f & PdaTables::kHasBytes) heads.push_back(c);
    if (f & PdaTables::kHasCalls) {
      for (int32_t i = t.call_begin[static_cast<size_t>(c.state)]; i < t.call_begin[static_cast<size_t>(c.state) + 1]; ++i) {
        const PdaCall& call = t.calls[static_cast<size_t>(i)];
        sc.work.push_back({t.rules[static_cast<size_t>(call.rule)].start, arena.intern(call.ret, c.parent)});
      }
    }
    if (f & PdaTables::kFinal) {
      if (c.parent < 0) {
        *can_end = true;
      } else {
        const StackNode& n = arena.node(c.parent);
        sc.work.push_back({n.state, n.parent});
      }
    }
  }
}

// One byte from every head; the resulting kernels are sorted and unique.
inline void step_heads(const PdaTables& t, const std::vector<Config>& heads, uint8_t byte, std::vector<Config>& out) {
  out.clear();
  for (const Config& h : heads) {
    int32_t ns = t.step(h.state, byte);
    if (ns >= 0) out.push_back({ns, h.parent});
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

}  // namespace deepinfer::grammar
