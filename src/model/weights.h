// DeepSeek-V4.1 weights as the forward reads them, every tensor float32 row-major.
//
// Purpose: one struct per module with the shape of every tensor commented; load them from
// a checkpoint (each tensor checked for presence, shape and dtype, F32 mapped in place,
// BF16/F16 widened) or fill them with seeded random values from a config alone
// (`--load-format random`). FP8/MXFP4 release weights arrive with the checkpoint-format
// issue. Symbols: D hidden, H heads, hd head_dim, E experts, I expert width, V vocab.
// Invariants: pointers stay valid while the Weights (and its Checkpoint) live.
// Threading: immutable after loading.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "loader/checkpoint.h"
#include "loader/config.h"

namespace deepinfer::model {

// A weight matrix [rows, cols] in its stored format (float32, bf16, FP8 blocks, MXFP4),
// usually mapped straight from the checkpoint file.
using Mat = kernels::WeightView;

struct AttentionWeights {
  Mat wq_a;                        // [q_lora, D]
  const float* q_norm = nullptr;   // [q_lora]
  Mat wq_b;                        // [H*hd, q_lora]
  Mat wkv;                         // [hd, D]
  const float* kv_norm = nullptr;  // [hd]
  Mat wo_a;                        // [o_groups*o_lora, H*hd/o_groups]
  Mat wo_b;                        // [D, o_groups*o_lora]
  const float* attn_sink = nullptr;  // [H]
  // KV sources only
  Mat c_wkv;                       // [hd, D]
  Mat c_wgate;                     // [hd, D], ratio > 1 only
  const float* c_norm = nullptr;   // [hd]
  // index sources only
  Mat i_wq_b;                      // [n_idx*d_idx, q_lora]
  Mat i_weights_proj;              // [n_idx, D]
  Mat i_wk;                        // [d_idx, hd], index sources that are KV sources
  const float* i_k_norm = nullptr; // [d_idx]
};

struct MoeWeights {
  Mat gate;                        // [E, D]
  const float* bias = nullptr;     // [E] selection-only correction bias
  // The routed experts 0..E-1, then the shared expert (E): the grouped products' tables.
  std::vector<Mat> w1, w3;         // (E + 1) x [I, D]
  std::vector<Mat> w2;             // (E + 1) x [D, I]
};

struct EngramWeights {
  Mat table;                       // [N_j, engram_head_dim] hash-bucket rows (float, or FP8 rows with ue8m0 per 32)
  Mat wkv;                         // [D*(hc+1), (N-1)*heads*engram_head_dim]
  const float* q_weight = nullptr; // [hc, D]
  const float* k_weight = nullptr; // [hc, D]
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [D]
  const float* ffn_norm = nullptr;   // [D]
  Mat hc_attn_fn;                    // [(2+hc)*hc, hc*D]
  const float* hc_attn_base = nullptr;   // [(2+hc)*hc]
  const float* hc_attn_scale = nullptr;  // [3]
  Mat hc_ffn_fn;
  const float* hc_ffn_base = nullptr;
  const float* hc_ffn_scale = nullptr;
  AttentionWeights attn;
  MoeWeights ffn;
  bool has_engram = false;
  EngramWeights engram;            // layers in engram_layer_ids only
};

// The DSpark draft stages (`mtp.S.*`, S < num_nextn_predict_layers; spec section 3.11): each
// stage a backbone-shaped block (window-only attention: no compressor, indexer or Engram; an MoE
// of its own dspark_n_routed_experts experts and a shared one, top dspark_num_experts_per_tok),
// stage 0's projection of the taps and the last stage's heads. The backbone's embed and head are
// shared. Symbols: T taps (dspark_target_layer_ids), r the Markov rank.
struct DraftWeights {
  std::vector<LayerWeights> stages;
  Mat main_proj;                        // [D, T*D] (mtp.0)
  const float* main_norm = nullptr;     // [D] (mtp.0)
  const float* norm = nullptr;          // [D] (the last stage)
  Mat markov_embed;                     // [V, r] (the last stage)
  Mat markov_head;                      // [V, r] (the last stage)
  const float* confidence = nullptr;    // [D + r] fp32 (the last stage's confidence_head.proj, [1, D + r])
};

struct Weights {
  Mat embed;                      // [V, D]
  const float* norm = nullptr;    // [D]
  Mat head;                       // [V, D]
  std::vector<LayerWeights> layers;
  // With the draft stages: a config with num_nextn_predict_layers > 0 and, when loaded, a
  // checkpoint with `mtp.*` tensors (one without any has no stages; one with some has all).
  bool has_draft = false;
  DraftWeights draft;
  // Storage for tensors that are not mapped in place.
  std::vector<std::unique_ptr<float[]>> owned;
  int64_t owned_floats = 0;
  std::vector<std::unique_ptr<uint8_t[]>> owned_bytes;
  int64_t owned_byte_count = 0;  // bytes held in owned_bytes
  // Copies in a device backend's memory (upload_weights); the pointers above then point here.
  std::vector<kernels::Buf<uint8_t>> device;
  bool on_backend = false;  // every pointer is in a device backend's memory (Engram tables aside, below)
  bool engram_tables_on_host = false;  // on_backend, but the Engram tables stay in host memory
  // Bytes of every weight in its stored format (what a forward reads at most).
  int64_t stored_bytes() const;
  // Bytes of host memory the owned storage holds (copies, conversions, host-made weights).
  int64_t host_bytes() const { return owned_floats * 4 + owned_byte_count; }
};

// One tensor the text model reads, as the loader visits it.
struct TensorSpec {
  std::string name;          // canonical (release) name
  int64_t rows = 0, cols = 1;  // a vector has cols 1
  bool matrix = false;
  bool need_f32 = false;     // a matrix the forward reads as a float array (any stored format widened)
};
// Calls `f` for every tensor of the text model, in the loader's order (the same walk as
// load_weights, random_weights and upload_weights), the draft stages' last when the config has
// them.
void for_each_tensor(const loader::ModelConfig& c, const std::function<void(const TensorSpec&)>& f);
// Whether the draft stages' tensors are in the checkpoint: false without any `mtp.*` tensor or
// when the config has no stages.
bool checkpoint_has_draft(const loader::Checkpoint& ck);

// How load_weights keeps checkpoint tensor `t` (found for `s`): its format (F16 widened to
// float32, FP8 by its scale's shape, any format widened under need_f32) and the bytes it copies
// into host memory (widened or misaligned tensors; 0 when it is read in place from the map).
// loadable is false for a dtype or shape load_weights refuses (it names the tensor).
struct CheckpointPlacement {
  kernels::WeightFormat format = kernels::WeightFormat::kF32;
  int64_t host_copy = 0;
  bool loadable = true;
};
CheckpointPlacement checkpoint_placement(const loader::Checkpoint& ck, const loader::TensorInfo& t, const TensorSpec& s);

// Loads and checks every tensor the text model reads (the draft stages' too when
// checkpoint_has_draft), each kept in its stored format:
// F32 and BF16 mapped in place; F8_E4M3 with its `.scale` companion (ue8m0 per 32x32 block,
// or per 32 channels of a row for Engram tables); MXFP4 (I8/U8 holding two e2m1 codes per
// byte, `.scale` ue8m0 per 32 inputs of a row); F16 widened. Errors name the tensor, the
// expected shape/dtype and what was found.
Weights load_weights(const loader::Checkpoint& ck);
// Seeded random weights at the config's shapes (matrices ~ N(0, 1/in), norms ~ 1, biases 0),
// the draft stages' when the config has them (after every other tensor, so the others' values
// do not depend on them);
// with a `quantization_config` they are stored in the release formats (see quantize_release)
// and matmul_format is not used. Without one, the matmul weights are in `matmul_format`.
// With a device backend they are made in its memory (random_weights_on); otherwise on the
// host, in float32, then converted. Either way the same values and bytes, up to the device's
// Box-Muller: its log/cos may differ from the host's in the last bits of a double, which
// changes a float (and then its block's codes) only where it sits on a rounding boundary.
// engram_tables_on_host (device backends): the Engram tables are made in host memory in their
// stored format (random_weights_on: generated and quantised by the backend in chunks, then
// downloaded; the same bytes as tables made in its memory).
Weights random_weights(const loader::ModelConfig& c, uint64_t seed, kernels::Backend* device = nullptr,
                       kernels::WeightFormat matmul_format = kernels::WeightFormat::kF32,
                       bool engram_tables_on_host = false);
// The largest float32 temporary random_weights_on uses for an FP8/MXFP4 matrix (256 MiB; a
// matrix is made in chunks of whole 32-row blocks, at least one block).
inline constexpr int64_t kRandomChunkFloats = int64_t{64} << 20;
// random_weights made through `be`'s ops in its memory (Weights::device): each tensor by
// fill_random, FP8/MXFP4 matrices as float32 rows in chunks of at most chunk_floats (at least
// 32 rows) quantised by quantize_weight into their codes and scales, laid out as
// upload_weights lays a loaded matrix out. On any backend (the CPU one too: the tests compare
// it with the host path byte for byte). engram_tables_on_host: the Engram tables are made in
// chunks of the same rows and downloaded into host memory (Weights::owned_bytes).
Weights random_weights_on(const loader::ModelConfig& c, uint64_t seed, kernels::Backend& be,
                          kernels::WeightFormat matmul_format = kernels::WeightFormat::kF32,
                          int64_t chunk_floats = kRandomChunkFloats, bool engram_tables_on_host = false);
// Every tensor of `w` in the canonical order (random_weights' stream order): matrices by name,
// vectors by name and length (the forward's float arrays of a 2-D tensor come as matrices).
void for_each_tensor(const loader::ModelConfig& c, Weights& w, const std::function<void(const std::string&, Mat&)>& mat,
                     const std::function<void(const std::string&, const float*, int64_t)>& vec);

// The release checkpoint's format for a tensor (by canonical name): FP8 e4m3 with 32x32
// ue8m0 blocks for the attention projections, indexer wq_b, shared experts, Engram wkv and the
// draft stages' main_proj; MXFP4 for routed experts (the draft stages' too); FP8 rows for
// Engram tables; BF16 embedding, head and the Markov head's matrices; float elsewhere.
kernels::WeightFormat release_format(const std::string& name);
// Quantises every matrix of `w` to its release format (round-to-nearest-even values,
// power-of-two scales 2^ceil(log2(amax / max code))), replacing its storage.
void quantize_release(const loader::ModelConfig& c, Weights& w);
// Copies every tensor into `be`'s memory and points `w` at the copies (for device backends);
// with engram_tables_on_host the Engram tables stay where they are (mapped or host-made).
void upload_weights(const loader::ModelConfig& c, Weights& w, kernels::Backend& be, bool engram_tables_on_host = false);
// An Engram hash-bucket table, by canonical name ("layers.N.engram.embed.weight").
bool is_engram_table(const std::string& name);
// Converts every matrix to float32 (exact), e.g. to write a float checkpoint of a quantised one.
void dequantize_all(const loader::ModelConfig& c, Weights& w);
// Converts every matrix the forward reads through matmul to `fmt` (e.g. bf16 for a benchmark).
void convert_matmul_weights(const loader::ModelConfig& c, Weights& w, kernels::WeightFormat fmt);
// Bytes of weights one decode token reads: everything but the routed experts it does not use,
// all embedding rows but one, all Engram table rows but the (N-1) x heads it hashes to, and
// the draft stages.
int64_t active_weight_bytes(const loader::ModelConfig& c, const Weights& w);

// Every tensor under its canonical (release) name in its stored format (with `.scale`
// companions), for writing a checkpoint (tests, `deepinfer quantize`).
std::vector<loader::TensorToWrite> export_tensors(const loader::ModelConfig& c, Weights& w);

// Parameter counts per part, for `deepinfer info` and the benchmark.
struct ParamCounts {
  int64_t embed = 0, head = 0, attention = 0, compressor = 0, indexer = 0, mhc = 0, norms = 0;
  int64_t routed_experts = 0, shared_experts = 0, router = 0;
  int64_t engram = 0, engram_tables = 0;  // dense engram weights; hash-bucket tables
  int64_t draft = 0;  // the DSpark draft stages (not in total())
  int64_t total() const;
  // Parameters read for one token (all except the experts not routed to).
  int64_t active_per_token(const loader::ModelConfig& c) const;
};
ParamCounts count_params(const loader::ModelConfig& c);

}  // namespace deepinfer::model
