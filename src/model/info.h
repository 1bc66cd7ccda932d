// A human-readable summary of a config: the derived schedule, parameter counts per part,
// bytes of per-sequence state. Used by `deepinfer info` and the benchmarks.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "loader/config.h"

namespace deepinfer::model {

struct StateBytes {
  double fixed_fp32 = 0;        // window rings at full length (all layers), float32 as stored now
  double per_token_fp32 = 0;    // compressed KV + indexer keys per token, float32 as stored now
  double fixed_quant = 0;       // the same in the formats the model rounds to (FP8 window, ...)
  double per_token_quant = 0;   // FP4 compressed KV (e4m3 scale / 16), FP4 indexer keys (ue8m0 / 32)
  // As SequenceState stores it: packed where the dims divide into blocks, float otherwise;
  // window positions (8 bytes an entry) and the Engram history (4 bytes a token) included.
  double fixed_stored = 0, per_token_stored = 0;
};
StateBytes state_bytes(const loader::ModelConfig& c);

std::string describe(const loader::ModelConfig& c);

// Host memory available to a new allocation now (MemAvailable of /proc/meminfo, else the free
// physical pages), in bytes; -1 when neither can be read.
int64_t host_memory_available();

// Bytes of state one sequence holds with n_tokens computed, as stored: the window rings fill up
// to sliding_window - 1 tokens, the compressed KV, indexer keys and Engram history grow with
// every token (what the engine's StateCache reserves).
// With draft_rings (a model made with ModelOptions.dspark): also the DSpark stages' rings, which
// fill up to sliding_window tokens.
int64_t sequence_state_bytes(const loader::ModelConfig& c, int64_t n_tokens, bool draft_rings = false);
// The DSpark stages' rings of one sequence with n_tokens computed (each stage keeps the last
// sliding_window keys: FP8 with a scale per 32 where head_dim divides, else float32, and 8
// bytes of position each).
int64_t draft_ring_bytes(const loader::ModelConfig& c, int64_t n_tokens);
// "1.23 GB" style.
std::string human_bytes(double bytes);

}  // namespace deepinfer::model
