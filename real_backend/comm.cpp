#include "real_backend/comm.hpp"

namespace fsdpsim::real {
namespace {

constexpr int64_t kFinish = 2;  // fingerprint op code: "this rank issues no more collectives"

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

// A fingerprint: op, group, element count, step, then a 256-bit set of the
// parameters packed into the collective.
constexpr int kPrint = 8;

std::string Comm::describe(const at::Tensor& prints) const {
  auto p = prints.accessor<int64_t, 2>();
  std::vector<PendingCollective> heads(world_);
  for (int r = 0; r < world_; ++r) {
    if (p[r][0] == kFinish) continue;
    PendingCollective& h = heads[r];
    h.waiting = true;
    h.coll = {p[r][0] == 0 ? CollOp::AllGather : CollOp::ReduceScatter,
              p[r][1] < static_cast<int64_t>(group_names_.size()) ? group_names_[p[r][1]] : "?", p[r][2]};
    h.step = static_cast<int>(p[r][3]);
    for (int bit = 0; bit < 256; ++bit)
      if ((static_cast<uint64_t>(p[r][4 + bit / 64]) >> (bit % 64)) & 1)
        h.members.push_back(bit < static_cast<int>(param_names_.size()) ? param_names_[bit] : "?");
  }
  return describe_pending(heads);
}

// Every collective is announced first: an all-gather of a fixed-size
// fingerprint is the same size on every rank, so gloo never sees a mismatched
// payload. The step is left out of the comparison: gloo pairs calls by order.
void Comm::exchange(int op, int group, int64_t count, int step, const std::vector<int>& members) {
  if (world_ == 1) return;  // nothing to disagree with
  std::vector<int64_t> mine{op, group, count, step, 0, 0, 0, 0};
  for (int m : members) mine[4 + m / 64] = static_cast<int64_t>(static_cast<uint64_t>(mine[4 + m / 64]) | (1ull << (m % 64)));
  std::vector<at::Tensor> in{at::tensor(mine, at::kLong)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_; ++r) out[0].push_back(at::empty({kPrint}, at::kLong));
  try {
    pg_->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  at::Tensor prints = at::stack(out[0]);
  auto p = prints.accessor<int64_t, 2>();
  bool same = true, any_finished = false;
  for (int r = 0; r < world_; ++r) {
    for (int k = 0; k < kPrint; ++k) same = same && (k == 3 || p[r][k] == p[0][k]);
    any_finished = any_finished || p[r][0] == kFinish;
  }
  if (same) return;
  throw CollectiveFailure(any_finished ? Status::Hang : Status::Mismatch, describe(prints));
}

at::Tensor Comm::all_gather(const at::Tensor& chunk, int group, int step, const std::vector<int>& members) {
  issued_.push_back({CollOp::AllGather, group, chunk.numel()});
  exchange(0, group, chunk.numel(), step, members);
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

at::Tensor Comm::reduce_scatter_avg(const at::Tensor& flat, int group, int step, const std::vector<int>& members) {
  int64_t seg = flat.numel() / world_;
  issued_.push_back({CollOp::ReduceScatter, group, seg});
  exchange(1, group, seg, step, members);
  std::vector<at::Tensor> t{flat.contiguous().clone()};
  try {
    pg_->allreduce(t)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return t[0].narrow(0, rank_ * seg, seg).div(world_);
}

void Comm::finish(int step) { exchange(static_cast<int>(kFinish), 0, 0, step, {}); }

}  // namespace fsdpsim::real
