// ipupod: the command-line client of ipupodd. All behaviour lives in
// client/cli/ (see client/cli/app.h); main sets the allocator up and calls it.
#include <iostream>

#include "client/cli/app.h"
#include "device/kernels/threads.h"
#include <malloc.h>

int main(int argc, char** argv) {
  // Buffers freed by one step of `ipupod run` (hundreds of KB: a step's
  // inputs on the wire, its outputs) stay in the heap for the next step
  // rather than being unmapped and faulted in again page by page.
  ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 128 << 20);
  // OpenBLAS (linked for local compiles) starts its workers as it loads;
  // they would spin ~0.1 s on a core the server's compute needs.
  ipupod::kernels::ShortenBlasIdleSpin();
  return ipupod::cli::RunCli(argc, argv, std::cout, std::cerr, ipupod::cli::ProcessEnv());
}
