// Runs the built fsdpsim binary as a process: its exit code and its stdout
// and stderr together. `env` ("A=1 B=2 ") is prefixed to the command line.
#pragma once
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace fsdpsim::test {

struct CliResult {
  int code;
  std::string out;
};

inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  std::string cmd = env + std::string(FSDPSIM_BINARY_DIR) + "/fsdpsim " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace fsdpsim::test
