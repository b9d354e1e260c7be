// File: client/files.h
//
// Whole-file reads for the client library and the CLI (models, configs,
// executables), with messages that name the file and what it was for.
//
// Thread safety: pure functions (they only read the file system).
// Errors: NOT_FOUND "WHAT 'PATH' does not exist"; INVALID_ARGUMENT when it
// is not a regular file ("is a directory", "is a character device": /dev/null)
// or is empty; INTERNAL when it exists but cannot be read (errno's text).
#ifndef IPUPOD_CLIENT_FILES_H_
#define IPUPOD_CLIENT_FILES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::client {

// `what` names the file's role in messages: "model", "--ipu-config file".
absl::StatusOr<std::string> ReadWholeFile(absl::string_view path, absl::string_view what);
// The checks ReadWholeFile makes before reading: a non-empty regular file.
absl::Status CheckReadableFile(absl::string_view path, absl::string_view what);

// Whether `path` can be written as tensor::WriteFileAtomically writes it (a
// temporary file beside it, then a rename): it is not a directory or device,
// and its directory exists and takes a new file - probed by creating and
// removing a temporary file, so nothing is left behind. NOT_FOUND for a
// missing directory, PERMISSION_DENIED when it refuses (or is read-only),
// INVALID_ARGUMENT when `path` is not a regular file, FAILED_PRECONDITION
// otherwise; the message names `what` ("--outputs"), the path and the fix.
absl::Status CheckWritablePath(absl::string_view path, absl::string_view what);

// PATH with its extension (after the last '.' of the last component)
// replaced by `extension` (".ipx"), or appended when it has none.
std::string ReplaceExtension(absl::string_view path, absl::string_view extension);

}  // namespace ipupod::client

#endif  // IPUPOD_CLIENT_FILES_H_
