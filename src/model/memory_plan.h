// The memory a model needs before any of it is allocated: weight bytes per stored format on the
// backend, Engram tables apart, host memory the load allocates, and the per-sequence state.
//
// Purpose: load_model checks the plan against the memory available (device and host) before
// it allocates, so a model that does not fit gets an Error that says how much it needs and how
// much there is instead of an out-of-memory abort mid-load or mid-run; `deepinfer info` prints
// the same plan. The tensor list is the loader's (for_each_tensor), and each tensor's format is
// the one the load keeps it in: the checkpoint's stored format (checkpoint_placement), or for
// random weights the format load_model makes them in (random_matmul_format, release formats
// under a quantization_config).
// Invariants: for a backend in host memory the weights are counted as host memory (mapped
// checkpoint pages excepted: they are read in place, not copied); otherwise every tensor is
// counted once on the device, Engram tables aside when they stay in host memory
// (engram_tables_on_host: mapped checkpoint tables are read in place, random ones are made on
// the host), and host bytes are only what the load allocates on the host. A
// step's activations and scratch are not counted (they depend on the step's token budget).
// Threading: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kernels/backend.h"
#include "loader/checkpoint.h"
#include "loader/config.h"

namespace deepinfer::model {

// Bytes per stored format, each with its ue8m0 scales, indexed by kernels::WeightFormat.
struct FormatBytes {
  std::array<int64_t, 5> bytes{};   // values + scales
  std::array<int64_t, 5> scales{};  // the scales alone
  void add(kernels::WeightFormat f, int64_t total, int64_t scale_bytes);
  int64_t of(kernels::WeightFormat f) const { return bytes[static_cast<size_t>(f)]; }
  int64_t fp8() const { return of(kernels::WeightFormat::kFP8Block32) + of(kernels::WeightFormat::kFP8Row32); }
  int64_t total() const;
  // "FP8 180 GB, MXFP4 120 GB, BF16 2.6 GB, F32 1.0 GB" (formats with bytes, largest first).
  std::string str() const;
};

// The format load_model makes random matrices in: bf16 when the backend computes in bf16 (the
// values its products use anyway, at half the memory), float32 otherwise.
kernels::WeightFormat random_matmul_format(kernels::Precision p);
// The state budget's fraction of the memory free after loading on a device backend when neither
// a byte budget nor a fraction is given (engine/state_budget.h takes it after a warm-up forward).
inline constexpr double kDeviceMemoryFraction = 0.9;
// The fraction in effect: 0 under a byte budget, else `fraction`, else kDeviceMemoryFraction on a
// device backend (0, unlimited, on a host backend).
double effective_memory_fraction(bool host_backend, int64_t budget_bytes, double fraction);

// Random weights are generated in the backend's memory unless the backend computes in host
// memory anyway (release formats are quantised there too, through a float32 temporary of at
// most 256 MiB in the device's memory, which the plan does not count).
bool random_weights_on_device(const loader::ModelConfig& c, bool backend_in_host_memory);

struct PlanOptions {
  bool host_backend = true;  // the backend computes in host memory (the CPU backend)
  kernels::Precision precision = kernels::Precision::kFloat32;
  std::string device = "cpu";       // the backend's name, for messages ("cpu", "cuda", "cuda:1")
  int64_t state_tokens = 0;         // one sequence's context the state must hold (0 or more than
                                    // max_position_embeddings: max_position_embeddings)
  int64_t state_budget_bytes = 0;   // the engine's state budget in bytes (0: none)
  double memory_fraction = 0;       // or this fraction of the memory free after loading (0: none;
                                    // plan_memory resolves it by effective_memory_fraction)
  bool engram_tables_on_host = true;  // device backends: Engram tables stay in host memory
  bool dspark = false;              // the state holds the DSpark stages' rings too (ModelOptions.dspark)
};

struct MemoryPlan {
  PlanOptions options;
  bool random = false;          // random weights (else the checkpoint's)
  bool made_on_host = false;    // random weights generated on the host in float32 first
  FormatBytes weights;          // matrices in the backend's memory, Engram tables excluded
  int64_t vectors = 0;          // float32 norms, biases and mHC scales in the backend's memory
  FormatBytes engram_tables;    // Engram hash-bucket tables (in the backend's memory unless engram_tables_host)
  bool engram_tables_host = false;  // a device backend with the tables in host memory
  int64_t mapped = 0;           // checkpoint bytes read in place from the memory map (not copied)
  int64_t host_copies = 0;      // host allocations the load keeps: widened/misaligned checkpoint
                                // tensors, or random weights made on the host (float32 + converted)
  int64_t host_scratch = 0;     // the largest temporary while converting on the host
  int64_t state_tokens = 0;     // resolved
  double state_fixed = 0, state_per_token = 0;  // one sequence's state, as stored
  int64_t state_min = 0;        // one sequence of state_tokens tokens

  int64_t weight_bytes() const { return weights.total() + vectors + engram_tables.total(); }
  // The weight bytes in the backend's memory (weight_bytes less host-memory Engram tables).
  int64_t device_weight_bytes() const { return weight_bytes() - (engram_tables_host ? engram_tables.total() : 0); }
  // State the engine must be able to hold: one sequence at state_tokens, or the explicit budget.
  int64_t state_needed() const;
  // Bytes needed in the backend's memory (0 for a host backend: see host_needed) and in host memory.
  int64_t device_needed() const;
  int64_t host_needed() const;
};

// ck null: random weights from config `c` (ck's config otherwise; `c` must be it).
MemoryPlan plan_memory(const loader::ModelConfig& c, const loader::Checkpoint* ck, const PlanOptions& o);

// Memory available now; -1 where unknown (then that side is not checked).
struct MemoryAvailable {
  int64_t device = -1, host = -1;
};

// Throws Error "<source>: the model does not fit on <device>: it needs X (weights: ...; Engram
// tables ...; state for one sequence of N tokens ...) but Y is free" (or "in memory" / "in host
// memory") when a side needs more than is available. `source` names what sizes the model (the
// checkpoint directory, or the config.json of random weights).
void check_memory_plan(const MemoryPlan& p, const MemoryAvailable& a, const std::string& source);

// The plan for `deepinfer info`, one figure a line.
std::string describe_memory_plan(const MemoryPlan& p, const MemoryAvailable& a);
// One line for the engine's start: weights per format, Engram tables, state, host, available;
// `budget` in place of the plan's budget rule when the engine has resolved it (StateBudget::how).
std::string memory_plan_summary(const MemoryPlan& p, const MemoryAvailable& a, const std::string& budget = "");

}  // namespace deepinfer::model
