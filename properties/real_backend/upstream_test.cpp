// The upstream backend for real: fsdpsim runs a corpus file through the
// Python pool (real PyTorch FSDP2 + PEFT + accelerate in .venv). Skipped when
// .venv has not been created (bash .ci/install-deps.sh creates it).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <unistd.h>

#include "model/vocab/observation_json.hpp"
#include "properties/cli_run.hpp"

namespace fsdpsim {
namespace {

using test::run_cli;

bool have_venv() { return ::access(FSDPSIM_SOURCE_DIR "/.venv/bin/python", X_OK) == 0; }

const std::string kSeed000 = FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_merged_set_adapter_w2.seq";

TEST(Upstream, RunsSeed000OnThePoolAsJson) {
  if (!have_venv()) GTEST_SKIP() << "no .venv/bin/python (bash .ci/install-deps.sh creates it)";
  test::CliResult r = run_cli("run " + kSeed000 + " --backend upstream --json --quiet");
  ASSERT_EQ(r.code, 1) << r.out;  // seed 000's findings
  std::stringstream in(r.out);
  int observations = 0, findings = 0, versions = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("{\"finding\"", 0) == 0) {
      ++findings;
    } else if (line.rfind("{\"trace_hash\"", 0) == 0) {
      EXPECT_NE(line.find("\"backend\":\"upstream\""), std::string::npos) << line;
    } else if (line.rfind("{\"upstream_versions\"", 0) == 0) {
      ++versions;
      EXPECT_NE(line.find("\"torch\":\"2.13.0"), std::string::npos) << line;
    } else {
      Observation o;
      std::string err;
      EXPECT_TRUE(parse_observation_json(line, &o, &err)) << err << "\n" << line;
      EXPECT_EQ(o.rank, observations % 2);
      EXPECT_EQ(o.step, observations / 2 + 1);
      ++observations;
    }
  }
  EXPECT_EQ(observations, 12);  // 6 ops, 2 ranks
  EXPECT_GE(findings, 1);
  EXPECT_EQ(versions, 1);
}

TEST(Upstream, Seed000AgreesWithTheModel) {
  if (!have_venv()) GTEST_SKIP() << "no .venv/bin/python (bash .ci/install-deps.sh creates it)";
  test::CliResult r = run_cli("run " + kSeed000 + " --backend model,upstream");
  EXPECT_EQ(r.code, 1) << r.out;  // findings, no divergence
  EXPECT_EQ(r.out.find("divergences"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nupstream: torch 2.13.0"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fsdpsim
