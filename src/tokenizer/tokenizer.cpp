#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

bool is_word_char(std::string_view s, size_t i, bool before) {
  // A \w-like test on the code point just before (or at) byte i.
  if (before) {
    if (i == 0) return false;
    size_t st = i - 1;
    while (st > 0 && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
    char32_t cp;
    if (!decode_utf8(s, st, &cp)) return false;
    return cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_unicode_whitespace(cp));
  }
  if (i >= s.size()) return false;
  char32_t cp;
  if (!decode_utf8(s, i, &cp)) return false;
  return cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !is_unicode_whitespace(cp));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  std::ifstream f(file);
  if (!f) throw Error(file + ": cannot open (tokenizer.json expected)");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), file);
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": invalid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("model")) throw Error(source + ": not a tokenizer.json (no 'model')");
  auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
  try {
    t->normalizer_ = Normalizer::from_json(j.value("normalizer", nlohmann::json()), source);
    t->pre_ = PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()), source);
    t->bpe_ = Bpe::from_json(j["model"], source);
    int32_t max_id = t->bpe_.max_id();
    const nlohmann::json added = j.value("added_tokens", nlohmann::json::array());
    if (!added.is_array()) throw Error(source + ": added_tokens: expected a list");
    // Ids in [0, entries + unused allowance), each added token once, and one that shares an id
    // with the vocabulary must be the same token.
    const int64_t limit = static_cast<int64_t>(t->bpe_.vocab().size() + added.size()) + Bpe::kMaxUnusedIds;
    std::unordered_map<int32_t, std::string> vocab_by_id;
    for (const auto& [tok, id] : t->bpe_.vocab()) vocab_by_id.emplace(id, tok);
    std::unordered_map<std::string, size_t> added_by_content;
    for (size_t i = 0; i < added.size(); ++i) {
      const auto& a = added[i];
      const std::string where = source + ": added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) throw Error(where + ": expected an object");
      if (!a.contains("id") || !a["id"].is_number_integer()) throw Error(where + ".id: expected an integer id");
      if (!a.contains("content") || !a["content"].is_string()) throw Error(where + ".content: expected a string");
      const auto& idj = a["id"];
      if (idj.is_number_unsigned() ? idj.get<uint64_t>() >= static_cast<uint64_t>(limit)
                                   : (idj.get<int64_t>() < 0 || idj.get<int64_t>() >= limit))
        throw Error(where + ".id: " + idj.dump() + " is out of range [0, " + std::to_string(limit) + ")");
      AddedToken at;
      at.id = static_cast<int32_t>(idj.get<int64_t>());
      at.content = a["content"].get<std::string>();
      for (const char* flag : {"special", "lstrip", "rstrip", "normalized", "single_word"})
        if (a.contains(flag) && !a[flag].is_boolean()) throw Error(where + "." + flag + ": expected true or false");
      at.special = a.value("special", false);
      at.lstrip = a.value("lstrip", false);
      at.rstrip = a.value("rstrip", false);
      at.normalized = a.value("normalized", false);
      at.single_word = a.value("single_word", false);
      if (at.content.empty()) throw Error(where + " (id " + std::to_string(at.id) + ") has empty content");
      if (t->added_by_id_.count(at.id))
        throw Error(where + ": id " + std::to_string(at.id) + " is already used by added token '" +
                    t->added_[t->added_by_id_[at.id]].content + "'");
      if (!added_by_content.emplace(at.content, i).second)
        throw Error(where + ": '" + at.content + "' is listed twice (also added_tokens[" +
                    std::to_string(added_by_content[at.content]) + "])");
      auto same_id = vocab_by_id.find(at.id);
      if (same_id != vocab_by_id.end() && same_id->second != at.content)
        throw Error(where + ": id " + std::to_string(at.id) + " ('" + at.content + "') is model.vocab's '" + same_id->second +
                    "' as well");
      auto same_content = t->bpe_.vocab().find(at.content);
      if (same_content != t->bpe_.vocab().end() && same_content->second != at.id)
        throw Error(where + ": '" + at.content + "' has id " + std::to_string(at.id) + " but model.vocab gives it id " +
                    std::to_string(same_content->second));
      max_id = std::max(max_id, at.id);
      t->added_by_id_[at.id] = t->added_.size();
      t->added_.push_back(std::move(at));
    }
    t->vocab_size_ = max_id + 1;
    for (size_t k = 0; k < t->added_.size(); ++k)
      t->added_by_first_byte_[static_cast<unsigned char>(t->added_[k].content[0])].push_back(k);
    for (auto& v : t->added_by_first_byte_)
      std::stable_sort(v.begin(), v.end(), [&](size_t x, size_t y) { return t->added_[x].content.size() > t->added_[y].content.size(); });
    t->id_to_token_.assign(static_cast<size_t>(t->vocab_size_), std::string());
    for (const auto& [tok, id] : t->bpe_.vocab()) t->id_to_token_[static_cast<size_t>(id)] = tok;
    for (const auto& a : t->added_) t->id_to_token_[static_cast<size_t>(a.id)] = a.content;
    // Post-processor: TemplateProcessing "single" (others add nothing to ids).
    const auto& pp = j.value("post_processor", nlohmann::json());
    if (!pp.is_null() && !pp.is_object()) throw Error(source + ": post_processor: expected an object");
    std::vector<const nlohmann::json*> procs;
    if (pp.is_object() && pp.value("type", "") == "Sequence") {
      if (!pp.contains("processors") || !pp["processors"].is_array())
        throw Error(source + ": post_processor.processors: expected a list");
      for (const auto& p : pp.at("processors")) {
        if (!p.is_object()) throw Error(source + ": post_processor.processors: expected a list of objects");
        procs.push_back(&p);
      }
    } else if (pp.is_object()) {
      procs.push_back(&pp);
    }
    for (const auto* p : procs) {
      if (p->value("type", "") != "TemplateProcessing") continue;
      if (!p->contains("single") || !(*p)["single"].is_array())
        throw Error(source + ": post_processor (TemplateProcessing).single: expected a list");
      bool seen_a = false;
      for (const auto& piece : p->at("single")) {
        if (!piece.is_object()) throw Error(source + ": post_processor (TemplateProcessing).single: expected a list of objects");
        if (piece.contains("Sequence")) {
          seen_a = true;
        } else if (piece.contains("SpecialToken")) {
          const std::string name = piece["SpecialToken"].at("id").get<std::string>();
          if (!p->contains("special_tokens") || !(*p)["special_tokens"].is_object())
            throw Error(source + ": post_processor (TemplateProcessing).special_tokens: expected an object");
          const auto& sts = p->at("special_tokens");
          if (!sts.contains(name)) throw Error(source + ": post_processor special token '" + name + "' is not defined");
          if (!sts[name].is_object() || !sts[name].contains("ids") || !sts[name]["ids"].is_array())
            throw Error(source + ": post_processor special token '" + name + "': expected an object with a list 'ids'");
          for (const auto& id : sts[name].at("ids")) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= t->vocab_size_)
              throw Error(source + ": post_processor special token '" + name + "': id " + id.dump() +
                          " is not a token id in [0, " + std::to_string(t->vocab_size_) + ")");
            (seen_a ? t->post_suffix_ : t->post_prefix_).push_back(static_cast<int32_t>(id.get<int64_t>()));
          }
        }
      }
    }
    const auto& dec = j.value("decoder", nlohmann::json());
    if (!dec.is_null() && !dec.is_object()) throw Error(source + ": decoder: expected an object");
    t->byte_level_decoder_ = dec.is_null() ? t->pre_.byte_level() : dec.value("type", "") == "ByteLevel";
    if (dec.is_object() && dec.value("type", "") == "Sequence") {
      t->byte_level_decoder_ = false;
      if (!dec.contains("decoders") || !dec["decoders"].is_array()) throw Error(source + ": decoder.decoders: expected a list");
      for (const auto& d : dec.at("decoders"))
        if (d.is_object() && d.value("type", "") == "ByteLevel") t->byte_level_decoder_ = true;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": malformed tokenizer.json: " + e.what());
  }
  for (int32_t id = 0; id < t->vocab_size_; ++id)
    t->max_token_bytes_ = std::max(t->max_token_bytes_, t->token_bytes(id).size());
  // Every token then consumes at most max_token_bytes_ bytes of the text, unless a normaliser
  // rewrites it or an added token swallows the white space around it.
  t->bytes_bound_tokens_ = t->normalizer_.empty();
  for (const auto& a : t->added_) t->bytes_bound_tokens_ = t->bytes_bound_tokens_ && !a.lstrip && !a.rstrip;
  // BOS/EOS by DeepSeek's conventional names.
  if (auto b = t->token_to_id("<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")) t->bos_ = *b;
  if (auto e = t->token_to_id("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>")) t->eos_ = *e;
  return t;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added_)
    if (a.content == token) return a.id;
  auto it = bpe_.vocab().find(std::string(token));
  if (it != bpe_.vocab().end()) return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_size_) return kEmpty;
  return id_to_token_[static_cast<size_t>(id)];
}

bool Tokenizer::is_added(int32_t id) const { return added_by_id_.count(id) != 0; }

bool Tokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

int Tokenizer::find_added(std::string_view text, size_t from, size_t* begin, size_t* end) const {
  // Leftmost start first, then longest content.
  for (size_t i = from; i < text.size(); ++i) {
    int best = -1;
    size_t best_len = 0;
    for (size_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const auto& a = added_[k];
      if (text.compare(i, a.content.size(), a.content) != 0) continue;
      if (a.single_word && (is_word_char(text, i, true) || is_word_char(text, i + a.content.size(), false))) continue;
      best = static_cast<int>(k);  // candidates are longest first: the first match wins
      best_len = a.content.size();
      break;
    }
    if (best < 0) continue;
    size_t b = i, e = i + best_len;
    const auto& a = added_[static_cast<size_t>(best)];
    if (a.lstrip)
      while (b > from && is_unicode_whitespace(static_cast<unsigned char>(text[b - 1]))) --b;
    if (a.rstrip)
      while (e < text.size() && is_unicode_whitespace(static_cast<unsigned char>(text[e]))) ++e;
    *begin = b;
    *end = e;
    return best;
  }
  return -1;
}

void Tokenizer::encode_segment(std::string_view text, std::vector<int32_t>& out, size_t limit) const {
  if (text.empty()) return;
  const std::string norm = normalizer_.empty() ? std::string(text) : normalizer_.apply(text);
  for (const auto& piece : pre_.split(norm)) {
    bpe_.encode(piece, out);
    if (out.size() > limit) return;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode(text, add_special_tokens, std::numeric_limits<size_t>::max());
}

std::optional<size_t> Tokenizer::max_bytes_for(size_t n_tokens) const {
  if (!bytes_bound_tokens_) return std::nullopt;
  if (n_tokens > std::numeric_limits<size_t>::max() / max_token_bytes_) return std::nullopt;
  return n_tokens * max_token_bytes_;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens, size_t limit) const {
  // The regexes run with PCRE2_NO_UTF_CHECK: text that is not UTF-8 must never reach them.
  check_utf8(text, "text");
  std::vector<int32_t> out;
  if (add_special_tokens) out.insert(out.end(), post_prefix_.begin(), post_prefix_.end());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t b = 0, e = 0;
    const int k = added_.empty() ? -1 : find_added(text, pos, &b, &e);
    if (k < 0) {
      encode_segment(text.substr(pos), out, limit);
      break;
    }
    encode_segment(text.substr(pos, b - pos), out, limit);
    out.push_back(added_[static_cast<size_t>(k)].id);
    pos = e;
    if (out.size() > limit) return out;
  }
  if (out.size() > limit) return out;
  if (add_special_tokens) out.insert(out.end(), post_suffix_.begin(), post_suffix_.end());
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::string& tok = id_to_token(id);
  if (!byte_level_decoder_) return tok;
  // Every character must be a byte stand-in; otherwise the token's own UTF-8 is used.
  std::string bytes;
  size_t i = 0;
  while (i < tok.size()) {
    char32_t cp;
    const size_t n = decode_utf8(tok, i, &cp);
    const int b = n ? unicode_to_byte(cp) : -1;
    if (b < 0) return tok;
    bytes.push_back(static_cast<char>(b));
    i += n;
  }
  return bytes;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8_lossy(bytes);
}

}  // namespace deepinfer::tokenizer
