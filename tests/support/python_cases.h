// File: tests/support/python_cases.h
//
// test_support::PythonCases: runs one of the PyTorch parity scripts in
// tests/parity/ with Debian's /usr/bin/python3 into a fresh TempDir:
//   /usr/bin/python3 tests/parity/SCRIPT DIR ARGS... > DIR/SCRIPT.log 2>&1
// A script exits 77 when python3 cannot import torch (or numpy, onnx): the
// parity tests then skip with skip_reason(); any other failure is an error
// carrying the script's log. Scripts are found through $IPUPOD_SOURCE_DIR
// (set by ctest), else the source dir this library was configured from.
//
// Thread safety: construct once (e.g. in SetUpTestSuite); then read-only.
// Errors: none thrown; see skip_reason() and error().
#ifndef IPUPOD_TESTS_SUPPORT_PYTHON_CASES_H_
#define IPUPOD_TESTS_SUPPORT_PYTHON_CASES_H_

#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace ipupod::test_support {

// The whole file as bytes ("" if it cannot be read).
std::string ReadTextFile(const std::string& path);

// The path of tests/parity/<script>.
std::string ParityScriptPath(const std::string& script);

class PythonCases {
 public:
  PythonCases(const std::string& script, const std::vector<std::string>& args = {});
  PythonCases(const PythonCases&) = delete;
  PythonCases& operator=(const PythonCases&) = delete;

  // Where the script wrote its cases.
  const std::string& dir() const { return dir_.path(); }
  // Non-empty when python3 lacks torch: the tests skip.
  const std::string& skip_reason() const { return skip_reason_; }
  // Non-empty when the script failed: the tests fail with it.
  const std::string& error() const { return error_; }

 private:
  TempDir dir_;
  std::string skip_reason_;
  std::string error_;
};

}  // namespace ipupod::test_support

#endif  // IPUPOD_TESTS_SUPPORT_PYTHON_CASES_H_
