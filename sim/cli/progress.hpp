// Progress on stderr for the commands that run longer than a moment
// (crosscheck, hunt, explore, shrink, check over many files), silent with
// --quiet; and colours on stdout, only on a terminal and without NO_COLOR.
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace fsdpsim::cli {

class Progress {
 public:
  // `tool` prefixes every line ("crosscheck: ..."); quiet: nothing is printed.
  Progress(std::string tool, bool quiet);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // How far the run is: shown once the run has taken a second; on a terminal
  // at most once a second, each replacing the last in place (\r); elsewhere at
  // most every 10 s, each a line of its own. The latest one held back is shown by done().
  void status(const std::string& text);
  // A line that stays: the run's parameters, a phase finished.
  void note(const std::string& text);
  // Shows a status held back by the rate limit and ends the line on a terminal.
  void done();
  // Erases a status line left on the terminal, before the command prints a
  // line of its own there (stdout on the same terminal); the next status redraws it.
  void clear();
  // A stream whose every line is a status() (for sim/core/explore's ostream hook);
  // a leading "TOOL: " is dropped, the prefix is added again.
  std::ostream& as_stream();

 private:
  friend class Waiting;
  using Clock = std::chrono::steady_clock;
  void emit(const std::string& text, bool stays);
  std::string tool_;
  bool quiet_;
  bool terminal_;
  bool open_line_ = false;  // a status line on the terminal without its newline yet
  std::string held_;        // the latest status the rate limit held back
  Clock::time_point start_, last_;
  std::unique_ptr<std::ostream> stream_;
  std::unique_ptr<std::streambuf> buf_;
};

// A step that blocks for seconds with nothing to count (an upstream pool's
// start, a release environment being made, a long run on the real or upstream
// backend): while it lasts, a second thread shows "TOOL: TEXT (N s)" once it
// has taken kAfter, then on a terminal redrawn each second in place, elsewhere
// a line every 10 s; nothing for a shorter step, nothing with --quiet. The
// scope must not use `progress` itself; on a terminal the line is erased at
// the end, before the command prints its result.
class Waiting {
 public:
  static constexpr std::chrono::milliseconds kAfter{2000};
  Waiting(Progress& progress, std::string text);
  ~Waiting();
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;

 private:
  void loop();
  Progress& progress_;
  std::string text_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool started_ = false;
  std::thread thread_;
};

// True when stdout is a terminal and NO_COLOR is unset or empty (no-color.org).
bool colour_stdout();
// `text` in red or green when colour_stdout(), as it is otherwise.
std::string red(const std::string& text);
std::string green(const std::string& text);

}  // namespace fsdpsim::cli
