#include "tokenizer/engram_map.h"

#include <unordered_map>

#include "tokenizer/normalizer.h"

namespace deepinfer::tokenizer {

namespace {
std::string collapse_space_runs(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool in_run = false;
  for (char c : s) {
    const bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (ws) {
      if (!in_run) out.push_back(' ');
      in_run = true;
    } else {
      out.push_back(c);
      in_run = false;
    }
  }
  return out;
}
}  // namespace

std::string engram_normalize(const std::string& text) {
  std::string s = lowercase(strip_marks(nfd(nfkc(text))));
  s = collapse_space_runs(s);
  if (s == " ") return s;  // the sentinel keeps a lone space through the strip
  return strip_whitespace(s);
}

EngramTokenMap build_engram_token_map(const Tokenizer& tok) {
  EngramTokenMap m;
  m.map.resize(static_cast<size_t>(tok.vocab_size()));
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const int32_t one[1] = {id};
    const std::string text = tok.decode(one, /*skip_special_tokens=*/false);
    std::string key;
    if (text.find("\xEF\xBF\xBD") != std::string::npos) {
      key = tok.id_to_token(id);
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    auto [it, inserted] = ids.emplace(key, m.n_keys);
    if (inserted) ++m.n_keys;
    m.map[static_cast<size_t>(id)] = it->second;
  }
  return m;
}

}  // namespace deepinfer::tokenizer
