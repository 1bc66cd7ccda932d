#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

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

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open safetensors file: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(path + ": cannot stat safetensors file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw Error(path + ": truncated safetensors file (" + std::to_string(size_) + " bytes, need at least 8)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path + ": mmap failed");
  }
  const auto* base = static_cast<const uint8_t*>(map_);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian hosts only
  if (header_len > size_ - 8) {
    std::string msg = path + ": truncated or corrupt safetensors file: header length " + std::to_string(header_len) +
                      " exceeds file size " + std::to_string(size_);
    ::munmap(map_, size_);
    map_ = nullptr;
    throw Error(msg);
  }
  const uint64_t data_start = 8 + header_len, data_len = size_ - data_start;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw Error(path + ": corrupt safetensors header (invalid JSON): " + e.what());
  }
  auto fail = [&](const std::string& msg) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw Error(path + ": " + msg);
  };
  if (!h.is_object()) fail("corrupt safetensors header (not a JSON object)");
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
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail("tensor '" + name + "': bad shape " + v["shape"].dump());
      ti.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("tensor '" + name + "': bad data_offsets " + off.dump());
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > data_len)
      fail("truncated or corrupt file: tensor '" + name + "' data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
           "] exceed the data section (" + std::to_string(data_len) + " bytes)");
    // Element count with overflow guard.
    uint64_t numel = 1;
    for (int64_t d : ti.shape) {
      if (d != 0 && numel > (uint64_t{1} << 50) / static_cast<uint64_t>(d)) fail("tensor '" + name + "': shape too large");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * static_cast<uint64_t>(core::dtype_size(ti.dtype)) != e - b)
      fail("tensor '" + name + "': " + std::to_string(e - b) + " bytes stored but shape " + ti.shape_str() + " of " +
           std::string(core::dtype_name(ti.dtype)) + " needs " + std::to_string(numel * static_cast<uint64_t>(core::dtype_size(ti.dtype))));
    ti.data = base + data_start + b;
    ti.nbytes = e - b;
    tensors_.emplace(name, std::move(ti));
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
