#include "real_backend/comm.hpp"

namespace fsdpsim::real {
namespace {

constexpr int64_t kFinish = 2;  // fingerprint op code: "this rank issues no more collectives"

std::string coll_text(int64_t op, const std::string& group, int64_t count) {
  return std::string(coll_op_name(op == 0 ? CollOp::AllGather : CollOp::ReduceScatter)) + "(" + group + ", " +
         std::to_string(count) + ")";
}

}  // namespace

std::shared_ptr<::gloo::transport::Device> loopback_device() {
  static std::shared_ptr<::gloo::transport::Device> dev = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return dev;
}

Comm::Comm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
           const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout)
    : rank_(rank), world_(world) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(device);
  opts->threads = 1;
  pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

std::string Comm::describe(const at::Tensor& prints) const {
  std::string desc;
  auto p = prints.accessor<int64_t, 2>();
  for (int r = 0; r < world_; ++r) {
    desc += (r ? "; " : "") + std::string("rank ") + std::to_string(r) + " ";
    if (p[r][0] == kFinish) {
      desc += "issues no matching collective";
      continue;
    }
    const std::string& g = p[r][1] < static_cast<int64_t>(group_names_.size()) ? group_names_[p[r][1]] : "?";
    desc += "in " + coll_text(p[r][0], g, p[r][2]) + " at step " + std::to_string(p[r][3]);
  }
  return desc;
}

// Every collective is announced first: an all-gather of four int64 (op, group,
// element count, step) is the same size on every rank, so gloo never sees a
// mismatched payload; the comparison ignores the step, as gloo pairs calls by order.
void Comm::exchange(int op, int group, int64_t count, int step) {
  if (world_ == 1) return;  // nothing to disagree with
  at::Tensor mine = at::tensor(std::vector<int64_t>{op, group, count, step}, at::kLong);
  std::vector<at::Tensor> in{mine};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_; ++r) out[0].push_back(at::empty({4}, at::kLong));
  try {
    pg_->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  at::Tensor prints = at::stack(out[0]);
  auto p = prints.accessor<int64_t, 2>();
  bool same = true, any_finished = false;
  for (int r = 0; r < world_; ++r) {
    same = same && p[r][0] == p[0][0] && p[r][1] == p[0][1] && p[r][2] == p[0][2];
    any_finished = any_finished || p[r][0] == kFinish;
  }
  if (same) return;
  throw CollectiveFailure(any_finished ? Status::Hang : Status::Mismatch, describe(prints));
}

at::Tensor Comm::all_gather(const at::Tensor& chunk, int group, int step) {
  issued_.push_back({CollOp::AllGather, group, chunk.numel()});
  exchange(0, group, chunk.numel(), step);
  std::vector<at::Tensor> in{chunk.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_; ++r) out[0].push_back(at::empty_like(in[0]));
  try {
    pg_->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return at::cat(out[0]);
}

at::Tensor Comm::reduce_scatter_avg(const at::Tensor& flat, int group, int step) {
  int64_t seg = flat.numel() / world_;
  issued_.push_back({CollOp::ReduceScatter, group, seg});
  exchange(1, group, seg, step);
  std::vector<at::Tensor> t{flat.contiguous().clone()};
  try {
    pg_->allreduce(t)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return t[0].narrow(0, rank_ * seg, seg).div(world_);
}

void Comm::finish(int step) {
  if (world_ == 1) return;
  exchange(static_cast<int>(kFinish), 0, 0, step);
}

}  // namespace fsdpsim::real
