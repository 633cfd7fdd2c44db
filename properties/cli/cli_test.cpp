// The fsdpsim command line: exit codes and error messages, run as a process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <sstream>
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

// A misspelt command, flag or built-in name gets the nearest one, on one line;
// --help lists the built-in scenarios --builtin accepts.
TEST(CliMessages, TyposGetTheNearestNameAndHelpListsTheBuiltins) {
  Result c = run("explre");
  EXPECT_EQ(c.code, 3);
  EXPECT_NE(c.out.find("unknown command 'explre'; did you mean 'explore'?"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("usage:"), std::string::npos) << "a near command needs no whole usage: " << c.out;
  EXPECT_NE(run("frobnicate").out.find("usage:"), std::string::npos);  // nothing near: the usage
  Result f = run("run x.seq --backen model");
  EXPECT_EQ(f.code, 3);
  EXPECT_NE(f.out.find("unknown flag --backen for run; did you mean '--backend'?"), std::string::npos) << f.out;
  Result b = run("explore --builtin seed000_merged_raf_fals");
  EXPECT_EQ(b.code, 3);
  EXPECT_NE(b.out.find("did you mean 'seed000_merged_raf_false'?"), std::string::npos) << b.out;
  Result s = run("run x.seq --set set_adapter_reshar=patched");
  EXPECT_EQ(s.code, 3);
  EXPECT_NE(s.out.find("unknown switch 'set_adapter_reshar'; did you mean 'set_adapter_reshard'?"), std::string::npos) << s.out;
  for (const char* help : {"--help", "explore --help"}) {
    Result h = run(help);
    EXPECT_EQ(h.code, 0);
    EXPECT_NE(h.out.find("built-in scenarios"), std::string::npos) << help;
    for (const char* name : {"seed000_merged_raf_false", "b8_modules_to_save", "three_ranks_padding"})
      EXPECT_NE(h.out.find(name), std::string::npos) << help << " lacks " << name;
  }
}

// run's table fits 120 columns, long cells wrapped onto lines of their own; --wide prints a
// row a line.
TEST(Cli, RunTableFitsOneHundredTwentyColumnsUnlessWide) {
  const std::string seq = FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_merged_set_adapter_w2.seq";
  auto table = [](const std::string& out) {  // from the header row to the line after the last row
    const size_t from = out.find("step  rank"), to = out.find("\n\n", from);
    return out.substr(from, to - from);
  };
  Result fitted = run("run " + seq);
  EXPECT_EQ(fitted.code, 1) << fitted.out;
  std::istringstream in(table(fitted.out));
  for (std::string line; std::getline(in, line);) EXPECT_LE(line.size(), 120u) << line;
  EXPECT_NE(fitted.out.find("(long cells wrap to fit 120 columns: --wide prints a row a line)"), std::string::npos) << fitted.out;
  EXPECT_NE(fitted.out.find("missing_delta"), std::string::npos);
  Result wide = run("run " + seq + " --wide");
  EXPECT_EQ(wide.code, 1);
  EXPECT_NE(wide.out.find("lin0:[default]/S=missing_delta lin1:[default]/S=missing_delta"), std::string::npos) << wide.out;
  EXPECT_EQ(wide.out.find("long cells wrap"), std::string::npos);
  size_t longest = 0;
  std::istringstream w(table(wide.out));
  for (std::string line; std::getline(w, line);) longest = std::max(longest, line.size());
  EXPECT_GT(longest, 120u);
}

// Every command answers --help with its own usage lines and the exit codes, exit 0,
// without running anything; --version names the pinned upstream libraries.
TEST(Cli, EveryCommandHasHelpAndTheBinaryAVersion) {
  for (const char* cmd : {"hunt", "triage", "demo", "run", "check", "crosscheck", "merge-results", "report", "shrink",
                          "expect", "cost", "worker", "profiles", "export", "random", "explore", "bench"}) {
    Result r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(std::string("fsdpsim ") + cmd), std::string::npos) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("exit codes:"), std::string::npos) << cmd;
    EXPECT_EQ(r.out.find("fsdpsim explore") != std::string::npos, std::string(cmd) == "explore") << cmd << ": " << r.out;
  }
  Result b = run("check -h");
  EXPECT_NE(b.out.find("(B: model, real, upstream"), std::string::npos) << b.out;
  EXPECT_EQ(run("profiles --help").out.find("(B: model"), std::string::npos);
  Result v = run("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("fsdpsim ", 0), 0u) << v.out;
  EXPECT_NE(v.out.find("torch 2.13.0, peft 0.21.2, accelerate 1.15.0"), std::string::npos) << v.out;
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
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3);  // 2 observations, the trace hash
  EXPECT_EQ(r.out.rfind("{\"step\":1,\"rank\":0,\"op\":\"train_step\",\"status\":\"ok\",\"grads\":[\"x\"]", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n{\"trace_hash\":\""), std::string::npos) << r.out;
}

TEST(Cli, CheckFailsOnAWrongExpectationAndPassesOnTheRightOne) {
  std::string bad = write("check_bad.seq", std::string(kGood) + "train_step expect grads={}\n");
  Result r = run("check " + bad);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(bad + ":6:19: step 1 rank 0: expected grads={}, got grads={x}"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 passed, 1 failed expectations, 0 diverged, 0 broken runs, 0 bad input\n"), std::string::npos) << r.out;
  std::string good = write("check_good.seq", std::string(kGood) + "train_step expect grads={x}\n");
  EXPECT_EQ(run("check " + good).code, 0);
}

TEST(Cli, DemoShowsSeed000UnderBothProfiles) {
  Result r = run("demo");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("S1 step 5 rank 0: expected gradients on {other}, got no_grad_fn"), std::string::npos);
  EXPECT_NE(r.out.find("patched   6    0         -"), std::string::npos) << r.out;
}

TEST(Cli, ACrashedRankExitsFourAndBothBackendsAgreeOtherwise) {
  std::string f = write("crash.seq", std::string(kGood) + "train_step\neval\nsave_optimizer\n");
  // A generous join timeout for the run that must not fail: ranks of a sanitizer build on a loaded
  // machine took over the default 5 s to join (the crash below keeps its short one).
  Result both = run("run " + f + " --backend both --timeout 30000");
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
                       "\"torch\":\"2.13.0+cpu\",\"transformers\":\"5.24.0\"},\"type\":\"upstream_versions\"}\n"),
            std::string::npos)
      << j.out;
  auto without_hash = [](const std::string& out) { return out.substr(0, out.find("{\"trace_hash\"")); };
  EXPECT_EQ(without_hash(j.out), without_hash(model.out));

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
  // --json keeps the divergences and each backend's trace hash (they were dropped: exit 2 with no record).
  Result dj = run_env(fake_pool_env(altered), "run " + seq + " --backend model,upstream --json");
  EXPECT_EQ(dj.code, 2) << dj.out;
  EXPECT_NE(dj.out.find("\n{\"divergence\":\"step 4 rank 1 (train_step): grads: {other} vs {}\",\"first\":\"model\",\"other\":\"upstream\",\"type\":\"divergence\"}\n"),
            std::string::npos)
      << dj.out;
  EXPECT_NE(dj.out.find("\",\"backend\":\"model\",\"type\":\"trace_hash\"}\n{\"trace_hash\":\""), std::string::npos) << dj.out;
  // A pool answering with steps the sequence does not have: exit 4 naming it, not a crash
  // (shrink --divergence against this fake pool corrupted the heap in the spec).
  std::string one_op = write("upstream_one_op.seq", std::string(kGood) + "train_step\n");
  Result extra = run_env(fake_pool_env(same), "run " + one_op + " --backend model,upstream");
  EXPECT_EQ(extra.code, 4) << extra.out;
  EXPECT_NE(extra.out.find("fsdpsim: upstream backend: an observation for step 2 rank 0, but the sequence has 1 ops at world 2\n"),
            std::string::npos)
      << extra.out;
  // shrink --divergence keeps the first difference's op and field while it drops what it can
  // (here the layer lin1: the replayed observations still differ at step 4's grads).
  Result sd = run_env(fake_pool_env(altered), "shrink " + seq + " --divergence --backend model,upstream");
  EXPECT_EQ(sd.code, 2) << sd.out;
  EXPECT_NE(("\n" + sd.out).find("\n# shrunk from " + seq + " by fsdpsim shrink --divergence --backend model,upstream ("), std::string::npos) << sd.out;
  EXPECT_NE(sd.out.find("\n# divergence (train_step): grads\n"), std::string::npos) << sd.out;
  EXPECT_EQ(sd.out.find("layer lin1"), std::string::npos) << sd.out;
  Result agree = run_env(fake_pool_env(same), "shrink " + seq + " --divergence --backend model,upstream");
  EXPECT_EQ(agree.code, 3) << agree.out;
  EXPECT_NE(agree.out.find(seq + ": no divergence to shrink (model,upstream agree on it)"), std::string::npos) << agree.out;
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

// Several backends: the table says whose observations it shows, one line says which backends
// agree or differ (and what upstream leaves uncompared), and a trace hash that is not the
// model's says whose it is.
TEST(CliUpstream, SeveralBackendsSayWhichAgreeAndWhoseTableAndHashTheyShow) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string seq = FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_patched_w2.seq";
  Result model = run("run " + seq + " --json");
  ASSERT_EQ(model.code, 0) << model.out;
  const std::string model_hash = model.out.substr(model.out.find("{\"trace_hash\":\"") + 15, 16);
  std::string same = write("several_same.jsonl", model.out);
  Result r = run_env(fake_pool_env(same), "run " + seq + " --backend model,real,upstream");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\nobservations of the upstream backend; findings below: the model's, which the others are compared with\nstep  rank"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nbackends agree: model, real and upstream\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\ntrace hash " + model_hash + " (model, real and upstream alike)\n"), std::string::npos) << r.out;
  EXPECT_EQ(run("run " + seq).out.find("backends agree"), std::string::npos);  // one backend: no such line

  // A field upstream does not observe reads otherwise: not compared, so they agree, but the
  // hash shown (upstream's) is not the model's, and the line says so.
  std::string peak = model.out;
  const std::string from = "\"peak_unsharded_bytes\":{\"default\":1664", to = "\"peak_unsharded_bytes\":{\"default\":9";
  for (size_t at = 0; (at = peak.find(from, at)) != std::string::npos; at += to.size()) peak.replace(at, from.size(), to);
  std::string peak_file = write("several_peak.jsonl", peak);
  Result u = run_env(fake_pool_env(peak_file, "FAKE_POOL_UNOBSERVED=peak_unsharded"), "run " + seq + " --backend model,upstream");
  EXPECT_EQ(u.code, 0) << u.out;
  EXPECT_NE(u.out.find("\nbackends agree: model and upstream (not compared: peak_unsharded, which upstream does not observe)\n"),
            std::string::npos) << u.out;
  EXPECT_NE(u.out.find(" (the upstream backend's, whose observations the table shows; model " + model_hash + ")\n"), std::string::npos)
      << u.out;
  // Compared (no unobserved list), the same file differs from the model and from it only.
  // A generous join timeout: the real ranks of a sanitizer build on a loaded machine took over 5 s to join.
  Result d = run_env(fake_pool_env(peak_file), "run " + seq + " --backend model,real,upstream --timeout 30000");
  EXPECT_EQ(d.code, 2) << d.out;
  EXPECT_NE(d.out.find("\nbackends differ: upstream (12 divergences from model); model and real agree\n"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("; model " + model_hash + ", real " + model_hash + ")\n"), std::string::npos) << d.out;
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

// ---- issue 11: no silent loss, clear errors --------------------------------

namespace {

std::string temp_dir(const std::string& name) {
  std::string d = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace

// stdout to /dev/full, stderr to a file: the exit code and what stderr says.
Result run_to_full(const std::string& args) {
  std::string err = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_full.err";
  std::string cmd = std::string(FSDPSIM_BINARY_DIR) + "/fsdpsim " + args + " > /dev/full 2> " + err;
  int status = std::system(cmd.c_str());
  std::ifstream in(err);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(CliOutput, AFailedWriteIsExitFourNamingThePath) {
  std::string f = write("full.seq", std::string(kGood) + "train_step\n");
  Result e = run_to_full("expect " + f);
  EXPECT_EQ(e.code, 4) << e.out;
  EXPECT_EQ(e.out, "fsdpsim: cannot write standard output: No space left on device\n");
  Result r = run_to_full("random --seed 1 --count 200");  // more than one buffer: fails mid-run
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_EQ(r.out, "fsdpsim: cannot write standard output: No space left on device\n");
}

TEST(CliOutput, BadOutDirIsExitThreeBeforeAnythingRuns) {
  std::string file = write("not_a_dir", "x");
  Result r = run("random --seed 1 --count 2 --out " + file);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_EQ(r.out, "<command line>: --out " + file + ": not a directory\n");
  Result c = run("crosscheck --seed 1 --count 1 --backends model,model --out " + file);
  EXPECT_EQ(c.code, 3) << c.out;  // a usage error first: the backends
  Result x = run("crosscheck --seed 1 --count 1 --out " + file + "/sub");
  EXPECT_EQ(x.code, 3) << x.out;
  EXPECT_NE(x.out.find("<command line>: --out " + file + "/sub: cannot create it: " + file + " is not a directory"), std::string::npos) << x.out;
  EXPECT_EQ(x.out.find("crosscheck seed"), std::string::npos) << "ran before checking --out: " << x.out;
  std::string d = temp_dir("random_out");
  Result ok = run("random --seed 1 --count 2 --out " + d);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(std::filesystem::exists(d + "/random_000001.seq"));
}

TEST(CliMessages, ADirectoryOrUnreadableFileSaysWhy) {
  std::string d = temp_dir("run_dir");
  Result r = run("run " + d);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.out, d + ": is a directory (expected a .seq file; `check` takes directories)\n");
  Result m = run("run " + d + "/missing.seq");
  EXPECT_EQ(m.code, 3);
  EXPECT_EQ(m.out, d + "/missing.seq: cannot open file: No such file or directory\n");
}

TEST(CliCheck, ReportsEachBadPathAndGoesOn) {
  std::string d = temp_dir("check_tree");
  std::filesystem::create_directories(d + "/empty");
  std::filesystem::create_directories(d + "/locked");
  std::ofstream(d + "/good.seq") << kGood << "train_step expect grads={x}\n";
  std::ofstream(d + "/locked/hidden.seq") << kGood;
  std::filesystem::permissions(d + "/locked", std::filesystem::perms::none);
  bool root = std::system(("test -r " + d + "/locked").c_str()) == 0;  // root reads anything
  Result r = run("check " + d + " " + d + "/empty ''");
  std::filesystem::permissions(d + "/locked", std::filesystem::perms::owner_all);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("PASS " + d + "/good.seq"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BAD  " + d + "/empty: no .seq files in this directory\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BAD  <command line>: an empty path argument\n"), std::string::npos) << r.out;
  if (!root) {
    EXPECT_NE(r.out.find("BAD  " + d + "/locked: cannot read directory: Permission denied\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1 passed, 0 failed expectations, 0 diverged, 0 broken runs, 3 bad input\n"), std::string::npos) << r.out;
  }
}

TEST(CliCrosscheck, EveryRunBrokenIsNotACleanResult) {
  setenv("FSDPSIM_CRASH_RANK", "1", 1);
  Result r = run("crosscheck --seed 5 --count 2 --timeout 2000 --out " + temp_dir("cc_broken"));
  unsetenv("FSDPSIM_CRASH_RANK");
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("findings (model, 0 completed)  unknown: no sequence completed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("none"), std::string::npos) << r.out;
}

// Runs `fsdpsim ARGS > DIR/log`, waits until the log shows `ready` (at most
// 120 s), sends SIG, and returns the exit status and the log.
Result interrupt_when(const std::string& args, const std::string& dir, const std::string& ready, const char* sig) {
  std::string cmd = "bash -c '" FSDPSIM_BINARY_DIR "/fsdpsim " + args + " > " + dir + "/log 2>&1 & p=$!; " +
                    "for i in $(seq 1200); do grep -q \"" + ready + "\" " + dir + "/log && break; sleep 0.1; done; kill -" + sig +
                    " $p; wait $p; echo $? > " + dir + "/rc'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream rc_in(dir + "/rc"), log_in(dir + "/log");
  int rc = -1;
  rc_in >> rc;
  return {rc, std::string((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>())};
}

// A signal stops the loop after the sequence in progress: the partial summary
// reaches the (redirected, so fully buffered) output and the exit is 128+signal.
TEST(CliCrosscheck, InterruptedRunKeepsItsPartialSummary) {
  for (const char* sig : {"INT", "TERM", "HUP"}) {
    std::string d = temp_dir(std::string("cc_sig_") + sig);
    Result r = interrupt_when("crosscheck --seed 1 --count 1000000 --out " + d, d, "crosscheck: ", sig);
    EXPECT_EQ(r.code, std::string(sig) == "INT" ? 130 : std::string(sig) == "TERM" ? 143 : 129) << r.out;
    EXPECT_NE(r.out.find(" of 1000000\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("interrupted "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("findings (model, "), std::string::npos) << r.out;
  }
}

// `check > log` stopped by SIGTERM: the log keeps every result line and the summary.
TEST(CliCheck, InterruptedCheckKeepsItsOutput) {
  std::string d = temp_dir("check_sig");
  Result r = interrupt_when("check " FSDPSIM_SOURCE_DIR "/corpus/regressions --backend real", d, "PASS ", "TERM");
  EXPECT_EQ(r.code, 143) << r.out;
  // The summary closes the log: "..., 0 bad input; interrupted by ..." when the signal came between
  // files, "..., 0 bad input, 1 interrupted; interrupted by ..." when it cut one short.
  EXPECT_NE(r.out.find(" bad input"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; interrupted by signal 15 after "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS "), std::string::npos) << r.out;
}

// The hunt, confirmed on the real backend only (no upstream Python): 0 when
// every class is confirmed, 1 with --fail-on-new (the E = 1 ParamWrapper
// classes have no fix), 3 on bad flags; it writes a .seq per class and summary.json.
TEST(Cli, HuntExitCodesAndOutputs) {
  const std::string out = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_hunt";
  std::filesystem::remove_all(out);
  const std::string env = "FSDPSIM_PYTHON=/nonexistent ";
  Result r = fsdpsim::test::run_cli("hunt --seconds 2 --seed 3 --out " + out, env);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("upstream: not installed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flag-on-copy/set_adapter "), std::string::npos) << r.out;  // seed 000's root cause, one row
  EXPECT_NE(r.out.find(" root causes: "), std::string::npos) << r.out;                // counts per verdict first
  EXPECT_NE(r.out.find("hunt: fuzz: "), std::string::npos);  // progress on stderr
  EXPECT_TRUE(std::filesystem::exists(out + "/summary.json"));
  int seqs = 0;
  for (const auto& e : std::filesystem::directory_iterator(out)) seqs += e.path().extension() == ".seq";
  EXPECT_GT(seqs, 3);
  Result strict = fsdpsim::test::run_cli("hunt --seconds 2 --seed 3 --fail-on-unreported --out " + out, env);
  EXPECT_EQ(strict.code, 1) << strict.out;
  Result alias = fsdpsim::test::run_cli("hunt --seconds 2 --seed 3 --fail-on-new --out " + out, env);  // the old name, said so
  EXPECT_EQ(alias.code, 1) << alias.out;
  EXPECT_NE(alias.out.find("--fail-on-new is now --fail-on-unreported"), std::string::npos) << alias.out;
  // The regression column: B2's class (every built-in scenario's own lifecycle is triaged
  // whatever the budget) is kept in the corpus; against an empty corpus every class is uncatalogued.
  Result cat = fsdpsim::test::run_cli("hunt --seconds 2 --seed 3 --corpus " FSDPSIM_SOURCE_DIR "/corpus/regressions --fail-on-uncatalogued --out " + out, env);
  {
    std::ifstream js(out + "/summary.json");
    std::stringstream ss;
    ss << js.rdbuf();
    EXPECT_NE(ss.str().find(FSDPSIM_SOURCE_DIR "/corpus/regressions/mixed_dtype_adapters_trainable_at_lazy_init.seq"), std::string::npos);
    EXPECT_NE(ss.str().find("\"root_cause\":\"mixed-adapter-dtypes-in-one-group\""), std::string::npos);
  }
  const std::string empty = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_hunt_empty_corpus";
  std::filesystem::create_directories(empty);
  Result none = fsdpsim::test::run_cli("hunt --seconds 1 --seed 3 --corpus " + empty + " --fail-on-uncatalogued --out " + out, env);
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_EQ(fsdpsim::test::run_cli("hunt --seconds 1 --seed 3 --corpus " + empty + " --out " + out, env).code, 0);
  EXPECT_EQ(run("hunt --corpus /nonexistent/corpus").code, 3);
  std::filesystem::remove_all(empty);
  EXPECT_EQ(run("hunt --seconds 0").code, 3);
  EXPECT_EQ(run("hunt --profile nope").code, 3);
  EXPECT_EQ(run("hunt extra").code, 3);
  std::filesystem::remove_all(out);
}

TEST(Cli, TriageCheckComparesSignatureLines) {
  std::string good = write("triage_good.seq", "# signature: S4:key_error | eval(S) *(U) | root_raf=false\n" + std::string(kGood) + "eval\nsave_optimizer\n");
  Result r = run("triage --check " + good);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(", removed by optimizer_ckpt_reshard=on"), std::string::npos) << r.out;  // the verdict word: cli_words_test
  std::string stale = write("triage_stale.seq", "# signature: S4:save_optimizer:key_error\n" + std::string(kGood) + "eval\nsave_optimizer\n");
  Result s = run("triage --check " + stale);
  EXPECT_EQ(s.code, 1) << s.out;
  EXPECT_NE(s.out.find("triage computes 'S4:key_error | eval(S) *(U) | root_raf=false'"), std::string::npos) << s.out;
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

// explore --svg on a graph over the drawing cap (20 552 states; the adapters' order and the save
// count are part of the key): the drawing keeps the paths to
// the findings, each finding state labelled, with a legend; a bad --svg path is exit 3 before
// the search.
TEST(Cli, ExploreSvgOverTheCapDrawsThePathsToTheFindings) {
  if (std::system("dot -V > /dev/null 2>&1") != 0) GTEST_SKIP() << "Graphviz dot not installed";
  Result bad = run("explore --builtin seed000_merged_raf_false --depth 5 --svg /nonexistent/dir/out.svg");
  EXPECT_EQ(bad.code, 3) << bad.out;
  EXPECT_EQ(bad.out.find("explore: "), std::string::npos) << "searched before checking --svg: " << bad.out;
  const std::string svg = std::string(FSDPSIM_BINARY_DIR) + "/cli_test_explore.svg";
  std::remove(svg.c_str());
  Result r = run("explore --builtin seed000_merged_raf_false --depth 5 --quiet --svg " + svg);
  EXPECT_EQ(r.code, 1) << r.out;
  const size_t at = r.out.find("\ndrew ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const int drawn = std::stoi(r.out.substr(at + 6));
  EXPECT_NE(r.out.find(" of 20552 states (over 3000: the paths from the initial state to each finding class) to " + svg),
            std::string::npos) << r.out;
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  // Graphviz writes each node as <g id="nodeN" class="node"><title>NAME</title>, each label line as <text>.
  int states = 0, legend = 0, red = 0;
  for (size_t p = text.find("class=\"node\""); p != std::string::npos; p = text.find("class=\"node\"", p + 1)) {
    const size_t t = text.find("<title>", p) + 7;
    const std::string name = text.substr(t, text.find("</title>", t) - t);
    const std::string node = text.substr(p, text.find("</g>", p) - p);
    if (name.rfind("legend_", 0) == 0) {
      ++legend;
      continue;
    }
    ++states;
    if (node.find("fill=\"#f4a6a6\"") == std::string::npos) continue;
    ++red;
    EXPECT_NE(node.find(" on "), std::string::npos) << "a red state without its finding: " << node;
  }
  EXPECT_EQ(states, drawn);
  EXPECT_GT(red, 60);  // 65 classes, some sharing a state
  EXPECT_EQ(legend, 7);
  EXPECT_NE(text.find("<title>cluster_legend</title>"), std::string::npos);
  EXPECT_NE(text.find(">S6 on save_adapters: lin#.lora_A.default save...</text>"), std::string::npos);
  EXPECT_NE(text.find("only the paths from the"), std::string::npos);
  std::remove(svg.c_str());
}
