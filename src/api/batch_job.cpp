#include "api/batch_job.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "api/batch_file.h"
#include "core/error.h"
#include "engine/engine.h"

namespace deepinfer::api {

namespace {

// The custom_id as format_batch_output writes it (invalid UTF-8 replaced), for comparing.
std::string written_id(const std::string& id) {
  const std::string dumped = nlohmann::json(id).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(dumped).get<std::string>();
}

std::string json_quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

BatchJob::BatchJob(const BatchJobOptions& options) : opts_(options) {
  const std::string& in_path = opts_.input;
  const std::string& out_path = opts_.output;
  struct stat in_st {};
  if (::stat(in_path.c_str(), &in_st) == 0 && S_ISDIR(in_st.st_mode)) throw Error(in_path + ": cannot read: Is a directory");
  std::ifstream in(in_path, std::ios::binary);
  if (!in) throw Error(in_path + ": cannot open");
  std::vector<Request> all;
  std::vector<size_t> line_nos;
  size_t line_no = 0;
  std::string line;
  bool too_long = false;
  size_t length = 0;
  while (read_line_bounded(in, line, kMaxBatchLineBytes + 1, &too_long, &length)) {
    ++line_no;
    if (too_long) {  // not kept in memory: an error line of its own
      Request r;
      r.request_id = "line " + std::to_string(line_no);
      r.error = r.request_id + ": " + std::to_string(length) + " bytes, more than the limit of " +
                std::to_string(kMaxBatchLineBytes) + " bytes per line";
      all.push_back(std::move(r));
      line_nos.push_back(line_no);
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are not requests
    all.push_back(parse_batch_line(line, line_no));
    line_nos.push_back(line_no);
  }
  if (in.bad()) throw Error(in_path + ": read failed");
  counts_.lines = all.size();
  for (const auto& r : all) ids_.push_back(r.request_id);

  std::unordered_map<std::string, size_t> first;
  size_t dups = 0;
  std::string dup_note;
  for (size_t i = 0; i < ids_.size(); ++i) {
    auto [it, fresh] = first.emplace(ids_[i], i);
    if (fresh) continue;
    if (dups++ == 0)
      dup_note = "custom_id " + json_quoted(ids_[i]) + " is on input lines " + std::to_string(line_nos[it->second]) + " and " +
                 std::to_string(line_nos[i]);
  }
  if (dups > 0)
    notes_.push_back(dup_note + " (" + std::to_string(dups) +
                     " repeated line(s) in all); each line still gets its own output line, in input order");

  if (same_file(in_path, out_path)) throw Error(out_path + ": --output is the same file as --input " + in_path);

  size_t skip = 0;
  if (!opts_.resume) {
    out_.open_truncate(out_path);
  } else {
    struct stat st {};
    if (::stat(out_path.c_str(), &st) != 0) {
      notes_.push_back("--resume: " + out_path + " does not exist yet; starting from the first request");
      out_.open_keep(out_path, 0);
    } else {
      if (!S_ISREG(st.st_mode)) throw Error(out_path + ": --resume needs a regular file");
      std::ifstream f(out_path, std::ios::binary);
      if (!f) throw Error(out_path + ": cannot open for reading");
      std::stringstream ss;
      ss << f.rdbuf();
      if (f.bad()) throw Error(out_path + ": read failed");
      const std::string bytes = ss.str();
      const ResumeFile rf = read_resume_bytes(bytes, out_path);
      if (rf.custom_ids.size() > all.size())
        throw Error(out_path + ": holds " + std::to_string(rf.custom_ids.size()) + " result lines but " + in_path +
                    " has only " + std::to_string(all.size()) +
                    " requests; --resume continues only an output written by run-batch from this input");
      for (size_t k = 0; k < rf.custom_ids.size(); ++k) {
        if (rf.custom_ids[k] != written_id(ids_[k]))
          throw Error(out_path + ": line " + std::to_string(k + 1) + ": custom_id " + json_quoted(rf.custom_ids[k]) +
                      " does not match request " + std::to_string(k + 1) + " of " + in_path + " (line " +
                      std::to_string(line_nos[k]) + ", custom_id " + json_quoted(ids_[k]) +
                      "); --resume continues only an output written by run-batch from this input, in its order");
      }
      if (rf.torn_bytes > 0)
        notes_.push_back("--resume: " + out_path + ": dropped a torn last line (" + std::to_string(rf.torn_bytes) +
                         " bytes) left by an interrupted run; its request runs again");
      skip = rf.custom_ids.size();
      out_.open_keep(out_path, rf.keep_bytes);
    }
  }
  counts_.skipped = skip;
  // An unseeded request gets the seed the engine would give it at its input position, so a
  // resumed run (which starts later in the input) samples as a fresh one.
  for (size_t g = 0; g < all.size(); ++g)
    if (!all[g].params.seed) all[g].params.seed = engine::request_seed(opts_.engine_seed, g);
  reqs_.assign(std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(skip)), std::make_move_iterator(all.end()));
}

std::vector<RequestOutput> BatchJob::run(LLM* llm, const BatchHooks& hooks) {
  std::vector<RequestOutput> outs;
  const size_t skip = counts_.skipped, n = reqs_.size();
  if (n > 0) {
    DI_CHECK(llm != nullptr, "BatchJob::run: requests pending and no LLM");
    std::vector<char> given(n, 0), failed(n, 0);
    OrderedLines lines(n, [&](size_t i, const std::string& s) {
      out_.write(s);
      ++counts_.written;
      ++(failed[i] ? counts_.failed : counts_.succeeded);
      if (hooks.on_written) hooks.on_written(skip + i);
    });
    const auto put = [&](size_t i, const RequestOutput& o) {
      given[i] = 1;
      failed[i] = o.error.empty() ? 0 : 1;
      lines.put(i, format_batch_output(ids_[skip + i], o) + "\n");
    };
    outs = llm->run(std::move(reqs_), [&](size_t i, const RequestOutput& o) {
      if (i >= n || given[i]) return;
      if (hooks.on_finish) hooks.on_finish(skip + i);
      put(i, o);
    });
    reqs_.clear();
    // Every request reports through on_finish; a result it did not report is still written.
    for (size_t i = 0; i < n && i < outs.size(); ++i)
      if (!given[i]) put(i, outs[i]);
    DI_CHECK(lines.written() == n, "BatchJob::run: a result was not written");
  }
  out_.close();
  return outs;
}

}  // namespace deepinfer::api
