#include "device/compiler/executable.h"

#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "device/compiler/executable_json.h"
#include "device/graph/onnx_import.h"
#include <unistd.h>

namespace ipupod::compiler {
namespace {

constexpr uint64_t kMetadataBytesMax = uint64_t{1} << 30;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLe(absl::string_view bytes, size_t offset, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    v |= uint64_t{static_cast<uint8_t>(bytes[offset + i])} << (8 * i);
  }
  return v;
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("executable is ", what));
}

// Magic, version, header size, exact length, hash. Returns the payload.
absl::StatusOr<absl::string_view> CheckContainer(absl::string_view bytes) {
  if (bytes.size() < kExecutableMagic.size() ||
      bytes.substr(0, kExecutableMagic.size()) != kExecutableMagic) {
    return absl::InvalidArgumentError(
        "not an ipupod executable (.ipx): the file does not start with the executable magic; "
        "compile the model with `ipupod compile`");
  }
  if (bytes.size() < 12) return Malformed("truncated: the header is incomplete");
  const uint64_t version = GetLe(bytes, 8, 4);
  if (version != kExecutableFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("executable format ", version, " but this ipupod reads ",
                     kExecutableFormatVersion, ": recompile with this version of ipupod"));
  }
  if (bytes.size() < kExecutableHeaderBytes)
    return Malformed("truncated: the header is incomplete");
  if (GetLe(bytes, 12, 4) != kExecutableHeaderBytes || GetLe(bytes, 56, 8) != 0) {
    return Malformed("corrupted: its header is inconsistent");
  }
  const uint64_t payload = GetLe(bytes, 16, 8);
  const uint64_t have = bytes.size() - kExecutableHeaderBytes;
  if (payload != have) {
    return Malformed(absl::StrCat(payload > have ? "truncated" : "corrupted", ": the header says ",
                                  payload, " payload bytes but the file has ", have,
                                  "; copy or compile it again"));
  }
  const absl::string_view body = bytes.substr(kExecutableHeaderBytes);
  const Sha256Digest digest = Sha256Of(body);
  if (bytes.substr(24, 32) != absl::string_view(reinterpret_cast<const char*>(digest.data()), 32)) {
    return Malformed("corrupted: its content hash does not match; copy or compile it again");
  }
  return body;
}

// One length-prefixed section of the payload.
absl::StatusOr<absl::string_view> TakeSection(absl::string_view& rest, uint64_t max,
                                              absl::string_view what) {
  if (rest.size() < 8) return Malformed(absl::StrCat("corrupted: the ", what, " is missing"));
  const uint64_t n = GetLe(rest, 0, 8);
  if (n > max || n > rest.size() - 8) {
    return Malformed(absl::StrCat("corrupted: the ", what, " length is out of range"));
  }
  const absl::string_view section = rest.substr(8, n);
  rest.remove_prefix(8 + n);
  return section;
}

int64_t ScaledDim(const tensor::Shape& shape, int64_t factor, tensor::Shape* out) {
  *out = shape;
  if (out->empty()) {
    if (factor > 1) out->push_back(factor);
  } else {
    (*out)[0] *= factor;
  }
  return factor;
}

}  // namespace

absl::string_view ExecutableModeName(ExecutableMode mode) {
  return mode == ExecutableMode::kTraining ? "training" : "inference";
}

absl::StatusOr<std::string> WriteExecutable(const Executable& executable) {
  IPUPOD_ASSIGN_OR_RETURN(std::string metadata, internal::ExecutableMetadataJson(executable));
  std::string payload;
  payload.reserve(16 + metadata.size() + executable.model_bytes.size());
  PutU64(payload, metadata.size());
  payload += metadata;
  PutU64(payload, executable.model_bytes.size());
  payload += executable.model_bytes;
  const Sha256Digest digest = Sha256Of(payload);
  std::string out(kExecutableMagic);
  PutU32(out, kExecutableFormatVersion);
  PutU32(out, kExecutableHeaderBytes);
  PutU64(out, payload.size());
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  PutU64(out, 0);
  out += payload;
  return out;
}

absl::StatusOr<Executable> ReadExecutable(absl::string_view bytes) {
  IPUPOD_ASSIGN_OR_RETURN(absl::string_view rest, CheckContainer(bytes));
  const std::string hash = DigestHex(Sha256Of(rest));
  IPUPOD_ASSIGN_OR_RETURN(absl::string_view metadata,
                          TakeSection(rest, kMetadataBytesMax, "metadata"));
  IPUPOD_ASSIGN_OR_RETURN(absl::string_view model,
                          TakeSection(rest, graph::kOnnxBytesMax, "model"));
  if (!rest.empty()) return Malformed("corrupted: bytes follow the model");
  Executable executable;
  IPUPOD_RETURN_IF_ERROR(internal::ReadExecutableMetadata(metadata, executable));
  executable.model_bytes = std::string(model);
  executable.content_hash = hash;
  return executable;
}

absl::Status CheckDeclaredHash(absl::string_view bytes, absl::string_view sha256) {
  if (bytes.size() < kExecutableHeaderBytes ||
      bytes.substr(0, kExecutableMagic.size()) != kExecutableMagic) {
    return absl::OkStatus();  // not an .ipx, or a truncated one: ReadExecutable says which
  }
  Sha256Digest header_hash;
  bytes.substr(24, header_hash.size())
      .copy(reinterpret_cast<char*>(header_hash.data()), header_hash.size());
  const std::string header_hex = DigestHex(header_hash);
  if (header_hex != sha256) {
    return absl::InvalidArgumentError(absl::StrCat("declared sha256 ", sha256,
                                                   " but the executable's header says ", header_hex,
                                                   "; declare the header's hash"));
  }
  const std::string payload_hex = DigestHex(Sha256Of(bytes.substr(kExecutableHeaderBytes)));
  if (payload_hex != sha256) {
    return absl::DataLossError(absl::StrCat("the executable's bytes hash to ", payload_hex,
                                            ", not ", sha256,
                                            ": it was corrupted on the way or on disk; upload it "
                                            "again, or recompile it if that fails"));
  }
  return absl::OkStatus();
}

absl::Status WriteExecutableFile(absl::string_view path, const Executable& executable) {
  IPUPOD_ASSIGN_OR_RETURN(std::string bytes, WriteExecutable(executable));
  const std::string target(path);
  const std::string tmp = absl::StrCat(target, ".tmp.", getpid());
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !file.flush()) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write executable file '", tmp, "'"));
    }
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename '", tmp, "' to '", target, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Executable> ReadExecutableFile(absl::string_view path) {
  std::ifstream file(std::string(path), std::ios::binary | std::ios::ate);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open executable file '", path, "'"));
  const std::streamoff size = file.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot read '", path, "'"));
  std::string bytes(static_cast<size_t>(size), '\0');
  file.seekg(0);
  if (!file.read(bytes.data(), size)) {
    return absl::InternalError(absl::StrCat("error reading executable file '", path, "'"));
  }
  auto executable = ReadExecutable(bytes);
  if (!executable.ok()) {
    return absl::Status(executable.status().code(),
                        absl::StrCat("'", path, "': ", executable.status().message()));
  }
  return executable;
}

tensor::Shape HostInputShape(const Executable& executable, const TensorSpec& input) {
  tensor::Shape shape;
  ScaledDim(input.shape, executable.batch_size_factor, &shape);
  return shape;
}

tensor::Shape HostOutputShape(const Executable& executable, const TensorSpec& output) {
  int64_t micro_batches = executable.replication_factor;
  switch (executable.output_mode.kind) {
    case OutputMode::Kind::kAll:
      micro_batches *= executable.device_iterations;
      if (executable.mode == ExecutableMode::kTraining) {
        micro_batches *= executable.training.gradient_accumulation_steps;
      }
      break;
    case OutputMode::Kind::kEveryN:
      micro_batches *= executable.device_iterations / executable.output_mode.every_n;
      break;
    case OutputMode::Kind::kFinal:
    case OutputMode::Kind::kSum:
      break;
  }
  tensor::Shape shape;
  ScaledDim(output.shape, micro_batches, &shape);
  return shape;
}

}  // namespace ipupod::compiler
