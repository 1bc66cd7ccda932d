// EBNF parser: the text syntax documented in grammar/grammar.h to a Grammar.
//
// Purpose: read a user's grammar (the `grammar` structured-output kind). Errors are
// deepinfer::Error with "line L, column C:" and what was expected; an undefined rule, a
// duplicate rule, a missing root, bad escapes, unbalanced brackets and repetition bounds
// above kMaxRepeat are reported. The input must be valid UTF-8.
// Threading: stateless.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

inline constexpr int32_t kMaxRepeat = 100000;  // largest m or n in e{m,n}

Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace deepinfer::grammar
