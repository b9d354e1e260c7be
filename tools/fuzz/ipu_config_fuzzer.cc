// The IPUConfig parsers (compiler::ParseIpuConfigJson and the --set syntax
// of UpdateFromString) and the checks after them. A config that parses must
// print as JSON that parses to the same JSON.
#include "device/compiler/ipu_config.h"
#include "tools/fuzz/fuzzer.h"

namespace compiler = ipupod::compiler;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = ipupod::fuzz::AsText(data, size);
  auto parsed = compiler::ParseIpuConfigJson(text);
  if (parsed.ok()) {
    (void)compiler::ValidateIpuConfig(parsed->config);
    (void)compiler::ResolveMode(parsed->config, true);
    (void)compiler::ResolveMode(parsed->config, false);
    const std::string json = compiler::IpuConfigToJson(parsed->config);
    auto again = compiler::ParseIpuConfigJson(json);
    FUZZ_CHECK(again.ok() && compiler::IpuConfigToJson(again->config) == json);
  }
  compiler::IpuConfig config;
  (void)compiler::UpdateFromString(config, text);
  return 0;
}
