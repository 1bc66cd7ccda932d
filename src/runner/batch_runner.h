// BatchRunner: runs chunks of several sequences as one forward of the model.
//
// Purpose: the runner's side of a forward. It lays the chunks out as a model::ForwardBatch
// (rows in sequence order, positions, RoPE tables, padding to a row bucket), runs the model's
// embedding and layer program, and turns the wanted rows into logits in the caller's buffers
// or into tokens drawn on the backend (sample::draw_on_backend: only ids and the logprobs
// asked for come back).
// Graphs (backends that have them, on by default): a forward of at most kGraphRows rows
// without replay runs on a ForwardBatch kept for its row bucket (powers of two up to 8, then
// multiples of 16), and each run of consecutive graphable stages of the layer program is a
// graph of that bucket: run eagerly the first time (which sizes every buffer and uploads every
// table), captured the second, replayed after. The eager stages run in between. The kept
// batches and their graph pools hold device memory until set_graphs(false) or the runner's end.
// Invariants: a sequence's logits are bitwise the same alone or batched, graphed or not.
// Token ids outside the vocabulary are an Error, thrown before any state changes.
// Threading: one forward at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/deepseek_v41.h"
#include "model/forward_batch.h"
#include "model/state.h"

namespace deepinfer::runner {

// One sequence's chunk in a batched forward.
struct Chunk {
  const int64_t* tokens = nullptr;  // [n] token ids, at positions state->length() ...
  int64_t n = 0;
  model::SequenceState* state = nullptr;
  // CED bounded replay: rows [0, replay_from) run only the layers up to the last KV source
  // (the encoder half plus the decoder's KV source); the later (decoder) layers run on rows
  // [replay_from, n). 0 = every layer on every row (exact).
  int64_t replay_from = 0;
  bool all_logits = false;  // logits of every row (needs replay_from == 0), else the last row
  float* logits = nullptr;  // [n or 1, vocab] fp32, or null for none
  // Host: the last row's token drawn on the backend by `draw` (greedy, or temperature,
  // top-k, top-p, min-p with the host's uniform), so only the id comes back; with or
  // without `logits`. With all_logits, every row's token, row i drawn by draws[i] (host [n]):
  // token and logprob are then [n], top_ids and top_logprobs [n, draws[0].logprobs].
  int32_t* token = nullptr;
  kernels::DrawParams draw{};
  const kernels::DrawParams* draws = nullptr;
  // With draw.logprobs >= 0, host: the token's logprob, and [draw.logprobs] best ids and
  // logprobs (past the vocabulary: -1).
  float* logprob = nullptr;
  int32_t* top_ids = nullptr;
  float* top_logprobs = nullptr;
};

class BatchRunner {
 public:
  explicit BatchRunner(model::DeepseekV41& model);
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;
  model::DeepseekV41& model() const { return model_; }

  // Runs several sequences' chunks in one pass: every matrix product covers all rows, the
  // stateful parts (window, compressor, indexer, attention) run per sequence.
  void forward(std::span<Chunk> batch);
  // One sequence: logits [n, vocab] (every row), or [1, vocab] (last_only).
  void forward(const int64_t* tokens, int64_t n, model::SequenceState& state, float* logits, bool last_only = false);
  // Graphs on backends that have them (on by default). Off frees them.
  void set_graphs(bool on);
  bool graphs() const { return graphs_ && model_.backend().graphs(); }

 private:
  // A row bucket's kept batch, its graph pool and, per group of graphable stages (in program
  // order), its graph (>= 0), -1 = not run yet, -2 = run once.
  struct Bucket;
  static constexpr int64_t kGraphRows = 256;
  static int64_t graph_bucket(int64_t rows);
  void validate(std::span<const Chunk> batch) const;
  void run_program(std::vector<model::Stage>& program, Bucket* bucket);
  void head(std::span<Chunk> batch, model::ForwardBatch& b);

  model::DeepseekV41& model_;
  bool graphs_ = true;
  std::map<int64_t, std::unique_ptr<Bucket>> buckets_;
};

}  // namespace deepinfer::runner
