#include "kernels/staging.h"

namespace deepinfer::kernels {

std::vector<UploadItem> copy_items(const std::vector<CopyDesc>& copies) {
  std::vector<UploadItem> items;
  items.reserve(copies.size());
  for (const auto& c : copies) items.push_back({.dst = c.dst, .src = c.src, .bytes = c.bytes, .from_device = true});
  return items;
}

void copy_batch(Backend& be, const std::vector<CopyDesc>& copies) {
  const auto items = copy_items(copies);
  be.upload_batch(items.data(), static_cast<int64_t>(items.size()));
}

void Uploads::send() {
  be.upload_batch(items.data(), static_cast<int64_t>(items.size()));
  items.clear();
  held.clear();
}

void Staged::upload(const std::vector<CopyDesc>& then_copy) {
  DI_CHECK(dev.size() == static_cast<int64_t>(host.size()), "staged arrays added after their buffer was made");
  auto items = copy_items(then_copy);
  items.insert(items.begin(), UploadItem{.dst = dev.data(), .src = host.data(), .bytes = static_cast<int64_t>(host.size())});
  dev.backend().upload_batch(items.data(), static_cast<int64_t>(items.size()));
}

}  // namespace deepinfer::kernels
