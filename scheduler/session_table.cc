// The sessions table: Add and Remove keep the held IPUs and the tickets in
// step with the sessions; CheckInvariants recomputes both from the sessions.
#include "scheduler/session_table.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace ipupod::scheduler {

using device::Block;

SessionTable::SessionTable(int pod_size) : pod_size_(pod_size), holder_(pod_size) {
  IPUPOD_CHECK(pod_size >= 1 && pod_size <= device::kMaxPodIpus) << "pod size " << pod_size;
}

Session& SessionTable::Add(Session session) {
  const Block block = session.block;
  IPUPOD_CHECK(IsAlignedIn(block, Block{0, pod_size_}))
      << "session " << session.id << " block " << block.start << "+" << block.size;
  IPUPOD_CHECK((held_ & MaskOf(block)).none())
      << "session " << session.id << " would share IPUs " << FormatIpus(held_ & MaskOf(block));
  IPUPOD_CHECK(!tickets_.contains(session.ticket)) << "ticket " << session.ticket << " is taken";
  auto [it, inserted] = sessions_.try_emplace(session.id, std::move(session));
  IPUPOD_CHECK(inserted) << "session " << it->first << " exists";
  for (int i = block.start; i < block.start + block.size; ++i) holder_[i] = it->first;
  held_ |= MaskOf(block);
  tickets_.emplace(it->second.ticket, it->first);
  return it->second;
}

std::optional<Session> SessionTable::Remove(absl::string_view id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  Session s = std::move(it->second);
  sessions_.erase(it);
  tickets_.erase(s.ticket);
  for (int i = s.block.start; i < s.block.start + s.block.size; ++i) holder_[i].clear();
  held_ &= ~MaskOf(s.block);
  return s;
}

Session* SessionTable::Find(absl::string_view id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

const Session* SessionTable::Find(absl::string_view id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

const std::string* SessionTable::IdOfTicket(absl::string_view ticket) const {
  auto it = tickets_.find(ticket);
  return it == tickets_.end() ? nullptr : &it->second;
}

const std::string& SessionTable::HolderOf(int ipu) const { return holder_[ipu]; }

Session* SessionTable::SessionOf(int ipu) {
  return holder_[ipu].empty() ? nullptr : Find(holder_[ipu]);
}

const Session* SessionTable::SessionOf(int ipu) const {
  return holder_[ipu].empty() ? nullptr : Find(holder_[ipu]);
}

void SessionTable::ForEach(const std::function<void(Session&)>& fn) {
  for (auto& [id, s] : sessions_) fn(s);
}

absl::Status SessionTable::CheckInvariants() const {
  std::vector<std::string> holder(pod_size_);
  for (const auto& [id, s] : sessions_) {
    if (s.id != id) return absl::InternalError(absl::StrCat("session ", s.id, " stored as ", id));
    const std::string* by_ticket = IdOfTicket(s.ticket);
    if (by_ticket == nullptr || *by_ticket != id) {
      return absl::InternalError(
          absl::StrCat("session ", id, ": ticket ", s.ticket, " does not name it"));
    }
    if (!IsAlignedIn(s.block, Block{0, pod_size_})) {
      return absl::InternalError(absl::StrCat("session ", id, ": block ", s.block.start, "+",
                                              s.block.size, " misaligned or outside the pod"));
    }
    for (int i = s.block.start; i < s.block.start + s.block.size; ++i) {
      if (!holder[i].empty()) {
        return absl::InternalError(
            absl::StrCat("IPU ", i, " is in sessions ", holder[i], " and ", id));
      }
      holder[i] = id;
    }
  }
  if (tickets_.size() != sessions_.size()) {
    return absl::InternalError(
        absl::StrCat(tickets_.size(), " tickets for ", sessions_.size(), " sessions"));
  }
  for (int i = 0; i < pod_size_; ++i) {
    if (holder[i] != holder_[i] || held_.test(i) != !holder[i].empty()) {
      return absl::InternalError(absl::StrCat("IPU ", i, " is recorded held by '", holder_[i],
                                              "' but is in '", holder[i], "'"));
    }
  }
  if ((held_ & ~MaskOf(Block{0, pod_size_})).any()) {
    return absl::InternalError("IPUs outside the pod are recorded held");
  }
  return absl::OkStatus();
}

}  // namespace ipupod::scheduler
