// A rank's state built by hand for the tests that drive one concept class without RankModel:
// every parameter present and on the CPU in fp32, every group SHARDED, no adapter injected,
// nothing in the PEFT bookkeeping (the test sets what it reads).
#pragma once
#include <string>

#include "model/machine/fsdp_state.hpp"
#include "model/machine/peft_model.hpp"
#include "model/machine/rank_state.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim::test {

inline RankState bare_state(const Topology& t) {
  RankState st;
  st.params.assign(t.params.size(), FsdpParam{});
  st.groups.assign(t.groups.size(), FsdpParamGroup{});
  st.layers.assign(t.layers.size(), LoraLayer{});
  st.graph.grad.assign(t.params.size(), 0);
  st.graph.ckpt_saved.resize(t.layers.size());
  st.graph.ckpt_input_rg.resize(t.layers.size());
  return st;
}

// One rank (rank 0) of a scenario's header on a bare state, with the pieces a class's port takes.
struct BareRank {
  explicit BareRank(const std::string& header)
      : header_(header), topo(compile_topology(parse_seq(header, "<test>"))), st(bare_state(topo)) {}
  std::string header_;  // ends with the `---` line
  Topology topo;
  RankState st;
  CollectiveLog log;
  AdapterSet grads, corrupt_deltas;
  FsdpState fsdp() { return FsdpState(topo, 0, st, st.params, log, ScopeSite{}); }
  DTensor dtensor() { return DTensor(topo, 0, st.params, st.groups, log, nullptr); }
  LayerParams layer_params(int l) { return LayerParams{topo, l, st.params, st.groups, st.prepared}; }
  LayerPort layer(int l) { return LayerPort{layer_params(l), dtensor(), ScopeSite{}}; }
  PeftPort peft_port() {
    return PeftPort{st, st, PeftModules{topo, st.params, st.layers, st.prepared}, fsdp(),
                    Accelerator(topo, 0, st.params, st.prepared, log), dtensor(), nullptr};
  }
  // One op line of this scenario.
  Op op(const std::string& line) const {
    return parse_seq(header_ + line + "\n", "<test>").ops.at(0);
  }
  int param(const char* name) const {
    for (size_t p = 0; p < topo.params.size(); ++p)
      if (topo.params[p].name == name) return static_cast<int>(p);
    return -1;
  }
};

}  // namespace fsdpsim::test
