// .npz, .npy and .safetensors reading (one executable per format, chosen by
// IPUPOD_FUZZ_FORMAT at compile time). A file that parses must serialize and
// parse back to the same tensors.
#include "common/tensor/npy.h"
#include "common/tensor/tensor_files.h"
#include "tools/fuzz/fuzzer.h"

namespace {

using ipupod::fuzz::AsText;
using ipupod::fuzz::kFuzzTensorBytesMax;
namespace tensor = ipupod::tensor;

[[maybe_unused]] constexpr tensor::TensorReadLimits kLimits{.bytes_max = kFuzzTensorBytesMax};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes = AsText(data, size);
#if IPUPOD_FUZZ_FORMAT == 0
  auto tensors = tensor::ParseNpz(bytes, kLimits);
  if (tensors.ok()) FUZZ_CHECK(*tensor::ParseNpz(tensor::SerializeNpz(*tensors)) == *tensors);
#elif IPUPOD_FUZZ_FORMAT == 1
  auto t = tensor::ParseNpy(bytes);
  if (t.ok()) FUZZ_CHECK(*tensor::ParseNpy(tensor::SerializeNpy(*t)) == *t);
#else
  auto tensors = tensor::ParseSafetensors(bytes, kLimits);
  if (tensors.ok()) {
    auto again = tensor::ParseSafetensors(tensor::SerializeSafetensors(*tensors));
    FUZZ_CHECK(again.ok() && *again == *tensors);
  }
#endif
  return 0;
}
