// File: common/mapped_file.h
//
// MappedFile: a regular file's bytes mapped read-only into memory, so a
// reader parses them where the page cache holds them: no zero-filled buffer,
// no copy out of the cache, and the pages populated in one call rather than
// one page fault per 4 KiB (tensor files of tens of MB; docs/benchmarks.md,
// "Issue 17 on a quiet machine").
//
// The mapping is private and read-only. A file truncated by another process
// while mapped would make a read past its new end fault (SIGBUS): map only
// files that are replaced, never rewritten in place - a user's input file
// for one CLI run, or the server's content-addressed blobs (written to a
// temporary name, then renamed).
//
// Thread safety: a const MappedFile may be read from many threads.
// Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT for a directory,
// device, pipe or socket, FAILED_PRECONDITION when it cannot be opened or
// mapped (the system's reason in the message).
#ifndef IPUPOD_COMMON_MAPPED_FILE_H_
#define IPUPOD_COMMON_MAPPED_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod {

class MappedFile {
 public:
  // Maps `path` whole.
  static absl::StatusOr<MappedFile> Open(absl::string_view path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // The file's bytes, valid while this object lives.
  absl::string_view bytes() const {
    return absl::string_view(static_cast<const char*>(data_), size_);
  }
  size_t size() const { return size_; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void Unmap();

  void* data_ = nullptr;  // null for an empty file
  size_t size_ = 0;
};

}  // namespace ipupod

#endif  // IPUPOD_COMMON_MAPPED_FILE_H_
