// File: common/format.h
//
// Human-readable numbers for tables, reports and messages, one function
// per style; the name says what it prints. Decimal (SI) units throughout,
// as Graphcore quotes IPU memory ("900 MB" per GC200). And text a client
// sent, shortened before an error message echoes it (ElideMiddle,
// EchoName), so a hostile name can never make a message too long to send.
//
// Thread safety: pure functions.
// Errors: none.
#ifndef IPUPOD_COMMON_FORMAT_H_
#define IPUPOD_COMMON_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ipupod {

// Wall-clock style, for waits and elapsed times: "0.4s", "12s", "3m04s",
// "2h05m" (tenths below 10 s, whole seconds from 10 s up; negative or NaN
// prints "0s").
std::string FormatClockDuration(double seconds);
// A number with an SI-prefixed unit, for simulated and measured step times:
// "12.3 us", "4.56 ms", "1.20 s".
std::string FormatSiDuration(double seconds);

// Three significant digits, trailing zeros dropped: "0 B", "512 B", "1.5 kB",
// "900 MB", "3.52 GB".
std::string FormatBytesTrimmed(uint64_t bytes);
// Fixed decimals, for aligned report columns: "17 B", "12.3 kB", "900.0 MB",
// "1.23 GB".
std::string FormatBytesFixed(int64_t bytes);

// At most `max_chars` characters of `text` (bytes; a multi-byte UTF-8
// character may be cut): the text itself if it fits, else its start and
// end around "...(N characters)...". REQUIRES: max_chars >= 40.
std::string ElideMiddle(absl::string_view text, size_t max_chars);
// How an error message quotes a name a client sent: ElideMiddle to
// kEchoedNameCharsMax.
inline constexpr size_t kEchoedNameCharsMax = 80;
std::string EchoName(absl::string_view name);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_FORMAT_H_
