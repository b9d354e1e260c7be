// The pending resets: Add, Take and Uncover keep each IPU's covering reset in
// step with the resets; CheckInvariants recomputes it from them.
#include "scheduler/reset_book.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace ipupod::scheduler {

ResetBook::ResetBook(int pod_size) : pod_size_(pod_size), covering_(pod_size, 0) {
  IPUPOD_CHECK(pod_size >= 1 && pod_size <= device::kMaxPodIpus) << "pod size " << pod_size;
}

void ResetBook::Add(uint64_t id, PendingReset reset) {
  IPUPOD_CHECK(!closed_) << "reset " << id << " added to a closed book";
  IPUPOD_CHECK(id != 0 && id < next_id_) << "reset id " << id << " was not handed out";
  IPUPOD_CHECK(!reset.ipus.empty()) << "reset " << id << " resets no IPU";
  for (size_t k = 0; k < reset.ipus.size(); ++k) {
    const int i = reset.ipus[k];
    IPUPOD_CHECK(i >= 0 && i < pod_size_) << "reset " << id << ": IPU " << i << " outside the pod";
    IPUPOD_CHECK(k == 0 || reset.ipus[k - 1] < i) << "reset " << id << ": IPUs not ascending";
    IPUPOD_CHECK(covering_[i] == 0)
        << "reset " << id << ": IPU " << i << " is covered by reset " << covering_[i];
  }
  auto [it, inserted] = resets_.try_emplace(id, std::move(reset));
  IPUPOD_CHECK(inserted) << "reset " << id << " is pending";
  for (int i : it->second.ipus) {
    covering_[i] = id;
    covered_.set(i);
  }
}

std::optional<PendingReset> ResetBook::Take(uint64_t id) {
  auto it = resets_.find(id);
  if (it == resets_.end()) return std::nullopt;
  PendingReset reset = std::move(it->second);
  resets_.erase(it);
  for (int i : reset.ipus) {
    if (covering_[i] != id) continue;  // it left (Uncover)
    covering_[i] = 0;
    covered_.reset(i);
  }
  return reset;
}

uint64_t ResetBook::Uncover(int ipu) {
  IPUPOD_CHECK(ipu >= 0 && ipu < pod_size_) << "IPU " << ipu << " outside the pod";
  const uint64_t id = covering_[ipu];
  covering_[ipu] = 0;
  covered_.reset(ipu);
  return id;
}

std::vector<PendingReset> ResetBook::Close() {
  closed_ = true;
  std::vector<PendingReset> all;
  all.reserve(resets_.size());
  for (auto& [id, reset] : resets_) all.push_back(std::move(reset));
  resets_.clear();
  covering_.assign(pod_size_, 0);
  covered_ = IpuMask();
  return all;
}

uint64_t ResetBook::CoveringReset(int ipu) const {
  IPUPOD_CHECK(ipu >= 0 && ipu < pod_size_) << "IPU " << ipu << " outside the pod";
  return covering_[ipu];
}

IpuMask ResetBook::CoveredBy(uint64_t id) const {
  IpuMask mask;
  const PendingReset* reset = Find(id);
  if (reset == nullptr) return mask;
  for (int i : reset->ipus) mask.set(i, covering_[i] == id);
  return mask;
}

const PendingReset* ResetBook::Find(uint64_t id) const {
  auto it = resets_.find(id);
  return it == resets_.end() ? nullptr : &it->second;
}

absl::Status ResetBook::CheckInvariants() const {
  if (closed_ && !resets_.empty()) {
    return absl::InternalError(
        absl::StrCat("the book is closed yet holds ", resets_.size(), " pending resets"));
  }
  for (const auto& [id, reset] : resets_) {
    if (id == 0 || id >= next_id_) {
      return absl::InternalError(absl::StrCat("reset ", id, " was not handed out"));
    }
    if (reset.ipus.empty()) return absl::InternalError(absl::StrCat("reset ", id, " has no IPU"));
    for (size_t k = 0; k < reset.ipus.size(); ++k) {
      const int i = reset.ipus[k];
      if (i < 0 || i >= pod_size_ || (k > 0 && reset.ipus[k - 1] >= i)) {
        return absl::InternalError(
            absl::StrCat("reset ", id, ": IPU ", i, " outside the pod or out of order"));
      }
    }
  }
  for (int i = 0; i < pod_size_; ++i) {
    const uint64_t id = covering_[i];
    if (covered_.test(i) != (id != 0)) {
      return absl::InternalError(absl::StrCat("IPU ", i, " is recorded covered by reset ", id,
                                              " but its mask bit is ", covered_.test(i)));
    }
    if (id == 0) continue;
    const PendingReset* reset = Find(id);
    if (reset == nullptr) {
      return absl::InternalError(
          absl::StrCat("IPU ", i, " is covered by reset ", id, " that is not pending"));
    }
    bool listed = false;
    for (int j : reset->ipus) listed = listed || j == i;
    if (!listed) {
      return absl::InternalError(
          absl::StrCat("IPU ", i, " is covered by reset ", id, " that does not list it"));
    }
  }
  if ((covered_ & ~MaskOf(device::Block{0, pod_size_})).any()) {
    return absl::InternalError("IPUs outside the pod are recorded covered");
  }
  return absl::OkStatus();
}

}  // namespace ipupod::scheduler
