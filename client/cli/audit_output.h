// File: client/cli/audit_output.h
//
// What `ipupod audit` prints: a table, oldest first (SEQ, TIME in the
// local zone, WHO with "(admin)" for an admin's rights, PEER, ACTION,
// TARGET, DETAILS, RESULT: the code, and the message of an error), or one
// JSON document (--json):
//   {"records": [{"seq", "time_unix_ms", "time" (RFC 3339 UTC, ms), "user",
//                 "admin", "peer", "action", "target", "details", "code",
//                 "message"}],
//    "next_page_token": ""}      ("" when nothing more matched; else what
//                                 --page-token continues from)
// Pure functions of the records (and a time zone for the table), unit-tested.
//
// Thread safety: pure functions.
#ifndef IPUPOD_CLIENT_CLI_AUDIT_OUTPUT_H_
#define IPUPOD_CLIENT_CLI_AUDIT_OUTPUT_H_

#include <string>

#include <google/protobuf/repeated_field.h>

#include "absl/time/time.h"
#include "client/cli/output.h"
#include "ipupod/v1/audit.pb.h"

namespace ipupod::cli {

using AuditRecords = google::protobuf::RepeatedPtrField<v1::AuditRecord>;

Json AuditJson(const AuditRecords& records, const std::string& next_page_token);
std::string AuditText(const AuditRecords& records, const std::string& next_page_token,
                      absl::TimeZone zone);

}  // namespace ipupod::cli

#endif  // IPUPOD_CLIENT_CLI_AUDIT_OUTPUT_H_
