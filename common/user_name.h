// File: common/user_name.h
//
// The one rule for user names: 1..64 characters from A-Z a-z 0-9 . _ - @.
// ipupodd enforces it on open mode's x-ipupod-user header and in its config
// (admins, token files); the client library refuses a bad name before
// sending it, with the server's own message.
//
// Thread safety: pure functions.
// Errors: none (InvalidUserNameMessage is the text callers put in theirs).
#ifndef IPUPOD_COMMON_USER_NAME_H_
#define IPUPOD_COMMON_USER_NAME_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ipupod {

inline constexpr size_t kUserNameMax = 64;

bool IsValidUserName(absl::string_view name);

// `user name "NAME" is not valid: use 1-64 characters from ... (pass --user
// NAME)`, NAME C-escaped and cut to 80 characters (with "...").
std::string InvalidUserNameMessage(absl::string_view name);

}  // namespace ipupod

#endif  // IPUPOD_COMMON_USER_NAME_H_
