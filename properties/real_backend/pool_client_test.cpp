// The upstream pool's client against a fake pool (fake_pool.py, plain
// python3): the ready line, runs, every way the pool can fail, and that
// nothing it started outlives it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "real_backend/upstream/pool_client.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim::upstream {
namespace {

// One set of files per test process: ctest -j2 runs two of these tests at once.
const std::string kDir = std::string(FSDPSIM_BINARY_DIR) + "/pool_client_test_" + std::to_string(::getpid()) + "_";

class PoolClient : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
    ::setenv("PYTHONPATH", FSDPSIM_SOURCE_DIR "/properties/real_backend", 1);
    for (const char* v : {"FAKE_POOL_MODE", "FAKE_POOL_OBS", "FAKE_POOL_UNOBSERVED", "FAKE_POOL_PIDFILE", "FAKE_POOL_LOG"})
      ::unsetenv(v);
    std::remove((kDir + "log").c_str());
  }
  void TearDown() override {
    for (const char* f : {"log", "obs.jsonl", "bad.jsonl", "pids"}) std::remove((kDir + f).c_str());
  }
  static UpstreamOptions fake(std::chrono::milliseconds startup = std::chrono::milliseconds(20000)) {
    UpstreamOptions o;
    o.python = "python3";
    o.module = "fake_pool";
    o.startup = startup;
    o.rank_timeout_ms = 1234;
    return o;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model's observations of a corpus file, written as the pool's JSON lines.
std::vector<Observation> model_obs(const std::string& path_out, std::string* seq_text) {
  SeqFile f = parse_seq_file(FSDPSIM_SOURCE_DIR "/corpus/regressions/seed000_merged_set_adapter_w2.seq");
  *seq_text = print_seq(f);
  RunResult r = run_checked(f);
  std::ofstream out(path_out);
  for (const auto& o : r.observations) {
    print_json(out, o);
    out << "\n";
  }
  out << "{\"finding\":\"S1\",\"step\":5,\"rank\":0,\"text\":\"a finding line the fake skips\"}\n";
  return r.observations;
}

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// Processes whose parent is this test process.
int children() {
  int n = 0;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("PPid:", 0) == 0 && std::atoi(line.c_str() + 5) == ::getpid()) ++n;
  }
  ::closedir(d);
  return n;
}

// Every pid the fake wrote is gone (rank children are reaped by init: allow a moment).
void expect_all_gone(const std::string& pidfile) {
  std::vector<pid_t> pids;
  std::ifstream in(pidfile);
  for (pid_t p; in >> p;) pids.push_back(p);
  ASSERT_GE(pids.size(), 2u);
  for (int i = 0; i < 200; ++i) {
    bool any = false;
    for (pid_t p : pids) any = any || alive(p);
    if (!any && children() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " outlived the pool";
  EXPECT_EQ(children(), 0);
}

TEST_F(PoolClient, ReadyLineGivesVersionsAndUnobserved) {
  ::setenv("FAKE_POOL_UNOBSERVED", "grads,param", 1);
  ::setenv("FAKE_POOL_LOG", (kDir + "log").c_str(), 1);
  UpstreamPool pool(fake());
  std::string err;
  ASSERT_TRUE(pool.start(2, &err)) << err;
  EXPECT_EQ(pool.versions().at("torch"), "2.13.0+cpu");
  EXPECT_EQ(pool.versions().at("python"), "3.11.7");
  EXPECT_EQ(pool.versions_line(), "upstream: torch 2.13.0+cpu, peft 0.21.2, accelerate 1.15.0, transformers 5.24.0");
  EXPECT_EQ(pool.unobserved(), (std::vector<std::string>{"grads", "param"}));
  pool.stop();
  EXPECT_NE(read_file(kDir + "log").find("argv --world 2 --timeout-ms 1234"), std::string::npos) << read_file(kDir + "log");
}

TEST_F(PoolClient, RunReturnsTheObservationsAndSendsTheSeqText) {
  std::string seq;
  std::vector<Observation> want = model_obs(kDir + "obs.jsonl", &seq);
  ::setenv("FAKE_POOL_OBS", (kDir + "obs.jsonl").c_str(), 1);
  ::setenv("FAKE_POOL_LOG", (kDir + "log").c_str(), 1);
  UpstreamPool pool(fake());
  ASSERT_TRUE(pool.start(2));
  pid_t pid = pool.pid();
  for (int i = 0; i < 2; ++i) {  // the pool is reused
    UpstreamResult r = pool.run(seq);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_FALSE(r.restarted);
    EXPECT_EQ(r.prepared_by, "ram_efficient");  // the done event's prepare path, for crosscheck's summary
    EXPECT_TRUE(r.obs == want);
  }
  EXPECT_EQ(pool.pid(), pid);
  EXPECT_TRUE(pool.start(2));  // same world: the same pool
  EXPECT_EQ(pool.pid(), pid);
  ASSERT_TRUE(pool.start(1));  // another world: a new one
  EXPECT_NE(pool.pid(), pid);
  EXPECT_EQ(pool.world(), 1);
  pool.stop();
  std::string log = read_file(kDir + "log");
  std::ostringstream quoted;
  print_json_string(quoted, seq);
  EXPECT_NE(log.find("request {\"cmd\":\"run\",\"seq\":" + quoted.str() + "}"), std::string::npos) << log;
  EXPECT_NE(log.find("request {\"cmd\":\"quit\"}"), std::string::npos) << log;
}

TEST_F(PoolClient, GarbageLineIsAnErrorAndTheNextRunStartsAFreshPool) {
  std::string seq;
  model_obs(kDir + "obs.jsonl", &seq);
  ::setenv("FAKE_POOL_OBS", (kDir + "obs.jsonl").c_str(), 1);
  ::setenv("FAKE_POOL_MODE", "garbage", 1);
  UpstreamPool pool(fake());
  ASSERT_TRUE(pool.start(2));
  pid_t pid = pool.pid();
  UpstreamResult r = pool.run(seq);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("upstream backend: unreadable line from the pool"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("'this is not json'"), std::string::npos) << r.error;
  EXPECT_FALSE(pool.running());
  ::unsetenv("FAKE_POOL_MODE");
  UpstreamResult again = pool.run(seq);
  EXPECT_TRUE(again.ok) << again.error;
  EXPECT_NE(pool.pid(), pid);
}

TEST_F(PoolClient, BadObservationIsAnErrorNamingTheField) {
  std::string seq;
  model_obs(kDir + "obs.jsonl", &seq);
  std::ofstream(kDir + "bad.jsonl") << "{\"step\":1,\"rank\":0,\"op\":\"eval\",\"status\":\"exploded\"}\n";
  ::setenv("FAKE_POOL_OBS", (kDir + "bad.jsonl").c_str(), 1);
  UpstreamPool pool(fake());
  UpstreamResult r = (pool.start(2), pool.run(seq));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("bad observation from the pool (status: expected one of ok,"), std::string::npos) << r.error;
}

TEST_F(PoolClient, PoolThatExitsMidRunIsAnErrorWithItsLastStderrLine) {
  std::string seq;
  model_obs(kDir + "obs.jsonl", &seq);
  ::setenv("FAKE_POOL_OBS", (kDir + "obs.jsonl").c_str(), 1);
  ::setenv("FAKE_POOL_MODE", "die", 1);
  UpstreamPool pool(fake());
  ASSERT_TRUE(pool.start(2));
  UpstreamResult r = pool.run(seq);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "upstream backend: the pool exited during a run (exit 1): fake rank 1 died: boom");
  EXPECT_EQ(r.error.find('\n'), std::string::npos);
}

TEST_F(PoolClient, ErrorEventIsAnError) {
  ::setenv("FAKE_POOL_MODE", "error_event", 1);
  UpstreamPool pool(fake());
  ASSERT_TRUE(pool.start(2));
  UpstreamResult r = pool.run("world 2\n---\neval\n");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "upstream backend: rank 1 died (exit 1): boom");
  EXPECT_FALSE(pool.running());
}

TEST_F(PoolClient, MissingPythonNamesTheInstallCommand) {
  UpstreamOptions o = fake();
  o.python = "/nonexistent/.venv/bin/python";
  UpstreamPool pool(o);
  std::string err;
  EXPECT_FALSE(pool.start(2, &err));
  EXPECT_EQ(err, "upstream backend: no Python at /nonexistent/.venv/bin/python; run `bash .ci/install-deps.sh` to create .venv");
  UpstreamResult r = pool.run("world 2\n---\neval\n");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("bash .ci/install-deps.sh"), std::string::npos);
}

TEST_F(PoolClient, PoolThatExitsBeforeReadyNamesItsErrorAndTheInstallCommand) {
  ::setenv("FAKE_POOL_MODE", "exit_early", 1);
  UpstreamPool pool(fake());
  std::string err;
  EXPECT_FALSE(pool.start(2, &err));
  EXPECT_NE(err.find("exited before it was ready (exit 1): ModuleNotFoundError: No module named 'peft'"), std::string::npos) << err;
  EXPECT_NE(err.find("; run `bash .ci/install-deps.sh` to create .venv"), std::string::npos) << err;
}

TEST_F(PoolClient, NoReadyLineWithinTheDeadlineIsAnError) {
  ::setenv("FAKE_POOL_MODE", "no_ready", 1);
  ::setenv("FAKE_POOL_PIDFILE", (kDir + "pids").c_str(), 1);
  UpstreamPool pool(fake(std::chrono::milliseconds(1500)));
  std::string err;
  EXPECT_FALSE(pool.start(2, &err));
  EXPECT_NE(err.find("no ready line from `"), std::string::npos) << err;
  EXPECT_EQ(err.find("bash .ci/install-deps.sh"), std::string::npos) << err;  // slow is not a broken .venv
  expect_all_gone(kDir + "pids");
}

TEST_F(PoolClient, NothingOutlivesThePool) {
  ::setenv("FAKE_POOL_PIDFILE", (kDir + "pids").c_str(), 1);
  {
    UpstreamPool pool(fake());
    ASSERT_TRUE(pool.start(3));
    EXPECT_GE(children(), 1);
  }
  expect_all_gone(kDir + "pids");
}

TEST_F(PoolClient, AStubbornPoolIsKilledAfterItsCleanupTimeAndTwoSeconds) {
  ::setenv("FAKE_POOL_PIDFILE", (kDir + "pids").c_str(), 1);
  ::setenv("FAKE_POOL_MODE", "stubborn", 1);
  auto t0 = std::chrono::steady_clock::now();
  {
    UpstreamOptions opt = fake();
    opt.cleanup = std::chrono::milliseconds(1000);  // then SIGTERM, which it ignores, and 2 s
    UpstreamPool pool(opt);
    ASSERT_TRUE(pool.start(2));
    t0 = std::chrono::steady_clock::now();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 2.9);
  EXPECT_LT(s, 5.0);
  expect_all_gone(kDir + "pids");
}

TEST(DiffFieldIn, MatchesNamesAndIndexedPrefixes) {
  std::vector<std::string> skip = {"grads", "param", "layer[1]"};
  EXPECT_TRUE(diff_field_in("grads: {a} vs {}", skip));
  EXPECT_TRUE(diff_field_in("param[3]: x vs y", skip));
  EXPECT_TRUE(diff_field_in("layer[1]: x vs y", skip));
  EXPECT_FALSE(diff_field_in("layer[0]: x vs y", skip));
  EXPECT_FALSE(diff_field_in("group[0]: x vs y", skip));
  EXPECT_FALSE(diff_field_in("grads_extra: x vs y", skip));
  EXPECT_FALSE(diff_field_in("status: ok vs hang", {}));
}

}  // namespace
}  // namespace fsdpsim::upstream
