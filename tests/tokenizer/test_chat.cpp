// DeepSeek-V4.1 chat encoding: the release's golden vectors, hand-derived cases for each
// rule of the reference encoder (encoding_dsv41.py; the comment on each case says which code
// path produces the expected text), and the bad-input errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace {

using deepinfer::Error;
using deepinfer::tokenizer::ChatOptions;
using deepinfer::tokenizer::EffortAliases;
using deepinfer::tokenizer::encode_chat;
using deepinfer::tokenizer::to_python_json;
using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kU = "<｜User｜>";
const std::string kA = "<｜Assistant｜>";
const std::string kS = "<｜System｜>";
const std::string kImg = "<｜deepseek_image｜>";

// `<｜System｜>` + the effort line the encoder puts before message 0 in thinking mode.
std::string effort(int n) {
  return kS + "Reasoning Effort: " + std::to_string(n) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

// The "## Tools" section (render_tools) around the given schema lines.
std::string tools_block(const std::string& schemas) {
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke "
         "tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n"
         "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" "
         "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n"
         "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types "
         "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`."
         "\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
         "inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly "
         "after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n" +
         schemas +
         "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
         "calls.\n";
}

std::string calls_block(const std::string& invokes) {
  return "\n\n<｜DSML｜ calls>\n" + invokes + "\n</｜DSML｜ calls>";
}

std::string enc(const char* messages, const ChatOptions& options = {}) {
  return encode_chat(Json::parse(messages), options);
}

ChatOptions thinking(const std::string& effort_name = "") {
  ChatOptions o;
  o.thinking = true;
  o.reasoning_effort = effort_name;
  return o;
}

// Expects Error whose message contains every string in `parts`.
void expect_error(const Json& messages, const ChatOptions& options, std::initializer_list<std::string> parts) {
  try {
    encode_chat(messages, options);
    ADD_FAILURE() << "no error for " << messages.dump();
  } catch (const Error& e) {
    for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p)) << messages.dump();
  }
}
void expect_error(const char* messages, std::initializer_list<std::string> parts) {
  expect_error(Json::parse(messages), ChatOptions{}, parts);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- The release's golden vectors ----

// Case semantics of the reference harness (load_cases): a bare list is the messages; an
// object has messages + optional tools (attached to messages[0]), thinking_mode (default
// chat) and reasoning_effort.
TEST(ChatGolden, ReleaseVectorsMatchByteForByte) {
  const std::filesystem::path dir = std::filesystem::path(DEEPINFER_TEST_DATA) / "chat";
  int cases = 0;
  for (int id = 1;; ++id) {
    const auto input = dir / ("test_input_" + std::to_string(id) + ".json");
    if (!std::filesystem::exists(input)) break;
    SCOPED_TRACE("case " + std::to_string(id));
    ++cases;
    Json data = Json::parse(read_file(input));
    if (data.is_array()) data = Json{{"messages", data}};
    Json messages = data["messages"];
    if (data.contains("tools")) messages[0]["tools"] = data["tools"];
    ChatOptions options;
    options.thinking = data.value("thinking_mode", "chat") == "thinking";
    if (data.contains("reasoning_effort")) {
      const Json& e = data["reasoning_effort"];
      options.reasoning_effort = e.is_string() ? e.get<std::string>() : std::to_string(e.get<int>());
    }
    const std::string expected = read_file(dir / ("test_output_" + std::to_string(id) + ".txt"));
    EXPECT_EQ(encode_chat(messages, options), expected);
  }
  EXPECT_EQ(cases, 5);
}

// ---- Reasoning effort ----

// render_reasoning_effort: message 0 in thinking mode gets `<｜System｜>` + the effort line; the
// user turn is last, so the header follows, with <think> (drop mode, index 0 >= last user 0).
TEST(ChatEffort, AliasesAndBudgets) {
  const std::pair<const char*, int> cases[] = {{"", 50},  {"low", 25}, {"high", 50}, {"xhigh", 75},
                                               {"max", 100}, {"1", 1},   {"42", 42},   {"100", 100}};
  for (const auto& [name, budget] : cases) {
    EXPECT_EQ(enc(R"([{"role": "user", "content": "question"}])", thinking(name)),
              kBos + effort(budget) + kU + "question" + kA + "<think>")
        << name;
  }
}

TEST(ChatEffort, ThreeStepAliasTable) {
  ChatOptions o = thinking();
  o.effort_aliases = EffortAliases::kThreeSteps;
  const std::pair<const char*, int> cases[] = {{"", 75}, {"low", 50}, {"high", 75}, {"max", 100}, {"60", 60}};
  for (const auto& [name, budget] : cases) {
    o.reasoning_effort = name;
    EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}])", o), kBos + effort(budget) + kU + "q" + kA + "<think>");
  }
  o.reasoning_effort = "xhigh";
  expect_error(Json::parse(R"([{"role": "user", "content": "q"}])"), o, {"reasoning_effort", "xhigh"});
}

// The reference validates the effort whatever the mode, and only ints 1..100 or aliases.
TEST(ChatEffort, InvalidValuesAreErrorsInBothModes) {
  for (const char* bad : {"-1", "0", "101", "medium", "none", "1.5", "042", " 5", "High", "1000"}) {
    for (bool think : {false, true}) {
      ChatOptions o;
      o.thinking = think;
      o.reasoning_effort = bad;
      expect_error(Json::parse(R"([{"role": "user", "content": "q"}])"), o, {"reasoning_effort", bad});
    }
  }
}

// Chat mode: no effort line and so no `<｜System｜>` without a system message; header </think>.
TEST(ChatEffort, ChatModeHasNoEffortLine) {
  ChatOptions o;
  o.reasoning_effort = "max";
  EXPECT_EQ(enc(R"([{"role": "user", "content": "hello"}])", o), kBos + kU + "hello" + kA + "</think>");
}

// ---- System messages ----

// Index 0 system: `<｜System｜>` + content; the next turn is a user, so no transition.
TEST(ChatSystem, LeadingSystemUsesSystemToken) {
  EXPECT_EQ(enc(R"([{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "hello"}])"),
            kBos + kS + "You are a helpful assistant." + kU + "hello" + kA + "</think>");
}

// An empty system message still emits the token in chat mode; in thinking mode the effort
// line already put it there, so the output equals the bare-user one.
TEST(ChatSystem, EmptySystemMessage) {
  const char* with_empty = R"([{"role": "system", "content": ""}, {"role": "user", "content": "hi"}])";
  const char* bare = R"([{"role": "user", "content": "hi"}])";
  EXPECT_EQ(enc(with_empty), kBos + kS + kU + "hi" + kA + "</think>");
  EXPECT_EQ(enc(with_empty, thinking()), enc(bare, thinking()));
}

// A system message at index > 0 gets its own token and counts as the last user turn: the
// q1 header is </think> (index 1 < last user 3), a1 loses its reasoning (drop mode, before the
// last user turn), and the mid system turn gets the generation header with <think>.
TEST(ChatSystem, MidConversationSystemTriggersHeader) {
  EXPECT_EQ(enc(R"([{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
                    {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
                    {"role": "system", "content": "mid sys"}])",
                thinking("88")),
            kBos + effort(88) + "sys" + kU + "q1" + kA + "</think>a1" + kEos + kS + "mid sys" + kA + "<think>");
}

// response_format on a system turn: "\n\n## Response Format:..." + json.dumps of the value.
TEST(ChatSystem, ResponseFormatBlock) {
  EXPECT_EQ(enc(R"([{"role": "system", "content": "S0", "response_format": {"type": "json_object"}},
                    {"role": "user", "content": "q"}])"),
            kBos + kS + "S0\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
                R"({"type": "json_object"})" + kU + "q" + kA + "</think>");
}

// List content on a non-user turn: only text blocks count (images are text placeholders),
// joined by blank lines; the tool_result block is left out.
TEST(ChatSystem, ListContentKeepsTextBlocks) {
  EXPECT_EQ(enc(R"([{"role": "system", "content": [{"type": "text", "text": "A"},
                    {"type": "image_url", "image_url": {"url": "x.png"}},
                    {"type": "tool_result", "content": "ignored"}, {"type": "text", "text": "B"}]},
                    {"role": "user", "content": "q"}])"),
            kBos + kS + "A\n\n" + kImg + "\n\nB" + kU + "q" + kA + "</think>");
}

// ---- Assistant turns and DSML tool calls ----

const char* kToolCallConversation = R"([{"role": "user", "content": "question"},
  {"role": "assistant", "reasoning_content": "  reason  ", "content": "summary",
   "tool_calls": [{"type": "function", "function": {"name": "lookup",
                   "arguments": "{\"query\":\"value\",\"limit\":2}"}}]}])";

const std::string kLookupCompletion =
    "  reason  </think>summary" +
    calls_block("<｜DSML｜ invoke name=\"lookup\">\n"
                "<｜DSML｜ parameter name=\"query\" string=\"true\">value</｜DSML｜ parameter>\n"
                "<｜DSML｜ parameter name=\"limit\" string=\"false\">2</｜DSML｜ parameter>\n"
                "</｜DSML｜ invoke>") +
    kEos;

// Thinking: the assistant after the last user keeps its reasoning (reasoning + </think>), then
// content, then "\n\n" + the calls block, then EOS. Parameter values: strings raw with
// string="true", others json.dumps'd with string="false".
TEST(ChatAssistant, ToolCallRendersSpacedDsmlTags) {
  EXPECT_EQ(enc(kToolCallConversation, thinking()),
            kBos + effort(50) + kU + "question" + kA + "<think>" + kLookupCompletion);
}

// Chat mode: no reasoning at all; the header was </think>.
TEST(ChatAssistant, ChatModeOmitsReasoning) {
  EXPECT_EQ(enc(kToolCallConversation),
            kBos + kU + "question" + kA + "</think>" + kLookupCompletion.substr(std::string("  reason  </think>").size()));
}

// Arguments given as an object: keys keep their order; values go through Python's json.dumps
// (", " / ": " separators, floats as repr, ensure_ascii=False).
TEST(ChatAssistant, ArgumentValuesAsPythonJson) {
  const std::string out = enc(R"([{"role": "user", "content": "go"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
      "arguments": {"s": "a \"q\" <b>", "i": 3, "f": 2.5, "big": 1e20, "b": true, "n": null,
                    "arr": [1, "x"], "obj": {"k": "é", "z": 1.0}}}}]}])");
  const std::string p = "<｜DSML｜ parameter name=\"";
  const std::string c = "</｜DSML｜ parameter>";
  EXPECT_EQ(out, kBos + kU + "go" + kA + "</think>" +
                     calls_block("<｜DSML｜ invoke name=\"f\">\n" + p + "s\" string=\"true\">a \"q\" <b>" + c + "\n" + p +
                                 "i\" string=\"false\">3" + c + "\n" + p + "f\" string=\"false\">2.5" + c + "\n" + p +
                                 "big\" string=\"false\">1e+20" + c + "\n" + p + "b\" string=\"false\">true" + c +
                                 "\n" + p + "n\" string=\"false\">null" + c + "\n" + p +
                                 "arr\" string=\"false\">[1, \"x\"]" + c + "\n" + p +
                                 "obj\" string=\"false\">{\"k\": \"é\", \"z\": 1.0}" + c + "\n</｜DSML｜ invoke>") +
                     kEos);
}

// Several calls join with "\n"; "{}" arguments leave an empty parameter list between the two
// newlines of the invoke template.
TEST(ChatAssistant, SeveralCallsAndEmptyArguments) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": \"x\"}"}},
      {"type": "function", "function": {"name": "g", "arguments": "{}"}}]}])"),
            kBos + kU + "go" + kA + "</think>ok" +
                calls_block("<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"b\" string=\"false\">1</｜DSML｜ parameter>\n"
                            "<｜DSML｜ parameter name=\"a\" string=\"true\">x</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
                            "<｜DSML｜ invoke name=\"g\">\n\n</｜DSML｜ invoke>") +
                kEos);
}

// wo_eos: the assistant template without EOS (continuing a partial answer).
TEST(ChatAssistant, WithoutEos) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "partial", "wo_eos": true}])"),
            kBos + kU + "q" + kA + "</think>partial");
}

// ---- Reasoning kept or dropped ----

const char* kTwoTurns = R"([{"role": "user", "content": "q1"},
  {"role": "assistant", "content": "a1", "reasoning_content": "r1"}, {"role": "user", "content": "q2"}])";

// Drop mode: the q1 header is </think> (index 0 < last user 2) and a1 has no reasoning part;
// the final header is <think>.
TEST(ChatThinking, EarlierReasoningDropped) {
  EXPECT_EQ(enc(kTwoTurns, thinking()),
            kBos + effort(50) + kU + "q1" + kA + "</think>a1" + kEos + kU + "q2" + kA + "<think>");
}

// drop_thinking off: every header opens <think> and a1 keeps "r1</think>".
TEST(ChatThinking, KeptWhenDropThinkingOff) {
  ChatOptions o = thinking();
  o.drop_thinking = false;
  EXPECT_EQ(enc(kTwoTurns, o),
            kBos + effort(50) + kU + "q1" + kA + "<think>r1</think>a1" + kEos + kU + "q2" + kA + "<think>");
}

// Tools anywhere switch drop mode off. Here they come through the options: an empty system
// message carrying them is put first (effort line, "", "\n\n" + tools section).
TEST(ChatThinking, KeptWhenToolsAreDefined) {
  ChatOptions o = thinking();
  o.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  EXPECT_EQ(enc(kTwoTurns, o), kBos + effort(50) + "\n\n" + tools_block(R"({"name": "f", "parameters": {"type": "object"}})") +
                                   kU + "q1" + kA + "<think>r1</think>a1" + kEos + kU + "q2" + kA + "<think>");
}

// Chat mode never shows reasoning, dropped or not.
TEST(ChatThinking, ChatModeNeverShowsReasoning) {
  EXPECT_EQ(enc(kTwoTurns), kBos + kU + "q1" + kA + "</think>a1" + kEos + kU + "q2" + kA + "</think>");
}

// _drop_thinking_messages: in thinking drop mode a developer turn before the last user-like
// turn disappears; chat mode keeps it (`<｜User｜>` + content, no header before the next user).
TEST(ChatThinking, DeveloperBeforeLastUserDropped) {
  const char* m = R"([{"role": "developer", "content": "dev note"}, {"role": "user", "content": "q"},
                      {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}])";
  EXPECT_EQ(enc(m, thinking()), kBos + effort(50) + kU + "q" + kA + "</think>a" + kEos + kU + "q2" + kA + "<think>");
  EXPECT_EQ(enc(m), kBos + kU + "dev note" + kU + "q" + kA + "</think>a" + kEos + kU + "q2" + kA + "</think>");
}

// A developer turn that is the last user-like turn stays and gets the header.
TEST(ChatThinking, DeveloperAsLastUserTurn) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                    {"role": "developer", "content": "d"}])",
                thinking()),
            kBos + effort(50) + kU + "q" + kA + "</think>a" + kEos + kU + "d" + kA + "<think>");
}

// ---- Tool results ----

// merge_tool_messages + sort_tool_results_by_call_order: the two tool messages and the user
// message after them form one user turn; results follow the assistant's call order (a, b).
TEST(ChatTools, ResultsMergedAndSortedByCallOrder) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "a", "type": "function", "function": {"name": "f1", "arguments": "{}"}},
      {"id": "b", "type": "function", "function": {"name": "f2", "arguments": "{\"x\": 1}"}}]},
    {"role": "tool", "tool_call_id": "b", "content": "rb"}, {"role": "tool", "tool_call_id": "a", "content": "ra"},
    {"role": "user", "content": "thanks"}])"),
            kBos + kU + "q" + kA + "</think>" +
                calls_block("<｜DSML｜ invoke name=\"f1\">\n\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"f2\">\n"
                            "<｜DSML｜ parameter name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>") +
                kEos + kU + "<tool_result>ra</tool_result>\n\n<tool_result>rb</tool_result>\n\nthanks" + kA + "</think>");
}

// Ids the last call list does not know sort as position 0 (stable): b(1), zzz(0), a(0) ->
// zzz, a, b. A call id may also sit in function.id.
TEST(ChatTools, UnknownIdsSortFirst) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"type": "function", "function": {"id": "a", "name": "f", "arguments": "{}"}},
      {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "b", "content": "B"}, {"role": "tool", "tool_call_id": "zzz", "content": "Z"},
    {"role": "tool", "tool_call_id": "a", "content": "A"}])"),
            kBos + kU + "q" + kA + "</think>" +
                calls_block("<｜DSML｜ invoke name=\"f\">\n\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"f\">\n\n</｜DSML｜ invoke>") +
                kEos + kU + "<tool_result>Z</tool_result>\n\n<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>" + kA +
                "</think>");
}

// A tool message right after a user message joins that user turn; consecutive user messages
// join with a blank line.
TEST(ChatTools, ToolAndUserMessagesMerge) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "look"}, {"role": "tool", "content": "r"}])"),
            kBos + kU + "look\n\n<tool_result>r</tool_result>" + kA + "</think>");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"),
            kBos + kU + "a\n\nb" + kA + "</think>");
}

// User content blocks: tool_result blocks (nested lists: text kept, images placeholders),
// unknown block types as "[Unsupported TYPE]".
TEST(ChatTools, UserContentBlocks) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
      {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text", "text": "t1"},
                                                              {"type": "image_url", "image_url": "u.png"}]},
      {"type": "input_audio", "input_audio": {}}]}])"),
            kBos + kU + "a\n\n<tool_result>t1\n\n" + kImg + "</tool_result>\n\n[Unsupported input_audio]" + kA +
                "</think>");
}

// ---- Tasks, latest_reminder, images ----

// A task on the last turn replaces the header: a non-action task appends its token; "action"
// appends the header, the mode's think marker, then <｜action｜>.
TEST(ChatTasks, TaskTokens) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "classify me", "task": "query"}])"),
            kBos + kU + "classify me<｜query｜>");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "c", "task": "read_url"}])", thinking()),
            kBos + effort(50) + kU + "c<｜read_url｜>");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q", "task": "action"}])"), kBos + kU + "q" + kA + "</think><｜action｜>");
}

// After an action task the assistant answer has no reasoning part even in thinking mode.
TEST(ChatTasks, AnswerAfterTaskHasNoReasoning) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q", "task": "action"},
                    {"role": "assistant", "content": "Search", "reasoning_content": "r"}])",
                thinking()),
            kBos + effort(50) + kU + "q" + kA + "<think><｜action｜>Search" + kEos);
}

// A user message after a task-carrying user message starts a new turn (no merge); the task
// turn is followed by a user, so nothing is appended after it.
TEST(ChatTasks, UserAfterTaskIsNotMerged) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "x", "task": "query"}, {"role": "user", "content": "y"}])"),
            kBos + kU + "x" + kU + "y" + kA + "</think>");
}

// A latest_reminder after a user turn: the user turn still gets its header (the next role is
// latest_reminder), the reminder itself none.
TEST(ChatTasks, LatestReminderAfterUser) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}, {"role": "latest_reminder", "content": "r"}])"),
            kBos + kU + "q" + kA + "</think><｜latest_reminder｜>r");
}

// Image blocks become placeholders, text blocks joined by blank lines.
TEST(ChatImages, PlaceholdersInOrder) {
  EXPECT_EQ(enc(R"([{"role": "user", "content": [{"type": "text", "text": "inspect"},
      {"type": "image_url", "image_url": {"url": "/a.png"}}, {"type": "text", "text": "and"},
      {"type": "image_url", "image_url": "/b.png"}, {"type": "image", "data": "AAAA"}]}])"),
            kBos + kU + "inspect\n\n" + kImg + "\n\nand\n\n" + kImg + "\n\n" + kImg + kA + "</think>");
}

TEST(ChatImages, PlaceholderTextAndMissingSourceRejected) {
  expect_error(R"([{"role": "user", "content": "hi <｜deepseek_image｜>"}])", {"messages[0].content", "placeholder"});
  expect_error(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a",
                   "reasoning_content": "<｜deepseek_image｜>"}])",
               {"messages[1].reasoning_content"});
  expect_error(R"([{"role": "user", "content": [{"type": "text", "text": "<｜deepseek_image｜>"}]}])",
               {"messages[0].content[0].text"});
  expect_error(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}}]}])",
               {"messages[0].content[0]", "no source"});
  expect_error(R"([{"role": "user", "content": [{"type": "image"}]}])", {"messages[0].content[0]", "no source"});
}

// ---- Options ----

// add_generation_prompt=false leaves out what follows the final turn only.
TEST(ChatOptionsTest, NoGenerationPrompt) {
  ChatOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}])", o), kBos + kU + "q");
  o.thinking = true;
  EXPECT_EQ(enc(kTwoTurns, o), kBos + effort(50) + kU + "q1" + kA + "</think>a1" + kEos + kU + "q2");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q", "task": "query"}])", o), kBos + effort(50) + kU + "q");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])", o),
            enc(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])", thinking()));
}

TEST(ChatOptionsTest, NoBosAndEmptyConversation) {
  ChatOptions o;
  o.add_bos = false;
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}])", o), kU + "q" + kA + "</think>");
  EXPECT_EQ(enc("[]"), kBos);
  EXPECT_EQ(enc("[]", o), "");
}

// Options tools go on a leading system or developer message, or on an empty system message
// put first.
TEST(ChatOptionsTest, ToolsAttachment) {
  ChatOptions o;
  o.tools = Json::parse(R"([{"type": "function", "function": {"name": "t", "description": "d"}}])");
  const std::string block = tools_block(R"({"name": "t", "description": "d"})");
  EXPECT_EQ(enc(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "q"}])", o),
            kBos + kS + "S\n\n" + block + kU + "q" + kA + "</think>");
  EXPECT_EQ(enc(R"([{"role": "developer", "content": "D"}])", o), kBos + kU + "D\n\n" + block + kA + "</think>");
  EXPECT_EQ(enc(R"([{"role": "user", "content": "q"}])", o), kBos + kS + "\n\n" + block + kU + "q" + kA + "</think>");
  expect_error(Json::parse(R"([{"role": "system", "content": "S", "tools": [{"type": "function", "function": {}}]}])"), o,
               {"messages[0].tools", "both"});
  o.tools = Json::parse(R"([{"type": "function"}])");
  expect_error(Json::parse(R"([{"role": "user", "content": "q"}])"), o, {"options.tools[0]"});
  o.tools = Json::parse(R"({"type": "function"})");
  expect_error(Json::parse(R"([{"role": "user", "content": "q"}])"), o, {"options.tools", "list"});
}

// ---- Python json.dumps ----

TEST(ChatJson, MatchesPythonJsonDumps) {
  EXPECT_EQ(to_python_json(Json::parse(R"({"b": [1, -2, 18446744073709551615], "a": {}, "c": [], "d": null, "e": false})")),
            R"({"b": [1, -2, 18446744073709551615], "a": {}, "c": [], "d": null, "e": false})");
  // Floats as Python's repr: exponent when the point is at <= -4 or > 16.
  EXPECT_EQ(to_python_json(Json::parse("[1.0, 1e16, 1e15, 1e-5, 0.0001, -0.0, 1.5e300, 0.1, 123456789.123, 2.5e-7, 1e2]")),
            "[1.0, 1e+16, 1000000000000000.0, 1e-05, 0.0001, -0.0, 1.5e+300, 0.1, 123456789.123, 2.5e-07, 100.0]");
  EXPECT_EQ(to_python_json(Json(std::nan(""))), "NaN");
  EXPECT_EQ(to_python_json(Json(-std::numeric_limits<double>::infinity())), "-Infinity");
  // ensure_ascii=False: non-ASCII raw; quotes, backslash and control characters escaped.
  EXPECT_EQ(to_python_json(Json("é\"\\\n\r\t\b\f\x01\x1f\x7f ✓")), "\"é\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\x7f ✓\"");
  EXPECT_THROW(to_python_json(Json::binary({1, 2})), Error);
}

// ---- Bad input ----

TEST(ChatErrors, MessagesShape) {
  expect_error(Json::parse(R"({"role": "user"})"), ChatOptions{}, {"messages", "array"});
  expect_error(R"([{"role": "user", "content": "q"}, 3])", {"messages[1]", "message object"});
  expect_error(R"([{"content": "q"}])", {"messages[0].role"});
  expect_error(R"([{"role": "robot", "content": "q"}])", {"messages[0].role", "robot"});
  expect_error(R"([{"role": "direct_search_results", "content": "q"}])", {"messages[0].role"});
}

TEST(ChatErrors, Content) {
  expect_error(R"([{"role": "user"}])", {"messages[0].content", "missing"});
  expect_error(R"([{"role": "user", "content": null}])", {"messages[0].content"});
  expect_error(R"([{"role": "system", "content": 5}])", {"messages[0].content", "number"});
  expect_error(R"([{"role": "tool"}])", {"messages[0].content"});
  expect_error(R"([{"role": "developer", "content": ""}])", {"messages[0].content", "developer"});
  expect_error(R"([{"role": "latest_reminder", "content": []}])", {"messages[0].content", "empty"});
  expect_error(R"([{"role": "user", "content": ["x"]}])", {"messages[0].content[0]", "block"});
  expect_error(R"([{"role": "user", "content": [{"text": "x"}]}])", {"messages[0].content[0].type"});
  expect_error(R"([{"role": "user", "content": [{"type": "text", "text": null}]}])", {"messages[0].content[0].text"});
  expect_error(R"([{"role": "user", "content": [{"type": "tool_result", "content": 7}]}])",
               {"messages[0].content[0].content"});
  expect_error(R"([{"role": "assistant", "content": "a", "reasoning_content": 1}])",
               {"messages[0].reasoning_content", "string"});
  // Valid JSON text, but not valid UTF-8 once decoded: built directly.
  Json bad = Json::array({Json{{"role", "user"}, {"content", std::string("\xff")}}});
  expect_error(bad, ChatOptions{}, {"messages[0]", "UTF-8"});
}

TEST(ChatErrors, ToolCalls) {
  const auto call = [](const std::string& tc) {
    return Json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": )" + tc +
                       "}]");
  };
  expect_error(call(R"({"name": "f"})"), {}, {"messages[1].tool_calls", "list"});
  expect_error(call(R"([3])"), {}, {"messages[1].tool_calls[0]"});
  expect_error(call(R"([{"type": "function"}])"), {}, {"messages[1].tool_calls[0].function"});
  expect_error(call(R"([{"function": {"arguments": "{}"}}])"), {}, {"messages[1].tool_calls[0].function.name"});
  expect_error(call(R"([{"function": {"name": "f"}}])"), {}, {"messages[1].tool_calls[0].function.arguments", "missing"});
  expect_error(call(R"([{"function": {"name": "f", "arguments": "\"scalar\""}}])"), {},
               {"messages[1].tool_calls[0].function.arguments", "JSON object"});
  expect_error(call(R"([{"function": {"name": "f", "arguments": "{not json"}}])"), {},
               {"messages[1].tool_calls[0].function.arguments", "not valid JSON"});
  expect_error(call(R"([{"function": {"name": "f", "arguments": [1]}}])"), {},
               {"messages[1].tool_calls[0].function.arguments", "JSON object"});
  expect_error(call(R"([{"id": 5, "function": {"name": "f", "arguments": {}}}])"), {}, {"messages[1].tool_calls[0].id"});
}

TEST(ChatErrors, OtherFields) {
  expect_error(R"([{"role": "user", "content": "q", "task": "summarise"}])", {"messages[0].task"});
  expect_error(R"([{"role": "assistant", "content": "a", "wo_eos": "yes"}])", {"messages[0].wo_eos"});
  expect_error(R"([{"role": "system", "content": "s", "tools": {"a": 1}}])", {"messages[0].tools", "list"});
  expect_error(R"([{"role": "system", "content": "s", "tools": [{"name": "f"}]}])", {"messages[0].tools[0]"});
  expect_error(R"([{"role": "tool", "content": "r", "tool_call_id": 3}])", {"messages[0].tool_call_id"});
}

}  // namespace
