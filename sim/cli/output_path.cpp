#include "sim/cli/output_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include "model/vocab/source_error.hpp"

namespace fsdpsim::cli {
namespace {

[[noreturn]] void refuse(const std::string& flag, const std::string& path, const std::string& why) {
  throw SourceError("<command line>", {}, fmt::format("{} {}: {}", flag, path, why));
}

// "" when a file can be created in `dir` (one is made and removed), else the system's reason.
std::string creation_problem(const std::string& dir) {
  std::string probe = dir + "/.fsdpsim-write-check-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

std::string parent_of(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal().parent_path();
  return p.empty() ? "." : p.string();
}

// The nearest ancestor of a path that does not exist which does (a file among them included).
std::string existing_ancestor(const std::string& path) {
  for (std::string p = parent_of(path);; p = parent_of(p)) {
    struct stat st;
    if (p == "." || p == "/" || ::stat(p.c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return p;
  }
}

// Where a new path would be created: its nearest existing ancestor must be a writable
// directory, and for a file it must be the file's own directory (a missing parent is a typo
// to report, not a directory to make).
void check_creatable(const std::string& flag, const std::string& path, bool directory) {
  const std::string at = existing_ancestor(path);
  struct stat st;
  if (::stat(at.c_str(), &st) != 0) refuse(flag, path, fmt::format("cannot create it: {}: {}", at, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) refuse(flag, path, fmt::format("cannot create it: {} is not a directory", at));
  if (!directory && at != parent_of(path)) refuse(flag, path, fmt::format("cannot create it: no directory {}", parent_of(path)));
  const std::string why = creation_problem(at);
  if (!why.empty()) refuse(flag, path, fmt::format("cannot create it in {}: {}", at, why));
}

}  // namespace

void check_output_dir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) refuse(flag, "''", "expected a directory name");
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) refuse(flag, dir, std::strerror(errno));
    check_creatable(flag, dir, true);
    return;
  }
  if (!S_ISDIR(st.st_mode)) refuse(flag, dir, "not a directory");
  const std::string why = creation_problem(dir);
  if (!why.empty()) refuse(flag, dir, "not writable: " + why);
}

void prepare_out_dir(const std::string& dir) {
  check_output_dir("--out", dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) refuse("--out", dir, "cannot create directory: " + ec.message());
}

void check_output_file(const std::string& flag, const std::string& path) {
  if (path.empty()) refuse(flag, "''", "expected a file name");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) refuse(flag, path, std::strerror(errno));
    check_creatable(flag, path, false);
    return;
  }
  if (S_ISDIR(st.st_mode)) refuse(flag, path, "is a directory (expected a file name)");
  // Neither created nor truncated; O_NONBLOCK: a FIFO without a reader is ENXIO, not a wait.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0 && errno == ENXIO && S_ISFIFO(st.st_mode)) refuse(flag, path, "a FIFO no process reads (nothing would take the output)");
  if (fd < 0) refuse(flag, path, fmt::format("not writable: {}", std::strerror(errno)));
  ::close(fd);
}

}  // namespace fsdpsim::cli
