// model/vocab/input_file.hpp: what is refused before a read, and the limits at
// their exact boundary (the limit itself is accepted, one byte more refused).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/vocab/input_file.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {
namespace {

class InputFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / "fsdpsim-input-XXXXXX").string();
    ASSERT_NE(::mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The message read_input_file throws for `path`, or "" when it reads it.
  static std::string error_of(const std::string& path, const InputLimits& lim) {
    try {
      read_input_file(path, lim);
      return "";
    } catch (const SourceError& e) {
      return e.what();
    }
  }
  std::string dir_;
};

constexpr InputLimits kSmall{"a test file", 100, 10};

TEST_F(InputFile, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/f.seq";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens it: a plain open for reading would wait forever.
  EXPECT_EQ(error_of(fifo, kSeqInput), fifo + ": not a regular file (a FIFO); expected a .seq file");
}

TEST_F(InputFile, DevicesAndDirectoriesAreRefusedByType) {
  EXPECT_EQ(error_of("/dev/zero", kJsonInput), "/dev/zero: not a regular file (a character device); expected a JSON input");
  EXPECT_EQ(error_of(dir_, kSeqInput), dir_ + ": is a directory (expected a .seq file; `check` takes directories)");
  EXPECT_EQ(error_of(dir_, kTextInput), dir_ + ": is a directory (expected a text file)");
  EXPECT_EQ(error_of(dir_ + "/missing", kSeqInput), dir_ + "/missing: cannot open file: No such file or directory");
}

TEST_F(InputFile, TheSizeLimitItselfIsAcceptedOneByteMoreIsNot) {
  const std::string lines = "123456789\n";  // 10 bytes a line: the 10-byte line limit is not crossed
  std::string at_limit;
  for (int i = 0; i < 10; ++i) at_limit += lines;
  EXPECT_EQ(error_of(write("ok", at_limit), kSmall), "");
  EXPECT_EQ(read_input_file(write("ok2", at_limit), kSmall), at_limit);
  const std::string over = write("over", at_limit + "x");
  EXPECT_EQ(error_of(over, kSmall), over + ":11:1: the file is larger than the 100 bytes limit for a test file (101 bytes)");
}

TEST_F(InputFile, ALongLineIsRefusedAtTheColumnPastTheLimit) {
  EXPECT_EQ(error_of(write("ok", "a\n0123456789\r\nb"), kSmall), "");  // 10 bytes: the limit, CRLF not counted
  const std::string path = write("long", "a\nb\n01234567890\n");
  EXPECT_EQ(error_of(path, kSmall), path + ":3:11: a line longer than the 10 bytes limit for a line of a test file");
}

TEST_F(InputFile, FilesWithoutASizeAreReadUpToTheLimit) {
  // /proc files report size 0: the bound is on what is read, not on st_size.
  EXPECT_NE(read_input_file("/proc/self/status", kTextInput).find("Name:"), std::string::npos);
}

TEST(InputLimitText, NamesTheUnit) {
  EXPECT_EQ(limit_text(int64_t{4} << 20), "4 MiB");
  EXPECT_EQ(limit_text(int64_t{64} << 10), "64 KiB");
  EXPECT_EQ(limit_text(100), "100 bytes");
}

}  // namespace
}  // namespace fsdpsim
