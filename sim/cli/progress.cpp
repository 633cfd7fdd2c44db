#include "sim/cli/progress.hpp"

#include "real_backend/fork_guard.hpp"

#include <unistd.h>

#include <cstdlib>
#include <iostream>

namespace fsdpsim::cli {
namespace {

constexpr std::chrono::seconds kStatusEvery(1);
// Into a file or pipe each status is a line that stays: a few, not one a second.
constexpr std::chrono::seconds kStatusEveryPiped(10);

// Splits what explore writes into lines, each handed to Progress::status.
class LineBuf : public std::streambuf {
 public:
  LineBuf(Progress* p, std::string prefix) : progress_(p), prefix_(std::move(prefix)) {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    if (c != '\n') {
      line_ += static_cast<char>(c);
      return c;
    }
    if (line_.rfind(prefix_, 0) == 0) line_.erase(0, prefix_.size());
    progress_->status(line_);
    line_.clear();
    return c;
  }

 private:
  Progress* progress_;
  std::string prefix_;
  std::string line_;
};

}  // namespace

Progress::Progress(std::string tool, bool quiet)
    : tool_(std::move(tool)), quiet_(quiet), terminal_(::isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

Progress::~Progress() { done(); }

void Progress::emit(const std::string& text, bool stays) {
  const std::string line = tool_ + ": " + text;
  if (!terminal_) {
    std::cerr << line << "\n" << std::flush;
    return;
  }
  // \r and erase-to-end-of-line: the next line starts where this one did.
  std::cerr << "\r" << line << "\033[K";
  if (stays) std::cerr << "\n";
  open_line_ = !stays;
  std::cerr << std::flush;
}

void Progress::status(const std::string& text) {
  if (quiet_) return;
  const auto now = Clock::now();
  if (now - start_ < kStatusEvery || now - last_ < (terminal_ ? kStatusEvery : kStatusEveryPiped)) {
    held_ = text;
    return;
  }
  last_ = now;
  held_.clear();
  emit(text, false);
}

void Progress::note(const std::string& text) {
  if (quiet_) return;
  held_.clear();  // the line that stays sums up what the held status was counting
  emit(text, true);
}

void Progress::done() {
  if (quiet_) return;
  // A held-back status is shown only once the run has been long enough to show any.
  if (!held_.empty() && Clock::now() - start_ >= kStatusEvery) emit(held_, false);
  held_.clear();
  if (open_line_) std::cerr << "\n" << std::flush;
  open_line_ = false;
}

void Progress::clear() {
  if (!open_line_) return;
  std::cerr << "\r\033[K" << std::flush;
  open_line_ = false;
}

std::ostream& Progress::as_stream() {
  if (!stream_) {
    buf_ = std::make_unique<LineBuf>(this, tool_ + ": ");
    stream_ = std::make_unique<std::ostream>(buf_.get());
  }
  return *stream_;
}

// The constructor returns once the thread is in its wait: a rank forked in the
// scope never catches the thread starting up, and each line it shows is
// written under the fork lock (real_backend/fork_guard.hpp).
Waiting::Waiting(Progress& progress, std::string text) : progress_(progress), text_(std::move(text)) {
  if (progress_.quiet_) return;
  std::unique_lock<std::mutex> lock(mu_);
  thread_ = std::thread([this] { loop(); });
  cv_.wait(lock, [this] { return started_; });
}

Waiting::~Waiting() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  progress_.clear();
}

void Waiting::loop() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto every = progress_.terminal_ ? kStatusEvery : std::chrono::seconds(kStatusEveryPiped);
  auto next = t0 + kAfter;
  std::unique_lock<std::mutex> lock(mu_);
  started_ = true;
  cv_.notify_all();
  while (!cv_.wait_until(lock, next, [this] { return stop_; })) {
    std::lock_guard<std::mutex> no_fork(real::fork_mutex());
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count();
    progress_.emit(text_ + " (" + std::to_string(s) + " s)", false);
    next += every;
  }
}

bool colour_stdout() {
  static const bool on = [] {
    const char* no = std::getenv("NO_COLOR");
    return ::isatty(STDOUT_FILENO) == 1 && !(no && *no);
  }();
  return on;
}

std::string red(const std::string& text) { return colour_stdout() ? "\033[31m" + text + "\033[0m" : text; }
std::string green(const std::string& text) { return colour_stdout() ? "\033[32m" + text + "\033[0m" : text; }

}  // namespace fsdpsim::cli
