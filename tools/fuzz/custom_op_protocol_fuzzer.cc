// What ipupodd reads from a custom op helper (device/customop/protocol.h: Hello and the replies
// of the shape, compute and gradient functions), and what the helper reads from ipupodd
// (the requests), on the same bytes: a library's process is untrusted, so every decoder
// must refuse what is malformed without reading past the message or allocating for counts
// the bytes cannot hold.
#include <optional>
#include <string>

#include "device/customop/protocol.h"
#include "tools/fuzz/fuzzer.h"

namespace customop = ipupod::customop;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes = ipupod::fuzz::AsText(data, size);
  std::string load_error;
  (void)customop::DecodeHello(bytes, &load_error);
  std::optional<customop::Failure> failure;
  (void)customop::DecodeTypesReply(bytes, failure);
  failure.reset();
  (void)customop::DecodeTensorsReply(bytes, failure);
  failure.reset();
  (void)customop::DecodeGradientReply(bytes, failure);
  (void)customop::PeekRequestKind(bytes);
  (void)customop::DecodeInfer(bytes);
  (void)customop::DecodeCompute(bytes);
  (void)customop::DecodeGradient(bytes);
  return 0;
}
