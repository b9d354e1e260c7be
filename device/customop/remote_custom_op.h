// File: device/customop/remote_custom_op.h
//
// RemoteCustomOp: graph::CustomOp (device/graph/custom_ops.h) for one op of a CustomOpLibrary:
// each Infer, Compute and Gradient is one call of the library's host process
// (device/customop/protocol.h). It checks what the graph sends - the node's operand counts,
// its attributes against the op's list and the six types custom_op_abi.h carries
// (a tensor attribute is refused), the inputs' dtypes against the op's - and what comes
// back: as many outputs as expected, each of the dtype and shape inferred, nothing more.
//
// Errors (each message names the op, "custom op com.acme::Cube"):
//   INVALID_ARGUMENT     a node or input the op does not take; the library's function
//                        returned an error (its message);
//   INTERNAL             the library misbehaved: crashed, hung, used up its CPU time, wrote
//                        past an output, threw, returned a malformed shape or result (the
//                        host process is ended; the next call starts another);
//   RESOURCE_EXHAUSTED   operands past what the host may hold (custom_ops.memory_mb);
//   FAILED_PRECONDITION, UNAVAILABLE  as CustomOpLibrary::Call.
// Thread safety: thread-safe (calls serialise in the library).
#ifndef IPUPOD_CUSTOMOP_REMOTE_CUSTOM_OP_H_
#define IPUPOD_CUSTOMOP_REMOTE_CUSTOM_OP_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/customop/custom_op_library.h"
#include "device/customop/protocol.h"
#include "device/graph/custom_ops.h"

namespace ipupod::customop {

class RemoteCustomOp : public graph::CustomOp {
 public:
  // Op `index` of `library`'s table.
  RemoteCustomOp(std::shared_ptr<CustomOpLibrary> library, uint32_t index);

  const std::string& name() const override { return name_; }
  std::string origin() const override;
  absl::Status CheckNode(const graph::Node& node) const override;
  absl::StatusOr<std::vector<graph::TensorType>> Infer(
      const graph::Node& node, absl::Span<const graph::TensorType* const> inputs) const override;
  absl::Status Compute(const graph::Node& node, absl::Span<const tensor::Tensor* const> inputs,
                       absl::Span<tensor::Tensor> outputs) const override;
  bool has_gradient() const override { return info_.has_gradient; }
  absl::Status Gradient(const graph::Node& node, absl::Span<const tensor::Tensor* const> inputs,
                        absl::Span<const tensor::Tensor* const> outputs,
                        absl::Span<const tensor::Tensor* const> output_grads,
                        const std::vector<bool>& wants,
                        std::vector<std::optional<tensor::Tensor>>& input_grads) const override;

  const OpInfo& info() const { return info_; }

 private:
  CallSite Site(absl::string_view function) const;
  // The status a reply that is not ok stands for.
  absl::Status FromFailure(const Failure& failure, absl::string_view function) const;
  absl::Status CheckInputType(size_t i, int32_t dtype) const;

  const std::shared_ptr<CustomOpLibrary> library_;
  const uint32_t index_;
  const OpInfo info_;
  const std::string name_;
};

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_REMOTE_CUSTOM_OP_H_
