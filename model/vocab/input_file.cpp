#include "model/vocab/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "model/vocab/source_error.hpp"

namespace fsdpsim {
namespace {

// The kind of a non-regular file, for "not a regular file (a FIFO)".
const char* type_name(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

void check_type(const std::string& path, const struct stat& st, const InputLimits& lim) {
  if (S_ISREG(st.st_mode)) return;
  if (S_ISDIR(st.st_mode)) {
    const bool seq = std::strcmp(lim.what, kSeqInput.what) == 0;
    throw SourceError(path, {}, std::string("is a directory (expected ") + lim.what + (seq ? "; `check` takes directories)" : ")"));
  }
  throw SourceError(path, {}, std::string("not a regular file (") + type_name(st.st_mode) + "); expected " + lim.what);
}

// The 1-based line and column of byte `at` in `text` (text holds at least `at` bytes).
SourcePos position_of(const std::string& text, size_t at) {
  SourcePos p{1, 1};
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

}  // namespace

std::string limit_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

void check_input_file(const std::string& path, const InputLimits& lim) {
  if (path.empty()) throw SourceError("<command line>", {}, std::string("an empty path where ") + lim.what + " was expected");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw SourceError(path, {}, std::string("cannot open file: ") + std::strerror(errno));
  check_type(path, st, lim);
}

std::string read_input_file(const std::string& path, const InputLimits& lim) {
  check_input_file(path, lim);
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once
  // and the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw SourceError(path, {}, std::string("cannot open file: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    if (!S_ISREG(st.st_mode)) check_type(path, st, lim);
    throw SourceError(path, {}, std::string("cannot open file: ") + std::strerror(err));
  }
  // st_size is 0 for /proc files and may change while reading: the bound is on what is read.
  const size_t cap = static_cast<size_t>(lim.max_bytes) + 1;
  std::string text;
  text.resize(std::min<size_t>(cap, st.st_size > 0 ? static_cast<size_t>(st.st_size) + 1 : 65536));
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (text.size() >= cap) break;
      text.resize(std::min(cap, text.size() * 2));
    }
    const ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw SourceError(path, {}, std::string("cannot read file: ") + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  // The first line over the limit within the first max_bytes, before the size: it is the
  // earlier place in the file (past max_bytes the size is the problem).
  const size_t end = std::min(got, static_cast<size_t>(lim.max_bytes));
  size_t line_start = 0;
  for (size_t i = 0; i <= end; ++i) {
    if (i < end && text[i] != '\n' && text[i] != '\r') {
      if (static_cast<int64_t>(i - line_start) >= lim.max_line)
        throw SourceError(path, position_of(text, i),
                          std::string("a line longer than the ") + limit_text(lim.max_line) + " limit for a line of " + lim.what);
      continue;
    }
    line_start = i + 1;
  }
  if (static_cast<int64_t>(got) > lim.max_bytes)
    throw SourceError(path, position_of(text, static_cast<size_t>(lim.max_bytes)),
                      std::string("the file is larger than the ") + limit_text(lim.max_bytes) + " limit for " + lim.what +
                          (st.st_size > lim.max_bytes ? " (" + std::to_string(st.st_size) + " bytes)" : std::string()));
  return text;
}

}  // namespace fsdpsim
