// File: tests/support/temp_dir.h
//
// test_support::TempDir: a fresh, empty directory under the system temp dir
// ($TMPDIR, else /tmp), removed with everything in it on destruction. One
// per test; tests write their files, state dirs and caches inside it.
//
// Thread safety: path() may be read from any thread.
// Errors: the constructor throws std::runtime_error if no directory can be
// made (a test cannot go on without it).
#ifndef IPUPOD_TESTS_SUPPORT_TEMP_DIR_H_
#define IPUPOD_TESTS_SUPPORT_TEMP_DIR_H_

#include <string>

namespace ipupod::test_support {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_TEMP_DIR_H_
