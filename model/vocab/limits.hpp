// Scenario limits, defined once: the parser enforces them (validate), the model
// sizes its per-adapter arrays and bit masks by them, and the real backend's
// collective fingerprint carries one bit per parameter (real_backend/comm.cpp).
#pragma once

namespace fsdpsim {

constexpr int kMaxAdapters = 8;
constexpr int kMaxLayers = 16;
constexpr int kMaxWorld = 64;
// Parameters a scenario may have: the real backend's collective fingerprint
// names the parameters packed into a collective in a bit set this wide.
constexpr int kMaxParams = 256;
// Ops times ranks: every op runs on every rank of this machine, and a run keeps one
// observation per op and rank (~1 kB each with its findings and texts), so this bounds a
// run's memory whatever the file (a 4 MiB .seq holds 800 000 ops; at world 64 they were
// 51 million observations and `std::bad_alloc`).
constexpr long long kMaxOpRanks = 50000;
// `generate N`'s steps: each is a whole no_grad forward on every rank.
constexpr int kMaxGenerateSteps = 16;
static_assert(kMaxAdapters <= 8, "adapter sets are uint8_t masks (OpResult::grads, RankState::present, Layout::wrapped)");
static_assert(kMaxLayers + 1 <= 32, "FSDP groups (the root plus one per layer at most) are uint32_t bit sets");

}  // namespace fsdpsim
