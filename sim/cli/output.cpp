#include "sim/cli/output.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>

#include "model/vocab/source_error.hpp"

namespace fsdpsim::cli {

void prepare_out_dir(const std::string& dir) {
  auto bad = [&](const std::string& why) { throw SourceError("<command line>", {}, fmt::format("--out {}: {}", dir, why)); };
  if (dir.empty()) bad("expected a directory name");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) bad(fmt::format("cannot create directory: {}", ec ? ec.message() : std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) bad("not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) bad(fmt::format("not writable: {}", std::strerror(errno)));
}

void check_output_file(const std::string& flag, const std::string& path) {
  auto bad = [&](const std::string& why) { throw SourceError("<command line>", {}, fmt::format("{} {}: {}", flag, path, why)); };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) bad("is a directory");
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);  // neither created nor truncated: a read-only mount says so here
    if (fd < 0) bad(fmt::format("not writable: {}", std::strerror(errno)));
    ::close(fd);
    return;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  if (::stat(dir.c_str(), &st) != 0) bad(fmt::format("cannot create it in {}: {}", dir, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) bad(fmt::format("cannot create it: {} is not a directory", dir));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) bad(fmt::format("cannot create it in {}: {}", dir, std::strerror(errno)));
}

void write_file(const std::string& path, const std::string& text) {
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (!out) throw WriteError(path, std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  int err = errno;
  if (std::fflush(out) != 0 && ok) ok = false, err = errno;
  if (std::fclose(out) != 0 && ok) ok = false, err = errno;
  if (!ok) throw WriteError(path, std::strerror(err));
}

void check_stdout(int err) {
  if (!std::cout || std::ferror(stdout)) {
    std::clearerr(stdout);
    std::cout.clear();
    throw WriteError("standard output", err ? std::strerror(err) : "write error");
  }
}

void flush_stdout() {
  int err = errno;  // a write that failed before the flush left its reason here
  errno = 0;
  std::cout.flush();
  if (errno) err = errno;
  if (std::fflush(stdout) != 0) err = errno;
  check_stdout(err);
}

}  // namespace fsdpsim::cli
