// File: server/store/state_marker.h
//
// The state marker: a small text file `<state_dir>/state.marker` that says
// "this directory holds a pod's durable state", so that a state.db that was
// deleted, truncated, replaced or left without its write-ahead log is
// noticed at start instead of silently starting a new, empty pod.
//
//   ipupod-state-marker 1
//   pod_id 5f0c2a...            (32 hex digits; also in state.db's meta table)
//   boot 7                      (the last boot number the store committed)
//
// It is written atomically (a temporary file, fsync, rename over the old
// one, fsync of the directory), so a reader sees the old or the new marker,
// never a torn one. SqliteStateStore (server/store/sqlite_state_store.h) writes it
// when a pod is initialised and after every boot, and checks it at Open.
//
// Thread safety: free functions on files; callers serialise writes (the
// store holds the state dir's lock).
// Errors: ReadStateMarker - DATA_LOSS for a marker that cannot be read or
// parsed; WriteStateMarker - FAILED_PRECONDITION when the file cannot be
// written (the message names it and the system error).
#ifndef IPUPOD_STORE_STATE_MARKER_H_
#define IPUPOD_STORE_STATE_MARKER_H_

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ipupod::store {

inline constexpr const char* kStateMarkerFile = "state.marker";

struct StateMarker {
  std::string pod_id;
  int64_t boot = 0;
};

// nullopt when `<dir>/state.marker` does not exist.
absl::StatusOr<std::optional<StateMarker>> ReadStateMarker(const std::filesystem::path& dir);
absl::Status WriteStateMarker(const std::filesystem::path& dir, const StateMarker& marker);

// 32 random hex digits (128 bits from the system's random device).
std::string NewPodId();

}  // namespace ipupod::store

#endif  // IPUPOD_STORE_STATE_MARKER_H_
