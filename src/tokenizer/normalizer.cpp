#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

std::string map_with(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // invalid UTF-8 cannot come from a std::string we built; keep as is
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

template <typename F>
void for_each_cp(std::string_view s, F f) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    size_t n = decode_utf8(s, i, &cp);
    if (n == 0) {
      cp = 0xFFFD;
      n = 1;
    }
    f(cp, s.substr(i, n));
    i += n;
  }
}

}  // namespace

std::string nfc(std::string_view s) { return map_with(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); }
std::string nfd(std::string_view s) { return map_with(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); }
std::string nfkc(std::string_view s) { return map_with(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); }
std::string nfkd(std::string_view s) { return map_with(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); }

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_cp(s, [&](char32_t cp, std::string_view) {
    if (cp == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
      append_utf8(out, 'i');
      append_utf8(out, 0x307);
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  });
  return out;
}

std::string strip_marks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_cp(s, [&](char32_t cp, std::string_view bytes) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (cat != UTF8PROC_CATEGORY_MN && cat != UTF8PROC_CATEGORY_MC && cat != UTF8PROC_CATEGORY_ME) out.append(bytes);
  });
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string strip_whitespace(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      char32_t cp;
      size_t n = decode_utf8(s, b, &cp);
      if (n == 0 || !is_unicode_whitespace(cp)) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      size_t st = e - 1;
      while (st > b && (static_cast<unsigned char>(s[st]) & 0xC0) == 0x80) --st;
      char32_t cp;
      size_t n = decode_utf8(s, st, &cp);
      if (n == 0 || st + n != e || !is_unicode_whitespace(cp)) break;
      e = st;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t i = 0;
  while (true) {
    size_t j = s.find(from, i);
    if (j == std::string_view::npos) break;
    out.append(s.substr(i, j - i));
    out.append(to);
    i = j + from.size();
  }
  out.append(s.substr(i));
  return out;
}

Normalizer Normalizer::from_json(const nlohmann::json& j, const std::string& source) {
  Normalizer n;
  if (j.is_null()) return n;
  std::vector<const nlohmann::json*> list;
  if (j.value("type", "") == "Sequence") {
    for (const auto& s : j.at("normalizers")) list.push_back(&s);
  } else {
    list.push_back(&j);
  }
  for (const auto* sp : list) {
    Step st;
    st.type = sp->value("type", "");
    if (st.type == "Replace") {
      const auto& pat = sp->at("pattern");
      if (!pat.contains("String")) throw Error(source + ": normalizer Replace with a regex pattern is not supported");
      st.a = pat["String"].get<std::string>();
      st.b = sp->value("content", "");
    } else if (st.type == "Prepend") {
      st.a = sp->value("prepend", "");
    } else if (st.type == "Strip") {
      st.left = sp->value("strip_left", true);
      st.right = sp->value("strip_right", true);
    } else if (st.type != "NFC" && st.type != "NFD" && st.type != "NFKC" && st.type != "NFKD" && st.type != "Lowercase" &&
               st.type != "StripAccents") {
      throw Error(source + ": normalizer type '" + st.type + "' is not supported");
    }
    n.steps_.push_back(std::move(st));
  }
  return n;
}

std::string Normalizer::apply(std::string_view s) const {
  std::string cur(s);
  for (const auto& st : steps_) {
    if (st.type == "NFC") cur = nfc(cur);
    else if (st.type == "NFD") cur = nfd(cur);
    else if (st.type == "NFKC") cur = nfkc(cur);
    else if (st.type == "NFKD") cur = nfkd(cur);
    else if (st.type == "Lowercase") cur = lowercase(cur);
    else if (st.type == "StripAccents") cur = strip_marks(cur);
    else if (st.type == "Strip") cur = strip_whitespace(cur, st.left, st.right);
    else if (st.type == "Replace") cur = replace_all(cur, st.a, st.b);
    else if (st.type == "Prepend") cur = cur.empty() ? cur : st.a + cur;
  }
  return cur;
}

}  // namespace deepinfer::tokenizer
