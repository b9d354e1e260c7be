// .ipx parsing (compiler::ReadExecutable): what ipupodd does with every
// uploaded executable. One that reads must write and read back.
#include "device/compiler/executable.h"
#include "tools/fuzz/fuzzer.h"

namespace compiler = ipupod::compiler;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto executable = compiler::ReadExecutable(ipupod::fuzz::AsText(data, size));
  if (!executable.ok()) return 0;
  auto written = compiler::WriteExecutable(*executable);
  FUZZ_CHECK(written.ok());
  FUZZ_CHECK(compiler::ReadExecutable(*written).ok());
  return 0;
}
