// ONNX import and compile: an ONNX model's initializers
// (tensor::ParseOnnxInitializers), graph::ImportOnnx and the whole
// compiler::Compile for one IPU with the default IPUConfig. A model that
// compiles must write and read back as an .ipx.
#include "common/tensor/tensor_files.h"
#include "device/compiler/compile.h"
#include "device/compiler/executable.h"
#include "device/graph/onnx_import.h"
#include "tools/fuzz/fuzzer.h"

namespace {

using ipupod::fuzz::AsText;
namespace compiler = ipupod::compiler;
namespace tensor = ipupod::tensor;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes = AsText(data, size);
  (void)tensor::ParseOnnxInitializers(bytes, "", {.bytes_max = ipupod::fuzz::kFuzzTensorBytesMax});
  if (!ipupod::graph::ImportOnnx(bytes).ok()) return 0;
  auto executable = compiler::Compile(bytes, compiler::IpuConfig{}, compiler::CompileOptions{});
  if (!executable.ok()) return 0;
  auto written = compiler::WriteExecutable(*executable);
  FUZZ_CHECK(written.ok());
  FUZZ_CHECK(compiler::ReadExecutable(*written).ok());
  return 0;
}
