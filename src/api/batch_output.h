// run-batch's output side: a checked, unbuffered writer for the results and metrics files, the
// reorder buffer that writes each result as soon as it and every earlier line are done, and
// the --resume reader that keeps the complete lines of an earlier run's output.
//
// Resume rule (what read_resume_bytes accepts): the file is a sequence of lines each ended by
// '\n'. Bytes after the last '\n' are a torn line left by a crash: they are dropped (the
// caller truncates the file there). Every complete line must be a run-batch output line: a
// JSON object with a string "custom_id" and an object "response" or "error". Anything else (an
// empty line, garbage, another JSON value) is an Error naming the file and line: the file was
// not written by run-batch and is left untouched.
// Threading: OutputFile and OrderedLines are single-threaded; read_resume_bytes is pure.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::api {

// A file written with write(2) directly (no user-space buffer: each write() is flushed to the
// kernel), fsync'ed on close when it is a regular file. Every failure throws
// Error("<path>: <reason>").
class OutputFile {
 public:
  OutputFile() = default;
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Truncates (or creates) `path`.
  void open_truncate(const std::string& path);
  // Keeps the first keep_bytes bytes of the regular file `path` (creating it when missing) and
  // appends after them.
  void open_keep(const std::string& path, uint64_t keep_bytes);
  void write(std::string_view bytes);
  // fsync (regular files) and close; reports the errors a delayed write shows only here.
  void close();
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& what) const;
  int fd_ = -1;
  std::string path_;
};

// Whether paths a and b name the same file: the same inode when both exist, else the same
// path once made absolute and normal (symbolic links of the existing part resolved).
bool same_file(const std::string& a, const std::string& b);

// Writes `text` to `path` (truncating it) through OutputFile: every error is an Error.
void write_file_checked(const std::string& path, const std::string& text);

// Lines 0..n-1 may finish in any order; each is handed to `sink` (with its index) as soon as it
// and every earlier line are in.
class OrderedLines {
 public:
  OrderedLines(size_t n, std::function<void(size_t, const std::string&)> sink) : n_(n), sink_(std::move(sink)) {}
  void put(size_t i, std::string line);  // i < n, each i once (DI_CHECK)
  size_t written() const { return next_; }
  size_t buffered() const { return pending_.size(); }

 private:
  size_t n_;
  size_t next_ = 0;
  std::map<size_t, std::string> pending_;
  std::vector<bool> seen_;
  std::function<void(size_t, const std::string&)> sink_;
};

struct ResumeFile {
  std::vector<std::string> custom_ids;  // of the complete lines, in file order
  std::vector<bool> is_error;           // per complete line: an "error" line
  uint64_t keep_bytes = 0;              // the complete lines' length; what follows is the torn tail
  uint64_t torn_bytes = 0;              // bytes after the last '\n' (dropped)
};

// Reads an earlier run's output (`file` names it in errors). Never crashes; throws Error for a
// complete line that is not a run-batch output line.
ResumeFile read_resume_bytes(std::string_view bytes, const std::string& file);

}  // namespace deepinfer::api
