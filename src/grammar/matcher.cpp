#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace deepinfer::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : g_(std::move(grammar)), t_(&g_->tables()) { reset(); }

void Matcher::reset() {
  arena_.clear();
  kernels_.assign(1, {t_->rules[static_cast<size_t>(t_->root)].start, -1});
  terminated_ = false;
  history_.clear();
  history_kernels_.clear();
  refresh();
}

void Matcher::refresh() {
  heads_.clear();
  can_end_ = false;
  closure(*t_, arena_, kernels_, heads_, &can_end_, scratch_);
}

void Matcher::push_history() {
  Step s;
  s.kernels_begin = static_cast<uint32_t>(history_kernels_.size());
  s.kernels_count = static_cast<uint32_t>(kernels_.size());
  s.arena_size = static_cast<uint32_t>(arena_.size());
  s.terminated = terminated_;
  history_kernels_.insert(history_kernels_.end(), kernels_.begin(), kernels_.end());
  history_.push_back(s);
}

bool Matcher::advance(std::string_view bytes) {
  const size_t arena0 = arena_.size();
  std::vector<Config>& cur = buf_a_;
  std::vector<Config>& nxt = buf_b_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (i == 0) {
      step_heads(*t_, heads_, b, nxt);
    } else {
      buf_heads_.clear();
      bool dummy = false;
      closure(*t_, arena_, cur, buf_heads_, &dummy, scratch_);
      step_heads(*t_, buf_heads_, b, nxt);
    }
    if (nxt.empty()) {
      arena_.truncate(arena0);
      return false;
    }
    std::swap(cur, nxt);
  }
  kernels_.assign(cur.begin(), cur.end());
  refresh();
  return true;
}

bool Matcher::accept_token(int32_t id) {
  const Vocabulary& v = g_->vocabulary();
  if (terminated_ || id < 0 || id >= v.size()) return false;
  const auto& stops = v.stop_ids();
  if (std::binary_search(stops.begin(), stops.end(), id)) {
    if (!can_end_) return false;
    push_history();
    terminated_ = true;
    return true;
  }
  if (v.excluded(id)) return false;
  return accept_string(v.token(id));
}

bool Matcher::accept_string(std::string_view bytes) {
  if (terminated_ || bytes.empty()) return false;
  push_history();
  if (!advance(bytes)) {
    history_.pop_back();
    history_kernels_.resize(history_kernels_.size() - kernels_.size());
    return false;
  }
  return true;
}

void Matcher::rollback(int n_tokens) {
  if (n_tokens <= 0) return;
  DI_CHECK(static_cast<size_t>(n_tokens) <= history_.size(), "rollback past the start of the matcher's history");
  const Step s = history_[history_.size() - static_cast<size_t>(n_tokens)];
  kernels_.assign(history_kernels_.begin() + s.kernels_begin, history_kernels_.begin() + s.kernels_begin + s.kernels_count);
  history_kernels_.resize(s.kernels_begin);
  history_.resize(history_.size() - static_cast<size_t>(n_tokens));
  arena_.truncate(s.arena_size);
  terminated_ = s.terminated;
  refresh();
}

bool Matcher::check_from(const Config& k, std::string_view bytes) const {
  const size_t arena0 = arena_.size();
  std::vector<Config>& cur = check_a_;
  std::vector<Config>& nxt = check_b_;
  cur.assign(1, k);
  bool ok = true;
  for (char c : bytes) {
    buf_heads_.clear();
    bool dummy = false;
    closure(*t_, arena_, cur, buf_heads_, &dummy, scratch_);
    step_heads(*t_, buf_heads_, static_cast<uint8_t>(c), nxt);
    if (nxt.empty()) {
      ok = false;
      break;
    }
    std::swap(cur, nxt);
  }
  arena_.truncate(arena0);
  return ok;
}

bool Matcher::is_token_allowed(int32_t id) const {
  const Vocabulary& v = g_->vocabulary();
  if (terminated_ || id < 0 || id >= v.size()) return false;
  const auto& stops = v.stop_ids();
  if (std::binary_search(stops.begin(), stops.end(), id)) return can_end_;
  if (v.excluded(id)) return false;
  for (const Config& k : kernels_) {
    if (check_from(k, v.token(id))) return true;
  }
  return false;
}

void Matcher::fill_next_token_bitmask(std::span<uint32_t> bitmask) const {
  const Vocabulary& v = g_->vocabulary();
  const auto words = static_cast<size_t>(v.bitmask_words());
  DI_CHECK(bitmask.size() >= words, "token bitmask smaller than the vocabulary");
  uint32_t* m = bitmask.data();
  auto set = [m](int32_t id) { m[static_cast<size_t>(id) >> 5] |= 1u << (id & 31); };
  bool zeroed = false;
  if (!terminated_ && kernels_.size() == 1) {
    const MaskEntry& e = g_->mask_entry(kernels_[0].state);
    if (!e.accepted_bits.empty()) {
      std::memcpy(m, e.accepted_bits.data(), words * sizeof(uint32_t));
      std::fill(bitmask.begin() + static_cast<std::ptrdiff_t>(words), bitmask.end(), 0u);
      zeroed = true;
    }
  }
  if (!zeroed) std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (terminated_) {
    for (int32_t s : v.stop_ids()) set(s);
    return;
  }
  const int max_depth = g_->max_tag_depth();
  for (size_t ki = 0; ki < kernels_.size(); ++ki) {
    const Config& k = kernels_[ki];
    const MaskEntry& e = g_->mask_entry(k.state);
    if (!(zeroed && ki == 0)) {
      if (!e.accepted_bits.empty()) {
        const uint32_t* src = e.accepted_bits.data();
        for (size_t w = 0; w < words; ++w) m[w] |= src[w];
      } else {
        for (int32_t id : e.accepted_ids) set(id);
      }
    }
    if (e.groups.empty()) continue;
    // The real stack's return states, innermost first; -1 marks the bottom.
    chain_.clear();
    for (int32_t p = k.parent; static_cast<int>(chain_.size()) < max_depth; p = arena_.node(p).parent) {
      if (p < 0) {
        chain_.push_back(-1);
        break;
      }
      chain_.push_back(arena_.node(p).state);
    }
    tag_match_.assign(e.tags.size(), 0);
    for (size_t ti = 0; ti < e.tags.size(); ++ti) {
      const auto& path = e.tags[ti];
      bool ok = path.size() <= chain_.size();
      for (size_t j = 0; ok && j < path.size(); ++j) ok = path[j] == chain_[j];
      tag_match_[ti] = ok ? 1 : 0;
    }
    for (const auto& grp : e.groups) {
      bool match = false;
      for (int32_t ti : grp.tags) match = match || tag_match_[static_cast<size_t>(ti)];
      if (match) {
        for (int32_t id : grp.tokens) set(id);
      } else if (grp.full_check) {
        for (int32_t id : grp.tokens) {
          if (!(m[static_cast<size_t>(id) >> 5] >> (id & 31) & 1u) && check_from(k, v.token(id))) set(id);
        }
      }
    }
  }
  if (can_end_) {
    for (int32_t s : v.stop_ids()) set(s);
  }
}

std::string Matcher::find_jump_forward_string(size_t max_bytes) const {
  std::string out;
  if (terminated_) return out;
  const size_t arena0 = arena_.size();
  std::vector<Config> cur = kernels_, heads = heads_, nxt;
  bool can_end = can_end_;
  while (!can_end && !heads.empty() && out.size() < max_bytes) {
    std::array<uint64_t, 4> bits{0, 0, 0, 0};
    for (const Config& h : heads) {
      const auto& fb = t_->first_bytes[static_cast<size_t>(h.state)];
      for (size_t w = 0; w < 4; ++w) bits[w] |= fb[w];
    }
    int count = 0, byte = -1;
    for (size_t w = 0; w < 4; ++w) {
      count += std::popcount(bits[w]);
      if (bits[w]) byte = static_cast<int>(w * 64) + std::countr_zero(bits[w]);
    }
    if (count != 1) break;
    step_heads(*t_, heads, static_cast<uint8_t>(byte), nxt);
    out += static_cast<char>(byte);
    std::swap(cur, nxt);
    heads.clear();
    can_end = false;
    closure(*t_, arena_, cur, heads, &can_end, scratch_);
  }
  arena_.truncate(arena0);
  return out;
}

int64_t Matcher::min_bytes_to_end() const {
  if (terminated_) return 0;
  int64_t best = INT64_MAX;
  for (const Config& k : kernels_) {
    int64_t d = t_->min_bytes_to_end[static_cast<size_t>(k.state)];
    for (int32_t p = k.parent; p >= 0; p = arena_.node(p).parent) d += t_->min_bytes_to_end[static_cast<size_t>(arena_.node(p).state)];
    best = std::min(best, d);
  }
  return best;
}

std::string Matcher::debug_state() const {
  std::vector<std::string> parts;
  for (const Config& k : kernels_) {
    std::string s = std::to_string(k.state);
    for (int32_t p = k.parent; p >= 0; p = arena_.node(p).parent) {
      s += ',';
      s += std::to_string(arena_.node(p).state);
    }
    parts.push_back(s);
  }
  std::sort(parts.begin(), parts.end());
  std::string out = terminated_ ? "T|" : "|";
  for (const auto& p : parts) {
    out += '[';
    out += p;
    out += ']';
  }
  return out;
}

}  // namespace deepinfer::grammar
