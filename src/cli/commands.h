// The `deepinfer` subcommands. Each returns the process exit code; bad input is reported on
// stderr with what was wrong and a non-zero code, never a crash.
#pragma once

#include <string>
#include <vector>

namespace deepinfer::cli {

int cmd_logits(const std::vector<std::string>& args);
int cmd_info(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_detokenize(const std::vector<std::string>& args);
int cmd_quantize(const std::vector<std::string>& args);
int cmd_generate(const std::vector<std::string>& args);
int cmd_chat(const std::vector<std::string>& args);
int cmd_run_batch(const std::vector<std::string>& args);

// "13,9,1" -> {13, 9, 1}; throws Error naming the flag on bad input.
std::vector<int64_t> parse_chunks(const std::string& s);
// Splits n tokens into chunk sizes; the last size repeats until the tokens run out.
std::vector<int64_t> chunk_plan(int64_t n, const std::vector<int64_t>& sizes);

}  // namespace deepinfer::cli
