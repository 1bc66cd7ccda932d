// Regular expressions to grammar expressions.
//
// Purpose: the `regex` structured-output kind and JSON Schema's `pattern`. Supported (the
// common ECMA-262 / PCRE / Python subset): literals, `.` (any code point but \n \r U+2028
// U+2029), classes `[...]` / `[^...]` with ranges, escapes \t \n \r \f \v \0 \xHH \uHHHH
// \u{H..} \x{H..}, escaped punctuation, shorthands \d \w \s \D \W \S, groups `(...)`,
// `(?:...)`, `(?<name>...)`, `(?P<name>...)`, alternation, quantifiers * + ? {n} {n,}
// {n,m} (lazy `?` suffixes accepted: same language), and `^` / `$` at the start / end of a
// top-level alternative. Anything else is a deepinfer::Error naming the construct and its
// offset: back-references, lookaround, word boundaries, \p{..}, inline flags, possessive
// quantifiers, anchors inside the pattern.
// Shorthands are chosen so that every generated string matches under both ECMA-262 and
// Python `re` (used by JSON Schema validators): \d = [0-9], \w = [A-Za-z0-9_],
// \s = ASCII white space; \D and \W (and negated classes holding \d or \w) stay within
// ASCII; \S excludes the union of both engines' white space.
// Threading: stateless.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct RegexOptions {
  bool json_string = false;  // emit each character JSON-escaped (inside a JSON string)
  bool search = false;       // JSON Schema `pattern`: match anywhere unless anchored by ^ / $
};

// Adds the pattern's language to `g` and returns its expr id.
int32_t regex_to_expr(Grammar& g, std::string_view pattern, const RegexOptions& opts = {});
// A grammar whose root matches exactly the strings that fully match `pattern`.
Grammar regex_to_grammar(std::string_view pattern);

}  // namespace deepinfer::grammar
