#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "core/rng.h"

namespace deepinfer::model {

using loader::ModelConfig;

namespace {

// Walks every tensor of the text model in a fixed order, calling `mat` for matrices and
// `vec` for vectors with the canonical name, the expected shape and the destination.
struct Visitor {
  std::function<void(const std::string&, int64_t, int64_t, Mat*)> mat;
  std::function<void(const std::string&, int64_t, const float**, int kind)> vec;  // kind: 0 norm, 1 zero-ish, 2 scale
  // Engram table (float, or FP8 rows with e8m0 scales kept as stored); null: use `mat`.
  std::function<void(const std::string& prefix, int64_t rows, int64_t dim, EngramWeights*)> engram_table;
  // A 2-D tensor read as a flat array (norm-like values).
  void vec2(const std::string& name, int64_t r, int64_t cols, const float** out) const {
    Mat m{*out, r, cols};  // carries the current pointer for visitors that read
    mat(name, r, cols, &m);
    *out = m.p;
  }
};

void visit(const ModelConfig& c, Weights& w, const Visitor& v) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim, hc = c.hc_mult;
  const int64_t mix = (2 + hc) * hc;
  v.mat("embed.weight", c.vocab_size, D, &w.embed);
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& L = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    v.vec(p + "attn_norm.weight", D, &L.attn_norm, 0);
    v.vec(p + "ffn_norm.weight", D, &L.ffn_norm, 0);
    if (c.has_engram(i)) {
      const size_t j = static_cast<size_t>(std::find(c.engram_layer_ids.begin(), c.engram_layer_ids.end(), i) -
                                           c.engram_layer_ids.begin());
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      L.has_engram = true;
      L.engram.rows = c.engram_num_embeddings[j];
      if (v.engram_table) v.engram_table(p + "engram.embed.", c.engram_num_embeddings[j], c.engram_head_dim, &L.engram);
      else v.mat(p + "engram.embed.weight", c.engram_num_embeddings[j], c.engram_head_dim, &L.engram.table);
      v.mat(p + "engram.wkv.weight", D * (hc + 1), cols * c.engram_head_dim, &L.engram.wkv);
      v.vec2(p + "engram.q_weight", hc, D, &L.engram.q_weight);
      v.vec2(p + "engram.k_weight", hc, D, &L.engram.k_weight);
    }
    v.mat(p + "hc_attn_fn", mix, hc * D, &L.hc_attn_fn);
    v.vec(p + "hc_attn_base", mix, &L.hc_attn_base, 1);
    v.vec(p + "hc_attn_scale", 3, &L.hc_attn_scale, 2);
    v.mat(p + "hc_ffn_fn", mix, hc * D, &L.hc_ffn_fn);
    v.vec(p + "hc_ffn_base", mix, &L.hc_ffn_base, 1);
    v.vec(p + "hc_ffn_scale", 3, &L.hc_ffn_scale, 2);
    AttentionWeights& A = L.attn;
    const std::string a = p + "attn.";
    v.mat(a + "wq_a.weight", c.q_lora_rank, D, &A.wq_a);
    v.vec(a + "q_norm.weight", c.q_lora_rank, &A.q_norm, 0);
    v.mat(a + "wq_b.weight", H * hd, c.q_lora_rank, &A.wq_b);
    v.mat(a + "wkv.weight", hd, D, &A.wkv);
    v.vec(a + "kv_norm.weight", hd, &A.kv_norm, 0);
    v.mat(a + "wo_a.weight", c.o_groups * c.o_lora_rank, H * hd / c.o_groups, &A.wo_a);
    v.mat(a + "wo_b.weight", D, c.o_groups * c.o_lora_rank, &A.wo_b);
    v.vec(a + "attn_sink", H, &A.attn_sink, 1);
    if (c.is_kv_source(i)) {
      v.mat(a + "compressor.wkv.weight", hd, D, &A.c_wkv);
      if (c.ratio(i) > 1) v.mat(a + "compressor.wgate.weight", hd, D, &A.c_wgate);
      v.vec(a + "compressor.norm.weight", hd, &A.c_norm, 0);
    }
    if (c.is_index_source(i)) {
      v.mat(a + "indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank, &A.i_wq_b);
      v.mat(a + "indexer.weights_proj.weight", c.index_n_heads, D, &A.i_weights_proj);
      if (c.is_kv_source(i)) {
        v.mat(a + "indexer.wk.weight", c.index_head_dim, hd, &A.i_wk);
        v.vec(a + "indexer.k_norm.weight", c.index_head_dim, &A.i_k_norm, 0);
      }
    }
    MoeWeights& F = L.ffn;
    const std::string f = p + "ffn.";
    const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
    v.mat(f + "gate.weight", E, D, &F.gate);
    v.vec(f + "gate.bias", E, &F.bias, 1);
    F.w1.resize(static_cast<size_t>(E));
    F.w2.resize(static_cast<size_t>(E));
    F.w3.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      v.mat(x + "w1.weight", I, D, &F.w1[e]);
      v.mat(x + "w2.weight", D, I, &F.w2[e]);
      v.mat(x + "w3.weight", I, D, &F.w3[e]);
    }
    v.mat(f + "shared_experts.w1.weight", I, D, &F.s_w1);
    v.mat(f + "shared_experts.w2.weight", D, I, &F.s_w2);
    v.mat(f + "shared_experts.w3.weight", I, D, &F.s_w3);
  }
  v.vec("norm.weight", D, &w.norm, 0);
  v.mat("head.weight", c.vocab_size, D, &w.head);
}

float* own(Weights& w, int64_t n) {
  w.owned.emplace_back(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]);
  w.owned_floats += n;
  return w.owned.back().get();
}

const float* fetch(const loader::Checkpoint& ck, Weights& w, const std::string& name, const std::vector<int64_t>& shape) {
  const loader::TensorInfo* t = ck.find(name);
  if (!t) throw Error(ck.dir() + ": missing tensor '" + name + "' (expected shape " + loader::shape_str(shape) + ")");
  if (t->shape != shape)
    throw Error(t->file + ": tensor '" + t->name + "' has shape " + t->shape_str() + ", expected " + loader::shape_str(shape));
  const int64_t n = t->numel();
  switch (t->dtype) {
    case core::DType::F32: {
      if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) return reinterpret_cast<const float*>(t->data);
      float* out = own(w, n);
      std::memcpy(out, t->data, static_cast<size_t>(n) * 4);
      return out;
    }
    case core::DType::BF16:
    case core::DType::F16: {
      float (*widen)(uint16_t) = t->dtype == core::DType::BF16 ? core::bf16_to_f32 : core::f16_to_f32;
      float* out = own(w, n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, t->data + 2 * i, 2);
        out[i] = widen(b);
      }
      return out;
    }
    default:
      throw Error(t->file + ": tensor '" + t->name + "' has dtype " + std::string(core::dtype_name(t->dtype)) +
                  ", expected F32, BF16 or F16 (FP8/FP4 release weights are not supported yet)");
  }
}

}  // namespace

Weights load_weights(const loader::Checkpoint& ck) {
  const ModelConfig& c = ck.config();
  Weights w;
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat* m) {
    m->p = fetch(ck, w, name, {r, cols});
    m->rows = r;
    m->cols = cols;
  };
  v.vec = [&](const std::string& name, int64_t n, const float** out, int) { *out = fetch(ck, w, name, {n}); };
  v.engram_table = [&](const std::string& prefix, int64_t rows, int64_t dim, EngramWeights* e) {
    const loader::TensorInfo* t = ck.find(prefix + "weight");
    if (t && t->dtype == core::DType::F8_E4M3) {
      if (t->shape != std::vector<int64_t>{rows, dim})
        throw Error(t->file + ": tensor '" + t->name + "' has shape " + t->shape_str() + ", expected " +
                    loader::shape_str({rows, dim}));
      if (dim % 32 != 0) throw Error(t->file + ": tensor '" + t->name + "': FP8 rows need engram_head_dim divisible by 32");
      const loader::TensorInfo* sc = ck.find(prefix + "scale");
      const std::vector<int64_t> sshape = {rows, dim / 32};
      if (!sc) throw Error(ck.dir() + ": missing tensor '" + prefix + "scale' (expected shape " + loader::shape_str(sshape) + ")");
      if (sc->shape != sshape || sc->dtype != core::DType::F8_E8M0)
        throw Error(sc->file + ": tensor '" + sc->name + "' is " + std::string(core::dtype_name(sc->dtype)) + " " +
                    sc->shape_str() + ", expected F8_E8M0 " + loader::shape_str(sshape));
      e->table_fp8 = t->data;
      e->table_scale = sc->data;
      return;
    }
    e->table.p = fetch(ck, w, prefix + "weight", {rows, dim});
    e->table.rows = rows;
    e->table.cols = dim;
  };
  visit(c, w, v);
  return w;
}

Weights random_weights(const ModelConfig& c, uint64_t seed) {
  Weights w;
  uint64_t tensor_id = 0;
  Visitor v;
  v.mat = [&](const std::string&, int64_t r, int64_t cols, Mat* m) {
    const uint64_t tid = ++tensor_id;
    float* p = own(w, r * cols);
    // std 1/sqrt(in) keeps activations O(1) through the random network.
    const float std = 1.0f / std::sqrt(static_cast<float>(cols));
    for (int64_t i = 0; i < r * cols; ++i) p[i] = std * core::normal01(seed ^ (tid * 0x9E3779B97F4A7C15ull), static_cast<uint64_t>(i));
    *m = Mat{p, r, cols};
  };
  v.vec = [&](const std::string&, int64_t n, const float** out, int kind) {
    const uint64_t tid = ++tensor_id;
    float* p = own(w, n);
    for (int64_t i = 0; i < n; ++i) {
      float z = core::normal01(seed ^ (tid * 0x9E3779B97F4A7C15ull), static_cast<uint64_t>(i));
      p[i] = kind == 0 ? 1.0f + 0.1f * z : kind == 2 ? 1.0f : 0.1f * z;
    }
    *out = p;
  };
  visit(c, w, v);
  return w;
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
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat* m) { add_f32(name, {r, cols}, m->p); };
  v.vec = [&](const std::string& name, int64_t n, const float** p, int) { add_f32(name, {n}, *p); };
  v.engram_table = [&](const std::string& prefix, int64_t rows, int64_t dim, EngramWeights* e) {
    if (e->table_fp8) {
      out.push_back({prefix + "weight", core::DType::F8_E4M3, {rows, dim},
                     std::vector<uint8_t>(e->table_fp8, e->table_fp8 + rows * dim)});
      out.push_back({prefix + "scale", core::DType::F8_E8M0, {rows, dim / 32},
                     std::vector<uint8_t>(e->table_scale, e->table_scale + rows * (dim / 32))});
    } else {
      add_f32(prefix + "weight", {rows, dim}, e->table.p);
    }
  };
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
  Visitor v;
  v.mat = [&](const std::string& name, int64_t r, int64_t cols, Mat*) {
    const int64_t n = r * cols;
    if (name == "embed.weight") pc.embed += n;
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
    if (name.find(".hc_") != std::string::npos) pc.mhc += n;
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
