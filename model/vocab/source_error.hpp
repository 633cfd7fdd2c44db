// A malformed-input error carrying `file:line:column`; every parser and
// validator throws this so the command line can exit 3 with one clear line.
#pragma once
#include <stdexcept>
#include <string>

namespace fsdpsim {

struct SourcePos {
  int line = 0;    // 1-based; 0 = no position (e.g. a command-line flag)
  int column = 0;  // 1-based
};

class SourceError : public std::runtime_error {
 public:
  SourceError(std::string file, SourcePos pos, const std::string& what)
      : std::runtime_error(format(file, pos, what)), file_(std::move(file)), pos_(pos) {}
  const std::string& file() const { return file_; }
  SourcePos pos() const { return pos_; }

 private:
  static std::string format(const std::string& file, SourcePos pos, const std::string& raw) {
    const std::string what = shorten(raw);
    if (pos.line <= 0) return file + ": " + what;
    return file + ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column) + ": " + what;
  }
  // Messages quote the offending token; a 1 MB token must not become a 1 MB
  // message. The middle is cut, so both the start and the end stay readable.
  static std::string shorten(const std::string& what) {
    constexpr size_t kMax = 400, kHead = 300, kTail = 60;
    if (what.size() <= kMax) return what;
    return what.substr(0, kHead) + "...(" + std::to_string(what.size() - kHead - kTail) + " characters cut)..." +
           what.substr(what.size() - kTail);
  }
  std::string file_;
  SourcePos pos_;
};

}  // namespace fsdpsim
