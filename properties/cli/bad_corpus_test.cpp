// corpus/bad: every malformed input once found, replayed through the CLI.
// Each file says in its leading comments what it must produce:
//   # command: cost          (optional; default run)
//   # exit: 3
//   # message: {file}:6:7: expected a layer name   (one or more; all must appear)
// `{file}` stands for the file's path as passed on the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "properties/cli_run.hpp"

namespace {

struct BadFile {
  std::string path;
  std::string command = "run";
  int exit = -1;
  std::vector<std::string> messages;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

BadFile read_header(const std::string& path) {
  BadFile b;
  b.path = path;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line) && line.rfind("#", 0) == 0;) {
    auto value = [&](const char* key) -> const char* {
      size_t n = std::char_traits<char>::length(key);
      return line.compare(0, n, key) == 0 ? line.c_str() + n : nullptr;
    };
    if (const char* v = value("# command: ")) b.command = v;
    if (const char* v = value("# exit: ")) b.exit = std::stoi(v);
    if (const char* v = value("# message: ")) b.messages.push_back(replace_all(v, "{file}", path));
  }
  return b;
}

std::vector<BadFile> bad_files() {
  std::vector<BadFile> out;
  for (const auto& e : std::filesystem::directory_iterator(FSDPSIM_SOURCE_DIR "/corpus/bad"))
    if (e.path().extension() == ".seq") out.push_back(read_header(e.path().string()));
  std::sort(out.begin(), out.end(), [](const BadFile& a, const BadFile& b) { return a.path < b.path; });
  return out;
}

void PrintTo(const BadFile& b, std::ostream* os) { *os << b.path; }

class BadCorpus : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadCorpus, ExitsWithItsCodeAndMessage) {
  const BadFile& b = GetParam();
  ASSERT_GE(b.exit, 0) << b.path << " has no `# exit: N` line";
  ASSERT_FALSE(b.messages.empty()) << b.path << " has no `# message: ...` line";
  fsdpsim::test::CliResult r = fsdpsim::test::run_cli(b.command + " " + b.path);
  EXPECT_EQ(r.code, b.exit) << r.out.substr(0, 2000);
  for (const auto& m : b.messages) EXPECT_NE(r.out.find(m), std::string::npos) << "missing: " << m << "\nin: " << r.out.substr(0, 2000);
  EXPECT_LT(r.out.size(), 4000u) << "a bad input's message should be short";
}

INSTANTIATE_TEST_SUITE_P(Files, BadCorpus, ::testing::ValuesIn(bad_files()), [](const ::testing::TestParamInfo<BadFile>& i) {
  std::string n = std::filesystem::path(i.param.path).stem().string();
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

}  // namespace
