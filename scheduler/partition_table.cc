// The partitions table: Add and Remove keep each IPU's partition in step with
// the blocks; CheckInvariants recomputes it from the blocks.
#include "scheduler/partition_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace ipupod::scheduler {

using device::Block;

PartitionTable::PartitionTable(int pod_size) : pod_size_(pod_size), names_(pod_size) {
  IPUPOD_CHECK(pod_size >= 1 && pod_size <= device::kMaxPodIpus) << "pod size " << pod_size;
}

const Partition& PartitionTable::Add(Partition partition) {
  const Block block = partition.block;
  IPUPOD_CHECK(IsAlignedIn(block, Block{0, pod_size_}))
      << "partition " << partition.name << " block " << block.start << "+" << block.size;
  IPUPOD_CHECK((partitioned_ & MaskOf(block)).none())
      << "partition " << partition.name << " overlaps another on IPUs "
      << FormatIpus(partitioned_ & MaskOf(block));
  auto [it, inserted] = partitions_.try_emplace(partition.name, std::move(partition));
  IPUPOD_CHECK(inserted) << "partition " << it->first << " exists";
  for (int i = block.start; i < block.start + block.size; ++i) names_[i] = it->first;
  partitioned_ |= MaskOf(block);
  return it->second;
}

bool PartitionTable::Remove(absl::string_view name) {
  auto it = partitions_.find(name);
  if (it == partitions_.end()) return false;
  const Block block = it->second.block;
  for (int i = block.start; i < block.start + block.size; ++i) names_[i].clear();
  partitioned_ &= ~MaskOf(block);
  partitions_.erase(it);
  return true;
}

const Partition* PartitionTable::Find(absl::string_view name) const {
  auto it = partitions_.find(name);
  return it == partitions_.end() ? nullptr : &it->second;
}

const Partition& PartitionTable::at(absl::string_view name) const {
  const Partition* p = Find(name);
  IPUPOD_CHECK(p != nullptr) << "no partition " << name;
  return *p;
}

absl::Status PartitionTable::CheckInvariants() const {
  std::vector<std::string> names(pod_size_);
  for (const auto& [name, p] : partitions_) {
    if (p.name != name) {
      return absl::InternalError(absl::StrCat("partition ", p.name, " stored as ", name));
    }
    if (!IsAlignedIn(p.block, Block{0, pod_size_})) {
      return absl::InternalError(absl::StrCat("partition ", name, ": block ", p.block.start, "+",
                                              p.block.size, " misaligned or outside the pod"));
    }
    for (int i = p.block.start; i < p.block.start + p.block.size; ++i) {
      if (!names[i].empty()) {
        return absl::InternalError(
            absl::StrCat("IPU ", i, " is in partitions ", names[i], " and ", name));
      }
      names[i] = name;
    }
  }
  for (int i = 0; i < pod_size_; ++i) {
    if (names[i] != names_[i] || partitioned_.test(i) != !names[i].empty()) {
      return absl::InternalError(absl::StrCat("IPU ", i, " is recorded in partition '", names_[i],
                                              "' but is in '", names[i], "'"));
    }
  }
  if ((partitioned_ & ~MaskOf(Block{0, pod_size_})).any()) {
    return absl::InternalError("IPUs outside the pod are recorded partitioned");
  }
  return absl::OkStatus();
}

}  // namespace ipupod::scheduler
