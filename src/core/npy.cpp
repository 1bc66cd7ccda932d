#include "core/npy.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <istream>
#include <sstream>

#include "core/error.h"

namespace deepinfer::core {

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // read_npy bounds the product before anything calls this
  return n;
}

namespace {

std::string dict_value(const std::string& header, const std::string& key, const std::string& path) {
  auto k = header.find("'" + key + "'");
  if (k == std::string::npos) throw Error(path + ": .npy header has no '" + key + "' entry");
  auto colon = header.find(':', k);
  if (colon == std::string::npos) throw Error(path + ": malformed .npy header");
  size_t i = colon + 1;
  while (i < header.size() && header[i] == ' ') ++i;
  if (i >= header.size()) throw Error(path + ": malformed .npy header");
  char open = header[i];
  char close = open == '\'' ? '\'' : open == '(' ? ')' : ',';
  size_t start = (open == '\'' || open == '(') ? i + 1 : i;
  auto end = header.find(close, start);
  if (end == std::string::npos) throw Error(path + ": malformed .npy header");
  return header.substr(start, end - start);
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open (.npy file expected): " + std::strerror(errno));
  return read_npy(f, path);
}

NpyArray read_npy(std::istream& f, const std::string& path) {
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw Error(path + ": not a .npy file (bad magic)");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint8_t b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) throw Error(path + ": truncated .npy header");
    header_len = b[0] | (b[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    uint8_t b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) throw Error(path + ": truncated .npy header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    throw Error(path + ": unsupported .npy version " + std::to_string(magic[6]));
  }
  if (header_len > (1u << 20)) throw Error(path + ": .npy header too large");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) throw Error(path + ": truncated .npy header");
  NpyArray a;
  a.descr = dict_value(header, "descr", path);
  std::string fortran = dict_value(header, "fortran_order", path);
  if (fortran.find("True") != std::string::npos) throw Error(path + ": Fortran-order arrays are not supported");
  if (fortran.find("True") == std::string::npos && fortran.find("False") == std::string::npos)
    throw Error(path + ": malformed .npy header: fortran_order is '" + fortran + "', expected True or False");
  const size_t shape_key = header.find("'shape'");
  const size_t shape_open = shape_key == std::string::npos ? shape_key : header.find_first_not_of(" :", shape_key + 7);
  if (shape_open == std::string::npos || header[shape_open] != '(')
    throw Error(path + ": malformed .npy header: 'shape' must be a tuple");
  std::string shape = dict_value(header, "shape", path);
  std::stringstream ss(shape);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t p = item.find_first_not_of(' ');
    if (p == std::string::npos) continue;
    size_t q = item.find_last_not_of(' ');
    if (item[q] == 'L') --q;  // Python 2 long
    const std::string digits = item.substr(p, q + 1 - p);
    long long d = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), d);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      throw Error(path + ": malformed .npy shape '(" + shape + ")': '" + digits + "' is not a dimension");
    if (d < 0) throw Error(path + ": negative dimension " + digits + " in .npy shape (" + shape + ")");
    a.shape.push_back(d);
  }
  if (a.descr.size() < 3 || (a.descr[0] != '<' && a.descr[0] != '|'))
    throw Error(path + ": only little-endian .npy data is supported, got '" + a.descr + "'");
  if (a.descr[1] != 'i' && a.descr[1] != 'u' && a.descr[1] != 'f' && a.descr[1] != 'b')
    throw Error(path + ": unsupported .npy dtype '" + a.descr + "' (integers and floats are)");
  const std::string size_str = a.descr.substr(2);
  if (size_str.empty() || size_str.size() > 2 || !std::all_of(size_str.begin(), size_str.end(), ::isdigit))
    throw Error(path + ": unsupported .npy dtype '" + a.descr + "'");
  const int64_t elem = std::stoll(size_str);
  if (elem <= 0) throw Error(path + ": unsupported .npy dtype '" + a.descr + "'");
  // Bound the element count without overflowing: at most 2^40 bytes.
  const int64_t limit = (int64_t{1} << 40) / elem;
  int64_t n = 1;
  for (int64_t d : a.shape) {
    if (d != 0 && n > limit / d) throw Error(path + ": .npy array too large (shape " + shape + ")");
    n *= d;
  }
  // The data must be in the file before anything is allocated for it.
  const std::streamoff data_start = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff file_size = f.tellg();
  f.seekg(data_start);
  if (data_start < 0 || file_size < data_start || !f) throw Error(path + ": cannot read .npy data (seek failed)");
  const int64_t have = static_cast<int64_t>(file_size - data_start);
  if (n * elem > have)
    throw Error(path + ": truncated .npy data: shape (" + shape + ") of '" + a.descr + "' needs " + std::to_string(n * elem) +
                " bytes, the file has " + std::to_string(have) + " after its header");
  a.bytes.resize(static_cast<size_t>(n * elem));
  if (!a.bytes.empty() && !f.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(a.bytes.size())))
    throw Error(path + ": truncated .npy data (expected " + std::to_string(a.bytes.size()) + " bytes)");
  return a;
}

std::vector<int64_t> read_npy_ints(const std::string& path, std::vector<int64_t>* shape) {
  NpyArray a = read_npy(path);
  std::vector<int64_t> out(static_cast<size_t>(a.numel()));
  const std::string t = a.descr.substr(1);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = a.bytes.data();
    if (t == "i8") { int64_t v; std::memcpy(&v, p + 8 * i, 8); out[i] = v; }
    else if (t == "u8") {
      uint64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      if (v > static_cast<uint64_t>(INT64_MAX))
        throw Error(path + ": value " + std::to_string(v) + " at index " + std::to_string(i) + " does not fit in int64");
      out[i] = static_cast<int64_t>(v);
    }
    else if (t == "i4") { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; }
    else if (t == "u4") { uint32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; }
    else if (t == "i2") { int16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = v; }
    else if (t == "u2") { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = v; }
    else if (t == "i1") { out[i] = static_cast<int8_t>(p[i]); }
    else if (t == "u1") { out[i] = p[i]; }
    else throw Error(path + ": expected an integer array (int32 or int64), got dtype '" + a.descr + "'");
  }
  if (shape) *shape = a.shape;
  return out;
}

std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>* shape) {
  NpyArray a = read_npy(path);
  std::vector<float> out(static_cast<size_t>(a.numel()));
  const std::string t = a.descr.substr(1);
  if (t == "f4") {
    if (!out.empty()) std::memcpy(out.data(), a.bytes.data(), out.size() * 4);
  } else if (t == "f8") {
    for (size_t i = 0; i < out.size(); ++i) {
      double v;
      std::memcpy(&v, a.bytes.data() + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
  } else {
    throw Error(path + ": expected a float32 array, got dtype '" + a.descr + "'");
  }
  if (shape) *shape = a.shape;
  return out;
}

namespace {
std::string npy_header(const char* descr, const std::vector<int64_t>& shape) {
  std::string sh = "(";
  for (size_t i = 0; i < shape.size(); ++i) sh += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
  sh += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
  size_t total = 10 + header.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  header += std::string(pad, ' ') + "\n";
  uint16_t hl = static_cast<uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(hl & 0xFF) + static_cast<char>(hl >> 8) + header;
}

void write_npy(const std::string& path, const char* descr, const void* data, size_t nbytes,
               const std::vector<int64_t>& shape) {
  const std::string header = npy_header(descr, shape);
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(nbytes));
  if (!f) throw Error(path + ": write failed");
}
}  // namespace

NpyF32Writer::NpyF32Writer(const std::string& path, const std::vector<int64_t>& shape) : path_(path) {
  expected_ = 1;
  for (int64_t d : shape) expected_ *= static_cast<uint64_t>(d);
  const std::string header = npy_header("<f4", shape);
  f_.open(path, std::ios::binary);
  if (!f_) throw Error(path + ": cannot open for writing: " + std::strerror(errno));
  f_.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (!f_) throw Error(path + ": write failed");
}

void NpyF32Writer::write(const float* data, size_t n) {
  DI_CHECK(written_ + n <= expected_, "more elements than the .npy shape holds");
  f_.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
  if (!f_) throw Error(path_ + ": write failed (disk full?)");
  written_ += n;
}

void NpyF32Writer::finish() {
  DI_CHECK(written_ == expected_, "fewer elements than the .npy shape holds");
  f_.close();
  if (!f_) throw Error(path_ + ": write failed");
}

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  write_npy(path, "<f4", data, static_cast<size_t>(n) * 4, shape);
}

void write_npy_i64(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  write_npy(path, "<i8", data, static_cast<size_t>(n) * 8, shape);
}

}  // namespace deepinfer::core
