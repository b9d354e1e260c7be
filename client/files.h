// File: client/files.h
//
// Whole-file reads for the client library and the CLI (models, configs,
// executables), with messages that name the file and what it was for.
//
// Thread safety: pure functions (they only read the file system).
// Errors: NOT_FOUND "WHAT 'PATH' does not exist" (or is not a regular file),
// INTERNAL when it exists but cannot be read (with errno's text).
#ifndef IPUPOD_CLIENT_FILES_H_
#define IPUPOD_CLIENT_FILES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::client {

// `what` names the file's role in messages: "model", "--ipu-config file".
absl::StatusOr<std::string> ReadWholeFile(absl::string_view path, absl::string_view what);

// PATH with its extension (after the last '.' of the last component)
// replaced by `extension` (".ipx"), or appended when it has none.
std::string ReplaceExtension(absl::string_view path, absl::string_view extension);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_FILES_H_
