// JSON string pieces shared by the JSON-Schema and regex compilers.
//
// Purpose: grammar expressions for the inside of a JSON string literal. A "character" here
// is one Unicode scalar value of the decoded string: either written raw (anything but `"`,
// `\` and U+0000..U+001F), or as an escape (\" \\ \/ \b \f \n \r \t \uXXXX without
// surrogates), so counting grammar characters counts decoded code points exactly (what
// JSON Schema's minLength/maxLength count).
// Threading: stateless.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Any one JSON string character, raw or escaped.
int32_t json_string_char(Grammar& g);
// The canonical encodings of the code points in `ranges` inside a JSON string: raw UTF-8,
// except `"` -> \", `\` -> \\, \b \f \n \r \t, other controls -> \u00XX (lower-case hex).
// Empty `ranges` gives an expression that matches nothing.
int32_t json_char_class(Grammar& g, const std::vector<CodeRange>& ranges);
// `utf8` written as JSON string content with the canonical escapes above.
std::string json_escape(std::string_view utf8);

}  // namespace deepinfer::grammar
