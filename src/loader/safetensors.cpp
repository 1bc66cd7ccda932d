#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::loader {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string TensorInfo::shape_str() const { return loader::shape_str(shape); }

// safetensors' own bound on the header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Elements of one tensor (and the product of its non-zero dimensions) at most 2^50.
constexpr uint64_t kMaxElements = uint64_t{1} << 50;

std::map<std::string, TensorInfo> parse_safetensors(const uint8_t* base, uint64_t size, const std::string& path) {
  auto fail = [&](const std::string& msg) { throw Error(path + ": " + msg); };
  if (size < 8) fail("truncated safetensors file (" + std::to_string(size) + " bytes, need at least 8)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | base[i];  // little-endian u64
  if (header_len > size - 8)
    fail("truncated or corrupt safetensors file: header length " + std::to_string(header_len) + " exceeds file size " +
         std::to_string(size));
  if (header_len > kMaxHeaderBytes)
    fail("corrupt safetensors file: header length " + std::to_string(header_len) + " exceeds the format's limit of " +
         std::to_string(kMaxHeaderBytes) + " bytes");
  const uint64_t data_start = 8 + header_len, data_len = size - data_start;
  // Duplicate tensor names would silently replace each other in the parsed object.
  std::set<std::string> keys;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string k = parsed.get<std::string>();
      if (!keys.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + header_len),
                              on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("corrupt safetensors header (invalid JSON): ") + e.what());
  }
  if (!h.is_object()) fail("corrupt safetensors header (not a JSON object)");
  if (!duplicate.empty()) fail("corrupt safetensors header: tensor '" + duplicate + "' is listed twice");
  if (h.contains("__metadata__") && !h["__metadata__"].is_object() && !h["__metadata__"].is_null())
    fail("corrupt safetensors header: __metadata__ must be an object");
  std::map<std::string, TensorInfo> tensors;
  struct Span {
    uint64_t b, e;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& v = it.value();
    const std::string& name = it.key();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail("tensor '" + name + "': header entry needs dtype, shape and data_offsets");
    TensorInfo ti;
    ti.name = name;
    ti.file = path;
    if (!v["dtype"].is_string() || !core::parse_dtype(v["dtype"].get<std::string>(), &ti.dtype))
      fail("tensor '" + name + "': unsupported dtype " + v["dtype"].dump());
    if (!v["shape"].is_array()) fail("tensor '" + name + "': shape is not a list");
    if (v["shape"].size() > 8) fail("tensor '" + name + "': shape " + v["shape"].dump() + " has more than 8 dimensions");
    // Element count, and the product of the non-zero dimensions, bounded without overflow: a
    // zero dimension must not hide a huge one.
    uint64_t numel = 1, nonzero = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail("tensor '" + name + "': bad shape " + v["shape"].dump());
      const uint64_t x = d.get<uint64_t>();
      if (x != 0 && nonzero > kMaxElements / x)
        fail("tensor '" + name + "': shape " + v["shape"].dump() + " is too large (over 2^50 elements)");
      if (x != 0) nonzero *= x;
      numel *= x;
      ti.shape.push_back(static_cast<int64_t>(x));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("tensor '" + name + "': bad data_offsets " + off.dump());
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_len)
      fail("truncated or corrupt file: tensor '" + name + "' data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
           "] exceed the data section (" + std::to_string(data_len) + " bytes)");
    const uint64_t need = numel * static_cast<uint64_t>(core::dtype_size(ti.dtype));
    if (need != e - b)
      fail("tensor '" + name + "': " + std::to_string(e - b) + " bytes stored but shape " + ti.shape_str() + " of " +
           std::string(core::dtype_name(ti.dtype)) + " needs " + std::to_string(need));
    ti.data = base + data_start + b;
    ti.nbytes = e - b;
    auto [pos, inserted] = tensors.emplace(name, std::move(ti));
    spans.push_back({b, e, &pos->first});
  }
  // The data section is the tensors' bytes laid end to end: no overlap, no hole.
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.b != y.b ? x.b < y.b : x.e < y.e; });
  uint64_t at = 0;
  const std::string* prev = nullptr;
  for (const Span& sp : spans) {
    if (sp.b < at)
      fail("corrupt safetensors file: tensor '" + *sp.name + "' bytes [" + std::to_string(sp.b) + ", " +
           std::to_string(sp.e) + ") overlap tensor '" + *prev + "' (which ends at " + std::to_string(at) + ")");
    if (sp.b > at)
      fail("corrupt safetensors file: " + std::to_string(sp.b - at) + " unused bytes at data offset " + std::to_string(at) +
           " before tensor '" + *sp.name + "' (the data section must have no holes)");
    at = sp.e;
    prev = sp.name;
  }
  if (at != data_len)
    fail("corrupt safetensors file: " + std::to_string(data_len - at) + " bytes after the last tensor's data at offset " +
         std::to_string(at) + " (the data section must have no holes)");
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open safetensors file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat safetensors file: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file (a safetensors file expected)");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw Error(path + ": truncated safetensors file (" + std::to_string(size_) + " bytes, need at least 8)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path + ": cannot map the safetensors file (" + std::to_string(size_) + " bytes) into memory: " +
                std::strerror(err));
  }
  try {
    tensors_ = parse_safetensors(static_cast<const uint8_t*>(map_), size_, path);
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (static_cast<uint64_t>(numel) * static_cast<uint64_t>(core::dtype_size(t.dtype)) != t.bytes.size())
      throw Error(path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) + " bytes for shape " +
                  shape_str(t.shape));
    h[t.name] = {{"dtype", std::string(core::dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot open for writing");
  const uint64_t hl = header.size();
  bool ok = std::fwrite(&hl, 8, 1, f) == 1 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const auto& t : tensors)
    ok = ok && (t.bytes.empty() || std::fwrite(t.bytes.data(), 1, t.bytes.size(), f) == t.bytes.size());
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error(path + ": write failed");
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace deepinfer::loader
