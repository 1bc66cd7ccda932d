#include "json_validator.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>

#include <gtest/gtest.h>

namespace deepinfer::grammar::testing {
namespace {

using ojson = nlohmann::ordered_json;

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_integer(const ojson& v) {
  if (v.is_number_integer()) return true;
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d);
}

long double num(const ojson& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  return static_cast<long double>(v.get<double>());
}

bool has_type(const ojson& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return is_integer(v);
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

// JSON equality with numbers compared by value (1 == 1.0).
bool json_equal(const ojson& a, const ojson& b) {
  if (a.is_number() && b.is_number()) return num(a) == num(b);
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto& [k, v] : a.items()) {
      if (!b.contains(k) || !json_equal(v, b[k])) return false;
    }
    return true;
  }
  return a == b;
}

bool check_format(const std::string& f, const std::string& s) {
  // PCRE2 (not std::regex: GCC 12 warns falsely inside <regex> under the sanitizers).
  static const std::string time = R"(([01]\d|2[0-3]):([0-5]\d):([0-5]\d)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  auto valid_date = [&](const std::string& d) {
    if (!regex_matches(R"(\d{4}-\d{2}-\d{2})", d, true)) return false;
    int y = std::stoi(d.substr(0, 4)), mo = std::stoi(d.substr(5, 2)), day = std::stoi(d.substr(8, 2));
    if (y < 1 || mo < 1 || mo > 12 || day < 1) return false;
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return day <= dim[mo - 1] + (mo == 2 && leap ? 1 : 0);
  };
  if (f == "date") return valid_date(s);
  if (f == "time") return regex_matches(time, s, true);
  if (f == "date-time") {
    size_t t = s.find('T');
    return t != std::string::npos && valid_date(s.substr(0, t)) && regex_matches(time, s.substr(t + 1), true);
  }
  if (f == "email") {
    size_t at = s.find('@');
    return at != std::string::npos && at > 0 && at + 1 < s.size();
  }
  if (f == "uuid") return regex_matches(R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})", s, true);
  if (f == "ipv4") return regex_matches(R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))", s, true);
  // RFC 1123 (each label at most 63 characters, no leading / trailing hyphen, 253 in all).
  static const std::string host = R"((?!.{254})([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  if (f == "hostname" || f == "idn-hostname") return regex_matches(host, s, true) && !regex_matches(R"((.*\.)?[0-9]+)", s, true);
  if (f == "ipv6") return regex_matches(R"([0-9A-Fa-f]{1,4}(:[0-9A-Fa-f]{1,4}){7})", s, true) || regex_matches(R"(([0-9A-Fa-f:]*::[0-9A-Fa-f:]*))", s, true);
  if (f == "uri" || f == "iri" || f == "uri-reference" || f == "iri-reference") {
    // RFC 3986 appendix B's split, each part checked against its character set.
    return regex_matches(R"([A-Za-z][A-Za-z0-9+.-]*:(//([A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*)?([A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*(\?([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?(#([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?)", s, true);
  }
  if (f == "json-pointer") return regex_matches(R"((/([^/~]|~[01])*)*)", s, true);
  if (f == "relative-json-pointer") return regex_matches(R"((0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*))", s, true);
  if (f == "duration") return regex_matches(R"(P(\d+[DW]|T\d+[HMS]|\d+Y(\d+M)?(\d+D)?))", s, true);
  return true;
}

class Validator {
 public:
  explicit Validator(const ojson& root) : root_(root) {}

  std::string check(const ojson& s, const ojson& v, const std::string& where, int depth = 0) {
    if (depth > 200) return where + ": too deep";
    if (s.is_boolean()) return s.get<bool>() ? "" : where + ": schema false";
    if (s.contains("$ref")) {
      std::string e = check(resolve(s["$ref"].get<std::string>()), v, where, depth + 1);
      if (!e.empty()) return e;
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) {
        ok = has_type(v, s["type"].get<std::string>());
      } else {
        for (const auto& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
      }
      if (!ok) return where + ": wrong type, want " + s["type"].dump() + " got " + v.dump();
    }
    if (s.contains("const") && !json_equal(s["const"], v)) return where + ": const mismatch";
    if (s.contains("enum")) {
      bool ok = false;
      for (const auto& e : s["enum"]) ok = ok || json_equal(e, v);
      if (!ok) return where + ": not in enum";
    }
    if (s.contains("not") && check(s["not"], v, where, depth + 1).empty()) return where + ": valid against 'not'";
    if (s.contains("if")) {
      const bool holds = check(s["if"], v, where, depth + 1).empty();
      const char* branch = holds ? "then" : "else";
      if (s.contains(branch)) {
        std::string e = check(s[branch], v, where + " (" + branch + ")", depth + 1);
        if (!e.empty()) return e;
      }
    }
    if (s.contains("allOf")) {
      for (const auto& sub : s["allOf"]) {
        std::string e = check(sub, v, where, depth + 1);
        if (!e.empty()) return e;
      }
    }
    if (s.contains("anyOf")) {
      bool ok = false;
      for (const auto& sub : s["anyOf"]) ok = ok || check(sub, v, where, depth + 1).empty();
      if (!ok) return where + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& sub : s["oneOf"]) n += check(sub, v, where, depth + 1).empty() ? 1 : 0;
      if (n != 1) return where + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (v.is_number()) {
      const long double x = num(v);
      if (s.contains("minimum") && x < num(s["minimum"])) return where + ": below minimum";
      if (s.contains("maximum") && x > num(s["maximum"])) return where + ": above maximum";
      if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() && x <= num(s["exclusiveMinimum"])) return where + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() && x >= num(s["exclusiveMaximum"])) return where + ": not below exclusiveMaximum";
    }
    if (v.is_string()) {
      const std::string& str = v.get_ref<const std::string&>();
      const size_t n = code_points(str);
      if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return where + ": shorter than minLength";
      if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return where + ": longer than maxLength";
      if (s.contains("pattern") && !regex_matches(s["pattern"].get<std::string>(), str, false)) return where + ": pattern mismatch: " + str;
      if (s.contains("format") && !check_format(s["format"].get<std::string>(), str)) return where + ": bad " + s["format"].get<std::string>() + ": " + str;
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return where + ": fewer than minItems";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return where + ": more than maxItems";
      if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
        for (size_t i = 0; i < v.size(); ++i) {
          for (size_t j = i + 1; j < v.size(); ++j) {
            if (json_equal(v[i], v[j])) return where + ": items " + std::to_string(i) + " and " + std::to_string(j) + " are equal";
          }
        }
      }
      size_t n_prefix = 0;
      const ojson* rest = s.contains("items") ? &s["items"] : nullptr;
      const ojson* prefix = s.contains("prefixItems") ? &s["prefixItems"] : nullptr;
      if (rest && rest->is_array()) {  // draft 7 tuple
        prefix = rest;
        rest = s.contains("additionalItems") ? &s["additionalItems"] : nullptr;
      }
      if (prefix) {
        n_prefix = prefix->size();
        for (size_t i = 0; i < n_prefix && i < v.size(); ++i) {
          std::string e = check((*prefix)[i], v[i], where + "/" + std::to_string(i), depth + 1);
          if (!e.empty()) return e;
        }
      }
      if (rest) {
        for (size_t i = n_prefix; i < v.size(); ++i) {
          std::string e = check(*rest, v[i], where + "/" + std::to_string(i), depth + 1);
          if (!e.empty()) return e;
        }
      }
    }
    if (v.is_object()) {
      if (s.contains("required")) {
        for (const auto& r : s["required"]) {
          if (!v.contains(r.get<std::string>())) return where + ": missing required '" + r.get<std::string>() + "'";
        }
      }
      if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return where + ": fewer than minProperties";
      if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return where + ": more than maxProperties";
      for (const char* kw : {"dependentRequired", "dependentSchemas", "dependencies"}) {
        if (!s.contains(kw)) continue;
        for (auto& [k, d] : s[kw].items()) {
          if (!v.contains(k)) continue;
          if (d.is_array()) {
            for (const auto& r : d) {
              if (!v.contains(r.get<std::string>())) return where + ": '" + k + "' present without '" + r.get<std::string>() + "'";
            }
          } else {
            std::string e = check(d, v, where + " (" + kw + " of " + k + ")", depth + 1);
            if (!e.empty()) return e;
          }
        }
      }
      for (auto& [k, x] : v.items()) {
        if (s.contains("propertyNames")) {
          std::string e = check(s["propertyNames"], ojson(k), where + " (property name " + k + ")", depth + 1);
          if (!e.empty()) return e;
        }
        bool matched = false;
        if (s.contains("patternProperties")) {
          for (auto& [pat, ps] : s["patternProperties"].items()) {
            if (!regex_matches(pat, k, false)) continue;
            matched = true;
            std::string e = check(ps, x, where + "/" + k, depth + 1);
            if (!e.empty()) return e;
          }
        }
        if (s.contains("properties") && s["properties"].contains(k)) {
          std::string e = check(s["properties"][k], x, where + "/" + k, depth + 1);
          if (!e.empty()) return e;
        } else if (!matched && s.contains("additionalProperties")) {
          std::string e = check(s["additionalProperties"], x, where + "/" + k, depth + 1);
          if (!e.empty()) return e;
        }
      }
    }
    return "";
  }

 private:
  const ojson& resolve(const std::string& ref) {
    const ojson* cur = &root_;
    size_t i = 1;
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      std::string tok = ref.substr(i + 1, (j == std::string::npos ? ref.size() : j) - i - 1);
      std::string key;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size()) {
          key += tok[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          key += tok[k];
        }
      }
      cur = cur->is_array() ? &(*cur)[std::stoul(key)] : &(*cur)[key];
      i = j == std::string::npos ? ref.size() : j;
    }
    return *cur;
  }
  const ojson& root_;
};

}  // namespace

bool regex_matches(const std::string& pattern, const std::string& text, bool full) {
  int err = 0;
  PCRE2_SIZE off = 0;
  // \uHHHH (ECMA-262 / Python syntax) needs ALT_BSUX; EXTRA_ALT_BSUX keeps \x{..} and \u{..}.
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_compile_extra_options(cc, PCRE2_EXTRA_ALT_BSUX);
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_ALT_BSUX, &err,
                                 &off, cc);
  pcre2_compile_context_free(cc);
  if (!re) {
    ADD_FAILURE() << "PCRE2 cannot compile /" << pattern << "/ (error " << err << " at " << off << ")";
    return false;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  uint32_t opts = full ? (PCRE2_ANCHORED | PCRE2_ENDANCHORED) : 0;
  int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, opts, md, nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

std::string validate_json(const ojson& schema, const ojson& instance) {
  Validator v(schema);
  return v.check(schema, instance, "#");
}

}  // namespace deepinfer::grammar::testing
