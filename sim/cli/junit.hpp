// `--junit FILE`: JUnit XML as CI dashboards read it (testsuites > testsuite >
// testcase, a <failure> for a finding or divergence, an <error> for bad input
// or a broken run, time attributes in seconds).
#pragma once
#include <string>
#include <vector>

namespace fsdpsim::cli {

struct JunitCase {
  enum class Outcome { Passed, Failure, Error };
  std::string classname;  // "check", "crosscheck", "hunt"
  std::string name;       // the file, "seed 20000", the class stem
  double seconds = 0;
  Outcome outcome = Outcome::Passed;
  std::string message;    // the failure's or error's one-line summary
  std::string text;       // its body: the failing expectations, the divergences
};

class JunitReport {
 public:
  explicit JunitReport(std::string suite) : suite_(std::move(suite)) {}
  void add(JunitCase c) { cases_.push_back(std::move(c)); }
  // Writes the report (replacing `path`); throws WriteError. `seconds`: the whole run.
  void write(const std::string& path, double seconds) const;

 private:
  std::string suite_;
  std::vector<JunitCase> cases_;
};

// `text` escaped for an XML attribute value (newlines as &#10;, which a bare
// newline there would read as a space) or, attribute false, for character data;
// characters XML 1.0 cannot hold (control codes but tab, newline, return) become '?'.
std::string xml_escaped(const std::string& text, bool attribute = true);

}  // namespace fsdpsim::cli
