// File: scheduler/partition_table.h
//
// The pod's partitions: named aligned blocks reserved for their owner, and
// which partition each IPU is in. One part of the Scheduler
// (scheduler_impl.h); persistence (StateStore) and who may create or remove a
// partition stay with the Scheduler.
//
// Invariants (CheckInvariants reports the first one broken):
//   * every partition is stored under its name;
//   * its block is aligned and inside the pod (allocator.h IsAlignedIn);
//   * no two partitions overlap: exactly the IPUs of the partitions' blocks
//     are partitioned, each recorded in the partition whose block holds it.
// Add and Remove keep them; partitions are never changed in place (the table
// hands out const references only).
//
// Ownership: the table owns its Partitions; a pointer or reference it returns
// stays valid until the next Add or Remove.
//
// Thread safety: not thread-safe; SchedulerImpl holds its lock (mu_) around
// every call.
// Errors: none returned. Add's and at's REQUIRES are programmer errors,
// checked with IPUPOD_CHECK (common/check.h): a breach aborts.
#ifndef IPUPOD_SCHEDULER_PARTITION_TABLE_H_
#define IPUPOD_SCHEDULER_PARTITION_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "device/device_ids.h"
#include "scheduler/allocator.h"

namespace ipupod::scheduler {

struct Partition {
  std::string name;
  device::Block block;
  std::string owner;
  int64_t created_unix_ms = 0;
};

class PartitionTable {
 public:
  using Map = absl::flat_hash_map<std::string, Partition>;

  // An empty table for a pod of `pod_size` IPUs.
  // REQUIRES: 1 <= pod_size <= device::kMaxPodIpus.
  explicit PartitionTable(int pod_size);
  PartitionTable(const PartitionTable&) = delete;
  PartitionTable& operator=(const PartitionTable&) = delete;

  // Stores `partition`; its block's IPUs become partitioned. Returns it as
  // stored. REQUIRES: its name is new; its block is aligned, inside the pod
  // and overlaps no other partition.
  const Partition& Add(Partition partition);
  // Removes the partition `name`; false if there is none.
  bool Remove(absl::string_view name);

  // The partition `name`; null if there is none.
  const Partition* Find(absl::string_view name) const;
  // The partition `name`. REQUIRES: it exists.
  const Partition& at(absl::string_view name) const;
  // The name of the partition `ipu` is in, "" for the free pool.
  // REQUIRES: 0 <= ipu < pod size.
  const std::string& NameOf(int ipu) const { return names_[ipu]; }
  // The IPUs in some partition.
  IpuMask Partitioned() const { return partitioned_; }

  size_t size() const { return partitions_.size(); }
  bool empty() const { return partitions_.empty(); }
  // Every partition, by name, in no particular order.
  const Map& all() const { return partitions_; }

  // OK, or INTERNAL naming the first broken invariant (see above). Costs
  // O(pod size + partitions).
  absl::Status CheckInvariants() const;

 private:
  const int pod_size_;
  Map partitions_;                  // by name
  std::vector<std::string> names_;  // per IPU; "" = the free pool
  IpuMask partitioned_;             // IPUs with a partition
};

}  // namespace ipupod::scheduler

#endif  // IPUPOD_SCHEDULER_PARTITION_TABLE_H_
