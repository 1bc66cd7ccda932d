#include "model/memory_plan.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/info.h"
#include "model/weights.h"

namespace deepinfer::model {

using kernels::WeightFormat;

namespace {

constexpr std::array<std::pair<WeightFormat, const char*>, 4> kShown = {
    {{WeightFormat::kFP8Block32, "FP8"}, {WeightFormat::kMXFP4, "MXFP4"}, {WeightFormat::kBF16, "BF16"}, {WeightFormat::kF32, "F32"}}};

int64_t matrix_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  return kernels::weight_bytes(kernels::WeightView{f, nullptr, nullptr, rows, cols});
}
int64_t matrix_scale_bytes(WeightFormat f, int64_t rows, int64_t cols) {
  return kernels::weight_scale_bytes(kernels::WeightView{f, nullptr, nullptr, rows, cols});
}

// Counts one tensor kept in format `f` in the backend's memory.
void count(MemoryPlan& p, const TensorSpec& s, WeightFormat f) {
  if (!s.matrix) {
    p.vectors += s.rows * 4;
    return;
  }
  FormatBytes& into = is_engram_table(s.name) ? p.engram_tables : p.weights;
  into.add(f, matrix_bytes(f, s.rows, s.cols), matrix_scale_bytes(f, s.rows, s.cols));
}

void plan_random(const loader::ModelConfig& c, MemoryPlan& p) {
  const PlanOptions& o = p.options;
  p.random = true;
  p.made_on_host = !random_weights_on_device(c, o.host_backend);
  const WeightFormat matmul = random_matmul_format(o.precision);
  for_each_tensor(c, [&](const TensorSpec& s) {
    WeightFormat f = WeightFormat::kF32;
    if (s.matrix && !s.need_f32) f = c.quantization.present ? release_format(s.name) : matmul;
    count(p, s, f);
    if (p.engram_tables_host && is_engram_table(s.name)) {  // made on the device, kept on the host
      p.host_copies += matrix_bytes(f, s.rows, s.cols);
      return;
    }
    if (!p.made_on_host) return;
    // Generated in float32 on the host; a matrix in another format is converted into a copy
    // (through a float temporary of the whole matrix) and the float32 original is kept.
    p.host_copies += s.rows * s.cols * 4;
    if (f != WeightFormat::kF32) {
      p.host_copies += matrix_bytes(f, s.rows, s.cols);
      p.host_scratch = std::max(p.host_scratch, s.rows * s.cols * 4);
    }
  });
}

void plan_checkpoint(const loader::Checkpoint& ck, MemoryPlan& p) {
  for_each_tensor(ck.config(), [&](const TensorSpec& s) {
    const loader::TensorInfo* t = ck.find(s.name);
    if (!t) return;  // load_weights names the missing tensor
    const CheckpointPlacement at = checkpoint_placement(ck, *t, s);
    if (!at.loadable) return;  // and the misshaped or mistyped one
    count(p, s, at.format);
    p.host_copies += at.host_copy;
    if (at.host_copy == 0) p.mapped += s.matrix ? matrix_bytes(at.format, s.rows, s.cols) : s.rows * 4;
  });
}

std::string tokens_str(int64_t n) { return std::to_string(n) + (n == 1 ? " token" : " tokens"); }

std::string state_str(const MemoryPlan& p) {
  return "state for one sequence of " + tokens_str(p.state_tokens) + " " + human_bytes(static_cast<double>(p.state_min));
}

std::string budget_str(const MemoryPlan& p, const MemoryAvailable& a, bool brief = false) {
  const PlanOptions& o = p.options;
  if (o.state_budget_bytes > 0) return "state budget " + human_bytes(static_cast<double>(o.state_budget_bytes));
  if (o.memory_fraction > 0) {
    std::ostringstream s;
    s << "state budget " << o.memory_fraction << (o.host_backend ? " of physical memory" : " of the memory free after loading and a warm-up forward");
    if (!o.host_backend && a.device >= 0)
      s << " (about " << human_bytes(o.memory_fraction * static_cast<double>(std::max<int64_t>(0, a.device - p.device_weight_bytes())))
        << ")";
    return s.str();
  }
  if (brief) return "no state budget";
  return "no state budget (sequences grow until memory runs out; --memory-budget or --memory-fraction sets one)";
}

std::string avail_str(int64_t bytes) { return bytes < 0 ? "unknown" : human_bytes(static_cast<double>(bytes)); }

// "weights: FP8 1 GB, F32 2 MB; Engram tables 3 GB; vectors 4 KB".
std::string weights_str(const MemoryPlan& p) {
  std::string s = "weights: " + p.weights.str();
  if (p.engram_tables.total() > 0)
    s += "; Engram tables " + p.engram_tables.str() + (p.engram_tables_host ? " (in host memory)" : "");
  if (p.vectors > 0) s += "; vectors F32 " + human_bytes(static_cast<double>(p.vectors));
  return s;
}

// What the host side's figure is made of.
std::string host_parts(const MemoryPlan& p) {
  std::string s;
  if (p.random && !p.made_on_host)
    return p.engram_tables_host && p.host_copies > 0
               ? "Engram tables made on the device, kept on the host " + human_bytes(static_cast<double>(p.host_copies))
               : "none (the weights are made in the backend's memory)";
  if (p.made_on_host) s = "random weights made on the host: float32 and converted copies " + human_bytes(static_cast<double>(p.host_copies));
  else s = "copies of checkpoint tensors (widened or misaligned) " + human_bytes(static_cast<double>(p.host_copies));
  if (p.host_scratch > 0) s += " + a conversion's temporary " + human_bytes(static_cast<double>(p.host_scratch));
  return s;
}

// The two figures of a "needs X but Y" message, with their exact bytes when they round alike.
std::pair<std::string, std::string> need_and_have(int64_t need, int64_t have) {
  std::string n = human_bytes(static_cast<double>(need)), h = human_bytes(static_cast<double>(have));
  if (n == h) {
    n += " (" + std::to_string(need) + " bytes)";
    h += " (" + std::to_string(have) + " bytes)";
  }
  return {n, h};
}

}  // namespace

void FormatBytes::add(WeightFormat f, int64_t total, int64_t scale_bytes) {
  bytes[static_cast<size_t>(f)] += total;
  scales[static_cast<size_t>(f)] += scale_bytes;
}

int64_t FormatBytes::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

std::string FormatBytes::str() const {
  std::vector<std::pair<int64_t, std::string>> parts;
  for (const auto& [f, name] : kShown) {
    const int64_t b = f == WeightFormat::kFP8Block32 ? fp8() : of(f);
    if (b > 0) parts.emplace_back(b, name);
  }
  std::stable_sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  if (parts.empty()) return "0 B";
  std::string s;
  for (const auto& [b, name] : parts) s += (s.empty() ? "" : ", ") + name + " " + human_bytes(static_cast<double>(b));
  return s;
}

WeightFormat random_matmul_format(kernels::Precision p) {
  return p == kernels::Precision::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32;
}

bool random_weights_on_device(const loader::ModelConfig&, bool backend_in_host_memory) { return !backend_in_host_memory; }

int64_t MemoryPlan::state_needed() const { return std::max(state_min, options.state_budget_bytes); }

int64_t MemoryPlan::device_needed() const { return options.host_backend ? 0 : device_weight_bytes() + state_needed(); }

int64_t MemoryPlan::host_needed() const {
  return host_copies + host_scratch + (options.host_backend ? state_needed() : 0);
}

double effective_memory_fraction(bool host_backend, int64_t budget_bytes, double fraction) {
  if (budget_bytes > 0) return 0;
  if (fraction > 0) return fraction;
  return host_backend ? 0 : kDeviceMemoryFraction;
}

MemoryPlan plan_memory(const loader::ModelConfig& c, const loader::Checkpoint* ck, const PlanOptions& o) {
  MemoryPlan p;
  p.options = o;
  p.options.memory_fraction = effective_memory_fraction(o.host_backend, o.state_budget_bytes, o.memory_fraction);
  p.engram_tables_host = !o.host_backend && o.engram_tables_on_host && !c.engram_layer_ids.empty();
  if (ck) plan_checkpoint(*ck, p);
  else plan_random(c, p);
  const int64_t positions = c.max_position_embeddings;
  p.state_tokens = o.state_tokens > 0 && o.state_tokens <= positions ? o.state_tokens : positions;
  const StateBytes b = state_bytes(c);
  p.state_fixed = b.fixed_stored + (o.dspark ? static_cast<double>(draft_ring_bytes(c, c.sliding_window)) : 0.0);
  p.state_per_token = b.per_token_stored;
  p.state_min = sequence_state_bytes(c, p.state_tokens, o.dspark);
  return p;
}

void check_memory_plan(const MemoryPlan& p, const MemoryAvailable& a, const std::string& source) {
  const std::string hint = " (`deepinfer info` shows the plan)";
  const std::string state = state_str(p) + (p.options.state_budget_bytes > p.state_min
                                                ? "; the state budget " + human_bytes(static_cast<double>(p.options.state_budget_bytes))
                                                : "");
  if (!p.options.host_backend && a.device >= 0 && p.device_needed() > a.device) {
    const auto [need, have] = need_and_have(p.device_needed(), a.device);
    throw Error(source + ": the model does not fit on " + p.options.device + ": it needs " + need + " (" + weights_str(p) +
                "; " + state + ") but " + have + " is free" + hint);
  }
  if (a.host >= 0 && p.host_needed() > a.host) {
    const auto [need, have] = need_and_have(p.host_needed(), a.host);
    std::string parts = host_parts(p);
    if (p.options.host_backend) {
      if (p.mapped > 0) parts = weights_str(p) + ", of which " + human_bytes(static_cast<double>(p.mapped)) +
                                " read in place from the checkpoint, not counted; " + parts;
      parts += "; " + state;
    }
    throw Error(source + (p.options.host_backend ? ": the model does not fit in memory: it needs "
                                                 : ": loading the model does not fit in host memory: it needs ") +
                need + " (" + parts + ") but " + have + " is available" + hint);
  }
}

std::string describe_memory_plan(const MemoryPlan& p, const MemoryAvailable& a) {
  const PlanOptions& o = p.options;
  std::ostringstream s;
  s << "memory plan: " << (p.random ? (p.made_on_host ? "random weights made on the host" : "random weights made on the backend")
                                    : "checkpoint weights as stored")
    << ", on " << o.device << (o.host_backend ? " (host memory)" : "") << "\n";
  s << "  weights " << human_bytes(static_cast<double>(p.weights.total())) << ": " << p.weights.str();
  int64_t scales = 0;
  for (int64_t b : p.weights.scales) scales += b;
  if (scales > 0) s << " (scales included: " << human_bytes(static_cast<double>(scales)) << ")";
  s << "\n  Engram tables " << human_bytes(static_cast<double>(p.engram_tables.total()));
  if (p.engram_tables.total() > 0)
    s << ": " << p.engram_tables.str()
      << (p.engram_tables_host ? (p.random ? " (in host memory)" : " (in host memory: read in place from the checkpoint)") : "");
  s << "\n  vectors (norms, biases) F32 " << human_bytes(static_cast<double>(p.vectors)) << "\n";
  if (!p.random) s << "  mapped from the checkpoint, read in place: " << human_bytes(static_cast<double>(p.mapped)) << "\n";
  s << "  host allocations: " << host_parts(p) << "\n";
  s << "  state: " << human_bytes(p.state_fixed) << " + " << p.state_per_token << " B/token a sequence; " << state_str(p)
    << "\n  " << budget_str(p, a) << "\n";
  if (!o.host_backend)
    s << "  needs on " << o.device << ": " << human_bytes(static_cast<double>(p.device_needed())) << " (weights, "
      << (p.engram_tables_host ? "" : "Engram tables, ") << "vectors and state); free now " << avail_str(a.device) << "\n";
  s << "  needs in host memory: " << human_bytes(static_cast<double>(p.host_needed()))
    << (o.host_backend && p.mapped > 0 ? " (the mapped checkpoint pages not counted)" : "") << "; available now "
    << avail_str(a.host) << "\n";
  const bool device_known = o.host_backend || a.device >= 0;
  const bool fits = (o.host_backend || a.device < 0 || p.device_needed() <= a.device) && (a.host < 0 || p.host_needed() <= a.host);
  s << "  fits: " << (!fits ? "no" : device_known && a.host >= 0 ? "yes" : "unknown (the available memory is not known)")
    << "\n";
  return s.str();
}

std::string memory_plan_summary(const MemoryPlan& p, const MemoryAvailable& a, const std::string& budget) {
  const PlanOptions& o = p.options;
  std::string s = "memory on " + o.device + ": " + weights_str(p) + "; " + state_str(p) + "; " + (budget.empty() ? budget_str(p, a, true) : budget);
  if (!o.host_backend)
    s += "; needs " + human_bytes(static_cast<double>(p.device_needed())) + " of " + avail_str(a.device) + " free";
  s += "; host " + human_bytes(static_cast<double>(p.host_needed())) + " of " + avail_str(a.host) + " available";
  return s;
}

}  // namespace deepinfer::model
