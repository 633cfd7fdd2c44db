// The standard scenario the .seq parser tests edit line by line (seq_parser_test.cpp,
// seq_parser_errors_test.cpp): `head(n, text)` replaces its line n.
#pragma once
#include <string>
#include <vector>

namespace fsdpsim::seq_test {

// The standard scenario; ops start on line 13.
inline const std::vector<std::string> kHeadLines = {
    "world 2",                                                          // 1
    "seed 7",                                                           // 2
    "profile upstream",                                                 // 3
    "layer lin0 10 20",                                                 // 4
    "layer lin1 20 2",                                                  // 5
    "adapter default r=8 alpha=16 targets=lin0,lin1 init=random",       // 6
    "adapter other r=4 alpha=4 targets=lin1 init=zero inference_mode",  // 7
    "adapter late r=2 alpha=2 targets=lin0 deferred",                   // 8
    "fully_shard lin0 reshard_after_forward=false",                     // 9
    "fully_shard root reshard_after_forward=true",                      // 10
    "optimizer all",                                                    // 11
    "---",                                                              // 12
};

// The header with line `n` (1-based) replaced; n == 0 keeps it as is.
inline std::string head(int n = 0, const std::string& repl = "") {
  std::string out;
  for (size_t i = 0; i < kHeadLines.size(); ++i) out += (static_cast<int>(i) + 1 == n ? repl : kHeadLines[i]) + "\n";
  return out;
}
inline std::string ops(const std::string& body) { return head() + body; }

}  // namespace fsdpsim::seq_test
