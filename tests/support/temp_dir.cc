#include "tests/support/temp_dir.h"

#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <stdlib.h>

namespace ipupod::test_support {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ipupod-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);  // best effort: a test must not fail here
}

}  // namespace ipupod::test_support
