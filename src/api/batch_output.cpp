#include "api/batch_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::api {

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::fail(const std::string& what) const { throw Error(path_ + ": " + what); }

void OutputFile::open_truncate(const std::string& path) {
  DI_CHECK(fd_ < 0, "OutputFile opened twice");
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(std::string("cannot open for writing: ") + std::strerror(errno));
}

void OutputFile::open_keep(const std::string& path, uint64_t keep_bytes) {
  DI_CHECK(fd_ < 0, "OutputFile opened twice");
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(std::string("cannot open for writing: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("--resume needs a regular file");
  if (static_cast<uint64_t>(st.st_size) < keep_bytes) fail("changed while it was being read");
  if (static_cast<uint64_t>(st.st_size) > keep_bytes && ::ftruncate(fd_, static_cast<off_t>(keep_bytes)) != 0)
    fail(std::string("cannot cut the torn last line: ") + std::strerror(errno));
  if (::lseek(fd_, static_cast<off_t>(keep_bytes), SEEK_SET) < 0) fail(std::string("cannot seek: ") + std::strerror(errno));
}

void OutputFile::write(std::string_view bytes) {
  DI_CHECK(fd_ >= 0, "OutputFile::write on a closed file");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(std::string("write failed: ") + std::strerror(errno));
    }
    if (n == 0) fail("write failed: no progress");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    fail(std::string("fsync failed: ") + std::strerror(e));
  }
  if (::close(fd) != 0) fail(std::string("close failed: ") + std::strerror(errno));
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(std::filesystem::absolute(a, ea), ea);
  const auto cb = std::filesystem::weakly_canonical(std::filesystem::absolute(b, eb), eb);
  return !ea && !eb && ca == cb;
}

void write_file_checked(const std::string& path, const std::string& text) {
  OutputFile f;
  f.open_truncate(path);
  f.write(text);
  f.close();
}

void OrderedLines::put(size_t i, std::string line) {
  DI_CHECK(i < n_, "OrderedLines::put: line out of range");
  if (seen_.empty()) seen_.assign(n_, false);
  DI_CHECK(!seen_[i], "OrderedLines::put: line given twice");
  seen_[i] = true;
  pending_.emplace(i, std::move(line));
  while (!pending_.empty() && pending_.begin()->first == next_) {
    auto node = pending_.extract(pending_.begin());
    sink_(next_, node.mapped());
    ++next_;
  }
}

ResumeFile read_resume_bytes(std::string_view bytes, const std::string& file) {
  ResumeFile r;
  const size_t last_nl = bytes.rfind('\n');
  r.keep_bytes = last_nl == std::string_view::npos ? 0 : last_nl + 1;
  r.torn_bytes = bytes.size() - r.keep_bytes;
  size_t start = 0, line_no = 0;
  while (start < r.keep_bytes) {
    const size_t end = bytes.find('\n', start);
    std::string_view line = bytes.substr(start, end - start);
    start = end + 1;
    ++line_no;
    const auto bad = [&](const std::string& why) -> void {
      throw Error(file + ": line " + std::to_string(line_no) + ": not a run-batch output line (" + why +
                  "); --resume continues only a file written by run-batch, and leaves this one untouched");
    };
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) bad("empty line");
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) bad("not valid JSON");
    if (!j.is_object()) bad("expected a JSON object");
    const auto id = j.find("custom_id");
    if (id == j.end() || !id->is_string()) bad("no string \"custom_id\"");
    const auto resp = j.find("response"), err = j.find("error");
    const bool has_resp = resp != j.end() && resp->is_object(), has_err = err != j.end() && err->is_object();
    if (has_resp == has_err) bad("expected exactly one of \"response\" or \"error\" (an object)");
    r.custom_ids.push_back(id->get<std::string>());
    r.is_error.push_back(has_err);
  }
  return r;
}

}  // namespace deepinfer::api
