#include "device/customop/protocol.h"

#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/customop/custom_op_abi.h"

namespace ipupod::customop {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the custom op protocol writes the host's byte order, little-endian");

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void Bytes(absl::string_view bytes) {
    Put<uint64_t>(bytes.size());
    out_.append(bytes.data(), bytes.size());
  }
  void Type(const WireType& type) {
    Put<int32_t>(type.dtype);
    Put<uint32_t>(static_cast<uint32_t>(type.dims.size()));
    for (int64_t d : type.dims) Put<int64_t>(d);
  }
  void Tensor(const WireTensor& t) {
    Type(t.type);
    Bytes(t.bytes);
  }
  void Attribute(const WireAttribute& a);
  void Attributes(const std::vector<WireAttribute>& attributes) {
    Put<uint32_t>(static_cast<uint32_t>(attributes.size()));
    for (const WireAttribute& a : attributes) Attribute(a);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

void Writer::Attribute(const WireAttribute& a) {
  Bytes(a.name);
  Put<int32_t>(a.type);
  Put<uint32_t>(static_cast<uint32_t>(a.floats.size()));
  for (float f : a.floats) Put<float>(f);
  Put<uint32_t>(static_cast<uint32_t>(a.ints.size()));
  for (int64_t i : a.ints) Put<int64_t>(i);
  Put<uint32_t>(static_cast<uint32_t>(a.strings.size()));
  for (const std::string& s : a.strings) Bytes(s);
}

// Reads what Writer wrote. The first problem is kept (later reads return zeros), so a
// decoder reads everything and asks Finish() once.
class Reader {
 public:
  Reader(absl::string_view in, absl::string_view what) : in_(in), what_(what) {}

  template <typename T>
  T Get() {
    T value{};
    if (!Need(sizeof(T), "a number")) return value;
    std::memcpy(&value, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // A count of elements of at least `min_bytes` each, which the rest must hold.
  uint32_t Count(size_t min_bytes, uint32_t max = std::numeric_limits<uint32_t>::max()) {
    const uint32_t n = Get<uint32_t>();
    if (n > max || (min_bytes > 0 && n > (in_.size() - pos_) / min_bytes)) {
      Fail(absl::StrCat("a count of ", n, " past what the message holds"));
      return 0;
    }
    return n;
  }
  absl::string_view Bytes() {
    const uint64_t n = Get<uint64_t>();
    if (!Need(n, "bytes")) return {};
    absl::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  WireType Type();
  WireTensor Tensor() {
    WireTensor t;
    t.type = Type();
    t.bytes = Bytes();
    if (ok() && static_cast<int64_t>(t.bytes.size()) != TypeBytes(t.type)) {
      Fail(absl::StrCat("a tensor of ", t.bytes.size(), " bytes for its type"));
    }
    return t;
  }
  WireAttribute Attribute();
  std::vector<WireAttribute> Attributes() {
    std::vector<WireAttribute> out(Count(4 + 8 + 12));
    for (WireAttribute& a : out) a = Attribute();
    return out;
  }
  std::vector<WireType> Types() {
    std::vector<WireType> out(Count(8, kOperandsMax));
    for (WireType& t : out) t = Type();
    return out;
  }
  std::vector<WireTensor> Tensors() {
    std::vector<WireTensor> out(Count(16, kOperandsMax));
    for (WireTensor& t : out) t = Tensor();
    return out;
  }
  void Fail(absl::string_view why) {
    if (error_.empty()) error_ = absl::StrCat(why, " at byte ", pos_);
  }
  bool ok() const { return error_.empty(); }
  absl::Status Finish() {
    if (ok() && pos_ != in_.size()) Fail(absl::StrCat(in_.size() - pos_, " bytes left over"));
    if (ok()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("malformed ", what_, ": ", error_));
  }

 private:
  bool Need(uint64_t n, absl::string_view what) {
    if (!ok()) return false;
    if (n > in_.size() - pos_) {
      Fail(absl::StrCat("truncated (", what, ": ", n, " past the ", in_.size() - pos_,
                        " that remain)"));
      return false;
    }
    return true;
  }

  absl::string_view in_;
  absl::string_view what_;
  size_t pos_ = 0;
  std::string error_;
};

WireType Reader::Type() {
  WireType t;
  t.dtype = Get<int32_t>();
  const uint32_t rank = Get<uint32_t>();
  if (rank > IPUPOD_MAX_RANK) {
    Fail(absl::StrCat("rank ", rank, " (at most ", IPUPOD_MAX_RANK, ")"));
    return t;
  }
  t.dims.resize(rank);
  for (int64_t& d : t.dims) d = Get<int64_t>();
  return t;
}

WireAttribute Reader::Attribute() {
  WireAttribute a;
  a.name = std::string(Bytes());
  a.type = Get<int32_t>();
  a.floats.resize(Count(sizeof(float)));
  for (float& f : a.floats) f = Get<float>();
  a.ints.resize(Count(sizeof(int64_t)));
  for (int64_t& i : a.ints) i = Get<int64_t>();
  a.strings.resize(Count(sizeof(uint64_t)));
  for (std::string& s : a.strings) s = std::string(Bytes());
  return a;
}

void PutOpInfo(Writer& w, const OpInfo& op) {
  w.Bytes(op.domain);
  w.Bytes(op.name);
  w.Put<int32_t>(op.since_version);
  w.Put<int32_t>(op.end_version);
  w.Put<int32_t>(op.num_inputs);
  w.Put<int32_t>(op.num_outputs);
  w.Put<uint32_t>(static_cast<uint32_t>(op.input_types.size()));
  for (int32_t t : op.input_types) w.Put<int32_t>(t);
  w.Put<uint8_t>(op.any_attribute ? 1 : 0);
  w.Put<uint32_t>(static_cast<uint32_t>(op.attributes.size()));
  for (const std::string& a : op.attributes) w.Bytes(a);
  w.Put<uint8_t>(op.has_gradient ? 1 : 0);
}

OpInfo GetOpInfo(Reader& r) {
  OpInfo op;
  op.domain = std::string(r.Bytes());
  op.name = std::string(r.Bytes());
  op.since_version = r.Get<int32_t>();
  op.end_version = r.Get<int32_t>();
  op.num_inputs = r.Get<int32_t>();
  op.num_outputs = r.Get<int32_t>();
  op.input_types.resize(r.Count(sizeof(int32_t), kOperandsMax));
  for (int32_t& t : op.input_types) t = r.Get<int32_t>();
  op.any_attribute = r.Get<uint8_t>() != 0;
  op.attributes.resize(r.Count(sizeof(uint64_t)));
  for (std::string& a : op.attributes) a = std::string(r.Bytes());
  op.has_gradient = r.Get<uint8_t>() != 0;
  return op;
}

// The status byte of a reply; a failure's message is read into `failure`.
bool ReadStatus(Reader& r, std::optional<Failure>& failure) {
  const uint8_t status = r.Get<uint8_t>();
  if (status == static_cast<uint8_t>(ReplyStatus::kOk)) return true;
  if (status != static_cast<uint8_t>(ReplyStatus::kOpError) &&
      status != static_cast<uint8_t>(ReplyStatus::kMisbehaved) &&
      status != static_cast<uint8_t>(ReplyStatus::kOutOfMemory)) {
    r.Fail(absl::StrCat("reply status ", status));
    return false;
  }
  failure = Failure{static_cast<ReplyStatus>(status), std::string(r.Bytes())};
  return false;
}

absl::Status CheckKind(Reader& r, RequestKind kind) {
  if (r.Get<uint8_t>() != static_cast<uint8_t>(kind)) {
    return absl::InternalError("malformed request: not of the kind expected");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DTypeBytes(int32_t dtype) {
  switch (dtype) {
    case IPUPOD_DTYPE_FLOAT32:
    case IPUPOD_DTYPE_INT32:
      return 4;
    case IPUPOD_DTYPE_INT64:
      return 8;
    case IPUPOD_DTYPE_BOOL:
      return 1;
    default:
      return -1;
  }
}

int64_t TypeBytes(const WireType& type) {
  int64_t bytes = DTypeBytes(type.dtype);
  if (bytes < 0) return -1;
  for (int64_t d : type.dims) {
    if (d < 0 || (d > 0 && bytes > (int64_t{1} << 62) / d)) return -1;
    bytes *= d;
  }
  return bytes;
}

std::string FrameHeader(uint64_t payload_bytes) {
  const uint32_t n = static_cast<uint32_t>(payload_bytes);
  char bytes[kFrameHeaderBytes];
  std::memcpy(bytes, &n, sizeof(n));
  return std::string(bytes, sizeof(bytes));
}

std::string EncodeHelloOk(const LibraryInfo& info) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyStatus::kOk));
  w.Put<uint32_t>(info.abi_version);
  w.Bytes(info.name);
  w.Put<uint32_t>(static_cast<uint32_t>(info.ops.size()));
  for (const OpInfo& op : info.ops) PutOpInfo(w, op);
  return w.Take();
}

std::string EncodeHelloError(absl::string_view message) {
  return EncodeFailure(ReplyStatus::kOpError, message);
}

std::string EncodeFailure(ReplyStatus status, absl::string_view message) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(status));
  w.Bytes(message);
  return w.Take();
}

std::string EncodeInfer(const InferRequest& request) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(RequestKind::kInfer));
  w.Put<uint32_t>(request.op);
  w.Attributes(request.attributes);
  w.Put<uint32_t>(static_cast<uint32_t>(request.inputs.size()));
  for (const WireType& t : request.inputs) w.Type(t);
  w.Put<uint32_t>(request.num_outputs);
  return w.Take();
}

std::string EncodeCompute(const ComputeRequest& request) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(RequestKind::kCompute));
  w.Put<uint32_t>(request.op);
  w.Attributes(request.attributes);
  w.Put<uint32_t>(static_cast<uint32_t>(request.inputs.size()));
  for (const WireTensor& t : request.inputs) w.Tensor(t);
  w.Put<uint32_t>(static_cast<uint32_t>(request.outputs.size()));
  for (const WireType& t : request.outputs) w.Type(t);
  return w.Take();
}

std::string EncodeGradient(const GradientRequest& request) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(RequestKind::kGradient));
  w.Put<uint32_t>(request.op);
  w.Attributes(request.attributes);
  for (const std::vector<WireTensor>* list :
       {&request.inputs, &request.outputs, &request.output_grads}) {
    w.Put<uint32_t>(static_cast<uint32_t>(list->size()));
    for (const WireTensor& t : *list) w.Tensor(t);
  }
  w.Put<uint32_t>(static_cast<uint32_t>(request.wants.size()));
  for (bool want : request.wants) w.Put<uint8_t>(want ? 1 : 0);
  return w.Take();
}

std::string EncodeTypesReply(const std::vector<WireType>& types) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyStatus::kOk));
  w.Put<uint32_t>(static_cast<uint32_t>(types.size()));
  for (const WireType& t : types) w.Type(t);
  return w.Take();
}

std::string EncodeTensorsReply(const std::vector<WireTensor>& tensors) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyStatus::kOk));
  w.Put<uint32_t>(static_cast<uint32_t>(tensors.size()));
  for (const WireTensor& t : tensors) w.Tensor(t);
  return w.Take();
}

std::string EncodeGradientReply(const std::vector<std::optional<WireTensor>>& grads) {
  Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(ReplyStatus::kOk));
  w.Put<uint32_t>(static_cast<uint32_t>(grads.size()));
  for (const std::optional<WireTensor>& g : grads) {
    w.Put<uint8_t>(g.has_value() ? 1 : 0);
    if (g.has_value()) w.Tensor(*g);
  }
  return w.Take();
}

absl::StatusOr<LibraryInfo> DecodeHello(absl::string_view payload, std::string* load_error) {
  Reader r(payload, "hello from the custom op host");
  std::optional<Failure> failure;
  LibraryInfo info;
  if (ReadStatus(r, failure)) {
    info.abi_version = r.Get<uint32_t>();
    info.name = std::string(r.Bytes());
    info.ops.resize(r.Count(40, kOpsMax));
    for (OpInfo& op : info.ops) op = GetOpInfo(r);
  }
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  if (failure.has_value()) {
    *load_error = failure->message;
    return absl::FailedPreconditionError(failure->message);
  }
  return info;
}

absl::StatusOr<RequestKind> PeekRequestKind(absl::string_view payload) {
  if (payload.empty()) return absl::InternalError("malformed request: empty");
  const uint8_t kind = static_cast<uint8_t>(payload[0]);
  if (kind < 1 || kind > 3) {
    return absl::InternalError(absl::StrCat("malformed request: kind ", kind));
  }
  return static_cast<RequestKind>(kind);
}

absl::StatusOr<InferRequest> DecodeInfer(absl::string_view payload) {
  Reader r(payload, "shape request");
  IPUPOD_RETURN_IF_ERROR(CheckKind(r, RequestKind::kInfer));
  InferRequest request;
  request.op = r.Get<uint32_t>();
  request.attributes = r.Attributes();
  request.inputs = r.Types();
  request.num_outputs = r.Get<uint32_t>();
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return request;
}

absl::StatusOr<ComputeRequest> DecodeCompute(absl::string_view payload) {
  Reader r(payload, "compute request");
  IPUPOD_RETURN_IF_ERROR(CheckKind(r, RequestKind::kCompute));
  ComputeRequest request;
  request.op = r.Get<uint32_t>();
  request.attributes = r.Attributes();
  request.inputs = r.Tensors();
  request.outputs = r.Types();
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return request;
}

absl::StatusOr<GradientRequest> DecodeGradient(absl::string_view payload) {
  Reader r(payload, "gradient request");
  IPUPOD_RETURN_IF_ERROR(CheckKind(r, RequestKind::kGradient));
  GradientRequest request;
  request.op = r.Get<uint32_t>();
  request.attributes = r.Attributes();
  request.inputs = r.Tensors();
  request.outputs = r.Tensors();
  request.output_grads = r.Tensors();
  request.wants.resize(r.Count(1, kOperandsMax));
  for (size_t i = 0; i < request.wants.size(); ++i) request.wants[i] = r.Get<uint8_t>() != 0;
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return request;
}

absl::StatusOr<std::vector<WireType>> DecodeTypesReply(absl::string_view payload,
                                                       std::optional<Failure>& failure) {
  Reader r(payload, "reply of the shape function");
  std::vector<WireType> types;
  if (ReadStatus(r, failure)) types = r.Types();
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return types;
}

absl::StatusOr<std::vector<WireTensor>> DecodeTensorsReply(absl::string_view payload,
                                                           std::optional<Failure>& failure) {
  Reader r(payload, "reply of the compute function");
  std::vector<WireTensor> tensors;
  if (ReadStatus(r, failure)) tensors = r.Tensors();
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return tensors;
}

absl::StatusOr<std::vector<std::optional<WireTensor>>> DecodeGradientReply(
    absl::string_view payload, std::optional<Failure>& failure) {
  Reader r(payload, "reply of the gradient function");
  std::vector<std::optional<WireTensor>> grads;
  if (ReadStatus(r, failure)) {
    grads.resize(r.Count(1, kOperandsMax));
    for (std::optional<WireTensor>& g : grads) {
      if (r.Get<uint8_t>() != 0) g = r.Tensor();
    }
  }
  IPUPOD_RETURN_IF_ERROR(r.Finish());
  return grads;
}

}  // namespace ipupod::customop
