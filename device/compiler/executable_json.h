// File: device/compiler/executable_json.h
//
// Internal to ipupod_compiler: the metadata JSON of an executable (see
// device/compiler/executable.h for its fields). nlohmann exceptions stop here.
//
// Thread safety: pure functions.
// Errors: INVALID_ARGUMENT - writing: a string that is not valid UTF-8;
// reading: a missing field or one of the wrong type (named).
#ifndef IPUPOD_COMPILER_EXECUTABLE_JSON_H_
#define IPUPOD_COMPILER_EXECUTABLE_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/compiler/executable.h"

namespace ipupod::compiler::internal {

absl::StatusOr<std::string> ExecutableMetadataJson(const Executable& executable);

// Fills every field except model_bytes and content_hash.
absl::Status ReadExecutableMetadata(absl::string_view text, Executable& executable);

}  // namespace ipupod::compiler::internal

#endif  // IPUPOD_COMPILER_EXECUTABLE_JSON_H_
