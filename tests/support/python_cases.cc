#include "tests/support/python_cases.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <sys/wait.h>

#ifndef IPUPOD_TEST_SOURCE_DIR
#define IPUPOD_TEST_SOURCE_DIR "."
#endif

namespace ipupod::test_support {

constexpr int kNoTorchExit = 77;  // what the parity scripts exit with when torch is missing

std::string ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream ss;
  ss << file.rdbuf();
  return ss.str();
}

std::string ParityScriptPath(const std::string& script) {
  const char* src = std::getenv("IPUPOD_SOURCE_DIR");
  return std::string(src != nullptr ? src : IPUPOD_TEST_SOURCE_DIR) + "/tests/parity/" + script;
}

PythonCases::PythonCases(const std::string& script, const std::vector<std::string>& args) {
  const std::string log = dir_.path() + "/" + script + ".log";
  std::string cmd = "/usr/bin/python3 '" + ParityScriptPath(script) + "' '" + dir_.path() + "'";
  for (const std::string& arg : args) cmd += " '" + arg + "'";
  cmd += " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  if (status == 0) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kNoTorchExit) {
    skip_reason_ = "/usr/bin/python3 cannot import torch, numpy or onnx (install python3-torch): " +
                   ReadTextFile(log);
  } else {
    error_ = script + " failed:\n" + ReadTextFile(log);
  }
}

}  // namespace ipupod::test_support
