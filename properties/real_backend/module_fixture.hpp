// The real backend's classes wired for one world-1 rank as RealRank wires them, but
// driven directly by a test (no dispatcher): each class test calls the class it tests
// and reads the registry.
#pragma once
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "model/vocab/seq.hpp"
#include "real_backend/activation_checkpoint.hpp"
#include "real_backend/comm.hpp"
#include "real_backend/dtensor.hpp"
#include "real_backend/fsdp_state.hpp"
#include "real_backend/loading.hpp"
#include "real_backend/optimizer.hpp"
#include "real_backend/peft_model.hpp"

namespace fsdpsim::test {

struct RealModule {
  explicit RealModule(const std::string& seq_text)
      : layout(real::make_layout(parse_seq(seq_text, "<test>"))),
        comm(c10::make_intrusive<c10d::HashStore>(), 0, 1, real::loopback_device(), std::chrono::milliseconds(5000)),
        params(layout),
        pg{&comm},
        fsdp(layout, params, pg),
        dtensor(layout, params, fsdp, pg),
        optimizer(layout, params, fsdp),
        accelerator(layout, 7, params, fsdp, dtensor, pg, optimizer),
        ckpt(layout, params),
        peft(layout, params, fsdp, dtensor, pg, ckpt, accelerator) {
    real::name_collectives(comm, layout);
    params.reset();
    fsdp.reset();
    ckpt.reset();
    optimizer.reset();
  }
  // from_pretrained and get_peft_model, as RealRank::reset runs them; then prepare.
  void load(bool prepare = true) {
    accelerator.place_base_params();
    peft.get_peft_model();
    if (prepare) accelerator.prepare();
  }
  int param(const std::string& name) const {
    for (size_t p = 0; p < layout.params.size(); ++p)
      if (layout.params[p].name == name) return static_cast<int>(p);
    return -1;
  }

  real::Layout layout;
  real::Comm comm;
  real::Parameters params;
  real::ProcessGroup pg;
  real::FsdpState fsdp;
  real::DTensor dtensor;
  real::Optimizer optimizer;
  real::Accelerator accelerator;
  real::CheckpointWrapper ckpt;
  real::PeftModel peft;
};

// One Linear layer lin0 (4 -> 4) with LoRA adapters a (r=2) and b (r=2), each in its own
// fully_shard group with the root, world 1.
inline std::string one_linear(const std::string& extra = "") {
  return "world 1\nprofile upstream\nlayer lin0 4 4\nadapter a r=2 alpha=4 targets=lin0 init=random\n"
         "adapter b r=2 alpha=2 targets=lin0 init=random\n" + extra + "fully_shard lin0\nfully_shard root\n---\n";
}

}  // namespace fsdpsim::test
