// The neighbourhood of a recorded sequence (neighbourhood.hpp): every sequence within K edits built
// from the file's own ops, each run once on the model and its findings gathered by class.
#include "sim/findings/neighbourhood.hpp"

#include <chrono>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "sim/core/simulator.hpp"
#include "sim/findings/root_cause.hpp"

namespace fsdpsim {
namespace {

// A sequence being edited: its ops and where each came from.
struct Edited {
  std::vector<Op> ops;
  std::vector<int> origin;      // index among the recorded ops (an inserted op: the op it copies)
  std::vector<char> inserted;   // the op was added by an edit
  std::vector<NearEdit> edits;
};

std::string key_of(const std::vector<Op>& ops) {
  std::string k, one;
  for (const Op& op : ops) {
    op_text_into(op, one);
    k += one;
    k += '\n';
  }
  return k;
}

// The recorded ops' distinct texts (rank form included), each with its first index: what an
// insertion may add.
std::vector<int> insertable(const std::vector<Op>& ops) {
  std::vector<int> out;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < ops.size(); ++i)
    if (seen.insert(op_text(ops[i])).second) out.push_back(static_cast<int>(i));
  return out;
}

// Every sequence one edit from `s`, in a fixed order: inserts (by position, then by op), deletes,
// swaps, then single-rank runs (by op, then rank). `recorded` gives the ops an insert copies.
void one_edit(const Edited& s, const std::vector<Op>& recorded, const std::vector<int>& pool, int world,
              const std::function<void(Edited&&)>& out) {
  const int n = static_cast<int>(s.ops.size());
  for (int p = 0; p <= n; ++p)
    for (int j : pool) {
      Edited e = s;
      e.ops.insert(e.ops.begin() + p, recorded[j]);
      e.origin.insert(e.origin.begin() + p, j);
      e.inserted.insert(e.inserted.begin() + p, 1);
      NearEdit ed;
      ed.kind = NearEdit::Kind::Insert, ed.op = j, ed.position = p;
      if (p > 0) ed.other = s.origin[p - 1], ed.other_inserted = s.inserted[p - 1];
      e.edits.push_back(ed);
      out(std::move(e));
    }
  for (int i = 0; i < n; ++i) {
    Edited e = s;
    e.ops.erase(e.ops.begin() + i), e.origin.erase(e.origin.begin() + i), e.inserted.erase(e.inserted.begin() + i);
    NearEdit ed;
    ed.kind = NearEdit::Kind::Delete, ed.op = s.origin[i], ed.op_inserted = s.inserted[i], ed.position = i;
    e.edits.push_back(ed);
    out(std::move(e));
  }
  for (int i = 0; i + 1 < n; ++i) {
    Edited e = s;
    std::swap(e.ops[i], e.ops[i + 1]), std::swap(e.origin[i], e.origin[i + 1]), std::swap(e.inserted[i], e.inserted[i + 1]);
    NearEdit ed;
    ed.kind = NearEdit::Kind::Swap, ed.op = s.origin[i], ed.op_inserted = s.inserted[i], ed.position = i;
    ed.other = s.origin[i + 1], ed.other_inserted = s.inserted[i + 1];
    e.edits.push_back(ed);
    out(std::move(e));
  }
  for (int i = 0; i < n; ++i) {
    if (s.ops[i].rank >= 0) continue;  // already one rank's
    for (int r = 0; r < world; ++r) {
      Edited e = s;
      e.ops[i].rank = r;
      NearEdit ed;
      ed.kind = NearEdit::Kind::Diverge, ed.op = s.origin[i], ed.op_inserted = s.inserted[i], ed.rank = r, ed.position = i;
      e.edits.push_back(ed);
      out(std::move(e));
    }
  }
}

// Root causes by the run a finding's attribution reads: the ops up to its step (and up to an
// explicit `prepare`, whose adapters the topology reads) and the finding itself. Most edited
// sequences share the recorded one's ops before a finding.
class Attributions {
 public:
  explicit Attributions(const SeqFile& f) : prepare_(prepare_index(f)) {}
  const std::string& of(const SeqFile& f, const Finding& fd) {
    const int upto = std::min<int>(static_cast<int>(f.ops.size()), std::max(fd.step, prepare_ + 1));
    std::string k = key_of(std::vector<Op>(f.ops.begin(), f.ops.begin() + upto));
    k += fd.spec + '\n' + fd.text;
    auto it = cache_.find(k);
    if (it == cache_.end()) it = cache_.emplace(std::move(k), attribute_root_cause(f, fd).id).first;
    return it->second;
  }

 private:
  int prepare_;
  std::unordered_map<std::string, std::string> cache_;
};

}  // namespace

NearResult explore_near(const SeqFile& recorded, int k, const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  SeqFile base = recorded;
  base.comments.clear();
  for (Op& op : base.ops) op.expects.clear();  // an edited sequence's ops expect nothing
  Edited start;
  start.ops = base.ops;
  for (size_t i = 0; i < base.ops.size(); ++i) start.origin.push_back(static_cast<int>(i)), start.inserted.push_back(0);
  const std::vector<int> pool = insertable(base.ops);

  // Breadth first: every sequence one edit away, then (k = 2) one edit from each of those.
  std::vector<Edited> all;
  std::unordered_set<std::string> seen = {key_of(start.ops)};
  auto keep = [&](Edited&& e) {
    if (seen.insert(key_of(e.ops)).second) all.push_back(std::move(e));
  };
  one_edit(start, base.ops, pool, base.scenario.world, keep);
  const size_t first_level = all.size();
  if (k >= 2)
    for (size_t i = 0; i < first_level; ++i) one_edit(Edited(all[i]), base.ops, pool, base.scenario.world, keep);

  NearResult res;
  res.sequences = static_cast<int64_t>(all.size());
  Attributions attributions(base);
  std::map<std::string, size_t> index;  // class id -> res.classes
  auto gather = [&](const SeqFile& f, const Edited& e, const RunResult& r, bool now) {
    std::unordered_set<std::string> hit;
    for (const Finding& fd : r.findings) {
      const std::string& rc = attributions.of(f, fd);
      const std::string id = fd.spec + " " + rc;
      auto [it, fresh] = index.emplace(id, res.classes.size());
      if (fresh) {
        NearClass c;
        c.id = id, c.spec = fd.spec, c.root_cause = rc, c.now = now, c.distance = static_cast<int>(e.edits.size());
        c.edits = e.edits, c.file = f, c.origins = e.origin, c.finding = fd;
        res.classes.push_back(std::move(c));
      }
      if (hit.insert(id).second) ++res.classes[it->second].reached;
    }
  };
  {
    RunResult r = run_checked_sampled(base, 16);
    gather(base, start, r, true);
    recycle(std::move(r));
  }
  const int64_t total = res.sequences;
  for (size_t i = 0; i < all.size(); ++i) {
    SeqFile f;
    f.scenario = base.scenario, f.separator = base.separator, f.ops = all[i].ops;
    try {
      validate(f, "<near>");
    } catch (const SourceError&) {
      ++res.refused;
      continue;
    }
    RunResult r = run_checked_sampled(f, 16);
    if (r.findings.empty()) {
      ++res.clean;
      // The fewest edits; among those a removal first, then a swap, an addition, one rank's op:
      // the edit that reads most like a fix to the script.
      static constexpr int kPrefer[] = {2, 0, 1, 3};  // by NearEdit::Kind
      auto rank_of = [](const std::vector<NearEdit>& e) { return e.size() * 4 + kPrefer[static_cast<int>(e.front().kind)]; };
      if (res.first_clean.empty() || rank_of(all[i].edits) < rank_of(res.first_clean)) res.first_clean = all[i].edits;
    }
    gather(f, all[i], r, false);
    recycle(std::move(r));
    if (progress && ((i + 1) % 64 == 0 || i + 1 == all.size())) progress(static_cast<int64_t>(i + 1), total);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string near_edit_text(const NearEdit& e, const std::function<std::string(int)>& text,
                           const std::function<std::string(int)>& where) {
  // An op of the recorded file by its script line and number; an added one as such.
  auto op = [&](int origin, bool inserted) {
    if (inserted) return "the added `" + text(origin) + "`";
    return "`" + text(origin) + "` at " + where(origin) + " (op " + std::to_string(origin + 1) + ")";
  };
  switch (e.kind) {
    case NearEdit::Kind::Insert:
      return "add `" + text(e.op) + "` (as at " + where(e.op) + ") " +
             (e.other < 0 ? std::string("before the first op") : "after " + op(e.other, e.other_inserted));
    case NearEdit::Kind::Delete: return "remove " + op(e.op, e.op_inserted);
    case NearEdit::Kind::Swap: return "swap " + op(e.op, e.op_inserted) + " and " + op(e.other, e.other_inserted);
    case NearEdit::Kind::Diverge: return "run " + op(e.op, e.op_inserted) + " on rank " + std::to_string(e.rank) + " only";
  }
  return "";
}

}  // namespace fsdpsim
