// Shared by the triage and root-cause tests: a corpus regression by name, and
// its triage (expected to find something).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "sim/findings/triage.hpp"

namespace fsdpsim::test {

inline SeqFile corpus(const std::string& name) {
  return parse_seq_file(std::string(FSDPSIM_SOURCE_DIR) + "/corpus/regressions/" + name);
}

inline TriageResult triaged(const SeqFile& f) {
  TriageResult t;
  EXPECT_TRUE(triage(f, &t)) << print_seq(f);
  return t;
}

}  // namespace fsdpsim::test
