#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/rng.h"
#include "model/quantize.h"

namespace deepinfer::model {

using loader::ModelConfig;

namespace {

// Walks every tensor of the text model in a fixed order, calling `mat` for matrices and
// `vec` for vectors with the canonical name, the expected shape and the destination.
// `need_f32` marks matrices the forward reads as plain float arrays (mHC projections,
// Engram q/k weights): any stored format is widened for them.
struct Visitor {
  std::function<void(const std::string&, int64_t, int64_t, Mat*, bool need_f32)> mat;
  std::function<void(const std::string&, int64_t, const float**, int kind)> vec;  // kind: 0 norm, 1 zero-ish, 2 scale
  // A 2-D tensor read as a flat float array.
  void vec2(const std::string& name, int64_t r, int64_t cols, const float** out) const {
    Mat m = Mat::f32(*out, r, cols);  // carries the current pointer for visitors that read
    mat(name, r, cols, &m, true);
    *out = m.f32();
  }
};

// One block's tensors under `p`: backbone layer i, or (i >= L) a draft stage: window-only (no
// compressor, indexer or Engram) with its own experts.
void visit_block(const ModelConfig& c, int64_t i, const std::string& p, LayerWeights& L, const Visitor& v) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, hc = c.hc_mult;
  const int64_t mix = (2 + hc) * hc;
  const bool draft = i >= c.num_hidden_layers;
  v.vec(p + "attn_norm.weight", D, &L.attn_norm, 0);
  v.vec(p + "ffn_norm.weight", D, &L.ffn_norm, 0);
  if (c.has_engram(i)) {
    const size_t j = static_cast<size_t>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), i) -
                                         c.engram_layer_ids.begin());
    const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
    L.has_engram = true;
    v.mat(p + "engram.embed.weight", c.engram_num_embeddings[j], c.engram_head_dim, &L.engram.table, false);
    v.mat(p + "engram.wkv.weight", D * (hc + 1), cols * c.engram_head_dim, &L.engram.wkv, false);
    v.vec2(p + "engram.q_weight", hc, D, &L.engram.q_weight);
    v.vec2(p + "engram.k_weight", hc, D, &L.engram.k_weight);
  }
  v.mat(p + "hc_attn_fn", mix, hc * D, &L.hc_attn_fn, true);
  v.vec(p + "hc_attn_base", mix, &L.hc_attn_base, 1);
  v.vec(p + "hc_attn_scale", 3, &L.hc_attn_scale, 2);
  v.mat(p + "hc_ffn_fn", mix, hc * D, &L.hc_ffn_fn, true);
  v.vec(p + "hc_ffn_base", mix, &L.hc_ffn_base, 1);
  v.vec(p + "hc_ffn_scale", 3, &L.hc_ffn_scale, 2);
  AttentionWeights& A = L.attn;
  const std::string a = p + "attn.";
  v.mat(a + "wq_a.weight", c.q_lora_rank, D, &A.wq_a, false);
  v.vec(a + "q_norm.weight", c.q_lora_rank, &A.q_norm, 0);
  v.mat(a + "wq_b.weight", H * hd, c.q_lora_rank, &A.wq_b, false);
  v.mat(a + "wkv.weight", hd, D, &A.wkv, false);
  v.vec(a + "kv_norm.weight", hd, &A.kv_norm, 0);
  v.mat(a + "wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, &A.wo_a, false);
  v.mat(a + "wo_b.weight", D, c.o_groups * c.o_lora_rank, &A.wo_b, false);
  v.vec(a + "attn_sink", H, &A.attn_sink, 1);
  if (c.is_kv_source(i)) {
    v.mat(a + "compressor.wkv.weight", hd, D, &A.c_wkv, false);
    if (c.ratio(i) > 1) v.mat(a + "compressor.wgate.weight", hd, D, &A.c_wgate, false);
    v.vec(a + "compressor.norm.weight", hd, &A.c_norm, 0);
  }
  if (c.is_index_source(i)) {
    v.mat(a + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, &A.i_wq_b, false);
    v.mat(a + "indexer.weights_proj.weight", c.index_n_heads, D, &A.i_weights_proj, false);
    if (c.is_kv_source(i)) {
      v.mat(a + "indexer.wk.weight", c.index_head_dim, hd, &A.i_wk, false);
      v.vec(a + "indexer.k_norm.weight", c.index_head_dim, &A.i_k_norm, 0);
    }
  }
  MoeWeights& F = L.ffn;
  const std::string f = p + "ffn.";
  const int64_t E = draft ? c.dspark_n_routed_experts : c.n_routed_experts, I = c.moe_intermediate_size;
  v.mat(f + "gate.weight", E, D, &F.gate, false);
  v.vec(f + "gate.bias", E, &F.bias, 1);
  F.w1.resize(static_cast<size_t>(E) + 1);
  F.w2.resize(static_cast<size_t>(E) + 1);
  F.w3.resize(static_cast<size_t>(E) + 1);
  for (int64_t e = 0; e <= E; ++e) {  // the routed experts, then the shared one
    const std::string x = e < E ? f + "experts." + std::to_string(e) + "." : f + "shared_experts.";
    v.mat(x + "w1.weight", I, D, &F.w1[e], false);
    v.mat(x + "w2.weight", D, I, &F.w2[e], false);
    v.mat(x + "w3.weight", I, D, &F.w3[e], false);
  }
}

// Every tensor: the backbone's, then (w.has_draft) the draft stages'.
void visit(const ModelConfig& c, Weights& w, const Visitor& v) {
  const int64_t D = c.hidden_size, L = c.num_hidden_layers;
  v.mat("embed.weight", c.vocab_size, D, &w.embed, false);
  w.layers.resize(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) visit_block(c, i, "layers." + std::to_string(i) + ".", w.layers[static_cast<size_t>(i)], v);
  v.vec("norm.weight", D, &w.norm, 0);
  v.mat("head.weight", c.vocab_size, D, &w.head, false);
  if (!w.has_draft) return;
  DraftWeights& d = w.draft;
  const int64_t S = c.num_nextn_predict_layers, taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  d.stages.resize(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) visit_block(c, L + s, "mtp." + std::to_string(s) + ".", d.stages[static_cast<size_t>(s)], v);
  v.mat("mtp.0.main_proj.weight", D, taps * D, &d.main_proj, false);
  v.vec("mtp.0.main_norm.weight", D, &d.main_norm, 0);
  const std::string last = "mtp." + std::to_string(S - 1) + ".";
  v.vec(last + "norm.weight", D, &d.norm, 0);
  v.mat(last + "markov_head.embed.weight", c.vocab_size, c.dspark_markov_rank, &d.markov_embed, false);
  v.mat(last + "markov_head.head.weight", c.vocab_size, c.dspark_markov_rank, &d.markov_head, false);
  v.vec2(last + "confidence_head.proj.weight", 1, D + c.dspark_markov_rank, &d.confidence);
}

float* own(Weights& w, int64_t n) {
  w.owned.emplace_back(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  w.owned_floats += n;
  return w.owned.back().get();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A shape mismatch may be the config's mistake as much as the checkpoint's: say where the
// expected shape comes from.
constexpr const char* kFromConfig = " (the shape config.json's sizes give; check both files)";

// A float copy of any stored matrix (small tensors the forward reads as float arrays).
const float* widen(Weights& w, const Mat& m) {
  if (m.format == kernels::WeightFormat::kF32) return m.f32();
  float* out = own(w, m.rows * m.cols);
  for (int64_t r = 0; r < m.rows; ++r) kernels::dequant_row(m, r, out + r * m.cols);
  return out;
}

std::string dtype_str(const loader::TensorInfo& t) { return std::string(core::dtype_name(t.dtype)) + " " + t.shape_str(); }

// An FP8 tensor's scales: 32x32 blocks for dense weights; per-row blocks of 32 (Engram tables)
// when its `.scale` companion has a row per weight row.
bool fp8_per_row(const loader::Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols) {
  const std::vector<int64_t> block = {ceil_div(rows, 32), ceil_div(cols, 32)}, row = {rows, ceil_div(cols, 32)};
  const loader::TensorInfo* sc = ck.find(name.substr(0, name.size() - 6) + "scale");
  return sc && sc->shape == row && row != block;
}

// The `.scale` companion of an FP8/MXFP4 tensor, checked for dtype and shape.
const uint8_t* fetch_scale(const loader::Checkpoint& ck, const loader::TensorInfo& t, const std::string& name,
                           const std::vector<int64_t>& shape) {
  const std::string sname = name.substr(0, name.size() - std::string("weight").size()) + "scale";
  const loader::TensorInfo* sc = ck.find(sname);
  if (!sc)
    throw Error(ck.dir() + ": tensor '" + t.name + "' is " + std::string(core::dtype_name(t.dtype)) +
                " but its scale tensor '" + sname + "' is missing (expected F8_E8M0 " + loader::shape_str(shape) + ")");
  if (sc->dtype != core::DType::F8_E8M0 || sc->shape != shape)
    throw Error(sc->file + ": scale tensor '" + sc->name + "' is " + dtype_str(*sc) + ", expected F8_E8M0 " +
                loader::shape_str(shape));
  return sc->data;
}

// One matrix in its stored format (or widened to float when need_f32).
Mat fetch_mat(const loader::Checkpoint& ck, Weights& w, const std::string& name, int64_t rows, int64_t cols, bool need_f32) {
  const loader::TensorInfo* t = ck.find(name);
  const std::vector<int64_t> shape = {rows, cols};
  if (!t) throw Error(ck.dir() + ": missing tensor '" + name + "' (expected shape " + loader::shape_str(shape) + ")");
  Mat m;
  m.rows = rows;
  m.cols = cols;
  m.data = t->data;
  switch (t->dtype) {
    case core::DType::F32:
    case core::DType::BF16:
    case core::DType::F16:
    case core::DType::F8_E4M3:
      if (t->shape != shape)
        throw Error(t->file + ": tensor '" + t->name + "' has shape " + t->shape_str() + ", expected " + loader::shape_str(shape) +
                    kFromConfig);
      break;
    case core::DType::I8:
    case core::DType::U8: {
      const std::vector<int64_t> packed = {rows, ceil_div(cols, 2)};
      if (t->shape != packed)
        throw Error(t->file + ": tensor '" + t->name + "' is MXFP4 (" + dtype_str(*t) + ") but a [" + std::to_string(rows) +
                    ", " + std::to_string(cols) + "] weight packs to " + loader::shape_str(packed) + kFromConfig);
      break;
    }
    default:
      throw Error(t->file + ": tensor '" + t->name + "' has dtype " + std::string(core::dtype_name(t->dtype)) +
                  ", expected F32, BF16, F16, F8_E4M3 (+scale) or MXFP4 as I8/U8 (+scale)");
  }
  switch (t->dtype) {
    case core::DType::F32:
      m.format = kernels::WeightFormat::kF32;
      if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
        float* out = own(w, rows * cols);
        std::memcpy(out, t->data, static_cast<size_t>(rows * cols) * 4);
        m.data = out;
      }
      break;
    case core::DType::BF16:
      m.format = kernels::WeightFormat::kBF16;
      if (reinterpret_cast<uintptr_t>(t->data) % 2 != 0) need_f32 = true;  // unaligned: widen
      break;
    case core::DType::F16: {
      float* out = own(w, rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        uint16_t b;
        std::memcpy(&b, t->data + 2 * i, 2);
        out[i] = core::f16_to_f32(b);
      }
      m = Mat::f32(out, rows, cols);
      break;
    }
    case core::DType::F8_E4M3: {
      const bool per_row = fp8_per_row(ck, name, rows, cols);
      m.format = per_row ? kernels::WeightFormat::kFP8Row32 : kernels::WeightFormat::kFP8Block32;
      m.scale = fetch_scale(ck, *t, name,
                            per_row ? std::vector<int64_t>{rows, ceil_div(cols, 32)}
                                    : std::vector<int64_t>{ceil_div(rows, 32), ceil_div(cols, 32)});
      break;
    }
    default:  // MXFP4
      m.format = kernels::WeightFormat::kMXFP4;
      m.scale = fetch_scale(ck, *t, name, {rows, ceil_div(cols, 32)});
      break;
  }
  if (need_f32 && m.format != kernels::WeightFormat::kF32) {
    Mat tmp = m;
    if (tmp.format == kernels::WeightFormat::kBF16 && reinterpret_cast<uintptr_t>(t->data) % 2 != 0) {
      // Unaligned bf16: copy the bytes first.
      auto* bytes = new uint8_t[static_cast<size_t>(rows * cols * 2)];
      std::memcpy(bytes, t->data, static_cast<size_t>(rows * cols * 2));
      w.owned_bytes.emplace_back(bytes);
      w.owned_byte_count += rows * cols * 2;
      tmp.data = bytes;
    }
    m = Mat::f32(widen(w, tmp), rows, cols);
  }
  return m;
}

const float* fetch_vec(const loader::Checkpoint& ck, Weights& w, const std::string& name, int64_t n) {
  const loader::TensorInfo* t = ck.find(name);
  if (!t) throw Error(ck.dir() + ": missing tensor '" + name + "' (expected shape [" + std::to_string(n) + "])");
  if (t->dtype != core::DType::F32 && t->dtype != core::DType::BF16 && t->dtype != core::DType::F16)
    throw Error(t->file + ": tensor '" + t->name + "' has dtype " + std::string(core::dtype_name(t->dtype)) +
                ", expected F32, BF16 or F16 for a vector");
  if (t->shape != std::vector<int64_t>{n})
    throw Error(t->file + ": tensor '" + t->name + "' has shape " + t->shape_str() + ", expected [" + std::to_string(n) + "]" +
                kFromConfig);
  if (t->dtype == core::DType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
    return reinterpret_cast<const float*>(t->data);
  float* out = own(w, n);
  for (int64_t i = 0; i < n; ++i) {
    if (t->dtype == core::DType::F32) {
      std::memcpy(&out[i], t->data + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, t->data + 2 * i, 2);
      out[i] = t->dtype == core::DType::BF16 ? core::bf16_to_f32(b) : core::f16_to_f32(b);
    }
  }
  return out;
}

}  // namespace

void for_each_tensor(const ModelConfig& c, const std::function<void(const TensorSpec&)>& f) {
  Weights dummy;
  dummy.has_draft = c.num_nextn_predict_layers > 0;
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat*, bool need_f32) {
    f(TensorSpec{name, r, cols, true, need_f32});
  };
  v.vec = [&](const std::string& name, int64_t n, const float**, int) { f(TensorSpec{name, n, 1, false, false}); };
  visit(c, dummy, v);
}

// The decisions of fetch_mat and fetch_vec, without reading or copying anything.
CheckpointPlacement checkpoint_placement(const loader::Checkpoint& ck, const loader::TensorInfo& t, const TensorSpec& s) {
  using F = kernels::WeightFormat;
  const int64_t n = s.rows * s.cols;
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  const bool aligned4 = addr % alignof(float) == 0, aligned2 = addr % 2 == 0;
  const bool is_float = t.dtype == core::DType::F32 || t.dtype == core::DType::BF16 || t.dtype == core::DType::F16;
  if (!s.matrix) {
    if (!is_float || t.shape != std::vector<int64_t>{s.rows}) return {F::kF32, 0, false};
    return {F::kF32, t.dtype == core::DType::F32 && aligned4 ? 0 : n * 4};
  }
  const bool packed = t.dtype == core::DType::I8 || t.dtype == core::DType::U8;
  if (t.shape != std::vector<int64_t>{s.rows, packed ? ceil_div(s.cols, 2) : s.cols}) return {F::kF32, 0, false};
  CheckpointPlacement p;
  switch (t.dtype) {
    case core::DType::F32: p = {F::kF32, aligned4 ? 0 : n * 4}; break;
    case core::DType::BF16:
      if (!aligned2) return {F::kF32, n * 2 + n * 4};  // the bytes copied, then widened
      p = {F::kBF16, 0};
      break;
    case core::DType::F16: p = {F::kF32, n * 4}; break;
    case core::DType::F8_E4M3:
      p = {fp8_per_row(ck, s.name, s.rows, s.cols) ? F::kFP8Row32 : F::kFP8Block32, 0};
      break;
    case core::DType::I8:
    case core::DType::U8: p = {F::kMXFP4, 0}; break;
    default: return {F::kF32, 0, false};
  }
  if (s.need_f32 && p.format != F::kF32) p = {F::kF32, p.host_copy + n * 4};
  return p;
}

namespace {

// Stored bytes of the matrices of blocks `layers`.
int64_t block_bytes(const std::vector<LayerWeights>& layers) {
  int64_t b = 0;
  auto add = [&](const Mat& m) {
    if (m) b += kernels::weight_bytes(m);
  };
  for (const auto& L : layers) {
    add(L.hc_attn_fn);
    add(L.hc_ffn_fn);
    for (const Mat* m : {&L.attn.wq_a, &L.attn.wq_b, &L.attn.wkv, &L.attn.wo_a, &L.attn.wo_b, &L.attn.c_wkv, &L.attn.c_wgate,
                         &L.attn.i_wq_b, &L.attn.i_weights_proj, &L.attn.i_wk, &L.ffn.gate, &L.engram.table,
                         &L.engram.wkv})
      add(*m);
    for (const auto* v : {&L.ffn.w1, &L.ffn.w2, &L.ffn.w3})
      for (const Mat& m : *v) add(m);
  }
  return b;
}

int64_t draft_bytes(const Weights& w) {
  if (!w.has_draft) return 0;
  const DraftWeights& d = w.draft;
  int64_t b = block_bytes(d.stages);
  for (const Mat* m : {&d.main_proj, &d.markov_embed, &d.markov_head})
    if (*m) b += kernels::weight_bytes(*m);
  return b;
}

}  // namespace

int64_t Weights::stored_bytes() const {
  int64_t b = block_bytes(layers) + draft_bytes(*this);
  for (const Mat* m : {&embed, &head})
    if (*m) b += kernels::weight_bytes(*m);
  return b;
}

bool checkpoint_has_draft(const loader::Checkpoint& ck) {
  if (ck.config().num_nextn_predict_layers == 0) return false;
  const auto it = ck.tensors().lower_bound("mtp.");
  return it != ck.tensors().end() && it->first.rfind("mtp.", 0) == 0;
}

Weights load_weights(const loader::Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  Weights w;
  w.has_draft = checkpoint_has_draft(ck);
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat* m, bool need_f32) {
    *m = fetch_mat(ck, w, name, r, cols, need_f32);
  };
  v.vec = [&](const std::string& name, int64_t n, const float** out, int) { *out = fetch_vec(ck, w, name, n); };
  visit(c, w, v);
  return w;
}

namespace {

// Tensor t (in visiting order, from 1) is mean + std * normal01(stream t, i); mean 0 stores
// std * z. Matrices N(0, 1/in) keep activations O(1) through the random network; norms
// 1 + 0.1 N, biases 0.1 N, scales 1.
uint64_t tensor_stream(uint64_t seed, uint64_t t) { return seed ^ (t * 0x9E3779B97F4A7C15ull); }
float matrix_std(int64_t cols) { return 1.0f / std::sqrt(static_cast<float>(cols)); }
float vector_mean(int kind) { return kind == 1 ? 0.0f : 1.0f; }
float vector_std(int kind) { return kind == 2 ? 0.0f : 0.1f; }

// A random Engram table (m: format and shape set) made in host memory in its stored format:
// chunks of rows filled (and quantised) in `be`'s memory from the tensor's stream, downloaded.
// The same bytes as the device-resident table: an FP8-row row's codes and scale depend on that
// row alone, and the stream continues across chunks.
void random_table_on_host(kernels::Backend& be, Weights& w, Mat& m, uint64_t stream, float std, int64_t chunk_floats) {
  const Mat one{m.format, nullptr, nullptr, 1, m.cols};
  const int64_t srow = kernels::weight_scale_bytes(one), vrow = kernels::weight_bytes(one) - srow;
  auto host = [&](int64_t bytes) {
    w.owned_bytes.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
    w.owned_byte_count += bytes;
    return w.owned_bytes.back().get();
  };
  uint8_t* values = host(vrow * m.rows);
  uint8_t* scales = srow > 0 ? host(srow * m.rows) : nullptr;
  m.data = values;
  m.scale = scales;
  const int64_t per = std::max<int64_t>(32, chunk_floats / std::max<int64_t>(m.cols, 1) / 32 * 32);
  const int64_t most = std::min(per, m.rows);
  kernels::Buf<uint8_t> codes(be, vrow * most), sc(be, srow * most);
  kernels::Buf<float> rows(be, srow > 0 ? most * m.cols : 0);
  for (int64_t r0 = 0; r0 < m.rows; r0 += per) {
    const int64_t n = std::min(per, m.rows - r0);
    if (srow == 0) {
      be.fill_random({.out = codes.data(), .format = m.format, .n = n * m.cols, .seed = stream, .mean = 0.0f, .std = std,
                      .first = r0 * m.cols});
    } else {
      be.fill_random({.out = rows.data(), .format = kernels::WeightFormat::kF32, .n = n * m.cols, .seed = stream,
                      .mean = 0.0f, .std = std, .first = r0 * m.cols});
      be.quantize_weight({.x = rows.data(), .rows = n, .cols = m.cols, .row0 = 0, .format = m.format,
                          .codes = codes.data(), .scales = sc.data()});
      be.download(scales + r0 * srow, sc.data(), n * srow);
    }
    be.download(values + r0 * vrow, codes.data(), n * vrow);
  }
}

}  // namespace

Weights random_weights(const ModelConfig& c, uint64_t seed, kernels::Backend* device, kernels::WeightFormat matmul_format,
                       bool engram_tables_on_host) {
  if (device && !device->host_memory())
    return random_weights_on(c, seed, *device, matmul_format, kRandomChunkFloats, engram_tables_on_host);
  // On the host: every tensor in float32, converted afterwards.
  Weights w;
  w.has_draft = c.num_nextn_predict_layers > 0;
  uint64_t tensor_id = 0;
  auto make = [&](int64_t n, float mean, float std) {
    const uint64_t stream = tensor_stream(seed, ++tensor_id);
    float* p = own(w, n);
    for (int64_t i = 0; i < n; ++i) {
      const float z = core::normal01(stream, static_cast<uint64_t>(i));
      p[i] = mean == 0.0f ? std * z : mean + std * z;
    }
    return p;
  };
  Visitor v;
  v.mat = [&](const std::string&, int64_t r, int64_t cols, Mat* m, bool) {
    *m = Mat::f32(make(r * cols, 0.0f, matrix_std(cols)), r, cols);
  };
  v.vec = [&](const std::string&, int64_t n, const float** out, int kind) { *out = make(n, vector_mean(kind), vector_std(kind)); };
  visit(c, w, v);
  if (c.quantization.present) quantize_release(c, w);
  else if (matmul_format != kernels::WeightFormat::kF32) convert_matmul_weights(c, w, matmul_format);
  return w;
}

Weights random_weights_on(const ModelConfig& c, uint64_t seed, kernels::Backend& be, kernels::WeightFormat matmul_format,
                          int64_t chunk_floats, bool engram_tables_on_host) {
  const bool release = c.quantization.present;
  DI_CHECK(release || matmul_format == kernels::WeightFormat::kF32 || matmul_format == kernels::WeightFormat::kBF16,
           "random weights on a backend are float32 or bf16 without a quantization_config");
  Weights w;
  w.has_draft = c.num_nextn_predict_layers > 0;
  w.on_backend = !be.host_memory();
  // Host tables on a host backend too (the same bytes; the tests compare the two paths).
  const bool host_tables = engram_tables_on_host;
  w.engram_tables_on_host = host_tables && w.on_backend;
  uint64_t tensor_id = 0;
  auto buffer = [&](int64_t bytes) {
    w.device.emplace_back(be, bytes);
    return w.device.back().data();
  };
  auto fill = [&](void* out, kernels::WeightFormat f, int64_t n, uint64_t stream, float mean, float std, int64_t first) {
    be.fill_random({.out = out, .format = f, .n = n, .seed = stream, .mean = mean, .std = std, .first = first});
  };
  kernels::Buf<float> rows;  // float32 rows of an FP8/MXFP4 matrix, before their quantisation
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat* m, bool need_f32) {
    const uint64_t stream = tensor_stream(seed, ++tensor_id);
    const float std = matrix_std(cols);
    const kernels::WeightFormat f = need_f32 ? kernels::WeightFormat::kF32 : release ? release_format(name) : matmul_format;
    *m = Mat{f, nullptr, nullptr, r, cols};
    if (host_tables && is_engram_table(name)) {
      random_table_on_host(be, w, *m, stream, std, chunk_floats);
      return;
    }
    const int64_t scale_bytes = kernels::weight_scale_bytes(*m);
    auto* values = static_cast<uint8_t*>(buffer(kernels::weight_bytes(*m) - scale_bytes));
    m->data = values;
    if (f == kernels::WeightFormat::kF32 || f == kernels::WeightFormat::kBF16) {
      fill(values, f, r * cols, stream, 0.0f, std, 0);
      return;
    }
    auto* scales = static_cast<uint8_t*>(buffer(scale_bytes));
    m->scale = scales;
    // Chunks of whole 32-row blocks; the stream continues across them (RandomFillArgs.first).
    const int64_t per = std::max<int64_t>(32, chunk_floats / std::max<int64_t>(cols, 1) / 32 * 32);
    const int64_t need = std::min(per, r) * cols;
    if (rows.capacity() < need) {
      rows = kernels::Buf<float>();  // the old one goes first
      rows = kernels::Buf<float>(be, need);
    }
    for (int64_t r0 = 0; r0 < r; r0 += per) {
      const int64_t n = std::min(per, r - r0);
      fill(rows.data(), kernels::WeightFormat::kF32, n * cols, stream, 0.0f, std, r0 * cols);
      be.quantize_weight({.x = rows.data(), .rows = n, .cols = cols, .row0 = r0, .format = f, .codes = values, .scales = scales});
    }
  };
  v.vec = [&](const std::string&, int64_t n, const float** out, int kind) {
    void* p = buffer(n * static_cast<int64_t>(sizeof(float)));
    fill(p, kernels::WeightFormat::kF32, n, tensor_stream(seed, ++tensor_id), vector_mean(kind), vector_std(kind), 0);
    *out = static_cast<const float*>(p);
  };
  visit(c, w, v);
  be.synchronize();  // the CUDA products read weights before their programmatic wait
  return w;
}

void for_each_tensor(const ModelConfig& c, Weights& w, const std::function<void(const std::string&, Mat&)>& mat,
                     const std::function<void(const std::string&, const float*, int64_t)>& vec) {
  Visitor v;
  v.mat = [&](const std::string& name, int64_t, int64_t, Mat* m, bool) { mat(name, *m); };
  v.vec = [&](const std::string& name, int64_t n, const float** p, int) { vec(name, *p, n); };
  visit(c, w, v);
}

kernels::WeightFormat release_format(const std::string& name) {
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (name == "embed.weight" || name == "head.weight" || has(".markov_head.")) return kernels::WeightFormat::kBF16;
  if (has(".engram.embed.")) return kernels::WeightFormat::kFP8Row32;
  if (has(".ffn.experts.")) return kernels::WeightFormat::kMXFP4;
  if (has(".engram.wkv.") || has(".shared_experts.") || has(".indexer.wq_b.") || has(".attn.wq_a.") ||
      has(".attn.wq_b.") || has(".attn.wkv.") || has(".attn.wo_a.") || has(".attn.wo_b.") || has(".main_proj."))
    return kernels::WeightFormat::kFP8Block32;
  return kernels::WeightFormat::kF32;
}

void quantize_release(const ModelConfig& c, Weights& w) {
  Visitor v;
  v.mat = [&](const std::string& name, int64_t, int64_t, Mat* m, bool need_f32) {
    const kernels::WeightFormat f = release_format(name);
    if (need_f32 || f == m->format) return;
    *m = quantize_matrix(*m, f, w);
  };
  v.vec = [&](const std::string&, int64_t, const float**, int) {};
  visit(c, w, v);
}

bool is_engram_table(const std::string& name) { return name.find(".engram.embed.") != std::string::npos; }

void upload_weights(const ModelConfig& c, Weights& w, kernels::Backend& be, bool engram_tables_on_host) {
  if (w.on_backend) return;
  w.on_backend = true;
  w.engram_tables_on_host = engram_tables_on_host;
  auto put = [&](const void* src, int64_t bytes) -> void* {
    w.device.emplace_back(be, bytes);
    be.upload(w.device.back().data(), src, bytes);
    return w.device.back().data();
  };
  Visitor v;
  v.mat = [&](const std::string& name, int64_t, int64_t, Mat* m, bool) {
    if (!m->data || (engram_tables_on_host && is_engram_table(name))) return;
    const int64_t scale_bytes = kernels::weight_scale_bytes(*m), value_bytes = kernels::weight_bytes(*m) - scale_bytes;
    m->data = put(m->data, value_bytes);
    if (m->scale) m->scale = static_cast<const uint8_t*>(put(m->scale, scale_bytes));
  };
  v.vec = [&](const std::string&, int64_t n, const float** out, int) {
    if (*out) *out = static_cast<const float*>(put(*out, n * static_cast<int64_t>(sizeof(float))));
  };
  visit(c, w, v);
  be.synchronize();  // the CUDA products read weights before their programmatic wait
}

void dequantize_all(const ModelConfig& c, Weights& w) {
  Visitor v;
  v.mat = [&](const std::string&, int64_t, int64_t, Mat* m, bool) {
    if (m->format != kernels::WeightFormat::kF32) *m = quantize_matrix(*m, kernels::WeightFormat::kF32, w);
  };
  v.vec = [&](const std::string&, int64_t, const float**, int) {};
  visit(c, w, v);
}

void convert_matmul_weights(const ModelConfig& c, Weights& w, kernels::WeightFormat fmt) {
  Visitor v;
  v.mat = [&](const std::string&, int64_t, int64_t, Mat* m, bool need_f32) {
    if (!need_f32 && m->format != fmt) *m = quantize_matrix(*m, fmt, w);
  };
  v.vec = [&](const std::string&, int64_t, const float**, int) {};
  visit(c, w, v);
}

int64_t active_weight_bytes(const ModelConfig& c, const Weights& w) {
  int64_t experts = 0;  // the routed ones (the shared expert, last, is always active)
  int64_t tables = 0, table_rows = 0;  // Engram tables, and the rows of them a token reads
  const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  for (const auto& L : w.layers) {
    for (const auto* v : {&L.ffn.w1, &L.ffn.w2, &L.ffn.w3})
      for (size_t e = 0; e + 1 < v->size(); ++e) experts += kernels::weight_bytes((*v)[e]);
    if (L.has_engram && L.engram.table) {
      const int64_t b = kernels::weight_bytes(L.engram.table);
      tables += b;
      table_rows += b / std::max<int64_t>(1, L.engram.table.rows) * cols;
    }
  }
  const int64_t embed = kernels::weight_bytes(w.embed);
  return w.stored_bytes() - draft_bytes(w) - experts +
         experts / std::max<int64_t>(1, c.n_routed_experts) * c.num_experts_per_tok - embed +
         embed / std::max<int64_t>(1, c.vocab_size) - tables + table_rows;
}

std::vector<loader::TensorToWrite> export_tensors(const ModelConfig& c, Weights& w) {
  std::vector<loader::TensorToWrite> out;
  auto add_f32 = [&](const std::string& name, std::vector<int64_t> shape, const float* p) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    loader::TensorToWrite t{name, core::DType::F32, std::move(shape), std::vector<uint8_t>(static_cast<size_t>(n) * 4)};
    if (n) std::memcpy(t.bytes.data(), p, t.bytes.size());
    out.push_back(std::move(t));
  };
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat* m, bool) {
    const auto* bytes = static_cast<const uint8_t*>(m->data);
    const std::string sname = name.substr(0, name.size() - 6) + "scale";
    switch (m->format) {
      case kernels::WeightFormat::kF32: add_f32(name, {r, cols}, m->f32()); break;
      case kernels::WeightFormat::kBF16:
        out.push_back({name, core::DType::BF16, {r, cols}, std::vector<uint8_t>(bytes, bytes + r * cols * 2)});
        break;
      case kernels::WeightFormat::kFP8Block32:
      case kernels::WeightFormat::kFP8Row32: {
        const bool row = m->format == kernels::WeightFormat::kFP8Row32;
        const std::vector<int64_t> sshape = {row ? r : ceil_div(r, 32), ceil_div(cols, 32)};
        out.push_back({name, core::DType::F8_E4M3, {r, cols}, std::vector<uint8_t>(bytes, bytes + r * cols)});
        out.push_back({sname, core::DType::F8_E8M0, sshape, std::vector<uint8_t>(m->scale, m->scale + sshape[0] * sshape[1])});
        break;
      }
      case kernels::WeightFormat::kMXFP4: {
        const int64_t packed = ceil_div(cols, 2), sc = ceil_div(cols, 32);
        out.push_back({name, core::DType::I8, {r, packed}, std::vector<uint8_t>(bytes, bytes + r * packed)});
        out.push_back({sname, core::DType::F8_E8M0, {r, sc}, std::vector<uint8_t>(m->scale, m->scale + r * sc)});
        break;
      }
    }
  };
  v.vec = [&](const std::string& name, int64_t n, const float** p, int) { add_f32(name, {n}, *p); };
  visit(c, w, v);
  return out;
}

int64_t ParamCounts::total() const {
  return embed + head + attention + compressor + indexer + mhc + norms + routed_experts + shared_experts + router + engram + engram_tables;
}

int64_t ParamCounts::active_per_token(const ModelConfig& c) const {
  const int64_t per_expert = routed_experts / std::max<int64_t>(1, c.n_routed_experts);
  const int64_t active_routed = per_expert * c.num_experts_per_tok;
  // One embedding row is read per token.
  // Engram reads (N-1)*heads table rows per engram layer.
  const int64_t engram_rows = static_cast<int64_t>(c.engram_layer_ids.size()) * (c.engram_max_ngram_size - 1) *
                              c.engram_n_heads * c.engram_head_dim;
  return c.hidden_size + head + attention + compressor + indexer + mhc + norms + active_routed + shared_experts + router +
         engram + engram_rows;
}

ParamCounts count_params(const ModelConfig& c) {
  ParamCounts pc;
  Weights dummy;
  dummy.has_draft = c.num_nextn_predict_layers > 0;
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat*, bool) {
    const int64_t n = r * cols;
    if (name.rfind("mtp.", 0) == 0) pc.draft += n;
    else if (name == "embed.weight") pc.embed += n;
    else if (name.find(".engram.embed.") != std::string::npos) pc.engram_tables += n;
    else if (name.find(".engram.") != std::string::npos) pc.engram += n;
    else if (name == "head.weight") pc.head += n;
    else if (name.find(".hc_") != std::string::npos) pc.mhc += n;
    else if (name.find(".compressor.") != std::string::npos) pc.compressor += n;
    else if (name.find(".indexer.") != std::string::npos) pc.indexer += n;
    else if (name.find(".attn.") != std::string::npos) pc.attention += n;
    else if (name.find(".shared_experts.") != std::string::npos) pc.shared_experts += n;
    else if (name.find(".experts.") != std::string::npos) pc.routed_experts += n;
    else if (name.find(".gate.") != std::string::npos) pc.router += n;
  };
  v.vec = [&](const std::string& name, int64_t n, const float**, int) {
    if (name.rfind("mtp.", 0) == 0) pc.draft += n;
    else if (name.find(".hc_") != std::string::npos) pc.mhc += n;
    else if (name.find("gate.bias") != std::string::npos) pc.router += n;
    else if (name.find("compressor.") != std::string::npos) pc.compressor += n;
    else if (name.find("indexer.") != std::string::npos) pc.indexer += n;
    else if (name.find("attn_sink") != std::string::npos) pc.attention += n;
    else pc.norms += n;
  };
  visit(c, dummy, v);
  return pc;
}

}  // namespace deepinfer::model
