// Errors and invariant checks.
//
// Purpose: one error type for bad input from a user (a file, a flag, a token id), with a
// message that names what was wrong; and DI_CHECK for broken invariants inside the engine,
// which abort with file:line. Exceptions are thrown only while loading or validating input,
// never inside the per-token hot loops.
// Threading: stateless; safe from any thread.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace deepinfer {

// Bad input from outside the engine: the message says which file / field / value and what
// was expected. Caught at the edges (CLI, API) and turned into a clear message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "deepinfer: internal invariant broken at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

}  // namespace deepinfer

// Invariant inside the engine (not user input): abort with file:line when false.
#define DI_CHECK(cond, ...)                                                      \
  do {                                                                           \
    if (!(cond)) ::deepinfer::check_failed(#cond, __FILE__, __LINE__, std::string(__VA_ARGS__)); \
  } while (0)
