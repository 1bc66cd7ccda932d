// to_python_json: JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes
// it (", " and ": " separators, insertion order, repr-style floats), which the chat
// encoding's tool schemas and tool-call arguments depend on.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {

namespace {

using Json = nlohmann::ordered_json;

void dump_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Python's float.__repr__: shortest round-trip digits; exponent form when the decimal
// point position is <= -4 or > 16, else positional with at least one fractional digit.
void dump_float(std::string& out, double v) {
  if (std::isnan(v)) { out += "NaN"; return; }
  if (std::isinf(v)) { out += v < 0 ? "-Infinity" : "Infinity"; return; }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // "-d.ddde+XX"
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, e))
    if (c != '.') digits += c;
  const int exp10 = std::atoi(std::string(sci.substr(e + 1)).c_str());
  const long decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const long ndig = static_cast<long>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (ndig > 1) {
      out += '.';
      out.append(digits, 1);
    }
    const int x = exp10 < 0 ? -exp10 : exp10;
    out += exp10 < 0 ? "e-" : "e+";
    if (x < 10) out += '0';
    out += std::to_string(x);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt < ndig) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt));
  } else {
    out += digits;
    out.append(static_cast<size_t>(decpt - ndig), '0');
    out += ".0";
  }
}

void dump(std::string& out, const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::number_integer: out += std::to_string(j.get<int64_t>()); return;
    case Json::value_t::number_unsigned: out += std::to_string(j.get<uint64_t>()); return;
    case Json::value_t::number_float: dump_float(out, j.get<double>()); return;
    case Json::value_t::string: dump_string(out, j.get_ref<const std::string&>()); return;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& e : j) {
        if (!first) out += ", ";
        first = false;
        dump(out, e);
      }
      out += ']';
      return;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(out, it.key());
        out += ": ";
        dump(out, it.value());
      }
      out += '}';
      return;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded: break;
  }
  throw Error("chat: a " + std::string(j.type_name()) + " value cannot be written as JSON text");
}

// ---- Pass 1: reading and validating ----


}  // namespace

std::string to_python_json(const nlohmann::ordered_json& value) {
  std::string out;
  dump(out, value);
  return out;
}

}  // namespace deepinfer::tokenizer
