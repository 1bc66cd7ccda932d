// One run-batch job: the input file's requests, the results file written incrementally in
// input order, and --resume.
//
// Results: each request's output line is written (one write(2), so flushed) as soon as it and
// every earlier input line are done; the file is fsync'ed and closed at the end. A write,
// fsync or close failure throws Error("<output>: <reason>") and stops the job.
// Resume: the existing output's complete lines are kept and its torn last line (no '\n') is
// cut (see batch_output.h for the rule). Its lines must be the results of the input's first K
// requests, in order (custom_ids compared by position, so duplicated custom_ids resume right):
// those K are skipped and the rest appended. An output that does not match the input (another
// custom_id at some line, more lines than the input has requests, or a line that is not a
// run-batch output line) is an Error and the file is left untouched. A missing output file is
// started from the first request.
// Unseeded requests get the seed they would have as request g of the whole input (see
// BatchJobOptions::engine_seed).
// Duplicated custom_ids in the input are allowed: every line gets its own output line; a note
// names the first duplicate.
// Threading: one thread; hooks run on the engine thread inside LLM::run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/batch_output.h"
#include "deepinfer/llm.h"

namespace deepinfer::api {

struct BatchJobOptions {
  std::string input;
  std::string output;
  bool resume = false;
  // EngineConfig.seed of the LLM that runs the job. A request without its own seed gets the one
  // the engine would give it as request g of the whole input (g counts from 0), so a resumed
  // run samples the remaining requests exactly as a fresh run would.
  uint64_t engine_seed = 0;
};

struct BatchCounts {
  size_t lines = 0;      // requests in the input (non-blank lines)
  size_t skipped = 0;    // already in the output (--resume): not run again
  size_t written = 0;    // output lines written by this run
  size_t succeeded = 0;  // of them, "response" lines
  size_t failed = 0;     // of them, "error" lines
};

struct BatchHooks {
  std::function<void(size_t)> on_finish;   // request i (input order, from 0) finished; before it is written
  std::function<void(size_t)> on_written;  // request i's line has been written to the output
};

class BatchJob {
 public:
  // Reads the input (and with resume the earlier output) and opens the output. Throws Error.
  explicit BatchJob(const BatchJobOptions& options);

  size_t pending() const { return reqs_.size(); }  // requests still to run
  const BatchCounts& counts() const { return counts_; }
  const std::vector<std::string>& notes() const { return notes_; }  // for stderr: duplicates, torn line, ...

  // Runs the pending requests (llm may be null when none is pending), writing each line as
  // described above, then fsyncs and closes the output. Returns the run requests' outputs in
  // input order (the skipped ones are not in it).
  std::vector<RequestOutput> run(LLM* llm, const BatchHooks& hooks = {});

 private:
  BatchJobOptions opts_;
  std::vector<Request> reqs_;     // the requests to run (after the skipped ones)
  std::vector<std::string> ids_;  // custom_id per input request (all of them)
  BatchCounts counts_;
  std::vector<std::string> notes_;
  OutputFile out_;
};

}  // namespace deepinfer::api
