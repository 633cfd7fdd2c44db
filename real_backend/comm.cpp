#include "real_backend/comm.hpp"

#include <algorithm>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include "model/vocab/cross_paired.hpp"
#include "model/vocab/limits.hpp"

#include <cstring>
#include <limits>
#include <thread>

namespace fsdpsim::real {
namespace {

// Fingerprint op codes: 0 all_gather, 1 reduce_scatter, 3 broadcast, 4 all_reduce.
constexpr int64_t kFinish = 2;  // "this rank issues no more collectives"
constexpr int64_t kBroadcast = 3;
constexpr int64_t kAllReduce = 4;

CollOp coll_op_of(int64_t code) {
  return code == 0            ? CollOp::AllGather
         : code == kBroadcast ? CollOp::Broadcast
         : code == kAllReduce ? CollOp::AllReduce
                              : CollOp::ReduceScatter;
}

const char* collective_name(int64_t code) {
  switch (code) {
    case 0: return "all_gather";
    case 1: return "reduce_scatter";
    case kFinish: return "the end-of-sequence exchange";
    case kBroadcast: return "broadcast";
    case kAllReduce: return "all_reduce";
    default: return "an unknown exchange";
  }
}

}  // namespace

std::shared_ptr<::gloo::transport::Device> loopback_device() {
  static std::shared_ptr<::gloo::transport::Device> dev = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return dev;
}

std::vector<std::unique_ptr<Comm>> join_thread_ranks(int world, std::chrono::milliseconds timeout) {
  at::set_num_threads(1);
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(timeout);
  std::vector<std::unique_ptr<Comm>> comms(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        comms[r] = std::make_unique<Comm>(store, r, world, loopback_device(), timeout);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r)
    if (!errors[r].empty()) throw std::runtime_error("rank " + std::to_string(r) + " could not join the process group: " + errors[r]);
  return comms;
}

Comm::Comm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
           const std::shared_ptr<::gloo::transport::Device>& device, std::chrono::milliseconds timeout)
    : store_(store), timeout_(timeout), rank_(rank), world_(world) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(device);
  opts->threads = 1;
  pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

template <class Issue>
void Comm::run(Issue&& issue) {
  try {
    issue()->wait();
  } catch (const std::exception& e) {
    throw CommBroken(std::string("gloo: ") + e.what());
  }
}

// A fingerprint: op, group, element count, step, dtype, DTensor or not, then a bit set
// of the parameters packed into the collective, one bit per parameter a scenario can have.
constexpr int kMembers = 6;
constexpr int kMemberWords = (kMaxParams + 63) / 64;
constexpr int kPrint = kMembers + kMemberWords;
static_assert(64 * kMemberWords >= kMaxParams, "every parameter index has its bit in the fingerprint");
constexpr int kPrintFloats = 2 * kPrint;  // the fingerprint's bytes, in float slots
constexpr int64_t kInline = 1024;  // every generated all-gather's chunk fits (largest seen: 960 floats)

std::vector<PendingCollective> Comm::heads(const at::Tensor& prints) const {
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
    // as observed (Comm::observed): a broadcast's dtype, every wire dtype under a policy
    h.coll.dtype = observed(h.coll.op, static_cast<DType>(p[r][4]));
    h.step = static_cast<int>(p[r][3]);
    auto member = [&](int bit) { return (static_cast<uint64_t>(p[r][kMembers + bit / 64]) >> (bit % 64)) & 1; };
    // the group's packing order first (a grouped fully_shard packs as given), then any other
    const bool packed = h.coll.op != CollOp::Broadcast && p[r][1] < static_cast<int64_t>(packing_.size());
    const std::vector<int> none;
    const std::vector<int>& order = packed ? packing_[p[r][1]] : none;
    for (int bit : order)
      if (member(bit)) h.members.push_back(bit < static_cast<int>(param_names_.size()) ? param_names_[bit] : "?");
    for (int bit = 0; bit < 64 * kMemberWords; ++bit)
      if (member(bit) && std::find(order.begin(), order.end(), bit) == order.end())
        h.members.push_back(bit < static_cast<int>(param_names_.size()) ? param_names_[bit] : "?");
  }
  return heads;
}

// Every collective is announced first: an all-gather of a fixed-size
// fingerprint is the same size on every rank, so gloo never sees a mismatched
// payload. The step is left out of the comparison: gloo pairs calls by order.
// A payload of up to kInline floats travels in the same all-gather (one round
// trip instead of two); the ranks' payloads come back as a (world, n) tensor.
at::Tensor Comm::announce(int op, int group, int64_t count, int step, const std::vector<int>& members, const at::Tensor& payload,
                          DType dtype, bool dtensor) {
  CollectiveMark mark(probe_, [&] {
    const auto& names = op == kBroadcast ? param_names_ : group_names_;
    std::string g = op == kFinish ? "" : group < static_cast<int>(names.size()) ? names[group] : "?";
    return std::string(collective_name(op)) + (g.empty() ? "" : "(" + g + ", " + std::to_string(count) + " elements)");
  });
  std::vector<int64_t> mine(kPrint, 0);
  mine[0] = op;
  mine[1] = group;
  mine[2] = count;
  mine[3] = step;
  mine[4] = static_cast<int64_t>(dtype);
  mine[5] = dtensor ? 1 : 0;
  for (int m : members)
    mine[kMembers + m / 64] = static_cast<int64_t>(static_cast<uint64_t>(mine[kMembers + m / 64]) | (1ull << (m % 64)));
  const int64_t n = payload.defined() ? payload.numel() : 0;
  const bool inline_payload = payload.defined() && n <= kInline;
  constexpr int64_t kBuf = kPrintFloats + kInline;
  at::Tensor buf = at::zeros({kBuf});
  std::memcpy(buf.data_ptr<float>(), mine.data(), sizeof(int64_t) * kPrint);
  if (inline_payload) buf.narrow(0, kPrintFloats, n).copy_(payload.reshape({-1}));
  // All-gather into one tensor (all_gather_into_tensor): rank r's buffer is row r.
  at::Tensor out = at::empty({world_ * kBuf});
  run([&] { return pg_->_allgather_base(out, buf); });
  out = out.view({world_, kBuf});
  at::Tensor prints = at::empty({world_, kPrint}, at::kLong);
  for (int r = 0; r < world_; ++r) std::memcpy(prints[r].data_ptr<int64_t>(), out[r].data_ptr<float>(), sizeof(int64_t) * kPrint);
  auto p = prints.accessor<int64_t, 2>();
  bool same_bytes = true, other_op = false, same = true, any_finished = false, any_dtensor = false;
  for (int r = 0; r < world_; ++r) any_dtensor = any_dtensor || p[r][5] == 1;
  max_count_ = 0;
  root_bytes_ = -1;
  bool part_filled = p[0][0] == kBroadcast;  // every receiver posted at least the root's bytes, some more
  for (int r = 0; r < world_; ++r) {
    // gloo pairs the n-th call of every rank by op and bytes (ProcessGroupGloo.cpp::
    // AsyncAllgatherWork / AsyncReduceScatterWork send flat buffers), whatever the dtypes
    const auto bytes = [&](int q) { return p[q][2] * dtype_bytes(static_cast<DType>(p[q][4])); };
    same_bytes = same_bytes && bytes(r) == bytes(0);
    part_filled = part_filled && p[r][0] == kBroadcast && bytes(r) >= bytes(0);
    other_op = other_op || p[r][0] != p[0][0];
    max_count_ = std::max(max_count_, p[r][2]);
    // A DTensor collective pairs with any same-sized one: gloo sees one group, one size.
    for (int k = 0; k < kPrint; ++k) same = same && (k == 3 || (any_dtensor && k != 0 && k != 2 && k != 4) || p[r][k] == p[0][k]);
    any_finished = any_finished || p[r][0] == kFinish;
  }
  // gloo's all-gather is a ring (gloo allgather.cc: each rank first receives its left neighbour's
  // chunk): while some rank never joins, an all-gathering rank whose left neighbour all-gathers more
  // bytes than it posted still aborts on tcp/pair.cc's preamble enforce, a mismatch (crosscheck
  // seeds 218 and 250 at world 3), and beside ranks in a reduce-scatter (seed 30144 at world 4).
  const auto bytes_of = [&](int q) { return p[q][2] * dtype_bytes(static_cast<DType>(p[q][4])); };
  bool ring_overrun = false;
  for (int r = 0; r < world_; ++r) {
    const int left = (r + world_ - 1) % world_;
    ring_overrun = ring_overrun || (p[r][0] == 0 && p[left][0] == 0 && bytes_of(left) > bytes_of(r));
  }
  // Another group, other parameters, another dtype or another key of the same bytes: it goes
  // through, each rank getting its peers' bytes of another tensor.
  if (!same && same_bytes && !other_op && !any_finished) {
    if (crossed_.empty()) crossed_ = describe_cross_paired(heads(prints));
    same = true;
  }
  // A broadcast whose root sends fewer bytes than some ranks posted completes on every rank, theirs
  // part-filled (measured on torch 2.13 CPU gloo, docs/design/upstream-backend.md): Comm::broadcast
  // sends the real bytes.
  if (!same && part_filled && !same_bytes) {
    if (crossed_.empty()) crossed_ = describe_cross_paired(heads(prints));
    root_bytes_ = p[0][2] * dtype_bytes(static_cast<DType>(p[0][4]));
    return at::Tensor();
  }
  // Another op blocks every rank until gloo's timeout (ProcessGroupGloo.cpp::ProcessGroupGloo::
  // _allgather_base against ::_reduce_scatter_base or ::broadcast); other bytes of one op abort one.
  if (!same)
    throw CollectiveFailure((any_finished || other_op) && !ring_overrun ? Status::Hang : Status::Mismatch, describe_pending(heads(prints)));
  if (!inline_payload) return at::Tensor();
  return out.narrow(1, kPrintFloats, n).clone();
}

at::Tensor Comm::all_gather(const at::Tensor& chunk, int group, int step, const std::vector<int>& members,
                            int64_t recorded_count, bool dtensor, DType wire) {
  issued_.push_back({CollOp::AllGather, group, recorded_count >= 0 ? recorded_count : chunk.numel(), observed(CollOp::AllGather, wire), members});
  if (world_ == 1) return chunk.reshape({-1}).clone();
  at::Tensor got = announce(0, group, chunk.numel(), step, members, chunk, wire, dtensor);
  if (got.defined()) return got.reshape({-1});
  // fp32 travels whatever the wire dtype (uint8 values convert exactly both ways)
  at::Tensor in = chunk.reshape({-1}).to(at::kFloat).contiguous();
  const int64_t n = in.numel();
  // a byte cross-pairing of other dtypes: ranks' counts differ, and what travels here is fp32, so
  // every rank sends the largest count and keeps its own of each slot (the values a mix either way)
  if (max_count_ > n) in = at::constant_pad_nd(in, {0, max_count_ - n});
  at::Tensor out = at::empty({world_ * in.numel()}, in.options());
  run([&] { return pg_->_allgather_base(out, in); });
  return max_count_ > n ? out.view({world_, max_count_}).narrow(1, 0, n).reshape({-1}) : out;
}

// The fingerprint goes first (alone: the payload must not be summed from a
// buffer whose ranks disagree), then gloo's reduce-scatter does the sum and the
// division, so the shard is the value FSDP2 on gloo computes at any world size.
at::Tensor Comm::reduce_scatter_avg(const at::Tensor& flat, int group, int step, const std::vector<int>& members,
                                    DType wire) {
  int64_t seg = flat.numel() / world_;
  issued_.push_back({CollOp::ReduceScatter, group, seg, observed(CollOp::ReduceScatter, wire), members});
  if (world_ == 1) return flat.clone();
  announce(1, group, seg, step, members, at::Tensor(), wire);
  at::Tensor in = flat.reshape({-1}).contiguous();
  // a byte cross-pairing of other dtypes (fp32 against bf16 gradients): ranks' counts differ, so each
  // segment is padded to the largest count and each rank keeps its own part (a sum of unrelated values)
  if (max_count_ > seg) in = at::constant_pad_nd(in.view({world_, seg}), {0, max_count_ - seg}).reshape({-1});
  at::Tensor out = at::empty({std::max(seg, max_count_)}, in.options());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d::ReduceOp::AVG;
  run([&] { return pg_->_reduce_scatter_base(out, in, opts); });
  return max_count_ > seg ? out.narrow(0, 0, seg).clone() : out;
}

// DTensor's own reduction of a Partial tensor (torch 2.13 distributed/tensor/_redistribute.py):
// Partial -> Shard(0) of `flat` is a reduce-scatter (this rank's segment back), Partial ->
// Replicate an all-reduce (the sum back), SUM, on the mesh's one group (paired by size alone).
at::Tensor Comm::dtensor_reduce(CollOp op, const at::Tensor& flat, int group, int step, int member) {
  at::Tensor in = flat.reshape({-1}).to(at::kFloat).contiguous();
  issued_.push_back({op, group, in.numel(), observed(op, DType::F32), {member}, true});
  if (world_ == 1) return in.clone();
  announce(static_cast<int>(op == CollOp::AllReduce ? kAllReduce : 1), group, in.numel(), step, {member}, at::Tensor(),
           DType::F32, true);
  if (op == CollOp::AllReduce) {
    std::vector<at::Tensor> io{in};
    run([&] { return pg_->allreduce(io); });
    return in;
  }
  at::Tensor out = at::empty({in.numel() / world_}, in.options());
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = c10d::ReduceOp::SUM;
  run([&] { return pg_->_reduce_scatter_base(out, in, opts); });
  return out;
}

at::Tensor Comm::broadcast(const at::Tensor& full, int param, DType dtype, int step) {
  issued_.push_back({CollOp::Broadcast, param, full.numel(), dtype, {param}});
  part_filled_ = at::Tensor();
  at::Tensor flat = full.reshape({-1}).to(at::kFloat).contiguous();
  if (world_ == 1) return flat.clone();
  at::Tensor got = announce(static_cast<int>(kBroadcast), param, full.numel(), step, {param}, flat, dtype);
  if (root_bytes_ >= 0) return broadcast_part_filled(full, dtype);
  if (got.defined()) return got[0].clone();
  const int64_t n = flat.numel();
  std::vector<at::Tensor> t{max_count_ > n ? at::constant_pad_nd(flat, {0, max_count_ - n}) : flat.clone()};
  run([&] { return pg_->broadcast(t); });  // BroadcastOptions: root rank 0
  return max_count_ > n ? t[0].narrow(0, 0, n).clone() : t[0];
}

// The bytes as each rank holds them: the root's tensor in its dtype; a receiver's torch.empty of
// its own dtype and size (accelerate utils/fsdp_utils.py::fsdp2_load_full_state_dict), which gloo
// fills with the root's bytes first and leaves as it was after them. What torch.empty holds is
// whatever the allocator hands back, which depends on the process's earlier sequences: the tail
// takes the value torch's deterministic mode writes there instead (NaN for floating dtypes, the
// largest value for integers: ATen/native/TensorFactories.h::fill_empty_deterministic_, which
// torch.empty runs under use_deterministic_algorithms), as the upstream pool sets it, so a sequence observes the same tail
// whatever ran before it.
static at::Scalar untouched(at::ScalarType st) {
  return st == at::kByte ? at::Scalar(255) : at::Scalar(std::numeric_limits<float>::quiet_NaN());
}

at::Tensor Comm::broadcast_part_filled(const at::Tensor& full, DType dtype) {
  const at::ScalarType st = dtype == DType::BF16 ? at::kBFloat16 : dtype == DType::U8 ? at::kByte : at::kFloat;
  const int64_t n = full.numel();
  std::vector<at::Tensor> t{rank_ == 0 ? full.reshape({-1}).to(st).contiguous().view(at::kByte).clone()
                                       : at::full({n}, untouched(st), at::TensorOptions().dtype(st)).view(at::kByte)};
  const int64_t sent = root_bytes_;
  root_bytes_ = -1;
  run([&] { return pg_->broadcast(t); });  // BroadcastOptions: root rank 0
  if (rank_ != 0 && t[0].numel() > sent) {
    part_filled_ = t[0];
    part_filled_root_bytes_ = sent;
  }
  return t[0].view(st).to(at::kFloat);
}

// accelerate's distribute_tensor(full, mesh, [Shard(0)]) scatters rank 0's padded chunks (torch
// distributed/tensor/placement_types.py::Shard._shard_tensor, src_data_rank 0) into a torch.empty
// chunk of this rank's dtype: rank 0's chunk bytes for this rank first (its own dtype, zero
// padding past the tensor), the empty tail after them. Those bytes are the ones the broadcast
// already carried, so they are read from its buffer here rather than sent again.
at::Tensor Comm::part_filled_chunk(int64_t chunk_numel, DType dtype) const {
  if (!part_filled_.defined()) return at::Tensor();
  const at::ScalarType st = dtype == DType::BF16 ? at::kBFloat16 : dtype == DType::U8 ? at::kByte : at::kFloat;
  const int64_t numel = std::max<int64_t>(1, part_filled_.numel() / static_cast<int64_t>(at::elementSize(st)));
  const int64_t root_chunk = chunk_numel * part_filled_root_bytes_ / numel;  // bytes of rank 0's chunk
  at::Tensor out = at::full({chunk_numel}, untouched(st), at::TensorOptions().dtype(st));
  at::Tensor bytes = out.view(at::kByte);
  const int64_t from = rank_ * root_chunk, have = std::clamp<int64_t>(part_filled_root_bytes_ - from, 0, root_chunk);
  if (have > 0) bytes.narrow(0, 0, have).copy_(part_filled_.narrow(0, from, have));
  const int64_t pad = std::min(root_chunk, bytes.numel()) - have;  // rank 0's zero padding
  if (pad > 0) bytes.narrow(0, have, pad).zero_();
  return out.to(at::kFloat);
}

// PeftModel.save_pretrained on rank 0 writes the file; the others read it from disk
// (the upstream pool: adapters-N.pt in the ranks' shared directory). Each save has its own
// number, so a rank 0 already at its next save never changes what a peer still loads.
void Comm::write_rank0_file(const at::Tensor& flat, int save) {
  if (rank_ != 0 || world_ == 1) return;
  at::Tensor f = flat.reshape({-1}).to(at::kFloat).contiguous();
  const auto* bytes = reinterpret_cast<const uint8_t*>(f.data_ptr<float>());
  store_->set(file_key(save), std::vector<uint8_t>(bytes, bytes + f.numel() * sizeof(float)));
}

std::string Comm::file_key(int save) const {
  return "fsdpsim-file-" + std::to_string(sequence_) + "-" + std::to_string(save);
}

at::Tensor Comm::read_rank0_file(int save) {
  const std::string key = file_key(save);
  // Whether rank 0 will still write the file is decided by where rank 0 is, never by how long it
  // took (the model's rule: sim/core/simulator.cpp, file_missing). Every collective spans the whole
  // group, this rank included: a rank 0 in a collective of this sequence that this rank has not
  // entered (its save's own gathers included) cannot go on while this rank waits, and one past
  // this sequence is done with it: neither writes the file. A rank 0 that is still running (or
  // still leaving a collective this rank has left, or not yet at this sequence) may: wait for it,
  // as the upstream pool does (fsdpsim_upstream/op_checkpoints.py::run_load_adapters).
  const bool probed = probe_ && probe_->progress;
  auto written = [&] {
    try {
      return store_->check({key});
    } catch (const std::exception& e) {
      throw CommBroken(std::string("the rank group's store: ") + e.what());
    }
  };
  auto never_writes = [&] {
    const RankSnapshot p0 = probe_->progress->get(0);
    const int64_t mine = probe_->progress->get(rank_).in_sequence;
    return p0.sequence > sequence_ || (p0.sequence == sequence_ && p0.in_sequence > mine &&
                                       (p0.phase == RankPhase::InCollective || p0.phase == RankPhase::Failed));
  };
  // No progress slot (a torchrun launch): a bounded wait, the one decision left to a clock.
  const auto give_up = std::chrono::steady_clock::now() + std::min(timeout_, std::chrono::milliseconds(10000));
  // A rank 0 whose slot stops changing this long is the harness's failure, not the op's outcome.
  const auto stall_limit = std::max(timeout_, std::chrono::milliseconds(60000));
  int64_t changes = probed ? probe_->progress->get(0).changes : 0;
  auto moved = std::chrono::steady_clock::now();
  while (!written()) {
    if (probed) {
      // rank 0 writes the file before it enters its next collective: look once more after seeing it there
      if (never_writes()) {
        if (written()) break;
        return at::Tensor();
      }
      const int64_t now_changes = probe_->progress->get(0).changes;
      if (now_changes != changes) {
        changes = now_changes;
        moved = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - moved > stall_limit) {
        throw CommBroken("rank " + std::to_string(rank_) + " waited for rank 0's adapter file while rank 0 made no progress for " +
                         std::to_string(stall_limit.count() / 1000) + " s");
      }
    } else if (std::chrono::steady_clock::now() > give_up) {
      return at::Tensor();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<uint8_t> bytes = store_->get(key);
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size() / sizeof(float))}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
  return t;
}

void Comm::finish(int step) {
  if (world_ > 1) announce(static_cast<int>(kFinish), 0, 0, step, {}, at::Tensor());
}

}  // namespace fsdpsim::real
