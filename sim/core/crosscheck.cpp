#include "sim/core/crosscheck.hpp"

#include "model/vocab/op_rules.hpp"
#include "model/vocab/enum_names.hpp"
#include "sim/core/value_blind.hpp"

#include <algorithm>

#include "model/vocab/model_lowering.hpp"
#include "model/vocab/module_tree.hpp"
#include "model/vocab/profile.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {

const BackendList kModelAndReal = {Backend::Model, Backend::Real};

const char* backend_name(Backend b) { return enum_names<Backend>("model", "real", "upstream")[b]; }

bool parse_backends(const std::string& text, BackendList* out, std::string* error) {
  if (text == "both") {
    *out = kModelAndReal;
    return true;
  }
  BackendList list;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    Backend b;
    if (name == "model") b = Backend::Model;
    else if (name == "real") b = Backend::Real;
    else if (name == "upstream") b = Backend::Upstream;
    else {
      *error = name.empty() ? "an empty name" : "unknown backend '" + name + "'";
      return false;
    }
    if (std::find(list.begin(), list.end(), b) != list.end()) {
      *error = "'" + name + "' listed twice";
      return false;
    }
    list.push_back(b);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::stable_partition(list.begin(), list.end(), [](Backend b) { return b == Backend::Model; });
  *out = list;
  return true;
}

std::string real_backend_refusal(const Scenario& s, SourcePos* at) {
  // Mixed precision and DoRA run on the C++ backend (real_backend/activation_dtype.hpp, lora_layer.cpp); 4-bit bases do not.
  if (s.model) {
    *at = s.model->pos;
    return std::string("the C++ backend (real) does not implement `model` scenarios (a transformers ") + family_name(s.model->family) +
           " built from its config); run this file with --backend model";
  }
  if (const LayerDecl* q = s.quantized()) {
    *at = q->pos;
    return "the C++ backend (real) does not implement 4-bit (QLoRA) base layers (layer '" + q->name + "' quant=" +
           quant_name(*q->quant) + ": a bitsandbytes Linear4bit); run this file with --backend upstream";
  }
  return "";
}

std::string upstream_refusal(const Scenario& s, SourcePos* at) {
  if (!s.model) return "";
  // The pool builds the transformers model from its config (real_backend/upstream/fsdpsim_upstream/
  // model_scenario.py); what it does not run yet is refused here, each with its reason.
  if (s.model->family == Family::Qwen2Moe) {
    *at = s.model->pos;
    return "the upstream backend does not run qwen2_moe `model` scenarios yet (experts, target_parameters; "
           "docs/design/known-limits.md); run llama, qwen2, mistral or gpt2";
  }
  if (s.plan == ShardPlan::LoraModules) {
    *at = s.plan_pos;
    return "the upstream backend does not run fully_shard_plan lora_modules yet (docs/design/known-limits.md); "
           "use fully_shard_plan transformer_layers or fully_shard lines";
  }
  if (s.loading == Loading::RamEfficient) {
    // ranks > 0 build the model on meta and take rank 0's weights in accelerate's prepare: on a
    // transformers model a rank stalls there (measured, not yet traced)
    *at = s.loading_pos;
    return "the upstream backend does not run `loading ram_efficient` on a `model` scenario yet "
           "(docs/design/known-limits.md); run this file with --backend model";
  }
  const ModuleTree tree = module_tree(*s.model);
  for (const auto& a : s.adapters) {
    // a LoRA Embedding holds lora_embedding_A / lora_embedding_B (peft tuners/lora/layer.py::Embedding),
    // names the pool's observation does not read yet; a ModulesToSaveWrapper at a dotted path likewise.
    // DoRA runs (its magnitude on a Linear or a Conv1D: peft tuners/lora/variants.py::DoraLinearVariant)
    bool embedding = false;
    for (const auto& t : resolve_targets(tree, a.targets).modules) {
      const int m = tree.module_index(t);
      embedding = embedding || (m >= 0 && tree.modules[m].kind == ModuleKind::Embedding);
    }
    if (embedding || !a.modules_to_save.empty()) {
      *at = a.pos;
      return "the upstream backend does not run adapter '" + a.name + "' of a `model` scenario yet (" +
             (embedding ? "an Embedding target" : "modules_to_save") +
             "; docs/design/known-limits.md); run this file with --backend model";
    }
  }
  return "";
}

std::string real_backend_refusal(const SeqFile& f, SourcePos* at) {
  if (std::string why = real_backend_refusal(f.scenario, at); !why.empty()) return why;
  // The whole model's DCP state dicts (torch distributed/checkpoint/state_dict.py) are not plain
  // libtorch work: the C++ backend has no DTensor state dict to save or load.
  for (const Op& op : f.ops)
    if (op.kind == OpKind::SaveModel || op.kind == OpKind::LoadModel) {
      *at = op.pos;
      return std::string("the C++ backend (real) does not implement the model state dict ops (") + op_text(op) +
             "); run this file with --backend upstream";
    } else if (op.kind == OpKind::MergeAndUnload) {
      // PEFT swapping each LoRA layer for its base layer in a tree FSDP sharded is not libtorch work
      *at = op.pos;
      return "the C++ backend (real) does not implement merge_and_unload; run this file with --backend upstream";
    }
  return "";
}

std::string backend_refusal(const SeqFile& f, Backend b, SourcePos* at) {
  return b == Backend::Real ? real_backend_refusal(f, at) : b == Backend::Upstream ? upstream_refusal(f.scenario, at) : "";
}

std::string model_refusal(const Scenario& s, SourcePos* at) {
  if (s.model) {  // what model/vocab/model_lowering.cpp does not lower yet
    Scenario lowered = s;
    if (std::string why = lower_model(lowered, at); !why.empty()) return why;
  }
  // PEFT 0.21.2 runs DoRA on a Linear4bit (bnb.py::Linear4bit with DoraLinearVariant: measured on the
  // upstream backend); the model's DoRA reads a float base weight, which a 4-bit layer does not have.
  for (const auto& a : s.adapters) {
    if (!a.use_dora) continue;
    for (const auto& l : s.layers)
      for (const auto& t : a.targets)
        if (l.quant && t == l.name) {
          *at = a.pos;
          return "the model does not implement DoRA on a 4-bit base (adapter '" + a.name + "' has use_dora and targets '" + l.name +
                 "' quant=" + quant_name(*l.quant) + "); run this file with --backend upstream";
        }
  }
  return "";
}

std::string model_refusal(const SeqFile& f, SourcePos* at) {
  if (std::string why = model_refusal(f.scenario, at); !why.empty()) return why;
  if (std::string why = OpRules::generate_unmodelled(f.scenario, f.ops, at); !why.empty()) return why;
  return OpRules::unload_unmodelled(f.scenario, f.ops, at);
}

std::string backends_text(const BackendList& b) {
  std::string s;
  for (Backend x : b) s += (s.empty() ? "" : ",") + std::string(backend_name(x));
  return s;
}

real::RealRanks& RealPools::get(int world) {
  for (auto& p : pools_)
    if (p->world() == world) return *p;
  pools_.push_back(std::make_unique<real::RealRanks>(world, mode_, timeout_));
  return *pools_.back();
}

upstream::UpstreamPool& RealPools::upstream(int world) {
  for (size_t k = 0; k < upstream_.size(); ++k)
    if (upstream_[k]->world() == world || (!upstream_[k]->running() && upstream_[k]->world() == 0)) {
      std::rotate(upstream_.begin() + static_cast<long>(k), upstream_.begin() + static_cast<long>(k) + 1, upstream_.end());
      return *upstream_.back();
    }
  int ranks = world;
  for (const auto& p : upstream_) ranks += p->running() ? p->world() : 0;
  for (auto& p : upstream_)  // least recently used first
    if (ranks > kUpstreamRanks && p->running()) {
      ranks -= p->world();
      p->stop();
    }
  for (const auto& p : upstream_)
    if (!p->running()) retired_starts_ += p->starts(), retired_start_seconds_ += p->start_seconds();
  upstream_.erase(std::remove_if(upstream_.begin(), upstream_.end(), [](const auto& p) { return !p->running(); }), upstream_.end());
  upstream::UpstreamOptions opt;
  opt.rank_timeout_ms = static_cast<int>(timeout_.count());
  opt.python = upstream_python_;
  upstream_.push_back(std::make_unique<upstream::UpstreamPool>(opt));
  return *upstream_.back();
}

const upstream::UpstreamPool* RealPools::upstream_spoken() const {
  for (const auto& p : upstream_)
    if (!p->versions().empty()) return p.get();
  return upstream_.empty() ? nullptr : upstream_.front().get();
}

std::vector<std::string> RealPools::upstream_unobserved() const {
  const upstream::UpstreamPool* p = upstream_spoken();
  return p ? p->unobserved() : std::vector<std::string>{};
}

std::map<std::string, std::string> RealPools::upstream_versions() const {
  const upstream::UpstreamPool* p = upstream_spoken();
  return p ? p->versions() : std::map<std::string, std::string>{};
}

std::string RealPools::upstream_versions_line() const {
  const upstream::UpstreamPool* p = upstream_spoken();
  return p ? p->versions_line() : "";
}

int RealPools::upstream_starts() const {
  int n = retired_starts_;
  for (const auto& p : upstream_) n += p->starts();
  return n;
}

double RealPools::upstream_start_seconds() const {
  double s = retired_start_seconds_;
  for (const auto& p : upstream_) s += p->start_seconds();
  return s;
}

void RealPools::stop_upstream() {
  for (auto& p : upstream_) p->stop();
}

std::string backend_who(Backend b) {
  return b == Backend::Model ? "model" : std::string(backend_name(b)) + " backend";
}

std::vector<std::string> compare_observations(const std::vector<Observation>& first, const std::vector<Observation>& other,
                                              const std::string& first_who, const std::string& other_who,
                                              const std::vector<std::string>& skip) {
  std::vector<std::string> out;
  size_t i = 0, j = 0;
  auto key = [](const Observation& o) { return std::make_pair(o.step, o.rank); };
  auto only = [&](const Observation& o, const std::string& who) {
    out.push_back("step " + std::to_string(o.step) + " rank " + std::to_string(o.rank) + " (" + o.op + "): observed by the " +
                  who + " only (" + status_name(o.status) + ")");
  };
  while (i < first.size() || j < other.size()) {
    if (j >= other.size() || (i < first.size() && key(first[i]) < key(other[j]))) {
      only(first[i++], first_who);
      continue;
    }
    if (i >= first.size() || key(other[j]) < key(first[i])) {
      only(other[j++], other_who);
      continue;
    }
    for (const auto& d : observation_diff(first[i], other[j]))
      if (!upstream::diff_field_in(d, skip))
        out.push_back("step " + std::to_string(first[i].step) + " rank " + std::to_string(first[i].rank) + " (" + first[i].op + "): " + d);
    ++i, ++j;
  }
  return out;
}

namespace {

BackendRun infra(const std::string& message) {
  BackendRun out;
  out.infra_failure = true;
  out.infra_message = message;
  return out;
}

// One backend, run once or twice; a second run that differs is an S8 finding.
// Returns false with *error on an infrastructure failure.
// A backend's observations name steps and ranks of this sequence: the spec
// and the comparison index the ops and ranks by them. A backend that reports
// others (a broken pool, a replayed file) is a harness failure, not a crash.
bool observations_fit(const SeqFile& f, const std::vector<Observation>& obs, Backend b, std::string* error) {
  for (const auto& o : obs)
    if (o.step < 1 || o.step > static_cast<int>(f.ops.size()) || o.rank < 0 || o.rank >= f.scenario.world) {
      *error = backend_who(b) + ": an observation for step " + std::to_string(o.step) + " rank " + std::to_string(o.rank) +
               ", but the sequence has " + std::to_string(f.ops.size()) + " ops at world " + std::to_string(f.scenario.world);
      return false;
    }
  return true;
}

template <typename RunOnce>
bool run_twice(const SeqFile& f, bool twice, SingleRun* out, std::string* error, RunOnce run_once) {
  if (!run_once(&out->observations, error)) return false;
  if (!observations_fit(f, out->observations, out->backend, error)) return false;
  out->trace_hash = observations_hash(out->observations);
  out->findings = check_spec(f, out->observations);
  if (!twice) return true;
  std::vector<Observation> second;
  if (!run_once(&second, error) || !observations_fit(f, second, out->backend, error)) return false;
  if (observations_hash(second) != out->trace_hash) {
    // Only what the comparison reads counts: the classes the values could not tell apart
    // (`*_alt`) follow the values themselves, which a part-filled broadcast leaves to torch.empty.
    auto d = compare_observations(out->observations, second, backend_who(out->backend), backend_who(out->backend));
    if (!d.empty())
      out->findings.push_back({"S8", 0, -1,
                               std::string("S8: two ") + backend_name(out->backend) + " runs of the same sequence differ: " + d[0],
                               ""});
  }
  return true;
}

bool run_single(const SeqFile& f, Backend b, RealPools& pools, bool twice, SingleRun* out, std::string* error) {
  out->backend = b;
  if (b == Backend::Model) {
    // A `model` file runs lowered to the machine's layers and calls (model/vocab/model_lowering.hpp).
    RunResult model = run_checked(lowered_file(f));  // always twice: the simulator is cheap
    out->observations = std::move(model.observations);
    out->findings = std::move(model.findings);
    out->trace_hash = model.trace_hash;
    return true;
  }
  if (b == Backend::Real) {
    real::RealRanks& ranks = pools.get(f.scenario.world);
    return run_twice(f, twice, out, error, [&](std::vector<Observation>* obs, std::string* err) {
      real::RealResult r = ranks.run(f);
      if (r.infra_failure) *err = "real backend failed: " + r.infra_message;
      else *obs = std::move(r.observations);
      return !r.infra_failure;
    });
  }
  upstream::UpstreamPool& pool = pools.upstream(f.scenario.world);
  if (!pool.start(f.scenario.world, error)) return false;
  const std::string text = print_seq(f);  // a `model` file as written: the pool builds the model itself
  const std::string switches = switches_json(effective_profile(f.scenario));
  // its observations are read (fit, spec) against the layers the model lowers it to, the names the pool reports
  return run_twice(lowered_file(f), twice, out, error, [&](std::vector<Observation>* obs, std::string* err) {
    upstream::UpstreamResult r = pool.run(text, switches);
    if (!r.ok) *err = r.error;
    else *obs = std::move(r.obs), out->prepared_by = r.prepared_by;
    return r.ok;
  });
}

}  // namespace

BackendList runnable_backends(const SeqFile& f, const BackendList& backends, std::string* skipped) {
  SourcePos at;
  // The backends that cannot run the scenario are left out where at least two others can: those
  // are compared, and *skipped says which could not and why.
  BackendList left;
  std::string why;
  for (Backend b : backends) {
    const std::string no = backend_refusal(f, b, &at);
    if (no.empty()) left.push_back(b);
    else why += (why.empty() ? "" : "; ") + no.substr(0, no.find(';'));
  }
  if (why.empty() || left.size() < 2) return backends;
  *skipped = why + ": compared " + backends_text(left) + " only";
  return left;
}

BackendRun run_backend(const SeqFile& f, const BackendList& all, RealPools& pools, bool twice) {
  BackendRun out;
  const BackendList backends = runnable_backends(f, all, &out.skipped);
  for (Backend b : backends) {
    out.used_upstream = out.used_upstream || b == Backend::Upstream;
    SingleRun run;
    std::string error;
    if (!run_single(f, b, pools, twice, &run, &error)) {
      BackendRun bad = infra(error);
      bad.used_upstream = out.used_upstream;
      bad.skipped = out.skipped;
      return bad;
    }
    if (b == Backend::Upstream) out.upstream_prepared_by = run.prepared_by;
    out.runs.push_back(std::move(run));
  }
  const SingleRun& first = out.runs.front();
  out.findings = first.findings;
  for (size_t k = 1; k < out.runs.size(); ++k) {
    SingleRun& other = out.runs[k];
    Comparison c{first.backend, other.backend, {}};
    std::vector<std::string> skip;
    if (other.backend == Backend::Upstream || first.backend == Backend::Upstream) skip = pools.upstream_unobserved();
    // Against the model, a value backend's readings the values cannot tell apart are taken
    // the model's way (sim/core/value_blind.hpp); its findings, and its expectations, follow from those.
    if (first.backend == Backend::Model && other.backend != Backend::Model) {
      other.observations = reconcile_value_blind(first.observations, std::move(other.observations));
      c.unjudged = settle_unjudged(first.observations, &other.observations);
      std::vector<Finding> s8;
      for (const auto& fd : other.findings)
        if (fd.spec == "S8") s8.push_back(fd);
      other.findings = check_spec(lowered_file(f), other.observations);
      other.findings.insert(other.findings.end(), s8.begin(), s8.end());
    }
    c.divergences =
        compare_observations(first.observations, other.observations, backend_who(first.backend), backend_who(other.backend), skip);
    // Findings follow from the observations; with fields skipped, only S8
    // (a backend disagreeing with itself) can differ for a reason of its own.
    auto compared = [&](const Finding& fd) { return skip.empty() || fd.spec == "S8"; };
    for (const auto& fd : other.findings)
      if (compared(fd) && std::find(first.findings.begin(), first.findings.end(), fd) == first.findings.end())
        c.divergences.push_back("finding on the " + backend_who(other.backend) + " only: " + fd.text);
    for (const auto& fd : first.findings)
      if (compared(fd) && std::find(other.findings.begin(), other.findings.end(), fd) == other.findings.end())
        c.divergences.push_back("finding on the " + backend_who(first.backend) + " only: " + fd.text);
    out.divergences.insert(out.divergences.end(), c.divergences.begin(), c.divergences.end());
    out.unjudged.insert(out.unjudged.end(), c.unjudged.begin(), c.unjudged.end());
    out.comparisons.push_back(std::move(c));
  }
  out.observations = out.runs.back().observations;
  out.trace_hash = out.runs.back().trace_hash;
  return out;
}

}  // namespace fsdpsim
