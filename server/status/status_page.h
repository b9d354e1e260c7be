// File: server/status/status_page.h
//
// The status page's HTML (server/status/status_page.html, embedded at build time
// by server/status/CMakeLists.txt): one self-contained document, its style and
// script inline, that renders /status.json and refreshes itself. ipupodd
// serves it at "/" of its HTTP listener (docs/operations.md).
//
// Thread safety: returns a view of a constant.
#ifndef IPUPOD_STATUS_STATUS_PAGE_H_
#define IPUPOD_STATUS_STATUS_PAGE_H_

#include "absl/strings/string_view.h"

namespace ipupod::status {

absl::string_view StatusPageHtml();

}  // namespace ipupod::status

#endif  // IPUPOD_STATUS_STATUS_PAGE_H_
