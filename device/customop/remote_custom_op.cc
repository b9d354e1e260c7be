#include "device/customop/remote_custom_op.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/customop/custom_op_abi.h"

namespace ipupod::customop {
namespace {

using graph::TensorType;
using tensor::DType;
using tensor::Tensor;

// Reply bytes beyond the tensors a reply carries (status, counts, types).
constexpr uint64_t kReplyOverheadBytes = uint64_t{64} << 10;

absl::StatusOr<int32_t> WireDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return IPUPOD_DTYPE_FLOAT32;
    case DType::kInt32:
      return IPUPOD_DTYPE_INT32;
    case DType::kInt64:
      return IPUPOD_DTYPE_INT64;
    case DType::kBool:
      return IPUPOD_DTYPE_BOOL;
    case DType::kFloat16:  // graph::RunOp widens float16 before an op sees it
      break;
  }
  return absl::InternalError("a float16 value reached a custom op");
}

absl::StatusOr<WireType> ToWire(const TensorType& type) {
  IPUPOD_ASSIGN_OR_RETURN(int32_t dtype, WireDType(type.dtype));
  return WireType{dtype, type.shape};
}

absl::StatusOr<DType> GraphDType(int32_t code) {
  switch (code) {
    case IPUPOD_DTYPE_FLOAT32:
      return DType::kFloat32;
    case IPUPOD_DTYPE_INT32:
      return DType::kInt32;
    case IPUPOD_DTYPE_INT64:
      return DType::kInt64;
    case IPUPOD_DTYPE_BOOL:
      return DType::kBool;
    default:
      return absl::InternalError(absl::StrCat("returned the unknown dtype ", code));
  }
}

std::string DTypeText(int32_t code) {
  absl::StatusOr<DType> dtype = GraphDType(code);
  return dtype.ok() ? std::string(tensor::DTypeName(*dtype)) : absl::StrCat("dtype ", code);
}

absl::StatusOr<TensorType> FromWire(const WireType& type) {
  IPUPOD_ASSIGN_OR_RETURN(DType dtype, GraphDType(type.dtype));
  return TensorType{dtype, type.dims};
}

// The node's attributes as the protocol carries them (the six types of
// custom_op_abi.h; INVALID_ARGUMENT for a tensor attribute).
absl::StatusOr<std::vector<WireAttribute>> Attributes(const graph::Node& node) {
  std::vector<WireAttribute> out;
  for (const auto& [name, value] : node.attributes) {
    WireAttribute a;
    a.name = name;
    if (const auto* i = std::get_if<int64_t>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_INT;
      a.ints = {*i};
    } else if (const auto* f = std::get_if<float>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_FLOAT;
      a.floats = {*f};
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_STRING;
      a.strings = {*s};
    } else if (const auto* is = std::get_if<std::vector<int64_t>>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_INTS;
      a.ints = *is;
    } else if (const auto* fs = std::get_if<std::vector<float>>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_FLOATS;
      a.floats = *fs;
    } else if (const auto* ss = std::get_if<std::vector<std::string>>(&value)) {
      a.type = IPUPOD_ATTRIBUTE_STRINGS;
      a.strings = *ss;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute '", name,
                       "' is a tensor; custom ops take float, floats, int, ints, string and "
                       "strings attributes (PopTorch's Table 4.1)"));
    }
    out.push_back(std::move(a));
  }
  return out;
}

WireTensor WireView(const WireType& type, const Tensor& t) {
  return WireTensor{type, absl::string_view(static_cast<const char*>(t.raw_data()), t.byte_size())};
}

// The wire views of `tensors` (their types held in `types`, which must not move).
absl::Status ViewTensors(absl::Span<const Tensor* const> tensors, std::vector<WireType>& types,
                         std::vector<WireTensor>& out) {
  types.reserve(tensors.size());
  for (const Tensor* t : tensors) {
    if (t == nullptr) return absl::InternalError("a custom op's operand is missing");
    IPUPOD_ASSIGN_OR_RETURN(WireType type, ToWire(TensorType{t->dtype(), t->shape()}));
    types.push_back(std::move(type));
    out.push_back(WireView(types.back(), *t));
  }
  return absl::OkStatus();
}

}  // namespace

RemoteCustomOp::RemoteCustomOp(std::shared_ptr<CustomOpLibrary> library, uint32_t index)
    : library_(std::move(library)),
      index_(index),
      info_(library_->info().ops.at(index)),
      name_(graph::CustomOpName(info_.domain, info_.name)) {}

std::string RemoteCustomOp::origin() const {
  return absl::StrCat("library '", library_->path(), "'");
}

CallSite RemoteCustomOp::Site(absl::string_view function) const {
  return CallSite{absl::StrCat("custom op ", name_), absl::StrCat("in its ", function),
                  absl::StrCat("from its ", function)};
}

absl::Status RemoteCustomOp::FromFailure(const Failure& failure, absl::string_view function) const {
  switch (failure.status) {
    case ReplyStatus::kOpError:
      return absl::InvalidArgumentError(
          absl::StrCat("custom op ", name_, ": its ", function, " failed: ", failure.message));
    case ReplyStatus::kOutOfMemory:
      return absl::ResourceExhaustedError(absl::StrCat(
          "custom op ", name_, ": ", failure.message, " of ",
          library_->limits().address_space_bytes >> 20, " MiB (config key custom_ops.memory_mb)"));
    default:
      return absl::InternalError(absl::StrCat("custom op ", name_, " misbehaved in its ", function,
                                              ": ", failure.message,
                                              "; its host process was stopped"));
  }
}

absl::Status RemoteCustomOp::CheckNode(const graph::Node& node) const {
  const std::string op = absl::StrCat("custom op ", name_, " (", origin(), ")");
  if (static_cast<int32_t>(node.inputs.size()) != info_.num_inputs ||
      static_cast<int32_t>(node.outputs.size()) != info_.num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat("has ", node.inputs.size(), " inputs and ", node.outputs.size(), " outputs; ",
                     op, " takes ", info_.num_inputs, " and gives ", info_.num_outputs));
  }
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input ", i, " is omitted; ", op, " takes every input"));
    }
  }
  IPUPOD_RETURN_IF_ERROR(Attributes(node).status());
  for (const auto& [name, value] : node.attributes) {
    if (info_.any_attribute || std::find(info_.attributes.begin(), info_.attributes.end(), name) !=
                                   info_.attributes.end()) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "attribute '", name, "' is not one ", op, " reads (it reads ",
        info_.attributes.empty() ? "none" : absl::StrJoin(info_.attributes, ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status RemoteCustomOp::CheckInputType(size_t i, int32_t dtype) const {
  const int32_t want = info_.input_types[i];
  if (want == IPUPOD_DTYPE_UNDEFINED || want == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("input ", i, " is ", DTypeText(dtype),
                                                 "; custom op ", name_, " takes ", DTypeText(want),
                                                 " there"));
}

absl::StatusOr<std::vector<TensorType>> RemoteCustomOp::Infer(
    const graph::Node& node, absl::Span<const TensorType* const> inputs) const {
  InferRequest request;
  request.op = index_;
  IPUPOD_ASSIGN_OR_RETURN(request.attributes, Attributes(node));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i] == nullptr) return absl::InternalError("a custom op's input type is missing");
    IPUPOD_ASSIGN_OR_RETURN(WireType type, ToWire(*inputs[i]));
    IPUPOD_RETURN_IF_ERROR(CheckInputType(i, type.dtype));
    request.inputs.push_back(std::move(type));
  }
  request.num_outputs = static_cast<uint32_t>(info_.num_outputs);
  std::vector<TensorType> out;
  const CallSite site = Site("shape function");
  IPUPOD_RETURN_IF_ERROR(library_->Call(
      EncodeInfer(request), kControlFrameBytesMax, site,
      [&](absl::string_view reply) -> absl::Status {
        std::optional<Failure> failure;
        IPUPOD_ASSIGN_OR_RETURN(std::vector<WireType> types, DecodeTypesReply(reply, failure));
        if (failure.has_value()) return FromFailure(*failure, "shape function");
        if (types.size() != node.outputs.size()) {
          return absl::InternalError(absl::StrCat(site.who, " returned ", types.size(),
                                                  " output types for ", node.outputs.size(),
                                                  " outputs"));
        }
        for (const WireType& t : types) {
          IPUPOD_ASSIGN_OR_RETURN(TensorType type, FromWire(t));
          out.push_back(std::move(type));
        }
        return absl::OkStatus();
      }));
  return out;
}

absl::Status RemoteCustomOp::Compute(const graph::Node& node,
                                     absl::Span<const Tensor* const> inputs,
                                     absl::Span<Tensor> outputs) const {
  ComputeRequest request;
  request.op = index_;
  IPUPOD_ASSIGN_OR_RETURN(request.attributes, Attributes(node));
  std::vector<WireType> input_types;
  IPUPOD_RETURN_IF_ERROR(ViewTensors(inputs, input_types, request.inputs));
  uint64_t reply_bytes = kReplyOverheadBytes;
  for (const Tensor& t : outputs) {
    IPUPOD_ASSIGN_OR_RETURN(WireType type, ToWire(TensorType{t.dtype(), t.shape()}));
    request.outputs.push_back(std::move(type));
    reply_bytes += t.byte_size();
  }
  const CallSite site = Site("compute function");
  return library_->Call(
      EncodeCompute(request), reply_bytes, site, [&](absl::string_view reply) -> absl::Status {
        std::optional<Failure> failure;
        IPUPOD_ASSIGN_OR_RETURN(std::vector<WireTensor> got, DecodeTensorsReply(reply, failure));
        if (failure.has_value()) return FromFailure(*failure, "compute function");
        if (got.size() != outputs.size()) {
          return absl::InternalError(
              absl::StrCat(site.who, " returned ", got.size(), " outputs for ", outputs.size()));
        }
        for (size_t i = 0; i < got.size(); ++i) {
          if (!(got[i].type == request.outputs[i])) {
            return absl::InternalError(absl::StrCat(site.who, " returned output ", i,
                                                    " of another type than its shape function "
                                                    "gave; its host process was stopped"));
          }
          if (!got[i].bytes.empty()) {
            std::memcpy(outputs[i].mutable_raw_data(), got[i].bytes.data(), got[i].bytes.size());
          }
        }
        return absl::OkStatus();
      });
}

absl::Status RemoteCustomOp::Gradient(const graph::Node& node,
                                      absl::Span<const Tensor* const> inputs,
                                      absl::Span<const Tensor* const> outputs,
                                      absl::Span<const Tensor* const> output_grads,
                                      const std::vector<bool>& wants,
                                      std::vector<std::optional<Tensor>>& input_grads) const {
  if (!info_.has_gradient) {
    return absl::FailedPreconditionError(
        absl::StrCat("custom op ", name_, " has no gradient function"));
  }
  GradientRequest request;
  request.op = index_;
  request.wants = wants;
  IPUPOD_ASSIGN_OR_RETURN(request.attributes, Attributes(node));
  std::vector<WireType> input_types, output_types, grad_types;
  IPUPOD_RETURN_IF_ERROR(ViewTensors(inputs, input_types, request.inputs));
  IPUPOD_RETURN_IF_ERROR(ViewTensors(outputs, output_types, request.outputs));
  std::vector<Tensor> zeros;  // gradients that do not flow are zeros
  zeros.reserve(outputs.size());
  std::vector<const Tensor*> grads;
  uint64_t reply_bytes = kReplyOverheadBytes;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (output_grads.size() > i && output_grads[i] != nullptr) {
      grads.push_back(output_grads[i]);
      continue;
    }
    IPUPOD_ASSIGN_OR_RETURN(Tensor z, Tensor::Create(DType::kFloat32, outputs[i]->shape()));
    zeros.push_back(std::move(z));
    grads.push_back(&zeros.back());
  }
  IPUPOD_RETURN_IF_ERROR(ViewTensors(grads, grad_types, request.output_grads));
  for (const Tensor* t : inputs) reply_bytes += static_cast<uint64_t>(t->num_elements()) * 4;
  const CallSite site = Site("gradient function");
  return library_->Call(
      EncodeGradient(request), reply_bytes, site, [&](absl::string_view reply) -> absl::Status {
        std::optional<Failure> failure;
        IPUPOD_ASSIGN_OR_RETURN(auto got, DecodeGradientReply(reply, failure));
        if (failure.has_value()) return FromFailure(*failure, "gradient function");
        if (got.size() != inputs.size()) {
          return absl::InternalError(absl::StrCat(site.who, " returned ", got.size(),
                                                  " gradients for ", inputs.size(), " inputs"));
        }
        for (size_t i = 0; i < got.size(); ++i) {
          if (!got[i].has_value()) continue;
          const WireType want{IPUPOD_DTYPE_FLOAT32, inputs[i]->shape()};
          if (i >= wants.size() || !wants[i] || !(got[i]->type == want)) {
            return absl::InternalError(absl::StrCat(site.who, " returned a gradient for input ", i,
                                                    " that was not asked for or is not "
                                                    "float32 of the input's shape"));
          }
          IPUPOD_ASSIGN_OR_RETURN(
              Tensor g, Tensor::FromBytes(DType::kFloat32, inputs[i]->shape(), got[i]->bytes));
          input_grads[i] = std::move(g);
        }
        return absl::OkStatus();
      });
}

}  // namespace ipupod::customop
