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
