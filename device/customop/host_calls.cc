#include "device/customop/host_calls.h"

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ipupod::customop {
namespace {

constexpr unsigned char kGuardByte = 0xA5;

// Zero-filled, 8-byte aligned bytes with a guard band behind them.
class Buffer {
 public:
  explicit Buffer(int64_t bytes)
      : bytes_(bytes),
        words_(static_cast<size_t>((bytes + kGuardBytes + 7) / 8)),
        storage_(new uint64_t[words_]) {
    char* p = reinterpret_cast<char*>(storage_.get());
    std::memset(p, 0, static_cast<size_t>(bytes_));
    std::memset(p + bytes_, kGuardByte, words_ * 8 - static_cast<size_t>(bytes_));
  }
  char* data() { return reinterpret_cast<char*>(storage_.get()); }
  int64_t bytes() const { return bytes_; }
  bool GuardIntact() const {
    const auto* p = reinterpret_cast<const unsigned char*>(storage_.get());
    for (size_t i = static_cast<size_t>(bytes_); i < words_ * 8; ++i) {
      if (p[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  int64_t bytes_;
  size_t words_;
  std::unique_ptr<uint64_t[]> storage_;
};

// The C view of the request's attributes (custom_op_abi.h's IpupodAttributes).
class CAttributes {
 public:
  explicit CAttributes(const std::vector<WireAttribute>& attributes) {
    items_.reserve(attributes.size());
    pointers_.reserve(attributes.size());
    lengths_.reserve(attributes.size());
    for (const WireAttribute& a : attributes) {
      IpupodAttribute c{};
      c.name = a.name.c_str();
      c.type = a.type;
      c.floats = a.floats.data();
      c.ints = a.ints.data();
      std::vector<const char*>& pointers = pointers_.emplace_back();
      std::vector<int64_t>& lengths = lengths_.emplace_back();
      for (const std::string& s : a.strings) {
        pointers.push_back(s.data());
        lengths.push_back(static_cast<int64_t>(s.size()));
      }
      c.strings = pointers.data();
      c.string_lengths = lengths.data();
      if (a.type == IPUPOD_ATTRIBUTE_STRING && !a.strings.empty()) {
        c.string = a.strings[0].data();
        c.count = static_cast<int64_t>(a.strings[0].size());
      } else {
        c.count = static_cast<int64_t>(a.floats.size() + a.ints.size() + a.strings.size());
      }
      items_.push_back(c);
    }
    view_ = IpupodAttributes{items_.data(), static_cast<int64_t>(items_.size())};
  }
  const IpupodAttributes* view() const { return &view_; }

 private:
  std::vector<IpupodAttribute> items_;
  std::vector<std::vector<const char*>> pointers_;
  std::vector<std::vector<int64_t>> lengths_;
  IpupodAttributes view_{};
};

IpupodTensorType ToC(const WireType& t) {
  IpupodTensorType c{};
  c.dtype = t.dtype;
  c.rank = static_cast<int32_t>(t.dims.size());
  for (size_t i = 0; i < t.dims.size(); ++i) c.dims[i] = t.dims[i];
  return c;
}

std::string TypeText(const WireType& t) {
  return absl::StrCat("dtype ", t.dtype, " [", absl::StrJoin(t.dims, ", "), "]");
}

// The shape function's output i, checked.
std::optional<std::string> CheckShape(const IpupodTensorType& c, int i, WireType& out) {
  if (DTypeBytes(c.dtype) < 0) return absl::StrCat("gave output ", i, " the dtype ", c.dtype);
  if (c.rank < 0 || c.rank > IPUPOD_MAX_RANK) {
    return absl::StrCat("gave output ", i, " rank ", c.rank, " (0 to ", IPUPOD_MAX_RANK, ")");
  }
  out.dtype = c.dtype;
  out.dims.assign(c.dims, c.dims + c.rank);
  if (TypeBytes(out) < 0) return absl::StrCat("gave output ", i, " the shape ", TypeText(out));
  return std::nullopt;
}

std::string Misbehaved(absl::string_view what, bool& fatal) {
  fatal = true;
  return EncodeFailure(ReplyStatus::kMisbehaved, what);
}

// Runs one library call; the text of an exception that escaped it, if one did.
template <typename F>
std::optional<std::string> Guarded(const std::function<void()>& before, F&& call, int& rc) {
  if (before) before();
  try {
    rc = call();
  } catch (const std::exception& e) {
    return absl::StrCat("threw a C++ exception (", e.what(), ")");
  } catch (...) {
    return std::string("threw an exception");
  }
  return std::nullopt;
}

std::string OpFailed(const char* error) {
  const size_t n = strnlen(error, kErrorBytes);
  return EncodeFailure(ReplyStatus::kOpError,
                       n == 0 ? absl::string_view("(no message)") : absl::string_view(error, n));
}

// Inputs copied into aligned buffers, viewed as IpupodTensors.
struct Inputs {
  std::vector<Buffer> buffers;
  std::vector<IpupodTensor> views;

  explicit Inputs(const std::vector<WireTensor>& tensors) {
    buffers.reserve(tensors.size());
    for (const WireTensor& t : tensors) {
      Buffer& b = buffers.emplace_back(static_cast<int64_t>(t.bytes.size()));
      if (!t.bytes.empty()) std::memcpy(b.data(), t.bytes.data(), t.bytes.size());
      IpupodTensor view{};
      view.type = ToC(t.type);
      view.num_elements = IpupodNumElements(&view.type);
      view.data = t.bytes.empty() ? nullptr : b.data();
      views.push_back(view);
    }
  }
};

// Output buffers of the given types (absent: not wanted), viewed as IpupodMutableTensors.
struct Outputs {
  std::vector<std::optional<Buffer>> buffers;
  std::vector<IpupodMutableTensor> views;
  std::vector<WireType> types;

  void Add(const WireType& type, bool wanted) {
    IpupodMutableTensor view{};
    view.type = ToC(type);
    types.push_back(type);
    if (wanted) {
      Buffer& b = buffers.emplace_back(std::in_place, TypeBytes(type)).value();
      view.num_elements = IpupodNumElements(&view.type);
      view.data = b.bytes() > 0 ? b.data() : nullptr;
    } else {
      buffers.emplace_back();
    }
    views.push_back(view);
  }
  // The first output whose guard band was written, or -1.
  int Overrun() const {
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].has_value() && !buffers[i]->GuardIntact()) return static_cast<int>(i);
    }
    return -1;
  }
  std::optional<WireTensor> Wire(size_t i) {
    if (!buffers[i].has_value()) return std::nullopt;
    return WireTensor{
        types[i], absl::string_view(buffers[i]->data(), static_cast<size_t>(buffers[i]->bytes()))};
  }
};

std::string Overran(const Outputs& outputs, int i, absl::string_view what, bool& fatal) {
  return Misbehaved(absl::StrCat("wrote past the end of ", what, " ", i, " (",
                                 TypeText(outputs.types[static_cast<size_t>(i)]), ", ",
                                 outputs.buffers[static_cast<size_t>(i)]->bytes(), " bytes)"),
                    fatal);
}

}  // namespace

const IpupodCustomOp* HostCalls::Op(uint32_t index) const {
  return index < static_cast<uint32_t>(table_->num_ops) ? &table_->ops[index] : nullptr;
}

std::string HostCalls::Handle(absl::string_view request, bool& fatal) {
  fatal = false;
  absl::StatusOr<RequestKind> kind = PeekRequestKind(request);
  try {
    if (kind.ok() && *kind == RequestKind::kInfer) {
      absl::StatusOr<InferRequest> r = DecodeInfer(request);
      if (r.ok()) return Infer(*r, fatal);
      kind = r.status();
    } else if (kind.ok() && *kind == RequestKind::kCompute) {
      absl::StatusOr<ComputeRequest> r = DecodeCompute(request);
      if (r.ok()) return Compute(*r, fatal);
      kind = r.status();
    } else if (kind.ok()) {
      absl::StatusOr<GradientRequest> r = DecodeGradient(request);
      if (r.ok()) return Gradient(*r, fatal);
      kind = r.status();
    }
  } catch (const std::bad_alloc&) {
    return EncodeFailure(ReplyStatus::kOutOfMemory,
                         "the host could not allocate the call's operands within its address "
                         "space limit");
  }
  return Misbehaved(
      absl::StrCat("the host received a request it cannot read: ", kind.status().message()), fatal);
}

std::string HostCalls::Infer(const InferRequest& request, bool& fatal) {
  const IpupodCustomOp* op = Op(request.op);
  if (op == nullptr || request.num_outputs != static_cast<uint32_t>(op->num_outputs)) {
    return Misbehaved("the host received a shape request for an op it lacks", fatal);
  }
  CAttributes attributes(request.attributes);
  std::vector<IpupodTensorType> inputs;
  for (const WireType& t : request.inputs) inputs.push_back(ToC(t));
  std::vector<IpupodTensorType> outputs(request.num_outputs);
  char error[kErrorBytes] = {};
  int rc = 0;
  std::optional<std::string> thrown = Guarded(
      before_call_,
      [&] {
        return op->infer_shapes(attributes.view(), inputs.data(),
                                static_cast<int32_t>(inputs.size()), outputs.data(),
                                static_cast<int32_t>(outputs.size()), error, sizeof(error) - 1);
      },
      rc);
  if (thrown.has_value()) return Misbehaved(*thrown, fatal);
  if (rc != 0) return OpFailed(error);
  std::vector<WireType> types(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::optional<std::string> bad = CheckShape(outputs[i], static_cast<int>(i), types[i]);
    if (bad.has_value()) return EncodeFailure(ReplyStatus::kMisbehaved, *bad);
  }
  return EncodeTypesReply(types);
}

std::string HostCalls::Compute(const ComputeRequest& request, bool& fatal) {
  const IpupodCustomOp* op = Op(request.op);
  if (op == nullptr) return Misbehaved("the host received a request for an op it lacks", fatal);
  CAttributes attributes(request.attributes);
  Inputs inputs(request.inputs);
  Outputs outputs;
  for (const WireType& t : request.outputs) outputs.Add(t, /*wanted=*/true);
  char error[kErrorBytes] = {};
  int rc = 0;
  std::optional<std::string> thrown = Guarded(
      before_call_,
      [&] {
        return op->compute(attributes.view(), inputs.views.data(),
                           static_cast<int32_t>(inputs.views.size()), outputs.views.data(),
                           static_cast<int32_t>(outputs.views.size()), error, sizeof(error) - 1);
      },
      rc);
  if (const int i = outputs.Overrun(); i >= 0) return Overran(outputs, i, "output", fatal);
  if (thrown.has_value()) return Misbehaved(*thrown, fatal);
  if (rc != 0) return OpFailed(error);
  std::vector<WireTensor> tensors;
  for (size_t i = 0; i < outputs.types.size(); ++i) tensors.push_back(*outputs.Wire(i));
  return EncodeTensorsReply(tensors);
}

std::string HostCalls::Gradient(const GradientRequest& request, bool& fatal) {
  const IpupodCustomOp* op = Op(request.op);
  if (op == nullptr || op->gradient == nullptr || request.wants.size() != request.inputs.size() ||
      request.output_grads.size() != request.outputs.size()) {
    return Misbehaved("the host received a gradient request it cannot serve", fatal);
  }
  CAttributes attributes(request.attributes);
  Inputs inputs(request.inputs), outputs(request.outputs), output_grads(request.output_grads);
  Outputs grads;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const WireType& t = request.inputs[i].type;
    const bool wanted = request.wants[i] && t.dtype == IPUPOD_DTYPE_FLOAT32;
    grads.Add(WireType{IPUPOD_DTYPE_FLOAT32, t.dims}, wanted);
  }
  char error[kErrorBytes] = {};
  int rc = 0;
  std::optional<std::string> thrown = Guarded(
      before_call_,
      [&] {
        return op->gradient(attributes.view(), inputs.views.data(),
                            static_cast<int32_t>(inputs.views.size()), outputs.views.data(),
                            static_cast<int32_t>(outputs.views.size()), output_grads.views.data(),
                            grads.views.data(), error, sizeof(error) - 1);
      },
      rc);
  if (const int i = grads.Overrun(); i >= 0)
    return Overran(grads, i, "the gradient of input", fatal);
  if (thrown.has_value()) return Misbehaved(*thrown, fatal);
  if (rc != 0) return OpFailed(error);
  std::vector<std::optional<WireTensor>> out;
  for (size_t i = 0; i < grads.types.size(); ++i) out.push_back(grads.Wire(i));
  return EncodeGradientReply(out);
}

}  // namespace ipupod::customop
