// File: device/customop/protocol.h
//
// The protocol between ipupodd and `ipupod-custom-op-host` (device/customop/host.h) over one
// Unix socket: frames of a 4-byte little-endian length and that many bytes, each a
// message below. The host speaks first (Hello: the library's op table, or why it could
// not load it); then ipupodd sends one request at a time and reads one reply.
//
//   Hello          u8 status, then the LibraryInfo (ok) or a message
//   Infer          u8 1, u32 op, attributes, inputs' types, u32 outputs
//   Compute        u8 2, u32 op, attributes, input tensors, outputs' types
//   Gradient       u8 3, u32 op, attributes, input tensors, output tensors, output
//                  gradients, the inputs whose gradient is wanted (u8 each)
//   Reply          u8 status; ok: the types (Infer), tensors (Compute) or per input u8
//                  present + tensor (Gradient); otherwise a message
//
// Integers are little-endian; a type is i32 dtype, u32 rank, i64 dims; a tensor is its
// type, u64 bytes and the bytes; a string is u64 length and bytes; an attribute is its
// name, i32 type and the values of custom_op_abi.h's six types. The codec is the same
// for both ends, so a request the host cannot read and a reply ipupodd cannot read are
// both "malformed", told apart by who reads them.
//
// Thread safety: plain values and pure functions.
// Errors: every Decode* returns INTERNAL naming what is malformed (truncated, a count or
// a length past the bytes that remain, a rank past IPUPOD_MAX_RANK, bytes left over):
// the peer misbehaved, which the caller turns into its own message.
#ifndef IPUPOD_CUSTOMOP_PROTOCOL_H_
#define IPUPOD_CUSTOMOP_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::customop {

inline constexpr size_t kFrameHeaderBytes = 4;
// Hello, Infer and their replies are small; a frame of these kinds past this is
// malformed.
inline constexpr uint64_t kControlFrameBytesMax = uint64_t{1} << 20;
// Most ops a library may declare, and operands an op may have.
inline constexpr int32_t kOpsMax = 1024;
inline constexpr int32_t kOperandsMax = 64;

enum class RequestKind : uint8_t { kInfer = 1, kCompute = 2, kGradient = 3 };

enum class ReplyStatus : uint8_t {
  kOk = 0,
  kOpError = 1,      // the library's function returned non-zero: its message
  kMisbehaved = 2,   // the host caught the library doing what it must not (message says what)
  kOutOfMemory = 3,  // the host could not hold the call's operands within its memory limit
};

// One op of a library's table (device/customop/custom_op_abi.h's IpupodCustomOp, as data).
struct OpInfo {
  std::string domain;
  std::string name;
  int32_t since_version = 1;
  int32_t end_version = 0;  // 0: open
  int32_t num_inputs = 0;
  int32_t num_outputs = 0;
  std::vector<int32_t> input_types;  // num_inputs; 0 = any
  bool any_attribute = true;         // no attribute list given
  std::vector<std::string> attributes;
  bool has_gradient = false;

  bool operator==(const OpInfo&) const = default;
};

struct LibraryInfo {
  uint32_t abi_version = 0;
  std::string name;
  std::vector<OpInfo> ops;

  bool operator==(const LibraryInfo&) const = default;
};

struct WireType {
  int32_t dtype = 0;
  std::vector<int64_t> dims;

  bool operator==(const WireType&) const = default;
};

// A tensor on the wire: its type and its raw bytes (a view into the frame when decoded).
struct WireTensor {
  WireType type;
  absl::string_view bytes;
};

struct WireAttribute {
  std::string name;
  int32_t type = 0;  // IpupodAttributeType
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;  // STRING: exactly one
};

struct InferRequest {
  uint32_t op = 0;
  std::vector<WireAttribute> attributes;
  std::vector<WireType> inputs;
  uint32_t num_outputs = 0;
};

struct ComputeRequest {
  uint32_t op = 0;
  std::vector<WireAttribute> attributes;
  std::vector<WireTensor> inputs;
  std::vector<WireType> outputs;
};

struct GradientRequest {
  uint32_t op = 0;
  std::vector<WireAttribute> attributes;
  std::vector<WireTensor> inputs;
  std::vector<WireTensor> outputs;
  std::vector<WireTensor> output_grads;
  std::vector<bool> wants;  // per input
};

// Bytes of a frame's payload, and of one value of `type` (dtype size x elements); -1 for
// an unknown dtype, a negative dim or a size past 2^62.
int64_t DTypeBytes(int32_t dtype);
int64_t TypeBytes(const WireType& type);

// Each Encode returns a frame's payload (without the length); FrameHeader gives the 4
// bytes in front of it.
std::string FrameHeader(uint64_t payload_bytes);
std::string EncodeHelloOk(const LibraryInfo& info);
std::string EncodeHelloError(absl::string_view message);
std::string EncodeInfer(const InferRequest& request);
std::string EncodeCompute(const ComputeRequest& request);
std::string EncodeGradient(const GradientRequest& request);
std::string EncodeFailure(ReplyStatus status, absl::string_view message);
std::string EncodeTypesReply(const std::vector<WireType>& types);
std::string EncodeTensorsReply(const std::vector<WireTensor>& tensors);
std::string EncodeGradientReply(const std::vector<std::optional<WireTensor>>& grads);

// A reply that is not kOk: its status and message.
struct Failure {
  ReplyStatus status = ReplyStatus::kOpError;
  std::string message;
};

// Hello: the table, or the host's message about why it could not load the library.
absl::StatusOr<LibraryInfo> DecodeHello(absl::string_view payload, std::string* load_error);
// The kind of a request (first byte).
absl::StatusOr<RequestKind> PeekRequestKind(absl::string_view payload);
absl::StatusOr<InferRequest> DecodeInfer(absl::string_view payload);
// The returned tensors view `payload`, which must outlive them.
absl::StatusOr<ComputeRequest> DecodeCompute(absl::string_view payload);
absl::StatusOr<GradientRequest> DecodeGradient(absl::string_view payload);

// Replies: `failure` is set (and the result empty) for a reply that is not kOk.
absl::StatusOr<std::vector<WireType>> DecodeTypesReply(absl::string_view payload,
                                                       std::optional<Failure>& failure);
absl::StatusOr<std::vector<WireTensor>> DecodeTensorsReply(absl::string_view payload,
                                                           std::optional<Failure>& failure);
absl::StatusOr<std::vector<std::optional<WireTensor>>> DecodeGradientReply(
    absl::string_view payload, std::optional<Failure>& failure);

}  // namespace ipupod::customop

#endif  // IPUPOD_CUSTOMOP_PROTOCOL_H_
