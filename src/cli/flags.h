// Command-line flag parsing shared by the subcommands: `--flag value` or `--flag=value`,
// boolean switches (`--flag` alone), and typed values with errors naming the flag.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace deepinfer::cli {

// Every flag must be in `known`; `switches` (a subset of known) may stand alone (= "true").
// "--help"/"-h" sets key "help". Throws Error naming an unknown flag or a missing value.
std::map<std::string, std::string> parse_flags(const std::vector<std::string>& args, const std::vector<std::string>& known,
                                               const std::string& cmd, const std::vector<std::string>& switches = {});
// Typed values: the whole string must be the number (no sign '+', spaces or trailing text),
// within [lo, hi]; otherwise Error "flag --F: expected an integer in [lo, hi], got 'V'".
int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
uint64_t parse_uint64(const std::string& flag, const std::string& v);
double parse_float(const std::string& flag, const std::string& v, double lo = -1.7976931348623157e308,
                   double hi = 1.7976931348623157e308);
// A comma-separated list of integers in [lo, hi] ("1,2,3"); empty items are errors.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& v, int64_t lo, int64_t hi);
bool parse_bool(const std::string& flag, const std::string& v);

}  // namespace deepinfer::cli
