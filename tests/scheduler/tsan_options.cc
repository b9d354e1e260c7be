// ThreadSanitizer defaults for the scheduler tests (no effect without TSan).
// Debian's libabsl is not instrumented: the memcpy/memmove it calls under its
// own locks (e.g. in Mutex deadlock detection) look like races to TSan, which
// cannot see those locks. TSan's option for uninstrumented libraries makes it
// ignore such calls; our own code stays fully checked (see common/sync.h).
#include "absl/base/config.h"

#ifdef ABSL_HAVE_THREAD_SANITIZER
extern "C" const char* __tsan_default_options();
extern "C" const char* __tsan_default_options() { return "ignore_noninstrumented_modules=1"; }
#endif
