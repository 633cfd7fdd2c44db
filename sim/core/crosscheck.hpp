// Runs a sequence on one or more backends (the model, the real libtorch
// backend, the upstream Python pool) and compares each with the first one op
// by op and rank by rank.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/spec/spec_checks.hpp"
#include "model/vocab/seq.hpp"
#include "real_backend/launcher.hpp"
#include "real_backend/upstream/pool_client.hpp"

namespace fsdpsim {

enum class Backend { Model, Real, Upstream };
const char* backend_name(Backend b);  // "model", "real", "upstream"
using BackendList = std::vector<Backend>;
extern const BackendList kModelAndReal;  // `both`

// "model", "real", "upstream", "both" (model,real) or a comma list of distinct
// backends ("model,upstream", "real,upstream,model"). The model, when listed,
// comes first: the others are compared with the first. False with *error.
bool parse_backends(const std::string& text, BackendList* out, std::string* error);
std::string backends_text(const BackendList& b);  // "model,upstream"
// Why the C++ backend (real) cannot run the scenario, with the position of the line that asks for
// it in *at; "" when it can. Every command that picks that backend refuses such a file (exit 3).
std::string real_backend_refusal(const Scenario& s, SourcePos* at);
// Why the upstream backend cannot run the scenario (a `model` scenario, not built there yet), as above.
std::string upstream_refusal(const Scenario& s, SourcePos* at);
// The same for a whole file: the scenario, then its ops (save_model / load_model).
std::string real_backend_refusal(const SeqFile& f, SourcePos* at);
// Why backend b cannot run f (real_backend_refusal, upstream_refusal; the model runs every file here), as above.
std::string backend_refusal(const SeqFile& f, Backend b, SourcePos* at);
// Why the model refuses a scenario (DoRA on a 4-bit layer), with where; "" when it runs it.
std::string model_refusal(const Scenario& s, SourcePos* at);
// The same for a whole file: the scenario, then a merge_and_unload beyond what the model covers.
std::string model_refusal(const SeqFile& f, SourcePos* at);
// The backends that run f: all of them, or the two or more left where others refuse the scenario
// (real_backend_refusal, upstream_refusal; *skipped then says so).
BackendList runnable_backends(const SeqFile& f, const BackendList& backends, std::string* skipped);
std::string backend_who(Backend b);             // "model", "real backend", "upstream backend"

// One backend's run of the sequence.
struct SingleRun {
  Backend backend = Backend::Model;
  std::vector<Observation> observations;
  std::vector<Finding> findings;
  uint64_t trace_hash = 0;
  std::string prepared_by;  // the upstream backend's prepare path (UpstreamResult::prepared_by); "" for the others
};

// The divergences between the first backend and another.
struct Comparison {
  Backend first = Backend::Model;
  Backend other = Backend::Real;
  std::vector<std::string> divergences;  // "step 5 rank 1 (train_step): grads: {other} vs {}"
  std::vector<std::string> unjudged;     // the other backend's fields its values could not settle (settle_unjudged)
};

struct BackendRun {
  std::vector<SingleRun> runs;  // one per backend, in the order compared (the first is the reference)
  std::vector<Observation> observations;  // the last backend's
  std::vector<Finding> findings;          // the first backend's
  std::vector<std::string> divergences;   // every comparison's, in order
  std::vector<std::string> unjudged;      // every comparison's unjudged fields: neither agreement nor divergence
  std::vector<Comparison> comparisons;    // one per backend after the first
  uint64_t trace_hash = 0;                // the last backend's
  bool infra_failure = false;
  std::string infra_message;  // "real backend failed: ..." or "upstream backend: ..."
  bool used_upstream = false;
  std::string upstream_prepared_by;  // the upstream run's prepare path, when upstream ran (SingleRun::prepared_by)
  std::string skipped;  // set: a backend of three could not run the scenario (why, and which two were compared)
};

// Keeps one pool of real ranks per world size, and one upstream pool per
// world size (each started on first use), reused across sequences: a corpus
// mixes worlds, and an upstream pool's start (torch and PEFT imported in every
// rank) costs seconds where one of its runs costs tens of milliseconds. At most
// kUpstreamRanks upstream ranks live at once: a world that would pass it stops
// the pools used least recently first.
class RealPools {
 public:
  static constexpr int kUpstreamRanks = 10;  // worlds 1-4 side by side (~0.35 GB a rank)
  RealPools(real::RankMode mode, std::chrono::milliseconds timeout) : mode_(mode), timeout_(timeout) {}
  real::RealRanks& get(int world);
  upstream::UpstreamPool& upstream(int world);  // not started yet when new
  bool upstream_started() const { return !upstream_.empty(); }
  // From any pool that has said them (every pool runs the same Python).
  std::vector<std::string> upstream_unobserved() const;
  std::map<std::string, std::string> upstream_versions() const;
  std::string upstream_versions_line() const;
  void stop_upstream();
  // The Python the upstream pools started from now on run (a release set's, --upstream);
  // empty: UpstreamOptions' default (.venv's).
  void set_upstream_python(const std::string& python) { upstream_python_ = python; }
  // Upstream pools started (and restarted) so far, the pools stopped to stay under
  // kUpstreamRanks included, and the seconds they took to get ready.
  int upstream_starts() const;
  double upstream_start_seconds() const;  // every upstream pool, in the calling thread (PR_SET_PDEATHSIG names it)

 private:
  const upstream::UpstreamPool* upstream_spoken() const;
  real::RankMode mode_;
  std::chrono::milliseconds timeout_;
  std::string upstream_python_;
  std::vector<std::unique_ptr<real::RealRanks>> pools_;
  std::vector<std::unique_ptr<upstream::UpstreamPool>> upstream_;  // most recently used last
  int retired_starts_ = 0;
  double retired_start_seconds_ = 0;
};

// Each backend runs the sequence twice (S8) unless !twice, and is
// spec-checked; every backend after the first is compared with the first,
// skipping the fields the upstream pool cannot observe.
BackendRun run_backend(const SeqFile& f, const BackendList& backends, RealPools& pools, bool twice = true);

// Field-by-field differences, "step 5 rank 1 (train_step): grads: {other} vs {}",
// leaving out the diffs of the fields in `skip` (observation_diff's names;
// "param" also skips "param[3]").
std::vector<std::string> compare_observations(const std::vector<Observation>& first, const std::vector<Observation>& other,
                                              const std::string& first_who = "model",
                                              const std::string& other_who = "real backend",
                                              const std::vector<std::string>& skip = {});

}  // namespace fsdpsim
