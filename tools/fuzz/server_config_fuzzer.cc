// ipupodd's config file parser (server::ParseConfigJson) and the small
// parsers beside it, on the same text.
#include "server/config.h"
#include "tools/fuzz/fuzzer.h"

namespace server = ipupod::server;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = ipupod::fuzz::AsText(data, size);
  (void)server::ParseConfigJson(text);
  (void)server::ParsePod(text);
  (void)server::ParseListenAddress(text);
  (void)server::ValidateLogLevel(text);
  return 0;
}
