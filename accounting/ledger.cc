#include "accounting/ledger.h"

namespace ipupod::accounting {

absl::string_view RecordKindName(RecordKind kind) {
  return kind == RecordKind::kJob ? "job" : "session";
}

}  // namespace ipupod::accounting
