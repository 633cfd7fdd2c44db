// The fsdpsim command line: exit codes and error messages, run as a process.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int code;
  std::string out;
};

Result run(const std::string& args) {
  std::string cmd = std::string(FSDPSIM_BINARY_DIR) + "/fsdpsim " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

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
  EXPECT_NE(b.out.find("--backend expects model, real or both"), std::string::npos);
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
