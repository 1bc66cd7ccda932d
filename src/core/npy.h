// NumPy .npy files (format 1.0/2.0/3.0): the CLI's token input and logits output, and the
// reference fixtures the tests compare against.
//
// Invariants: little-endian, C order only; a file that is not that gets an Error naming
// the file and what was found. Threading: pure functions.
#pragma once

#include <cstdint>
#include <fstream>
#include <istream>
#include <string>
#include <vector>

namespace deepinfer::core {

struct NpyArray {
  std::string descr;            // e.g. "<f4", "<i8"
  std::vector<int64_t> shape;   // C order
  std::vector<uint8_t> bytes;   // raw little-endian data
  int64_t numel() const;
};

NpyArray read_npy(const std::string& path);
// The same from a stream (a file's bytes); `path` names it in errors. The header's shape is
// checked against the bytes the stream still holds before anything is allocated for it.
NpyArray read_npy(std::istream& in, const std::string& path);
// Reads a 1-D or N-D integer array (int32/int64/uint8...) as int64.
std::vector<int64_t> read_npy_ints(const std::string& path, std::vector<int64_t>* shape = nullptr);
// Reads a float32 array (float64 is narrowed); shape optional.
std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>* shape = nullptr);

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);
void write_npy_i64(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape);

// Writes a float32 .npy of a known shape row block by row block, so an array larger than
// memory can be written as it is computed. finish() checks that every element came and
// closes the file; errors name the file.
class NpyF32Writer {
 public:
  NpyF32Writer(const std::string& path, const std::vector<int64_t>& shape);
  void write(const float* data, size_t n);
  void finish();

 private:
  std::string path_;
  std::ofstream f_;
  uint64_t expected_ = 0, written_ = 0;
};

}  // namespace deepinfer::core
