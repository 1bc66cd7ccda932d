// A JSON Schema validator for the tests (independent of the grammar compiler): checks an
// instance against the keywords the compiler supports, with the specification's meaning
// (additionalProperties absent = allowed, oneOf = exactly one, lengths in code points,
// pattern = unanchored PCRE2 search, formats date / time / date-time / email / uuid / ipv4 /
// ipv6 / hostname / uri / json-pointer / duration, patternProperties, propertyNames,
// min/maxProperties, dependentRequired / dependentSchemas / dependencies, uniqueItems, not, if/then/else).
// Threading: stateless.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::grammar::testing {

// "" when `instance` is valid, else the first violation with its location.
std::string validate_json(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& instance);

// PCRE2 (UTF) match of `pattern`: full (anchored at both ends) or search.
bool regex_matches(const std::string& pattern, const std::string& text, bool full);

}  // namespace deepinfer::grammar::testing
