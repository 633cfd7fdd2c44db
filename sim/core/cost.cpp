#include "sim/core/cost.hpp"

#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>
#include <ostream>
#include <stdexcept>

#include "model/vocab/source_error.hpp"
#include "model/vocab/table.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim {

CostReport cost_report(const SeqFile& f, const std::vector<Observation>& obs) {
  const Scenario& s = f.scenario;
  std::vector<std::string> owners;
  for (const auto& a : s.adapters) owners.push_back(a.name);
  owners.push_back("base");
  const size_t n = owners.size();
  // An owner the scenario does not declare (a backend reporting a name it
  // should not) is an error, never an index past `rows`.
  auto idx = [&](const std::string& o) {
    auto it = std::find(owners.begin(), owners.end(), o);
    if (it == owners.end()) throw std::runtime_error(fmt::format("cost: observation names an undeclared owner '{}'", o));
    return static_cast<size_t>(it - owners.begin());
  };
  CostReport rep;
  for (int r = 0; r < s.world; ++r) {
    std::vector<CostRow> rows(n);
    int steps = 0;
    int64_t peak_total = -1;
    const Observation* last = nullptr;
    for (const auto& o : obs) {
      if (o.rank != r || o.status == Status::NotRun) continue;
      if (o.status != Status::Hang && o.status != Status::Mismatch) last = &o;
      int64_t total = 0;
      for (const auto& b : o.peak_unsharded) total += b.bytes;
      if (total > peak_total) {
        peak_total = total;
        for (auto& row : rows) row.peak_unsharded = 0;
        for (const auto& b : o.peak_unsharded) rows[idx(b.owner)].peak_unsharded = b.bytes;
      }
      if (f.ops[o.step - 1].kind != OpKind::TrainStep) continue;
      ++steps;  // the last train_step's figures: the configuration the sequence ends in
      for (auto& row : rows) row.all_gather = row.reduce_scatter = 0;
      // Bytes of the full (world-sized, fp32) buffer each collective moves.
      for (const auto& c : o.collectives)
        for (const auto& p : c.parts) {
          int64_t bytes = p.numel * s.world * 4;
          if (c.op == CollOp::AllGather) rows[idx(s.owner_of_param(p.param))].all_gather += bytes;
          else if (c.op == CollOp::ReduceScatter) rows[idx(s.owner_of_param(p.param))].reduce_scatter += bytes;
        }
    }
    if (last)
      for (const auto& b : last->sharded_bytes) rows[idx(b.owner)].sharded = b.bytes;
    CostRow total;
    total.rank = r;
    total.owner = "total";
    for (size_t i = 0; i < n; ++i) {
      rows[i].rank = r;
      rows[i].owner = owners[i];
      total.sharded += rows[i].sharded;
      total.all_gather += rows[i].all_gather;
      total.reduce_scatter += rows[i].reduce_scatter;
      total.peak_unsharded += rows[i].peak_unsharded;
      rep.rows.push_back(rows[i]);
    }
    rep.rows.push_back(total);
    if (r == 0) rep.train_steps = steps;
  }
  return rep;
}

void print_cost(std::ostream& os, const CostReport& r) {
  std::vector<std::vector<std::string>> t = {
      {"rank", "owner", "sharded bytes", "all_gather bytes/step", "reduce_scatter bytes/step", "peak unsharded bytes"}};
  for (const auto& row : r.rows)
    t.push_back({fmt::format("{}", row.rank), row.owner, fmt::format("{}", row.sharded), fmt::format("{}", row.all_gather),
                 fmt::format("{}", row.reduce_scatter), fmt::format("{}", row.peak_unsharded)});
  print_aligned(os, t);
  if (r.train_steps == 0) os << "(no train_step in the sequence: per-step columns are 0)\n";
  else os << "(per-step columns: the last of " << r.train_steps << " train_step ops)\n";
}

std::vector<std::string> compare_cost(const CostReport& model, const CostReport& real) {
  std::vector<std::string> out;
  if (model.rows.size() != real.rows.size()) return {fmt::format("row count {} vs {}", model.rows.size(), real.rows.size())};
  for (size_t i = 0; i < model.rows.size(); ++i) {
    const CostRow& a = model.rows[i];
    const CostRow& b = real.rows[i];
    auto cell = [&](const char* what, int64_t x, int64_t y) {
      if (x != y) out.push_back(fmt::format("rank {} {} {}: {} vs {}", a.rank, a.owner, what, x, y));
    };
    cell("sharded", a.sharded, b.sharded);
    cell("all_gather", a.all_gather, b.all_gather);
    cell("reduce_scatter", a.reduce_scatter, b.reduce_scatter);
    cell("peak_unsharded", a.peak_unsharded, b.peak_unsharded);
  }
  return out;
}

int64_t scenario_peak_bytes(const SeqFile& f) {
  CostReport r = cost_report(f, run_checked(f).observations);
  int64_t sum = 0;
  for (const auto& row : r.rows)
    if (row.owner == "total") sum += row.sharded + row.peak_unsharded;
  return sum;
}

std::string bytes_text(int64_t bytes) {
  if (bytes >= 1000000000) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1000000) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{} bytes", bytes);
}

void check_memory_budget(const SeqFile& f, int64_t budget, const std::string& file) {
  const int64_t peak = scenario_peak_bytes(f);
  if (peak <= budget) return;
  const LayerDecl* big = nullptr;
  for (const auto& l : f.scenario.layers)
    if (!big || int64_t{l.in} * l.out * std::max(l.experts, 1) > int64_t{big->in} * big->out * std::max(big->experts, 1)) big = &l;
  throw SourceError(file, big ? big->pos : f.separator,
                    fmt::format("this sequence needs {} at its peak ({} ranks, sharded plus unsharded bytes by `fsdpsim cost`), "
                                "over the memory budget of {}; refused before running (--memory-budget BYTES changes the budget)",
                                bytes_text(peak), f.scenario.world, bytes_text(budget)));
}

}  // namespace fsdpsim
