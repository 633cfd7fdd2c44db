// Progress on stderr for the commands that run longer than a moment
// (crosscheck, hunt, explore, shrink, check over many files), silent with
// --quiet; and colours on stdout, only on a terminal and without NO_COLOR.
#pragma once
#include <chrono>
#include <memory>
#include <ostream>
#include <string>

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
  // A stream whose every line is a status() (for sim/explore's ostream hook);
  // a leading "TOOL: " is dropped, the prefix is added again.
  std::ostream& as_stream();

 private:
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

// True when stdout is a terminal and NO_COLOR is unset or empty (no-color.org).
bool colour_stdout();
// `text` in red or green when colour_stdout(), as it is otherwise.
std::string red(const std::string& text);
std::string green(const std::string& text);

}  // namespace fsdpsim::cli
