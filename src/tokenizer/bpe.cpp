#include "tokenizer/bpe.h"

#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

Bpe Bpe::from_json(const nlohmann::json& m, const std::string& source) {
  if (!m.is_object()) throw Error(source + ": model: expected an object, got " + m.dump().substr(0, 40));
  if (m.contains("type") && !m["type"].is_string()) throw Error(source + ": model.type: expected a string");
  if (m.contains("merges") && !m["merges"].is_array()) throw Error(source + ": model.merges: expected a list");
  if (m.contains("unk_token") && !m["unk_token"].is_string() && !m["unk_token"].is_null())
    throw Error(source + ": model.unk_token: expected a string");
  if (m.value("type", "BPE") != "BPE") throw Error(source + ": model type '" + m.value("type", "") + "' is not supported (BPE is)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw Error(source + ": model.vocab: expected an object");
  if (m.contains("byte_fallback") && m["byte_fallback"].is_boolean() && m["byte_fallback"].get<bool>())
    throw Error(source + ": model.byte_fallback = true is not supported");
  Bpe b;
  // Ids in [0, entries + kMaxUnusedIds) and each once; the tokenizer sizes its id table by
  // the largest.
  const int64_t limit = static_cast<int64_t>(m["vocab"].size()) + kMaxUnusedIds;
  std::unordered_map<int32_t, const std::string*> by_id;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const auto& v = it.value();
    if (!v.is_number_integer()) throw Error(source + ": model.vocab['" + it.key() + "']: expected an integer id, got " + v.dump());
    if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(limit) : (v.get<int64_t>() < 0 || v.get<int64_t>() >= limit))
      throw Error(source + ": model.vocab['" + it.key() + "']: id " + v.dump() + " is out of range [0, " +
                  std::to_string(limit) + ") (" + std::to_string(m["vocab"].size()) + " entries)");
    const int32_t id = static_cast<int32_t>(v.get<int64_t>());
    auto [prev, fresh] = by_id.emplace(id, &it.key());
    if (!fresh)
      throw Error(source + ": model.vocab['" + it.key() + "']: id " + std::to_string(id) + " is already taken by '" +
                  *prev->second + "'");
    b.vocab_.emplace(it.key(), id);
    b.max_id_ = std::max(b.max_id_, id);
  }
  if (m.contains("ignore_merges") && m["ignore_merges"].is_boolean()) b.ignore_merges_ = m["ignore_merges"].get<bool>();
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = b.vocab_.find(m["unk_token"].get<std::string>());
    if (it != b.vocab_.end()) b.unk_id_ = it->second;
  }
  const auto& merges = m.value("merges", nlohmann::json::array());
  int32_t rank = 0;
  for (const auto& mg : merges) {
    std::string a, c;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const auto sp = s.find(' ', 1);
      if (sp == std::string::npos) throw Error(source + ": merge " + std::to_string(rank) + " '" + s + "' is not 'a b'");
      a = s.substr(0, sp);
      c = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      c = mg[1].get<std::string>();
    } else {
      throw Error(source + ": merge " + std::to_string(rank) + " is neither 'a b' nor [\"a\", \"b\"]");
    }
    auto ia = b.vocab_.find(a), ic = b.vocab_.find(c), in = b.vocab_.find(a + c);
    if (ia == b.vocab_.end() || ic == b.vocab_.end() || in == b.vocab_.end())
      throw Error(source + ": merge " + std::to_string(rank) + " ('" + a + "', '" + c + "') refers to a token not in the vocabulary");
    b.merges_.emplace(key(ia->second, ic->second), Merge{rank, in->second});
    ++rank;
  }
  return b;
}

void Bpe::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols: one per character, linked list; merges taken from a min-heap of (rank, pos).
  struct Sym {
    int32_t id;
    int prev, next;
    size_t len;  // bytes of the piece this symbol covers (0 = merged away)
  };
  std::vector<Sym> syms;
  size_t i = 0;
  while (i < piece.size()) {
    char32_t cp;
    size_t n = decode_utf8(piece, i, &cp);
    if (n == 0) n = 1;
    auto it = vocab_.find(std::string(piece.substr(i, n)));
    const int32_t id = it != vocab_.end() ? it->second : unk_id_;
    if (id >= 0) syms.push_back({id, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1, n});
    i += n;
  }
  if (syms.empty()) return;
  for (size_t k = 0; k < syms.size(); ++k) {
    syms[k].prev = static_cast<int>(k) - 1;
    syms[k].next = k + 1 < syms.size() ? static_cast<int>(k) + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int pos) {
    if (pos < 0) return;
    const int nx = syms[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    auto it = merges_.find(key(syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(nx)].id));
    if (it != merges_.end())
      heap.push({it->second.rank, pos, syms[static_cast<size_t>(pos)].id, syms[static_cast<size_t>(nx)].id, it->second.new_id});
  };
  for (size_t k = 0; k + 1 < syms.size(); ++k) push(static_cast<int>(k));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& l = syms[static_cast<size_t>(c.pos)];
    if (l.len == 0 || l.id != c.left || l.next < 0) continue;
    Sym& r = syms[static_cast<size_t>(l.next)];
    if (r.id != c.right) continue;
    l.id = c.new_id;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.pos;
    push(l.prev);
    push(c.pos);
  }
  for (int k = 0; k >= 0; k = syms[static_cast<size_t>(k)].next) out.push_back(syms[static_cast<size_t>(k)].id);
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() < 256;
  if (cacheable) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    auto it = cache_->map.find(std::string(piece));
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lk(cache_->mu);
    if (cache_->map.size() > 200000) cache_->map.clear();
    cache_->map.emplace(std::string(piece), std::move(ids));
  }
}

}  // namespace deepinfer::tokenizer
