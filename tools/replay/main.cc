// ipupod-replay: replays a cluster trace through the real scheduler. All
// behaviour lives in tools/replay/ (see tools/replay/cli.h).
#include <iostream>

#include "tools/replay/cli.h"

int main(int argc, char** argv) {
  return ipupod::replay::RunReplayCli(argc, argv, std::cout, std::cerr);
}
