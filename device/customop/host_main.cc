// ipupod-custom-op-host: runs one custom op library for ipupodd (device/customop/host.h).
#include <cstdio>
#include <string>

#include "device/customop/host.h"

int main(int argc, char** argv) {
  absl::StatusOr<ipupod::customop::HostOptions> options =
      ipupod::customop::ParseHostArgs(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr,
                 "%s: %s\n(ipupodd starts this program with a socket on fd 3; it is not "
                 "meant to be run by hand)\n",
                 ipupod::customop::kHostBinaryName,
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return ipupod::customop::RunHost(*options);
}
