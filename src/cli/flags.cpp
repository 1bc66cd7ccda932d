#include "cli/flags.h"

#include <algorithm>
#include <cmath>

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

int64_t parse_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::logic_error&) {
    throw Error("flag --" + flag + ": expected an integer, got '" + v + "'");
  }
}

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw Error("flag --" + flag + ": expected true or false, got '" + v + "'");
}

double parse_float(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size() || !std::isfinite(x)) throw std::invalid_argument(v);
    return x;
  } catch (const std::logic_error&) {
    throw Error("flag --" + flag + ": expected a number, got '" + v + "'");
  }
}

}  // namespace deepinfer::cli
