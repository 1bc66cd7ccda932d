#include "cli/flags.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace deepinfer::cli {

std::map<std::string, std::string> parse_flags(const std::vector<std::string>& args, const std::vector<std::string>& known,
                                               const std::string& cmd, const std::vector<std::string>& switches) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out.emplace("help", "1");
      continue;
    }
    if (a.rfind("--", 0) != 0) throw Error("deepinfer " + cmd + ": unexpected argument '" + a + "'");
    std::string key = a.substr(2), val;
    auto eq = key.find('=');
    if (eq != std::string::npos) {
      val = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (std::find(switches.begin(), switches.end(), key) != switches.end()) {
      val = "true";  // a switch: --flag alone means true
    } else {
      if (i + 1 >= args.size()) throw Error("deepinfer " + cmd + ": flag --" + key + " needs a value");
      val = args[++i];
    }

    if (std::find(known.begin(), known.end(), key) == known.end())
      throw Error("deepinfer " + cmd + ": unknown flag --" + key);
    out[key] = val;
  }
  return out;
}

namespace {
std::string range_text(int64_t lo, int64_t hi) {
  if (lo == INT64_MIN && hi == INT64_MAX) return "an integer";
  if (hi == INT64_MAX) return "an integer >= " + std::to_string(lo);
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}
std::string shown(const std::string& v) { return v.size() > 80 ? v.substr(0, 80) + "..." : v; }
}  // namespace

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || x < lo || x > hi)
    throw Error("flag --" + flag + ": expected " + range_text(lo, hi) + ", got '" + shown(v) + "'");
  return x;
}

uint64_t parse_uint64(const std::string& flag, const std::string& v) {
  uint64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size())
    throw Error("flag --" + flag + ": expected an integer in [0, 18446744073709551615], got '" + shown(v) + "'");
  return x;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    out.push_back(parse_int(flag, v.substr(start, comma == std::string::npos ? std::string::npos : comma - start), lo, hi));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw Error("flag --" + flag + ": expected true or false, got '" + v + "'");
}

double parse_float(const std::string& flag, const std::string& v, double lo, double hi) {
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x))
    throw Error("flag --" + flag + ": expected a number, got '" + shown(v) + "'");
  if (x < lo || x > hi) {
    std::ostringstream os;
    os << "flag --" << flag << ": expected a number in [" << lo << ", " << hi << "], got '" << shown(v) << "'";
    throw Error(os.str());
  }
  return x;
}

}  // namespace deepinfer::cli
