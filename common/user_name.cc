#include "common/user_name.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ipupod {
namespace {

// How much of a bad name a message repeats.
constexpr size_t kShownNameMax = 80;

}  // namespace

bool IsValidUserName(absl::string_view name) {
  if (name.empty() || name.size() > kUserNameMax) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' &&
        c != '@') {
      return false;
    }
  }
  return true;
}

std::string InvalidUserNameMessage(absl::string_view name) {
  return absl::StrCat("user name \"", absl::CHexEscape(name.substr(0, kShownNameMax)),
                      name.size() > kShownNameMax ? "..." : "", "\" is not valid: use 1-",
                      kUserNameMax, " characters from A-Z a-z 0-9 . _ - @ (pass --user NAME)");
}

}  // namespace ipupod
