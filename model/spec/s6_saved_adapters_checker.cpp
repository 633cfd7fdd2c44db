#include "model/spec/s6_saved_adapters_checker.hpp"

#include <fmt/format.h>

namespace fsdpsim::spec {
namespace {

// save_adapters: the selected adapters that are missing, then the first tensor
// saved as a shard ("" when the save is whole).
std::string save_problem(const SpecContext& ctx, const Op& op, const Observation& o) {
  std::string why;
  const Mask selected = op.names.empty() ? ctx.present_in(o) : ctx.mask_of(op.names);
  Mask saved = 0;
  for (const auto& sv : o.saved) saved |= ctx.owner_mask(sv.name);
  const Mask lost = selected & ~saved;
  if (lost) why = fmt::format("adapters {} were not saved (saved: {})", ctx.text(lost), ctx.text(saved));
  // A saved adapter must be saved whole: every tensor it holds now, not some layers of it.
  for (const auto& p : o.params) {
    if (!(ctx.owner_mask(p.name) & selected & saved)) continue;
    bool found = false;
    for (const auto& sv : o.saved) found = found || sv.name == p.name;
    if (found) continue;
    fmt::format_to(std::back_inserter(why), "{}{} was not saved", why.empty() ? "" : "; ", p.name.str());
    break;
  }
  for (const auto& sv : o.saved) {
    if (sv.rows == sv.full_rows) continue;
    fmt::format_to(std::back_inserter(why), "{}{} saved {} of {} rows (this rank's shard, not the full tensor)", why.empty() ? "" : "; ",
                   sv.name.str(), sv.rows, sv.full_rows);
    break;
  }
  return why;
}

}  // namespace

void S6SavedAdaptersChecker::observe(const SpecContext& ctx, const Op& op, const Observation& o, std::vector<Finding>& out) {
  std::string why;
  if (op.kind == OpKind::SaveAdapters && o.status == Status::Ok) why = save_problem(ctx, op, o);
  // Rank 0 writes the file: of a replica the ranks trained apart, only its copy is kept.
  if (op.kind == OpKind::SaveAdapters && o.status == Status::Ok && o.rank == 0 && !o.replica_diff.empty())
    fmt::format_to(std::back_inserter(why), "{}the file holds rank 0's copy of {}, which the other ranks trained differently",
                   why.empty() ? "" : "; ", names_set_text(o.replica_diff));
  if (op.kind == OpKind::LoadAdapters && o.status != Status::Ok && o.status != Status::ValueError)
    why = fmt::format("load_adapters raised {}: {}", status_name(o.status), o.message);
  if (op.kind == OpKind::LoadAdapters && !o.reload_diff.empty())
    why = fmt::format("reloaded values differ from the saved ones: {}", names_set_text(o.reload_diff));
  if (!why.empty()) out.push_back(finding("S6", o.step, o.rank, why));
}

}  // namespace fsdpsim::spec
