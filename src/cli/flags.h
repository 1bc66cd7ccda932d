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
int64_t parse_int(const std::string& flag, const std::string& v);
double parse_float(const std::string& flag, const std::string& v);
bool parse_bool(const std::string& flag, const std::string& v);

}  // namespace deepinfer::cli
