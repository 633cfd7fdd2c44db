// How an op raises. A transition that may raise returns a Raise: empty, or
// the exception upstream raises there (status and text). It is [[nodiscard]]
// and the model library builds with -Werror=unused-result, so no caller can go
// on as if nothing was raised: it hands the Raise up (`if (Raise r = f())
// return r;`) to RankModel::apply, which puts it into the op's result, as the
// real backend's OpError reaches its op loop. (A value, not a C++ throw: the
// generated sequences raise often, and unwinding cost the simulator a quarter
// of its speed.) Effects that happened before the raise stay, as upstream's are
// not undone either: collectives already issued, a partly injected adapter,
// groups left in FORWARD.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "model/vocab/observation.hpp"

namespace fsdpsim {

struct OpRaised {
  Status status;
  std::string message;
};

class [[nodiscard]] Raise {
 public:
  Raise() = default;  // nothing raised
  Raise(Status status, std::string message) : raised_(std::make_unique<OpRaised>(OpRaised{status, std::move(message)})) {}
  explicit operator bool() const { return raised_ != nullptr; }
  const OpRaised& operator*() const { return *raised_; }
  const OpRaised* operator->() const { return raised_.get(); }

 private:
  std::unique_ptr<OpRaised> raised_;  // one pointer: the common, empty outcome costs a null check
};

}  // namespace fsdpsim
