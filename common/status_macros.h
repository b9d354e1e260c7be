// File: common/status_macros.h
//
// Propagation helpers for absl::Status / absl::StatusOr, the error type used
// across every module boundary in ipupod (converted to grpc::Status only in
// server/ and back in client/).
#ifndef IPUPOD_COMMON_STATUS_MACROS_H_
#define IPUPOD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` yields a non-OK status.
#define IPUPOD_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status ipupod_status_ = (expr);          \
    if (!ipupod_status_.ok()) return ipupod_status_; \
  } while (0)

#define IPUPOD_STATUS_CONCAT_INNER_(a, b) a##b
#define IPUPOD_STATUS_CONCAT_(a, b) IPUPOD_STATUS_CONCAT_INNER_(a, b)

// `IPUPOD_ASSIGN_OR_RETURN(auto x, F());` binds the value of a StatusOr or
// returns its status from the enclosing function.
#define IPUPOD_ASSIGN_OR_RETURN(lhs, expr) \
  IPUPOD_ASSIGN_OR_RETURN_IMPL_(IPUPOD_STATUS_CONCAT_(ipupod_statusor_, __LINE__), lhs, expr)
#define IPUPOD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = *std::move(tmp)

#endif  // IPUPOD_COMMON_STATUS_MACROS_H_
