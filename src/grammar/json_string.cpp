#include "grammar/json_string.h"

#include <cstdio>

#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

std::string escape_code_point(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    return buf;
  }
  std::string s;
  utf8_append(s, cp);
  return s;
}

bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

}  // namespace

std::string json_escape(std::string_view utf8) {
  std::string out;
  size_t i = 0;
  while (i < utf8.size()) {
    uint32_t cp = 0;
    size_t n = utf8_decode(utf8, i, &cp);
    if (n == 0) {  // not produced by the callers; keep the byte
      out += utf8[i++];
      continue;
    }
    out += escape_code_point(cp);
    i += n;
  }
  return out;
}

int32_t json_char_class(Grammar& g, const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> plain;
  std::vector<int32_t> alts;
  for (const auto& r : ranges) {
    uint32_t lo = r.lo;
    while (lo <= r.hi) {
      if (needs_escape(lo)) {
        alts.push_back(g.literal(escape_code_point(lo)));
        if (lo == r.hi) break;
        ++lo;
        continue;
      }
      // Longest run from lo without a code point that needs escaping.
      uint32_t hi = r.hi;
      if (lo < '"' && hi >= '"') hi = '"' - 1;
      if (lo < '\\' && hi >= '\\') hi = '\\' - 1;
      plain.push_back({lo, hi});
      if (hi == r.hi) break;
      lo = hi + 1;
    }
  }
  if (!plain.empty()) alts.insert(alts.begin(), g.char_class(std::move(plain)));
  if (alts.empty()) return g.char_class({});  // matches nothing
  return g.alt(std::move(alts));
}

int32_t json_string_char(Grammar& g) {
  int32_t raw = g.char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, /*negated=*/true);
  int32_t simple = g.seq({g.literal("\\"), g.char_class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                        {'n', 'n'}, {'r', 'r'}, {'t', 't'}})});
  int32_t hex = g.char_class({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
  // \uXXXX without the surrogates D800..DFFF.
  int32_t not_d = g.seq({g.char_class({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}}), g.repeat(hex, 3, 3)});
  int32_t d_low = g.seq({g.char_class({{'D', 'D'}, {'d', 'd'}}), g.char_class({{'0', '7'}}), g.repeat(hex, 2, 2)});
  int32_t unicode = g.seq({g.literal("\\u"), g.alt({not_d, d_low})});
  return g.alt({raw, simple, unicode});
}

}  // namespace deepinfer::grammar
