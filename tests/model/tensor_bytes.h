// A model's weights as bytes, tensor by tensor (model::for_each_tensor's order), for tests that
// compare two Weights made different ways (on the host, through a backend's ops, on a device).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "loader/config.h"
#include "model/weights.h"

namespace deepinfer::testing {

struct TensorBytes {
  std::string name;
  int format = -1;             // a matrix's kernels::WeightFormat; -1 for a vector
  int64_t rows = 0, cols = 0;  // a matrix's shape (a vector: 1 x n)
  std::vector<uint8_t> bytes;  // a matrix's values then its scales; a vector's floats
};

// `be` reads the tensors (a device backend's download; the CPU backend's is a copy).
inline std::vector<TensorBytes> tensor_bytes(const loader::ModelConfig& c, model::Weights& w, kernels::Backend& be) {
  std::vector<TensorBytes> out;
  auto get = [&](const void* p, int64_t n) {
    std::vector<uint8_t> v(static_cast<size_t>(n));
    if (n) be.download(v.data(), p, n);
    return v;
  };
  model::for_each_tensor(
      c, w,
      [&](const std::string& name, model::Mat& m) {
        const int64_t sc = kernels::weight_scale_bytes(m);
        std::vector<uint8_t> b = get(m.data, kernels::weight_bytes(m) - sc), s = get(m.scale, sc);
        b.insert(b.end(), s.begin(), s.end());
        out.push_back({name, static_cast<int>(m.format), m.rows, m.cols, std::move(b)});
      },
      [&](const std::string& name, const float* p, int64_t n) { out.push_back({name, -1, 1, n, get(p, n * 4)}); });
  return out;
}

}  // namespace deepinfer::testing
