#include "sim/cli/junit.hpp"

#include <cstdio>

#include "sim/cli/output.hpp"
#include "sim/report/report_html.hpp"

namespace fsdpsim::cli {

std::string xml_escaped(const std::string& text, bool attribute) {
  std::string out;
  for (char c : html_escape(text)) {  // & < > " ' as entities: the same five XML has
    if (c == '\n' && attribute) out += "&#10;";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += '?';
    else out += c;
  }
  return out;
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s < 0 ? 0.0 : s);
  return buf;
}

}  // namespace

void JunitReport::write(const std::string& path, double seconds) const {
  int failures = 0, errors = 0;
  for (const auto& c : cases_) {
    failures += c.outcome == JunitCase::Outcome::Failure;
    errors += c.outcome == JunitCase::Outcome::Error;
  }
  const std::string counts = " tests=\"" + std::to_string(cases_.size()) + "\" failures=\"" + std::to_string(failures) +
                             "\" errors=\"" + std::to_string(errors) + "\" time=\"" + seconds_text(seconds) + "\"";
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fsdpsim\"" + counts + ">\n";
  xml += "  <testsuite name=\"" + xml_escaped(suite_) + "\"" + counts + ">\n";
  for (const auto& c : cases_) {
    xml += "    <testcase classname=\"" + xml_escaped(c.classname) + "\" name=\"" + xml_escaped(c.name) + "\" time=\"" +
           seconds_text(c.seconds) + "\"";
    if (c.outcome == JunitCase::Outcome::Passed) {
      xml += "/>\n";
      continue;
    }
    const char* tag = c.outcome == JunitCase::Outcome::Failure ? "failure" : "error";
    xml += ">\n      <" + std::string(tag) + " message=\"" + xml_escaped(c.message) + "\">" + xml_escaped(c.text, false) + "</" + tag +
           ">\n    </testcase>\n";
  }
  xml += "  </testsuite>\n</testsuites>\n";
  write_file(path, xml);
}

}  // namespace fsdpsim::cli
