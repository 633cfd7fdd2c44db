// The fsdpsim command line: exit codes and error messages, run as a process.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "properties/cli_run.hpp"

namespace {

using Result = fsdpsim::test::CliResult;

Result run(const std::string& args) { return fsdpsim::test::run_cli(args); }

std::string write(const std::string& name, const std::string& text) {
  std::string path = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_" + name;
  std::ofstream(path) << text;
  return path;
}

const char* kGood =
    "world 2\nlayer a 4 2\nadapter x r=2 alpha=2 targets=a\nfully_shard root reshard_after_forward=false\n---\n";

}  // namespace

TEST(Cli, UnknownOpExitsThreeWithFileLineColumn) {
  std::string f = write("bad_op.seq", std::string(kGood) + "eval\n  trian_step\n");
  Result r = run("run " + f);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find(f + ":7:3: unknown op 'trian_step'"), std::string::npos) << r.out;
}

TEST(Cli, RankOutOfRangeAfterWorldOverrideExitsThree) {
  std::string f = write("rank.seq", std::string(kGood) + "@1 zero_grad\n");
  EXPECT_EQ(run("run " + f).code, 0);
  Result r = run("run " + f + " --world 1");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find(f + ":6:1: rank @1 out of range (world 1)"), std::string::npos) << r.out;
}

TEST(Cli, UsageErrorsExitThree) {
  EXPECT_EQ(run("frobnicate").code, 3);
  EXPECT_EQ(run("run").code, 3);
  EXPECT_EQ(run("run x.seq --set nope=1").code, 3);
  Result r = run("run /nonexistent/x.seq");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("/nonexistent/x.seq: cannot open file"), std::string::npos);
  Result b = run("run x.seq --backend gpu");
  EXPECT_EQ(b.code, 3);
  EXPECT_NE(b.out.find("--backend expects model, real, upstream, both or a comma list of them"), std::string::npos) << b.out;
  EXPECT_EQ(run("run x.seq --backend model,model").code, 3);
  EXPECT_EQ(run("run x.seq --backend model,").code, 3);
  EXPECT_EQ(run("crosscheck --seed 1 --against model").code, 3);
  EXPECT_EQ(run("crosscheck --seed 1 --backends upstream").code, 3);
  EXPECT_EQ(run("run x.seq --ranks fibers").code, 3);
}

TEST(Cli, RunExitsOneOnFindingsAndZeroWhenClean) {
  std::string f = write("clean.seq", std::string(kGood) + "train_step\ntrain_step\n");
  Result clean = run("run " + f);
  EXPECT_EQ(clean.code, 0) << clean.out;
  EXPECT_NE(clean.out.find("findings: none"), std::string::npos);
  std::string g = write("finding.seq", std::string(kGood) + "eval\nsave_optimizer\n");
  Result finding = run("run " + g);
  EXPECT_EQ(finding.code, 1) << finding.out;
  EXPECT_NE(finding.out.find("S4 step 2 rank 0: save_optimizer raised KeyError: 0"), std::string::npos) << finding.out;
  EXPECT_EQ(run("run " + g + " --profile patched").code, 0);
  EXPECT_EQ(run("run " + g + " --set optimizer_ckpt_reshard=on").code, 0);
}

TEST(Cli, JsonPrintsOneObjectPerLine) {
  std::string f = write("json.seq", std::string(kGood) + "train_step\n");
  Result r = run("run " + f + " --json");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_EQ(r.out.rfind("{\"step\":1,\"rank\":0,\"op\":\"train_step\",\"status\":\"ok\",\"grads\":[\"x\"]", 0), 0u) << r.out;
}

TEST(Cli, CheckFailsOnAWrongExpectationAndPassesOnTheRightOne) {
  std::string bad = write("check_bad.seq", std::string(kGood) + "train_step expect grads={}\n");
  Result r = run("check " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(bad + ":6:19: step 1 rank 0: expected grads={}, got grads={x}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 1 failed"), std::string::npos);
  std::string good = write("check_good.seq", std::string(kGood) + "train_step expect grads={x}\n");
  EXPECT_EQ(run("check " + good).code, 0);
}

TEST(Cli, MainJobShowsSeed000UnderBothProfiles) {
  Result r = run("");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("S1 step 5 rank 0: expected gradients on {other}, got no_grad_fn"), std::string::npos);
  EXPECT_NE(r.out.find("patched   6    0         -"), std::string::npos) << r.out;
}

TEST(Cli, ACrashedRankExitsFourAndBothBackendsAgreeOtherwise) {
  std::string f = write("crash.seq", std::string(kGood) + "train_step\neval\nsave_optimizer\n");
  Result both = run("run " + f + " --backend both");
  EXPECT_EQ(both.code, 1) << both.out;  // the S4 finding, and no divergence
  EXPECT_EQ(both.out.find("divergences"), std::string::npos) << both.out;
  setenv("FSDPSIM_CRASH_RANK", "1", 1);
  Result crashed = run("run " + f + " --backend real --timeout 2000");
  unsetenv("FSDPSIM_CRASH_RANK");
  EXPECT_EQ(crashed.code, 4) << crashed.out;
  EXPECT_NE(crashed.out.find("real backend failed: rank 1 died (exit 9)"), std::string::npos) << crashed.out;
}

TEST(Cli, RandomIsReproducibleFromThePrintedSeed) {
  Result all = run("random --seed 40 --count 3");
  Result third = run("random --seed 42 --count 1");
  EXPECT_EQ(all.code, 0);
  EXPECT_NE(all.out.find(third.out), std::string::npos);
  EXPECT_EQ(run("random --count 3").code, 3);
}

TEST(Cli, CostPrintsPerRankPerAdapterAndBothBackendsAgree) {
  std::string f = write("cost.seq",
                        "world 2\nlayer lin0 8 8\nadapter a r=4 targets=lin0\nadapter b r=4 targets=lin0\n"
                        "fully_shard root reshard_after_forward=true\n---\ntrain_step\n");
  Result r = run("cost " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rank  owner  sharded bytes  all_gather bytes/step  reduce_scatter bytes/step  peak unsharded bytes"),
            std::string::npos) << r.out;
  // b is frozen: gathered (twice: forward, then backward after the reshard) but not reduced.
  EXPECT_NE(r.out.find("1     b      128            512                    0                          256"), std::string::npos)
      << r.out;
  Result both = run("cost " + f + " --backend both");
  EXPECT_EQ(both.code, 0) << both.out;
  EXPECT_NE(both.out.find("real backend: the same figures"), std::string::npos) << both.out;
  EXPECT_EQ(run("cost").code, 3);
}

// The upstream backend against the fake pool (properties/real_backend/fake_pool.py)
// replaying observation lines from a file.
std::string fake_pool_env(const std::string& obs, const std::string& extra = "") {
  return "FSDPSIM_PYTHON=python3 FSDPSIM_UPSTREAM_MODULE=fake_pool PYTHONPATH=" FSDPSIM_SOURCE_DIR
         "/properties/real_backend FAKE_POOL_OBS=" + obs + " " + extra + " ";
}

Result run_env(const std::string& env, const std::string& args) { return fsdpsim::test::run_cli(args, env); }

TEST(CliUpstream, ModelAndAFakePoolReplayingTheModelAgreeAndDifferOnAnAlteredField) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string seq = FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_patched_w2.seq";
  Result model = run("run " + seq + " --json");
  ASSERT_EQ(model.code, 0) << model.out;
  std::string same = write("upstream_same.jsonl", model.out);
  Result r = run_env(fake_pool_env(same), "run " + seq + " --backend model,upstream");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("backend model,upstream"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("upstream: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("divergences"), std::string::npos) << r.out;
  Result j = run_env(fake_pool_env(same), "run " + seq + " --backend upstream --json");
  EXPECT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("\n{\"upstream_versions\":{\"accelerate\":\"1.15.0\",\"peft\":\"0.21.2\",\"python\":\"3.11.7\","
                       "\"torch\":\"2.13.0+cpu\",\"transformers\":\"5.24.0\"}}\n"),
            std::string::npos)
      << j.out;
  EXPECT_EQ(j.out.substr(0, j.out.find("{\"upstream_versions\"")), model.out);

  // Step 4 rank 1's grads altered: a divergence naming the field, exit 2.
  std::string text = model.out;
  size_t at = text.find("{\"step\":4,\"rank\":1,");
  ASSERT_NE(at, std::string::npos);
  size_t g = text.find("\"grads\":[\"other\"]", at);
  ASSERT_NE(g, std::string::npos);
  text.replace(g, 17, "\"grads\":[]");
  std::string altered = write("upstream_altered.jsonl", text);
  Result d = run_env(fake_pool_env(altered), "run " + seq + " --backend model,upstream");
  EXPECT_EQ(d.code, 2) << d.out;
  EXPECT_NE(d.out.find("divergences (model vs upstream): 2\n  step 4 rank 1 (train_step): grads: {other} vs {}\n  finding on the upstream backend only: S1 step 4 rank 1"),
            std::string::npos)
      << d.out;
  // Three backends: the real one agrees with the model, the upstream one does not.
  Result three = run_env(fake_pool_env(altered), "run " + seq + " --backend upstream,real,model");
  EXPECT_EQ(three.code, 2) << three.out;
  EXPECT_NE(three.out.find("divergences (model vs upstream): 2"), std::string::npos) << three.out;
  EXPECT_EQ(three.out.find("divergences (model vs real)"), std::string::npos) << three.out;
  // check: the expectation fails on the upstream backend, and the file diverges.
  Result c = run_env(fake_pool_env(altered), "check " + seq + " --backend model,upstream");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_NE(c.out.find("  [upstream] " + seq + ":16:30: step 4 rank 1: expected grads={other}, got grads={}"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("[model]"), std::string::npos) << c.out;
  Result cs = run_env(fake_pool_env(same), "check " + seq + " --backend model,upstream");
  EXPECT_EQ(cs.code, 0) << cs.out;
  EXPECT_NE(cs.out.find("PASS " + seq), std::string::npos) << cs.out;
  EXPECT_NE(cs.out.find("upstream: torch 2.13.0+cpu"), std::string::npos) << cs.out;
  // A field the pool does not observe is not compared.
  Result skipped = run_env(fake_pool_env(altered, "FAKE_POOL_UNOBSERVED=optimizer_missing,grads"),
                           "run " + seq + " --backend model,upstream");
  EXPECT_EQ(skipped.code, 0) << skipped.out;
}

TEST(CliUpstream, PoolFailuresExitFour) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string seq = FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_patched_w2.seq";
  Result missing = run_env("FSDPSIM_PYTHON=/nonexistent/python ", "run " + seq + " --backend model,upstream");
  EXPECT_EQ(missing.code, 4) << missing.out;
  EXPECT_EQ(missing.out, "fsdpsim: upstream backend: no Python at /nonexistent/python; run `bash .ci/install-deps.sh` to create .venv\n");
  Result died = run_env(fake_pool_env("/dev/null", "FAKE_POOL_MODE=die"), "run " + seq + " --backend upstream");
  EXPECT_EQ(died.code, 4) << died.out;
  EXPECT_NE(died.out.find("fsdpsim: upstream backend: the pool exited during a run (exit 1): fake rank 1 died: boom"),
            std::string::npos)
      << died.out;
  Result broke = run_env(fake_pool_env("/dev/null", "FAKE_POOL_MODE=error_event"), "check " + seq + " --backend upstream");
  EXPECT_EQ(broke.code, 4) << broke.out;
  EXPECT_NE(broke.out.find("BROKE " + seq + ": upstream backend: rank 1 died (exit 1): boom"), std::string::npos) << broke.out;
}

// explore: bad input exits 3; a scope with findings exits 1 and writes one replayable file per class.
TEST(Cli, ExploreExitsThreeOnBadInputAndOneOnClasses) {
  EXPECT_EQ(run("explore").code, 3);
  Result bad = run("explore --builtin no_such_scenario");
  EXPECT_EQ(bad.code, 3);
  EXPECT_NE(bad.out.find("--builtin expects one of seed000_merged_raf_false"), std::string::npos) << bad.out;
  EXPECT_EQ(run("explore --builtin seed002_experts --ops frobnicate").code, 3);
  std::string f = write("explore.seq", kGood);
  EXPECT_EQ(run("explore " + f + " --builtin seed002_experts").code, 3);
  const std::string out = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_explore_out";
  Result r = run("explore " + f + " --depth 2 --ops eval,save_optimizer --out " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("S4 on save_optimizer"), std::string::npos) << r.out;
  Result replay = run("run " + out + "/explore_001_S4_save_optimizer.seq");
  EXPECT_EQ(replay.code, 1) << replay.out;
  EXPECT_NE(replay.out.find("S4 step 2 rank 0"), std::string::npos) << replay.out;
  std::remove((out + "/explore_001_S4_save_optimizer.seq").c_str());
  std::remove(out.c_str());  // the directory, now empty
}
