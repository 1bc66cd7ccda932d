// deepinfer: the command-line entry point. Dispatches to a subcommand.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace {
void usage() {
  std::fprintf(stderr,
               "usage: deepinfer <command> [flags]\n"
               "commands:\n"
               "  generate   --model DIR --prompt TEXT [sampling flags]   (streams the completion)\n"
               "  chat       --model DIR [sampling flags] [--thinking]    (interactive)\n"
               "  run-batch  --model DIR --input IN.jsonl --output OUT.jsonl [--resume] [--exact-prefill] [--metrics FILE]\n"
               "  logits  --model DIR --tokens IDS.npy [--chunks 13,9,1] [--out LOGITS.npy] [--top K]\n"
               "          [--load-format auto|random] [--seed N] [--threads N]\n"
               "  info    --model DIR\n"
               "  quantize --model IN --out OUT   (float/bf16 checkpoint -> release FP8/MXFP4 format)\n"
               "  tokenize   --model DIR (--text TEXT | --file F) [--add-special-tokens true|false]\n"
               "  detokenize --model DIR --ids 1,2,3 [--skip-special-tokens true|false]\n"
               "run 'deepinfer <command> --help' for details\n");
}
}  // namespace

static int run(int argc, char** argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "logits") return deepinfer::cli::cmd_logits(args);
  if (cmd == "info") return deepinfer::cli::cmd_info(args);
  if (cmd == "tokenize") return deepinfer::cli::cmd_tokenize(args);
  if (cmd == "detokenize") return deepinfer::cli::cmd_detokenize(args);
  if (cmd == "generate") return deepinfer::cli::cmd_generate(args);
  if (cmd == "quantize") return deepinfer::cli::cmd_quantize(args);
  if (cmd == "chat") return deepinfer::cli::cmd_chat(args);
  if (cmd == "run-batch") return deepinfer::cli::cmd_run_batch(args);
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage();
    return 0;
  }
  std::fprintf(stderr, "deepinfer: error: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}

int main(int argc, char** argv) {
  // Subcommands report bad input by throwing deepinfer::Error (exit 2); anything else that
  // escapes (out of memory, a system error) still ends with a message and status 1.
  try {
    return run(argc, argv);
  } catch (const deepinfer::Error& e) {
    // Bad input (a flag, a file, a value): the message names it.
    std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer: error: %s\n", e.what());
    return 1;
  }
}
