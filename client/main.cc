// ipupod: the command-line client of ipupodd. All behaviour lives in
// client/cli/ (see client/cli/app.h).
#include <iostream>

#include "client/cli/app.h"

int main(int argc, char** argv) {
  return ipupod::cli::RunCli(argc, argv, std::cout, std::cerr, ipupod::cli::ProcessEnv());
}
