// run-batch files: OpenAI-batch-style JSONL in, one JSON line out per input line.
//
// Input line: {"custom_id": str, "body": {...}} where body holds `prompt` (text),
// `prompt_token_ids` (list of ints) or `messages` (chat), and sampling fields. Output line:
// {"custom_id", "response": {"text", "token_ids", "finish_reason", "usage", "choices"}} or
// {"custom_id", "error": {"message"}}. A malformed or invalid line becomes an error line; it
// never stops the batch. custom_id falls back to "line N" when it cannot be read.
// Threading: pure functions.
#pragma once

#include <iosfwd>
#include <string>

#include "deepinfer/llm.h"

namespace deepinfer::api {

// Longest input line accepted; a longer one becomes an error line ("line N: ... bytes").
inline constexpr size_t kMaxBatchLineBytes = size_t{64} << 20;

// Parses one input line (line_no counts from 1). Never throws: problems (a line over
// kMaxBatchLineBytes, JSON nested deeper than kMaxJsonDepth, a wrong type or range) set
// request.error, naming the field and the value.
Request parse_batch_line(const std::string& line, size_t line_no);
// Reads one input line of at most `limit` bytes ('\n' dropped); false at the end of input. A
// longer line is read to its end without being kept: *too_long is set, *length is its size.
bool read_line_bounded(std::istream& in, std::string& line, size_t limit, bool* too_long, size_t* length);
// The output line (no trailing newline).
std::string format_batch_output(const std::string& custom_id, const RequestOutput& out);

}  // namespace deepinfer::api
