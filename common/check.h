// File: common/check.h
//
// Runtime assertions for programmer errors: a state the code relies on that
// no input, load or fault can produce. A failed check writes
// "file:line: check failed: <condition>: <message>" to stderr and aborts; it
// is never an error path for anything a caller or the outside world can
// cause (those return absl::Status, docs/style.md "Errors").
//
//   IPUPOD_CHECK(cond) << "message " << value;   always on
//   IPUPOD_DCHECK(cond) << "message";            on when IPUPOD_DCHECK_IS_ON
//
// IPUPOD_DCHECK_IS_ON is 1 in debug builds (no NDEBUG) and in the
// sanitizer and fuzzing builds (cmake/sanitizers.cmake defines
// IPUPOD_DCHECKS), 0 in Release and RelWithDebInfo. When off, the condition
// and the message still compile (so they cannot rot) but neither is
// evaluated: a DCHECK may cost what a debug build can afford, such as a walk
// over the whole pod.
//
// IPUPOD_CHECK_OK(status) checks that an absl::Status is OK and names it.
//
// Thread safety: the macros may be used from any thread; a failure writes one
// line and aborts the process.
#ifndef IPUPOD_COMMON_CHECK_H_
#define IPUPOD_COMMON_CHECK_H_

#include <sstream>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"

#if !defined(NDEBUG) || defined(IPUPOD_DCHECKS)
#define IPUPOD_DCHECK_IS_ON 1
#else
#define IPUPOD_DCHECK_IS_ON 0
#endif

namespace ipupod::check_internal {

// Collects the message of a failed check; its destructor reports and aborts.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition)
      : file_(file), line_(line), condition_(condition) {}
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  ABSL_ATTRIBUTE_NORETURN ~CheckFailure();
  std::ostream& stream() { return message_; }

 private:
  const char* const file_;
  const int line_;
  const char* const condition_;
  std::ostringstream message_;
};

// Turns `stream << ...` into void, so the macros are statements whose
// message operands bind to the stream first.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace ipupod::check_internal

#define IPUPOD_CHECK(condition)               \
  (ABSL_PREDICT_TRUE(condition))              \
      ? (void)0                               \
      : ::ipupod::check_internal::Voidify() & \
            ::ipupod::check_internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define IPUPOD_CHECK_OK(expr)                                                             \
  for (const ::absl::Status ipupod_check_status_ = (expr); !ipupod_check_status_.ok();)   \
  ::ipupod::check_internal::Voidify() &                                                   \
      ::ipupod::check_internal::CheckFailure(__FILE__, __LINE__, #expr " is OK").stream() \
          << ipupod_check_status_ << " "

#if IPUPOD_DCHECK_IS_ON
#define IPUPOD_DCHECK(condition) IPUPOD_CHECK(condition)
#define IPUPOD_DCHECK_OK(expr) IPUPOD_CHECK_OK(expr)
#else
// `true ||` keeps the operands compiled and unevaluated.
#define IPUPOD_DCHECK(condition) IPUPOD_CHECK(true || (condition))
#define IPUPOD_DCHECK_OK(expr) IPUPOD_CHECK(true || (expr).ok())
#endif

#endif  // IPUPOD_COMMON_CHECK_H_
