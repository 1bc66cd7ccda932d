#include "model/info.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "model/weights.h"

namespace deepinfer::model {

StateBytes state_bytes(const loader::ModelConfig& c) {
  StateBytes b;
  const double hd = static_cast<double>(c.head_dim), di = static_cast<double>(c.index_head_dim);
  const double win = static_cast<double>(c.sliding_window - 1) * static_cast<double>(c.num_hidden_layers);
  b.fixed_fp32 = win * hd * 4;
  b.fixed_quant = win * (hd + hd / 32);  // e4m3 values + one ue8m0 scale per 32
  const bool win_packed = c.head_dim % 32 == 0, comp_packed = c.head_dim % 16 == 0, idx_packed = c.index_head_dim % 32 == 0;
  b.fixed_stored = win * ((win_packed ? hd + hd / 32 : hd * 4) + 8);
  b.per_token_stored = c.engram_layer_ids.empty() ? 0 : 4;
  for (int64_t s : c.kv_source_layer_ids) {
    const double r = static_cast<double>(c.ratio(s));
    const bool owns_k = c.is_index_source(s);
    b.per_token_fp32 += (hd * 4 + (owns_k ? di * 4 : 0)) / r;
    b.per_token_quant += (hd / 2 + hd / 16 + (owns_k ? di / 2 + di / 32 : 0)) / r;
    b.per_token_stored += ((comp_packed ? hd / 2 + hd / 16 : hd * 4) + (owns_k ? (idx_packed ? di / 2 + di / 32 : di * 4) : 0)) / r;
  }
  return b;
}

namespace {
std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string human(double n) {
  std::ostringstream o;
  o.precision(3);
  if (n >= 1e9) o << n / 1e9 << "B";
  else if (n >= 1e6) o << n / 1e6 << "M";
  else if (n >= 1e3) o << n / 1e3 << "K";
  else o << n;
  return o.str();
}
}  // namespace

int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : -1;
}

int64_t sequence_state_bytes(const loader::ModelConfig& c, int64_t n_tokens, bool draft_rings) {
  const StateBytes b = state_bytes(c);
  const int64_t ring = std::max<int64_t>(1, c.sliding_window - 1);
  const double window = b.fixed_stored * static_cast<double>(std::min(n_tokens, ring)) / static_cast<double>(ring);
  return static_cast<int64_t>(std::ceil(window + b.per_token_stored * static_cast<double>(n_tokens))) +
         (draft_rings ? draft_ring_bytes(c, n_tokens) : 0);
}

int64_t draft_ring_bytes(const loader::ModelConfig& c, int64_t n_tokens) {
  const int64_t hd = c.head_dim, row = (hd % 32 == 0 ? hd + hd / 32 : hd * 4) + 8;
  return c.num_nextn_predict_layers * std::min(std::max<int64_t>(n_tokens, 0), c.sliding_window) * row;
}

std::string human_bytes(double bytes) {
  std::ostringstream o;
  o.precision(3);
  if (bytes >= 1e15) o << bytes / 1e15 << " PB";
  else if (bytes >= 1e12) o << bytes / 1e12 << " TB";
  else if (bytes >= 1e9) o << bytes / 1e9 << " GB";
  else if (bytes >= 1e6) o << bytes / 1e6 << " MB";
  else if (bytes >= 1e3) o << bytes / 1e3 << " KB";
  else o << bytes << " B";
  return o.str();
}

std::string describe(const loader::ModelConfig& c) {
  std::ostringstream o;
  o << "DeepseekV41: " << c.num_hidden_layers << " layers, hidden " << c.hidden_size << ", " << c.num_attention_heads
    << " heads x " << c.head_dim << ", vocab " << c.vocab_size << ", hc " << c.hc_mult << ", window " << c.sliding_window
    << (c.composite ? " (composite config)" : "") << "\n";
  o << "schedule:\n";
  o << "  compress_ratios        " << list(c.compress_ratios) << "\n";
  o << "  kv_source_layer_ids    " << list(c.kv_source_layer_ids) << "\n";
  o << "  index_source_layer_ids " << list(c.index_source_layer_ids) << "\n";
  o << "  candidate_source       " << c.candidate_source_layer_id << " (" << c.candidate_topk_blocks << " blocks x "
    << c.candidate_block_size << ")\n";
  o << "  dspark_target_layer_ids " << list(c.dspark_target_layer_ids) << "\n";
  o << "  engram_layer_ids       " << list(c.engram_layer_ids) << "\n";
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    o << "  layer " << i << ": ratio " << c.ratio(i) << ", rope " << (c.ratio(i) > 0 ? "compress" : "main");
    if (c.is_kv_source(i)) o << ", KV source";
    if (c.is_index_source(i)) o << (c.is_kv_source(i) ? ", index source" : ", index source (reindex)");
    if (c.ratio(i) > 0) o << ", reads KV of " << c.kv_source_of(i) << ", top-k of " << c.index_source_of(i);
    if (c.has_engram(i)) o << ", engram";
    o << "\n";
  }
  o << "rope: main " << c.rope_main.rope_type << " theta " << c.rope_main.rope_theta << "; compress "
    << c.rope_compress.rope_type << " theta " << c.rope_compress.rope_theta;
  if (c.rope_compress.rope_type == "yarn")
    o << " factor " << c.rope_compress.factor << " original " << c.rope_compress.original_max_position_embeddings;
  o << "\n";
  ParamCounts p = count_params(c);
  o << "parameters: total " << human(static_cast<double>(p.total())) << ", active per token "
    << human(static_cast<double>(p.active_per_token(c))) << "\n";
  o << "  embed " << human(static_cast<double>(p.embed)) << ", head " << human(static_cast<double>(p.head))
    << ", attention " << human(static_cast<double>(p.attention)) << ", compressor " << human(static_cast<double>(p.compressor))
    << ", indexer " << human(static_cast<double>(p.indexer)) << ", mHC " << human(static_cast<double>(p.mhc))
    << ", norms " << human(static_cast<double>(p.norms)) << "\n";
  o << "  routed experts " << human(static_cast<double>(p.routed_experts)) << ", shared experts "
    << human(static_cast<double>(p.shared_experts)) << ", router " << human(static_cast<double>(p.router)) << "\n";
  if (c.num_nextn_predict_layers > 0)
    o << "DSpark draft stages: " << c.num_nextn_predict_layers << " (" << c.dspark_n_routed_experts << " experts, top "
      << c.dspark_num_experts_per_tok << "; block " << c.dspark_block_size << ", Markov rank " << c.dspark_markov_rank
      << "), " << human(static_cast<double>(p.draft)) << " parameters when the checkpoint has them\n";
  StateBytes b = state_bytes(c);
  o << "state per sequence, as stored: windows " << human(b.fixed_stored) << "B + " << b.per_token_stored
    << " B/token (FP8 windows, FP4 compressed KV and indexer keys; float32 would be " << human(b.fixed_fp32) << "B + "
    << b.per_token_fp32 << " B/token)\n";
  return o.str();
}

}  // namespace deepinfer::model
