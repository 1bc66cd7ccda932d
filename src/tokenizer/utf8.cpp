#include "tokenizer/utf8.h"

#include <cstdio>

#include "core/error.h"

namespace deepinfer::tokenizer {

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[t[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
inline unsigned byte_at(std::string_view s, size_t i) { return static_cast<unsigned char>(s[i]); }
// Valid range of the second byte for a lead byte (Unicode Table 3-7).
inline bool second_ok(unsigned lead, unsigned b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}
inline int seq_len(unsigned lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}
}  // namespace

size_t decode_utf8(std::string_view s, size_t i, char32_t* cp) {
  const unsigned lead = byte_at(s, i);
  const int n = seq_len(lead);
  if (n == 0 || i + static_cast<size_t>(n) > s.size()) return 0;
  if (n == 1) {
    *cp = lead;
    return 1;
  }
  if (!second_ok(lead, byte_at(s, i + 1))) return 0;
  char32_t v = lead & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    const unsigned b = byte_at(s, i + static_cast<size_t>(k));
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return static_cast<size_t>(n);
}

size_t invalid_subpart_length(std::string_view s, size_t i) {
  const unsigned lead = byte_at(s, i);
  const int n = seq_len(lead);
  if (n <= 1) return 1;
  if (i + 1 >= s.size() || !second_ok(lead, byte_at(s, i + 1))) return 1;
  size_t k = 2;
  while (k < static_cast<size_t>(n) && i + k < s.size() && (byte_at(s, i + k) & 0xC0) == 0x80) ++k;
  return k;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp;
    const size_t n = decode_utf8(bytes, i, &cp);
    if (n) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_subpart_length(bytes, i);
    }
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  // Walk back over at most 3 trailing bytes: if they form the start of a sequence that more
  // bytes could complete, the prefix stops before it.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const unsigned b = byte_at(bytes, i);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int len = seq_len(b);
    if (len > static_cast<int>(back) && invalid_subpart_length(bytes, i) == back) return i;
    return n;
  }
  return n;
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs are the common case: skip them a byte at a time without decoding.
    if (byte_at(s, i) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    const size_t n = decode_utf8(s, i, &cp);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view s, const std::string& field) {
  const size_t at = find_invalid_utf8(s);
  if (at == std::string_view::npos) return;
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", byte_at(s, at));
  throw Error(field + ": invalid UTF-8 at byte offset " + std::to_string(at) + " (byte " + hex + ")");
}

}  // namespace deepinfer::tokenizer
