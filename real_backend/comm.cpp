#include "real_backend/comm.hpp"

#include "model/vocab/limits.hpp"

#include <cstring>

namespace fsdpsim::real {
namespace {

// Fingerprint op codes: 0 all_gather, 1 reduce_scatter, 3 broadcast.
constexpr int64_t kFinish = 2;  // "this rank issues no more collectives"
constexpr int64_t kBroadcast = 3;
constexpr int64_t kFile = 4;  // read_rank0_file: the harness's stand-in for a shared file

CollOp coll_op_of(int64_t code) {
  return code == 0 ? CollOp::AllGather : code == kBroadcast ? CollOp::Broadcast : CollOp::ReduceScatter;
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

// A fingerprint: op, group, element count, step, dtype, then a bit set of the
// parameters packed into the collective, one bit per parameter a scenario can have.
constexpr int kMembers = 5;
constexpr int kMemberWords = (kMaxParams + 63) / 64;
constexpr int kPrint = kMembers + kMemberWords;
static_assert(64 * kMemberWords >= kMaxParams, "every parameter index has its bit in the fingerprint");
constexpr int kPrintFloats = 2 * kPrint;  // the fingerprint's bytes, in float slots
constexpr int64_t kInline = 4096;

std::string Comm::describe(const at::Tensor& prints) const {
  auto p = prints.accessor<int64_t, 2>();
  std::vector<PendingCollective> heads(world_);
  for (int r = 0; r < world_; ++r) {
    if (p[r][0] == kFinish) continue;
    PendingCollective& h = heads[r];
    h.waiting = true;
    h.coll.op = coll_op_of(p[r][0]);
    const auto& names = h.coll.op == CollOp::Broadcast ? param_names_ : group_names_;
    h.coll.group = p[r][1] < static_cast<int64_t>(names.size()) ? names[p[r][1]] : "?";
    h.coll.count = p[r][2];
    h.coll.dtype = static_cast<DType>(p[r][4]);
    h.step = static_cast<int>(p[r][3]);
    for (int bit = 0; bit < 64 * kMemberWords; ++bit)
      if ((static_cast<uint64_t>(p[r][kMembers + bit / 64]) >> (bit % 64)) & 1)
        h.members.push_back(bit < static_cast<int>(param_names_.size()) ? param_names_[bit] : "?");
  }
  return describe_pending(heads);
}

// Every collective is announced first: an all-gather of a fixed-size
// fingerprint is the same size on every rank, so gloo never sees a mismatched
// payload. The step is left out of the comparison: gloo pairs calls by order.
// A payload of up to kInline floats travels in the same all-gather (one round
// trip instead of two); the ranks' payloads come back as a (world, n) tensor.
at::Tensor Comm::announce(int op, int group, int64_t count, int step, const std::vector<int>& members, const at::Tensor& payload,
                          DType dtype) {
  std::vector<int64_t> mine(kPrint, 0);
  mine[0] = op;
  mine[1] = group;
  mine[2] = count;
  mine[3] = step;
  mine[4] = static_cast<int64_t>(dtype);
  for (int m : members)
    mine[kMembers + m / 64] = static_cast<int64_t>(static_cast<uint64_t>(mine[kMembers + m / 64]) | (1ull << (m % 64)));
  const int64_t n = payload.defined() ? payload.numel() : 0;
  const bool inline_payload = payload.defined() && n <= kInline;
  at::Tensor buf = at::zeros({kPrintFloats + kInline});
  std::memcpy(buf.data_ptr<float>(), mine.data(), sizeof(int64_t) * kPrint);
  if (inline_payload) buf.narrow(0, kPrintFloats, n).copy_(payload.reshape({-1}));
  std::vector<at::Tensor> in{buf};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_; ++r) out[0].push_back(at::empty_like(buf));
  try {
    pg_->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  at::Tensor prints = at::empty({world_, kPrint}, at::kLong);
  for (int r = 0; r < world_; ++r) std::memcpy(prints[r].data_ptr<int64_t>(), out[0][r].data_ptr<float>(), sizeof(int64_t) * kPrint);
  auto p = prints.accessor<int64_t, 2>();
  bool same = true, any_finished = false;
  for (int r = 0; r < world_; ++r) {
    for (int k = 0; k < kPrint; ++k) same = same && (k == 3 || p[r][k] == p[0][k]);
    any_finished = any_finished || p[r][0] == kFinish;
  }
  if (!same) throw CollectiveFailure(any_finished ? Status::Hang : Status::Mismatch, describe(prints));
  if (!inline_payload) return at::Tensor();
  std::vector<at::Tensor> rows;
  for (int r = 0; r < world_; ++r) rows.push_back(out[0][r].narrow(0, kPrintFloats, n));
  return at::stack(rows);
}

at::Tensor Comm::all_gather(const at::Tensor& chunk, int group, int step, const std::vector<int>& members,
                            int64_t recorded_count) {
  issued_.push_back({CollOp::AllGather, group, recorded_count >= 0 ? recorded_count : chunk.numel(), DType::F32, members});
  if (world_ == 1) return chunk.reshape({-1}).clone();
  at::Tensor got = announce(0, group, chunk.numel(), step, members, chunk);
  if (got.defined()) return got.reshape({-1});
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

// Small buffers: every rank's whole buffer comes back with the fingerprint and
// the sum is taken locally in rank order (deterministic). Larger ones:
// allreduce(SUM) and keep this rank's segment.
at::Tensor Comm::reduce_scatter_avg(const at::Tensor& flat, int group, int step, const std::vector<int>& members) {
  int64_t seg = flat.numel() / world_;
  issued_.push_back({CollOp::ReduceScatter, group, seg, DType::F32, members});
  if (world_ == 1) return flat.clone();
  at::Tensor got = announce(1, group, seg, step, members, flat);
  if (got.defined()) {
    at::Tensor sum = got[0].clone();
    for (int r = 1; r < world_; ++r) sum.add_(got[r]);
    return sum.narrow(0, rank_ * seg, seg).div(world_);
  }
  std::vector<at::Tensor> t{flat.contiguous().clone()};
  try {
    pg_->allreduce(t)->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return t[0].narrow(0, rank_ * seg, seg).div(world_);
}

at::Tensor Comm::broadcast(const at::Tensor& full, int param, DType dtype, int step) {
  issued_.push_back({CollOp::Broadcast, param, full.numel(), dtype, {param}});
  at::Tensor flat = full.reshape({-1}).to(at::kFloat).contiguous();
  if (world_ == 1) return flat.clone();
  at::Tensor got = announce(static_cast<int>(kBroadcast), param, full.numel(), step, {param}, flat, dtype);
  if (got.defined()) return got[0].clone();
  std::vector<at::Tensor> t{flat.clone()};
  try {
    pg_->broadcast(t)->wait();  // BroadcastOptions: root rank 0
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return t[0];
}

at::Tensor Comm::read_rank0_file(const at::Tensor& flat, int step) {
  at::Tensor f = flat.reshape({-1}).to(at::kFloat).contiguous();
  if (world_ == 1) return f.clone();
  at::Tensor got = announce(static_cast<int>(kFile), 0, f.numel(), step, {}, f);
  if (got.defined()) return got[0].clone();
  std::vector<at::Tensor> t{f.clone()};
  try {
    pg_->broadcast(t)->wait();  // root rank 0
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
  return t[0];
}

void Comm::finish(int step) {
  if (world_ > 1) announce(static_cast<int>(kFinish), 0, 0, step, {}, at::Tensor());
}

}  // namespace fsdpsim::real
