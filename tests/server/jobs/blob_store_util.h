// File: tests/server/jobs/blob_store_util.h
//
// What the blob store's tests share: a blob's name from its content, an
// upload in chunks, a directory's file names (owner markers apart), a
// file's bytes.
//
// Header-only. Thread safety: pure functions (Put: as BlobStore).
// Errors: Put returns the store's.
#ifndef IPUPOD_TESTS_JOBS_BLOB_STORE_UTIL_H_
#define IPUPOD_TESTS_JOBS_BLOB_STORE_UTIL_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "server/jobs/blob_store.h"

namespace ipupod::jobs::testing {

inline std::string Sha(absl::string_view content) { return DigestHex(Sha256Of(content)); }

// Uploads `content` in chunks of `chunk` bytes (none when already stored).
inline absl::StatusOr<uint64_t> Put(BlobStore& store, absl::string_view user,
                                    absl::string_view content, size_t chunk = 7) {
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<BlobStore::Upload> upload,
                          store.BeginUpload(user, Sha(content), content.size()));
  if (!upload->already_stored()) {
    for (size_t at = 0; at < content.size(); at += chunk) {
      IPUPOD_RETURN_IF_ERROR(upload->Append(content.substr(at, chunk)));
    }
  }
  return upload->Commit();
}

// The names in `dir`, sorted; without the owner markers (<sha256>.<hex
// user>.owner) unless `markers`.
inline std::vector<std::string> DirNames(const std::string& dir, bool markers = false) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (!markers && name.size() > 6 && name.substr(name.size() - 6) == ".owner") continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ipupod::jobs::testing

#endif  // IPUPOD_TESTS_JOBS_BLOB_STORE_UTIL_H_
