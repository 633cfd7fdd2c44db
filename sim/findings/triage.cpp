#include "sim/findings/triage.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <set>

#include "model/vocab/enum_names.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/text.hpp"
#include "sim/findings/fix_claim.hpp"
#include "sim/findings/root_cause_catalogue.hpp"
#include "sim/core/shrink.hpp"

namespace fsdpsim {
namespace {

const char* const kSignaturePrefix = "signature: ";
// The kept finding's sentence: what `export --python` checks the script against.
const char* const kFindingPrefix = "finding: ";
// The fix the re-runs found (sim/findings/fix_claim.hpp): `triage --check` re-derives it.
const char* const kFixPrefix = "fix: ";

// The state of a rank's groups, one letter: S every group sharded, U every
// group unsharded, M some of each, - no groups (before prepare).
char groups_letter(const Observation* o) {
  if (!o || o->groups.empty()) return '-';
  bool s = false, u = false;
  for (const auto& g : o->groups) (g.state == ShardedState::Sharded ? s : u) = true;
  return s && u ? 'M' : (u ? 'U' : 'S');
}

// What the groups of `rank` were when op `step` started: after the latest
// earlier op that ran on that rank; before any op, sharded (prepare ran
// first) unless an explicit prepare comes later.
char state_before(const SeqFile& f, const RunResult& r, int step, int rank) {
  const Observation* last = nullptr;
  for (const auto& o : r.observations)
    if (o.rank == rank && o.step < step && (!last || o.step > last->step)) last = &o;
  if (last) return groups_letter(last);
  return prepare_index(f) >= 0 ? '-' : 'S';
}

// Scenario traits the shrinker could not simplify away (its defaults are
// left out, so a trait listed is one the class needs).
std::string traits(const Scenario& s) {
  std::vector<std::string> t;
  if (s.world > 1) t.push_back(fmt::format("world={}", s.world));
  std::set<int> experts;
  for (const auto& l : s.layers)
    if (l.experts > 0) experts.insert(l.experts);
  for (int e : experts) t.push_back(fmt::format("experts={}", e));
  if (s.loading == Loading::RamEfficient) t.push_back("loading=ram_efficient");
  if (s.dtype != DType::F32) t.push_back(fmt::format("dtype={}", dtype_name(s.dtype)));
  if (!s.autocast_adapter_dtype) t.push_back("autocast=false");
  if (s.data == Data::PerRank) t.push_back("data=per_rank");
  if (!s.checkpoint.empty()) t.push_back("checkpoint");  // a layer in checkpoint_wrapper (beyond-seeds B7)
  for (const auto& a : s.adapters)
    if (!a.modules_to_save.empty()) {
      t.push_back("modules_to_save");  // a ModulesToSaveWrapper's per-adapter copies (beyond-seeds B8)
      break;
    }
  for (const auto& a : s.adapters)
    if (a.autocast_or(s.autocast_adapter_dtype) != s.autocast_adapter_dtype) {
      t.push_back("adapter_autocast");  // one adapter's entry point cast differently (beyond-seeds B2)
      break;
    }
  std::set<std::string> rafs;
  for (const auto& d : s.shards)
    if (d.raf != Raf::True) rafs.insert(fmt::format("{}={}", d.is_root() ? "root_raf" : "raf", raf_name(d.raf)));
  t.insert(t.end(), rafs.begin(), rafs.end());
  if (s.shards.size() > 1) t.push_back(fmt::format("groups={}", s.shards.size()));
  if (s.optimizer == OptimizerParams::AllLora) t.push_back("optimizer=all");
  for (const auto& a : s.adapters) {
    if (a.inference_mode) t.push_back("inference_mode");
    if (a.deferred) t.push_back("deferred");
  }
  return join(t, " ");
}

uint32_t fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

const char* verdict_name(Verdict v) { return enum_names<Verdict>("known", "misuse", "new")[v]; }

std::string class_signature(const SeqFile& f, const RunResult& r, const Finding& fd) {
  // The spec and status, not the op the finding surfaced in: the ops before it
  // are the cause, the last one (a reshard, a step, an eval) only observes it.
  // (The symptom's direction only steers the shrink: the ops that remain already tell it.)
  Finding plain = fd;
  plain.kind.clear();
  std::string key = finding_signature(f, r, plain);
  const size_t c1 = key.find(':'), c2 = key.rfind(':');
  if (c1 != c2) key = key.substr(0, c1) + key.substr(c2);
  std::string out = key + " |";
  const int last = fd.step >= 1 ? std::min<int>(fd.step, static_cast<int>(f.ops.size())) : static_cast<int>(f.ops.size());
  for (int i = 0; i < last; ++i) {
    const Op& op = f.ops[i];
    out += ' ';
    if (op.rank >= 0) out += '@';
    if (i + 1 == fd.step) {
      out += '*';
    } else {
      out += op_name(op.kind);
      if (op.list_form) out += "[]";
      if (op.kind == OpKind::LoadAdapter) out += op.trainable ? ":trainable" : ":frozen";
    }
    out += '(';
    out += state_before(f, r, i + 1, op.rank >= 0 ? op.rank : 0);
    out += ')';
  }
  const std::string t = traits(f.scenario);
  if (!t.empty()) out += " | " + t;
  return out;
}

bool triage(const SeqFile& f, TriageResult* out, const std::function<void(const std::string&)>& progress, const std::string& prefer) {
  ShrinkResult sr;
  if (!shrink(f, &sr, progress, true, prefer)) return false;
  SeqFile m = sr.minimal;
  m.comments.clear();
  RunResult r = run_checked(m);
  const Finding* kept = nullptr;
  for (const auto& fd : r.findings)
    if (finding_signature(m, r, fd) == sr.signature) {
      kept = &fd;
      break;
    }
  if (!kept) return false;  // the shrinker only keeps candidates that have it
  TriageResult t;
  t.key = sr.signature;
  t.spec = kept->spec;
  t.symptom = kept->text;
  t.signature = class_signature(m, r, *kept);
  t.root_cause = attribute_root_cause(m, *kept);
  t.runs = sr.runs + 1;
  for (const auto& op : m.ops) t.rank_divergent = t.rank_divergent || op.rank >= 0;
  t.fix_switch = fixing_switch(m, t.root_cause.id, &t.runs);  // re-run: no finding of this root cause left
  if (!t.fix_switch.empty()) {
    t.verdict = Verdict::Known;
    const std::string name = t.fix_switch.substr(0, t.fix_switch.find('='));
    t.fix_cites = switch_table()[static_cast<size_t>(*switch_from_name(name))].mirrors;
  } else {
    t.verdict = t.rank_divergent ? Verdict::Misuse : Verdict::New;
  }
  const RootCauseEntry entry = root_cause_entry(t.root_cause.id);
  std::string fix = t.fix_switch.empty() ? "no single patched switch removes it" : fmt::format("removed by {} (re-run on the {}; {})", t.fix_switch, kFixClaimBackend, t.fix_cites);
  m.comments = {kSignaturePrefix + t.signature, "root-cause: " + t.root_cause.id, "verdict: " + verdict_text(entry),
                "blame: " + t.root_cause.how, kFixPrefix + fix, kFindingPrefix + t.symptom};
  t.minimal = m;
  *out = t;
  return true;
}

namespace {
std::string comment_after(const SeqFile& f, const std::string& prefix) {
  for (const auto& c : f.comments)
    if (c.compare(0, prefix.size(), prefix) == 0) return c.substr(prefix.size());
  return "";
}
}  // namespace

std::string signature_comment(const SeqFile& f) { return comment_after(f, kSignaturePrefix); }

std::string fix_comment(const SeqFile& f) { return comment_after(f, kFixPrefix); }

std::string class_file_stem(const TriageResult& t) {
  std::string stem = t.signature.substr(0, t.signature.find(' '));
  std::replace(stem.begin(), stem.end(), ':', '-');
  return fmt::format("{}-{:08x}", stem, fnv1a(t.signature));
}

}  // namespace fsdpsim
