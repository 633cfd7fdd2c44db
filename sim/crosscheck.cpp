#include "sim/crosscheck.hpp"

#include <algorithm>

#include "sim/simulator.hpp"

namespace fsdpsim {

real::RealRanks& RealPools::get(int world) {
  for (auto& p : pools_)
    if (p->world() == world) return *p;
  pools_.push_back(std::make_unique<real::RealRanks>(world, mode_, timeout_));
  return *pools_.back();
}

std::vector<std::string> compare_observations(const std::vector<Observation>& model, const std::vector<Observation>& real) {
  std::vector<std::string> out;
  size_t i = 0, j = 0;
  auto key = [](const Observation& o) { return std::make_pair(o.step, o.rank); };
  while (i < model.size() || j < real.size()) {
    if (j >= real.size() || (i < model.size() && key(model[i]) < key(real[j]))) {
      out.push_back("step " + std::to_string(model[i].step) + " rank " + std::to_string(model[i].rank) + " (" + model[i].op +
                    "): observed by the model only (" + status_name(model[i].status) + ")");
      ++i;
      continue;
    }
    if (i >= model.size() || key(real[j]) < key(model[i])) {
      out.push_back("step " + std::to_string(real[j].step) + " rank " + std::to_string(real[j].rank) + " (" + real[j].op +
                    "): observed by the real backend only (" + status_name(real[j].status) + ")");
      ++j;
      continue;
    }
    for (const auto& d : observation_diff(model[i], real[j]))
      out.push_back("step " + std::to_string(model[i].step) + " rank " + std::to_string(model[i].rank) + " (" + model[i].op + "): " + d);
    ++i, ++j;
  }
  return out;
}

namespace {

BackendRun run_real_checked(const SeqFile& f, RealPools& pools, bool twice) {
  BackendRun out;
  real::RealRanks& ranks = pools.get(f.scenario.world);
  real::RealResult first = ranks.run(f);
  if (first.infra_failure) {
    out.infra_failure = true;
    out.infra_message = first.infra_message;
    return out;
  }
  out.observations = std::move(first.observations);
  out.trace_hash = observations_hash(out.observations);
  out.findings = check_spec(f, out.observations);
  if (!twice) return out;
  real::RealResult second = ranks.run(f);
  if (second.infra_failure) {
    out.infra_failure = true;
    out.infra_message = second.infra_message;
    return out;
  }
  if (observations_hash(second.observations) != out.trace_hash) {
    auto d = compare_observations(out.observations, second.observations);
    out.findings.push_back({"S8", 0, -1, "S8: two real runs of the same sequence differ: " + (d.empty() ? std::string("?") : d[0])});
  }
  return out;
}

}  // namespace

BackendRun run_backend(const SeqFile& f, Backend b, RealPools& pools, bool twice) {
  if (b == Backend::Real) return run_real_checked(f, pools, twice);
  RunResult model = run_checked(f);
  BackendRun out;
  out.observations = model.observations;
  out.findings = model.findings;
  out.trace_hash = model.trace_hash;
  if (b == Backend::Model) return out;
  BackendRun real = run_real_checked(f, pools, twice);
  if (real.infra_failure) return real;
  out.model_observations = std::move(out.observations);
  out.observations = real.observations;
  out.divergences = compare_observations(out.model_observations, real.observations);
  for (const auto& fd : real.findings)
    if (std::find(out.findings.begin(), out.findings.end(), fd) == out.findings.end())
      out.divergences.push_back("finding on the real backend only: " + fd.text);
  for (const auto& fd : out.findings)
    if (std::find(real.findings.begin(), real.findings.end(), fd) == real.findings.end())
      out.divergences.push_back("finding on the model only: " + fd.text);
  return out;
}

}  // namespace fsdpsim
