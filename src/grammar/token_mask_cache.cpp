#include "grammar/token_mask_cache.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "grammar/pda.h"

namespace deepinfer::grammar {

size_t MaskEntry::memory_bytes() const {
  size_t b = sizeof(*this) + accepted_bits.size() * 4 + accepted_ids.size() * 4;
  for (const auto& t : tags) b += t.size() * 4 + sizeof(t);
  for (const auto& g : groups) b += sizeof(g) + g.tags.size() * 4 + g.tokens.size() * 4;
  return b;
}

namespace {

struct TConfig {
  int32_t state = 0, parent = -1, tag = 0;
  bool operator==(const TConfig&) const = default;
  bool operator<(const TConfig& o) const {
    if (state != o.state) return state < o.state;
    if (parent != o.parent) return parent < o.parent;
    return tag < o.tag;
  }
};
struct TConfigHash {
  size_t operator()(const TConfig& c) const {
    uint64_t h = static_cast<uint32_t>(c.state) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint32_t>(c.parent) + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= static_cast<uint32_t>(c.tag) + 0x94D049BB133111EBull + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

class MaskBuilder {
 public:
  MaskBuilder(const PdaTables& t, const Vocabulary& v, int max_tag_depth) : t_(t), v_(v), max_depth_(max_tag_depth) {
    const size_t levels = static_cast<size_t>(v.max_token_bytes()) + 2;
    heads_.resize(levels);
    pops_.resize(levels);
    ovf_.assign(levels, 0);
    simple_.assign(levels, 0);
    sstate_.assign(levels, 0);
    arena_size_.assign(levels, 0);
  }

  MaskEntry run(int32_t state) {
    MaskEntry e;
    const auto& trie = v_.trie();
    const auto& trie_tokens = v_.trie_tokens();
    auto subtree_tokens = [&](size_t i, int32_t* b, int32_t* end) {
      *b = trie[i].tokens_begin;
      auto se = static_cast<size_t>(trie[i].subtree_end);
      *end = se < trie.size() ? trie[se].tokens_begin : static_cast<int32_t>(trie_tokens.size());
    };
    std::vector<int32_t> accepted;
    std::map<std::pair<std::vector<int32_t>, bool>, std::vector<int32_t>> uncertain;
    auto add_uncertain = [&](std::vector<int32_t> tags, bool full, int32_t b, int32_t end) {
      auto& list = uncertain[{std::move(tags), full}];
      list.insert(list.end(), trie_tokens.begin() + b, trie_tokens.begin() + end);
      e.n_uncertain += end - b;
    };
    kernels_.assign(1, {state, -1, 0});
    ovf_[0] = closure(0) ? 1 : 0;
    arena_size_[0] = arena_.size();
    mark_simple(0);
    std::vector<int32_t> alive;
    size_t i = 1;
    while (i < trie.size()) {
      const auto& node = trie[i];
      const size_t d = node.depth;
      if (simple_[d - 1]) {
        // Fast path: one configuration inside a rule, no call or end reachable: a table step.
        const int32_t ns = t_.step(sstate_[d - 1], node.byte);
        if (ns < 0) {
          int32_t b = 0, end = 0;
          subtree_tokens(i, &b, &end);
          e.n_rejected += end - b;
          i = static_cast<size_t>(node.subtree_end);
          continue;
        }
        if (t_.flags[static_cast<size_t>(ns)] == PdaTables::kHasBytes) {
          simple_[d] = 1;
          sstate_[d] = ns;
          ovf_[d] = 0;
          arena_size_[d] = arena_size_[d - 1];
          accepted.insert(accepted.end(), trie_tokens.begin() + node.tokens_begin, trie_tokens.begin() + node.tokens_end);
          ++i;
          continue;
        }
        heads_[d - 1].assign(1, TConfig{sstate_[d - 1], -1, 0});
      }
      arena_.truncate(arena_size_[d - 1]);
      kernels_.clear();
      for (const TConfig& h : heads_[d - 1]) {
        int32_t ns = t_.step(h.state, node.byte);
        if (ns >= 0) kernels_.push_back({ns, h.parent, h.tag});
      }
      if (kernels_.size() > 1) {
        std::sort(kernels_.begin(), kernels_.end());
        kernels_.erase(std::unique(kernels_.begin(), kernels_.end()), kernels_.end());
      }
      if (kernels_.empty()) {
        int32_t b = 0, end = 0;
        subtree_tokens(i, &b, &end);
        if (ovf_[d - 1]) {
          add_uncertain({}, true, b, end);
        } else {
          e.n_rejected += end - b;
        }
        i = static_cast<size_t>(node.subtree_end);
        continue;
      }
      const bool created = closure(d);
      ovf_[d] = (ovf_[d - 1] || created) ? 1 : 0;
      arena_size_[d] = arena_.size();
      if (node.tokens_end > node.tokens_begin) {
        bool acc = false;
        alive.clear();
        for (const TConfig& h : heads_[d]) {
          if (h.tag == 0) acc = true;
          alive.push_back(h.tag);
        }
        for (int32_t tg : pops_[d]) {
          if (tg == 0) acc = true;
          alive.push_back(tg);
        }
        if (acc) {
          accepted.insert(accepted.end(), trie_tokens.begin() + node.tokens_begin, trie_tokens.begin() + node.tokens_end);
        } else if (alive.empty() && !ovf_[d - 1]) {
          e.n_rejected += node.tokens_end - node.tokens_begin;
        } else {
          std::sort(alive.begin(), alive.end());
          alive.erase(std::unique(alive.begin(), alive.end()), alive.end());
          add_uncertain(alive, ovf_[d - 1] != 0, node.tokens_begin, node.tokens_end);
        }
      }
      mark_simple(d);
      if (heads_[d].empty()) {
        int32_t b = 0, end = 0;
        subtree_tokens(i, &b, &end);
        b = node.tokens_end;  // the node's own tokens are classified above
        if (ovf_[d]) {
          add_uncertain({}, true, b, end);
        } else {
          e.n_rejected += end - b;
        }
        i = static_cast<size_t>(node.subtree_end);
      } else {
        ++i;
      }
    }
    e.n_accepted = static_cast<int64_t>(accepted.size());
    const auto words = static_cast<size_t>(v_.bitmask_words());
    if (accepted.size() * 4 > words) {
      e.accepted_bits.assign(words, 0);
      for (int32_t id : accepted) e.accepted_bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    } else {
      std::sort(accepted.begin(), accepted.end());
      e.accepted_ids = std::move(accepted);
    }
    // Local tag numbering and paths (innermost return state first).
    std::unordered_map<int32_t, int32_t> local;
    for (auto& [key, tokens] : uncertain) {
      MaskEntry::Group g;
      g.full_check = key.second;
      for (int32_t tg : key.first) {
        auto [it, fresh] = local.emplace(tg, static_cast<int32_t>(e.tags.size()));
        if (fresh) {
          std::vector<int32_t> path;
          for (int32_t x = tg; x != 0; x = tags_[static_cast<size_t>(x)].parent) path.push_back(tags_[static_cast<size_t>(x)].ret);
          std::reverse(path.begin(), path.end());
          e.tags.push_back(std::move(path));
        }
        g.tags.push_back(it->second);
      }
      g.tokens = std::move(tokens);
      std::sort(g.tokens.begin(), g.tokens.end());
      e.groups.push_back(std::move(g));
    }
    return e;
  }

 private:
  struct Tag {
    int32_t parent = 0, ret = -1, depth = 0;
  };

  int32_t tag_of(int32_t parent, int32_t ret) {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(ret);
    auto [it, fresh] = tag_ids_.emplace(key, static_cast<int32_t>(tags_.size()));
    if (fresh) tags_.push_back({parent, ret, tags_[static_cast<size_t>(parent)].depth + 1});
    return it->second;
  }

  // Depth d can use the fast path: a single plain configuration and no overflow.
  void mark_simple(size_t d) {
    const auto& h = heads_[d];
    simple_[d] = (!ovf_[d] && pops_[d].empty() && h.size() == 1 && h[0].tag == 0 && h[0].parent < 0 &&
                  t_.flags[static_cast<size_t>(h[0].state)] == PdaTables::kHasBytes) ? 1 : 0;
    if (simple_[d]) sstate_[d] = h[0].state;
  }

  // kernels_ -> heads_[d], pops_[d]; returns true when a pop went past max_tag_depth.
  bool closure(size_t d) {
    auto& heads = heads_[d];
    auto& pops = pops_[d];
    heads.clear();
    pops.clear();
    if (kernels_.size() == 1 && t_.flags[static_cast<size_t>(kernels_[0].state)] == PdaTables::kHasBytes) {
      heads.push_back(kernels_[0]);
      return false;
    }
    bool overflow = false;
    work_.assign(kernels_.begin(), kernels_.end());
    seen_.clear();
    seen_set_.clear();
    while (!work_.empty()) {
      TConfig c = work_.back();
      work_.pop_back();
      if (seen_.size() < 32) {
        if (std::find(seen_.begin(), seen_.end(), c) != seen_.end()) continue;
        seen_.push_back(c);
        if (seen_.size() == 32) seen_set_.insert(seen_.begin(), seen_.end());
      } else if (!seen_set_.insert(c).second) {
        continue;
      }
      const uint8_t f = t_.flags[static_cast<size_t>(c.state)];
      if (f & PdaTables::kHasBytes) heads.push_back(c);
      if (f & PdaTables::kHasCalls) {
        for (int32_t k = t_.call_begin[static_cast<size_t>(c.state)]; k < t_.call_begin[static_cast<size_t>(c.state) + 1]; ++k) {
          const PdaCall& call = t_.calls[static_cast<size_t>(k)];
          work_.push_back({t_.rules[static_cast<size_t>(call.rule)].start, arena_.intern(call.ret, c.parent), c.tag});
        }
      }
      if (f & PdaTables::kFinal) {
        if (c.parent >= 0) {
          const StackNode& n = arena_.node(c.parent);
          work_.push_back({n.state, n.parent, c.tag});
        } else {
          pops.push_back(c.tag);
          if (tags_[static_cast<size_t>(c.tag)].depth < max_depth_) {
            const auto& sites = t_.rules[static_cast<size_t>(t_.rule_of[static_cast<size_t>(c.state)])].return_sites;
            for (int32_t ret : sites) work_.push_back({ret, -1, tag_of(c.tag, ret)});
          } else if (!t_.rules[static_cast<size_t>(t_.rule_of[static_cast<size_t>(c.state)])].return_sites.empty()) {
            overflow = true;
          }
        }
      }
    }
    return overflow;
  }

  const PdaTables& t_;
  const Vocabulary& v_;
  const int max_depth_;
  StackArena arena_;
  std::vector<Tag> tags_{Tag{}};
  std::unordered_map<uint64_t, int32_t> tag_ids_;
  std::vector<std::vector<TConfig>> heads_;
  std::vector<std::vector<int32_t>> pops_;
  std::vector<uint8_t> ovf_;
  std::vector<uint8_t> simple_;
  std::vector<int32_t> sstate_;
  std::vector<size_t> arena_size_;
  std::vector<TConfig> kernels_, work_, seen_;
  std::unordered_set<TConfig, TConfigHash> seen_set_;
};

}  // namespace

MaskEntry compute_mask_entry(const PdaTables& t, const Vocabulary& vocab, int32_t state, int max_tag_depth) {
  MaskBuilder b(t, vocab, max_tag_depth);
  return b.run(state);
}

}  // namespace deepinfer::grammar
