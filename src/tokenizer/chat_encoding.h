// DeepSeek-V4.1 chat format: OpenAI-style messages -> prompt text.
//
// Purpose: reproduce, byte for byte, the release's reference encoder (`encoding/encoding.py`,
// vendored in SGLang as `encoding_dsv41.py`, function encode_messages) for text prompts. The
// result is TEXT: special tokens (`<｜begin▁of▁sentence｜>`, `<｜User｜>`, `<｜Assistant｜>`,
// `<｜System｜>`, `<think>`, `</think>`, `<｜DSML｜ ...>` ...) appear literally and the tokenizer
// turns them into ids.
//
// What the encoder does (see chat_encoding.cpp for the step-by-step rules):
//   BOS; `<｜System｜>` + "Reasoning Effort: N ..." before message 0 in thinking mode; system
//   content (+ "## Tools" block with the JSON tool schemas, + "## Response Format" block);
//   `<｜User｜>` + content for user/developer turns; tool messages become
//   `<tool_result>...</tool_result>` blocks merged into a user turn and sorted by the
//   previous assistant's call order; after the last user-like turn (user, developer, or a
//   system message at index > 0) `<｜Assistant｜>` + `<think>` (thinking) or `</think>` (chat);
//   assistant turns = [reasoning + `</think>`] + content + [DSML tool-call block] + EOS; in
//   thinking mode the reasoning of turns before the last user turn is dropped unless
//   drop_thinking is off or any message defines tools.
//
// Input: a JSON array of message objects with "role" (system, developer, user, assistant,
// tool, latest_reminder) and the fields the reference reads: content (string, or a list of
// blocks: text / image_url / image / tool_result), reasoning_content, tool_calls
// ([{id?, type, function: {name, arguments: JSON-object string or object}}]), tool_call_id,
// tools, response_format, task (action/query/authority/domain/title/read_url), wo_eos.
// Keys are rendered in the order given (ordered_json), JSON exactly like Python's
// json.dumps(ensure_ascii=False).
//
// Deviations, all on inputs the reference would render oddly or crash on: every message
// except an assistant one must carry content (string or list; the reference reads a missing
// one as "" and a null one as "None" or crashes); non-string scalars where text is expected,
// non-object content blocks, blocks without a "type", unknown roles and invalid task names
// are errors everywhere rather than only where the reference happens to look. Not
// reproduced: integers beyond the 64-bit range (nlohmann holds them as doubles, Python as
// exact ints) and NaN/Infinity literals inside tool-call argument strings (Python's
// json.loads accepts them, nlohmann does not: an Error here); the `context` (continuation)
// argument; image records (images only become `<｜deepseek_image｜>` placeholders).
//
// Invariants: the output depends only on (messages, options); a message that the reference
// encoder accepts and that passes the checks above is rendered exactly as the reference
// renders it. Malformed input throws deepinfer::Error naming the message index and field,
// e.g. "chat messages[2].tool_calls[0].function.arguments: must be a JSON object, got array".
// Threading: pure functions, no shared state; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::tokenizer {

// Budgets of the named reasoning efforts. V4.1 checkpoint snapshots disagree on this table.
enum class EffortAliases {
  kQuarterSteps,  // low 25, high 50, xhigh 75, max 100 (SGLang encoding_dsv41.py, golden fixtures)
  kThreeSteps,    // low 50, high 75, max 100 (snapshots whose encoding.py has no "xhigh")
};

struct ChatOptions {
  bool thinking = false;  // thinking_mode "thinking" (true) or "chat" (false)
  // "" = the encoder's default ("high"); a name from the alias table, or "1".."100".
  // Validated in both modes, rendered only in thinking mode (before message 0).
  std::string reasoning_effort;
  EffortAliases effort_aliases = EffortAliases::kQuarterSteps;
  // false: leave out what the encoder appends after the FINAL message (the
  // `<｜Assistant｜>` + think-marker header, or a task token); earlier turns are unchanged.
  bool add_generation_prompt = true;
  bool drop_thinking = true;  // reference default; has no effect when any message has tools
  bool add_bos = true;        // reference add_default_bos_token
  // Optional OpenAI tool list given apart from the messages (null or an array). It is
  // attached to messages[0] when that is a system or developer message (which must not
  // define tools itself), otherwise an empty system message carrying it is put first.
  nlohmann::ordered_json tools;
};

// Renders `messages` (a JSON array) as prompt text; throws deepinfer::Error on bad input.
std::string encode_chat(const nlohmann::ordered_json& messages, const ChatOptions& options = {});

class Tokenizer;
// The conversation's token ids: encode_chat's text through the tokenizer (special tokens in
// the text are matched as such; no post-processor tokens are added).
std::vector<int32_t> encode_chat_ids(const Tokenizer& tok, const nlohmann::ordered_json& messages,
                                     const ChatOptions& options = {});

// `value` serialised exactly as Python's json.dumps(value, ensure_ascii=False) would: ", "
// and ": " separators, keys in stored order, floats as Python's repr ("1.0", "1e-05",
// "1e+16"), NaN/Infinity spelled as Python does. Throws Error for binary values.
std::string to_python_json(const nlohmann::ordered_json& value);

}  // namespace deepinfer::tokenizer
