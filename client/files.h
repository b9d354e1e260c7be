// File: client/files.h
//
// Whole-file reads for the client library and the CLI (models, configs,
// executables), with messages that name the file and what it was for; and
// reads in bounded pieces for files of any size (hashing and uploading the
// blobs of batch jobs: memory stays at one piece whatever the file's size).
//
// Thread safety: pure functions (they only read the file system).
// Errors: NOT_FOUND "WHAT 'PATH' does not exist"; INVALID_ARGUMENT when it
// is not a regular file ("is a directory", "is a character device": /dev/null)
// or is empty; INTERNAL when it exists but cannot be read (errno's text).
#ifndef IPUPOD_CLIENT_FILES_H_
#define IPUPOD_CLIENT_FILES_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::client {

// `what` names the file's role in messages: "model", "--ipu-config file".
absl::StatusOr<std::string> ReadWholeFile(absl::string_view path, absl::string_view what);
// The checks ReadWholeFile makes before reading: a non-empty regular file.
absl::Status CheckReadableFile(absl::string_view path, absl::string_view what);

// The size of the pieces ForEachFileChunk reads and Sha256OfFile hashes:
// 1 MiB, also the largest message of a blob or result stream.
inline constexpr size_t kFileChunkBytes = size_t{1} << 20;

// Reads the regular file `path` from `offset` to its end in pieces of at
// most `chunk_bytes`, calling `on_chunk` with each in order; stops early
// (OK) when it returns false. Holds one piece at a time. The errors of
// CheckReadableFile (an empty file included), INTERNAL on a read error.
absl::Status ForEachFileChunk(absl::string_view path, absl::string_view what, uint64_t offset,
                              size_t chunk_bytes,
                              const std::function<bool(absl::string_view)>& on_chunk);

// A file's content hash as the jobs' blob store names it.
struct FileDigest {
  std::string sha256;  // lower-case hex, 64 characters
  uint64_t size_bytes = 0;
};

// SHA-256 of the whole file, read in kFileChunkBytes pieces (bounded memory
// whatever the file's size). Errors: those of ForEachFileChunk.
absl::StatusOr<FileDigest> Sha256OfFile(absl::string_view path, absl::string_view what);

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
