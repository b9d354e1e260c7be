// IPUPOD_CHECK's failure: one line on stderr, then abort (a core dump and the
// sanitizers' stack, not an exception anyone could catch and carry on after).
#include "common/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ipupod::check_internal {

CheckFailure::~CheckFailure() {
  const std::string message = message_.str();
  std::fprintf(stderr, "%s:%d: check failed: %s%s%s\n", file_, line_, condition_,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace ipupod::check_internal
