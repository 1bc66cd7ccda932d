#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {

size_t utf8_decode(std::string_view s, size_t i, uint32_t* cp) {
  if (i >= s.size()) return 0;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = 0;
  uint32_t v = 0, min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, v = b0 & 0x1Fu, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, v = b0 & 0x0Fu, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, v = b0 & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3Fu);
  }
  if (v < min || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    size_t n = utf8_decode(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

namespace {

constexpr uint32_t kMaxForLen[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

void encode_fixed(uint32_t cp, int len, uint8_t* out) {
  std::string s;
  utf8_append(s, cp);
  for (int i = 0; i < len; ++i) out[i] = static_cast<uint8_t>(s[static_cast<size_t>(i)]);
}

// [lo, hi] within one encoded length: split until every byte position is a full range.
void split_range(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  // Split at encoded-length boundaries first.
  for (int len = 1; len <= 4; ++len) {
    uint32_t max = kMaxForLen[len - 1];
    if (lo <= max && hi > max) {
      split_range(lo, max, out);
      split_range(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    Utf8Sequence s;
    s.len = 1;
    s.r[0] = {static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)};
    out.push_back(s);
    return;
  }
  int len = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  // Split so that, for each suffix of continuation bytes, lo's suffix is all-0 and hi's
  // suffix is all-1 unless the prefixes are equal.
  for (int k = 1; k < len; ++k) {
    uint32_t m = (1u << (6 * k)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_range(lo, lo | m, out);
        split_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_range(lo, (hi & ~m) - 1, out);
        split_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode_fixed(lo, len, a);
  encode_fixed(hi, len, b);
  Utf8Sequence s;
  s.len = len;
  for (int i = 0; i < len; ++i) s.r[i] = {a[i], b[i]};
  out.push_back(s);
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodeRange>& ranges) {
  std::vector<Utf8Sequence> out;
  for (const auto& r : ranges) split_range(r.lo, r.hi, out);
  return out;
}

}  // namespace deepinfer::grammar
