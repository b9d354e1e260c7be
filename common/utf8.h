// File: common/utf8.h
//
// Text from outside (a client's names, a user's strings) on its way into
// something that must stay well-formed: a JSON log line, a protobuf string
// field (proto3 refuses invalid UTF-8), a bounded audit record.
//
//   ValidUtf8         the text with every invalid UTF-8 sequence replaced
//                     by U+FFFD (overlong forms, surrogates, code points
//                     past U+10FFFF and truncated sequences are invalid)
//   CutUtf8           ValidUtf8, then at most `max_bytes`, cut at a
//                     character boundary and marked with "..." when cut
//   AppendJsonString  a JSON string literal: quoted, ", \ and every control
//                     character escaped (\n, \t, \u001b, ...), invalid UTF-8
//                     replaced by U+FFFD; the result always parses (the
//                     status page's JSON, the JSON log)
//   EscapeControls    the same for a terminal: every control character (C0,
//                     DEL, C1) escaped (\n, \t, \x1b, \u009b), invalid UTF-8
//                     replaced by U+FFFD, so a name a client chose can move
//                     no cursor, colour nothing and forge no line or table
//                     row; the CLI's text output (client/cli/output.h)
//
// Thread safety: pure functions.
// Errors: none; bad input is repaired, never refused.
#ifndef IPUPOD_COMMON_UTF8_H_
#define IPUPOD_COMMON_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ipupod {

std::string ValidUtf8(absl::string_view text);

// REQUIRES: max_bytes >= 3 (room for the "..." mark).
std::string CutUtf8(absl::string_view text, size_t max_bytes);

void AppendJsonString(std::string& out, absl::string_view text);

// `keep`: control characters left as they are (a whole message's own "\n").
std::string EscapeControls(absl::string_view text, absl::string_view keep = "");

}  // namespace ipupod

#endif  // IPUPOD_COMMON_UTF8_H_
