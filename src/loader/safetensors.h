// safetensors files, memory-mapped: one file, or shards listed by model.safetensors.index.json.
//
// Purpose: parse and validate each header (dtype, shape, offsets inside the file, byte
// count = elements x dtype size, tensors laid end to end with no overlap and no hole), and
// hand out read-only views of tensor bytes straight from the mapping. A truncated or
// corrupt file is an Error naming the file and the tensor, never an out-of-bounds read.
// Invariants: a TensorInfo's data pointer stays valid while its SafetensorsFile lives.
// Threading: read-only after open; safe to read from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deepinfer::loader {

struct TensorInfo {
  std::string name;            // as stored in the file
  core::DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;            // for error messages
  int64_t numel() const;
  std::string shape_str() const;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

std::string shape_str(const std::vector<int64_t>& shape);

// Parses and checks a whole safetensors file held in memory ([base, base + size)), as
// safetensors' rules say: header length bounded (100 MB) and inside the file, a JSON object
// with each tensor once, known dtypes, data offsets inside the data section with the byte
// count equal to the shape's elements x the dtype's size (no overflow, a zero dimension
// does not hide a huge one), and the tensors' bytes covering the data section exactly (no
// overlap, no hole). Errors name `path` and the tensor. The TensorInfos point into `base`.
std::map<std::string, TensorInfo> parse_safetensors(const uint8_t* base, uint64_t size, const std::string& path);

// One tensor to write: name, dtype, shape and its raw little-endian bytes.
struct TensorToWrite {
  std::string name;
  core::DType dtype = core::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
// Writes a safetensors file (header padded to 8 bytes, tensors in the given order); checks
// that each byte count matches its shape and dtype.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

}  // namespace deepinfer::loader
