// Operations on a session's IPUs for the ExecutionService: begin/end (busy
// IPUs, faults and health as GetSession), and the device memory a load
// charges. Memory is accounted per IPU in device::Ipu; a session holds its
// IPUs exclusively, so what an IPU of a session holds is what its load
// charged.
#include <utility>

#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "scheduler/scheduler_impl.h"
#include "spdlog/spdlog.h"

namespace ipupod::scheduler {

using device::IpuState;

absl::StatusOr<SessionOperation> SchedulerImpl::BeginSessionOperation(const Caller& caller,
                                                                      absl::string_view session) {
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  IPUPOD_ASSIGN_OR_RETURN(Session * s, OwnSessionLocked(caller, session, "use"));
  MaybeRandomFaultLocked(*s);
  IPUPOD_RETURN_IF_ERROR(SessionHealthLocked(*s));
  // Healthy: every IPU is attached or busy. Check all before changing any.
  for (int i = s->block.start; i < s->block.start + s->block.size; ++i) {
    if (ipus_[i].state() == IpuState::kBusy) {
      return absl::UnavailableError(absl::StrFormat(
          "session %s is busy with another operation; retry when it has finished", s->id));
    }
  }
  for (int i = s->block.start; i < s->block.start + s->block.size; ++i) {
    IPUPOD_CHECK_OK(ipus_[i].BeginOperation()) << "kAttached, checked above";
  }
  return SessionOperation{SessionViewLocked(*s), s->load_generation};
}

void SchedulerImpl::EndSessionOperation(absl::string_view session) {
  MutationLock lock(this);
  const Session* s = sessions_.Find(session);
  if (s == nullptr) return;  // ended meanwhile; its IPUs may belong to others now
  const device::Block block = s->block;
  for (int i = block.start; i < block.start + block.size; ++i) ipus_[i].EndOperation();
}

absl::StatusOr<uint64_t> SchedulerImpl::RecordLoad(absl::string_view session,
                                                   uint64_t load_generation,
                                                   const std::vector<uint64_t>& bytes_per_ipu) {
  MutationLock lock(this);
  IPUPOD_RETURN_IF_ERROR(CheckRunningLocked());
  Session* found = sessions_.Find(session);
  if (found == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("session %s ended while loading; attach again and load", session));
  }
  Session& s = *found;
  if (s.load_generation != load_generation) {
    return absl::AbortedError(
        absl::StrFormat("IPUs of session %s were reset while loading; load again", s.id));
  }
  IPUPOD_RETURN_IF_ERROR(CheckLoadFitsLocked(s, bytes_per_ipu));
  for (int i = 0; i < s.block.size; ++i) {
    device::Ipu& ipu = ipus_[s.block.start + i];
    ipu.Free(ipu.memory_used_bytes());
    ipu.Allocate(bytes_per_ipu[i]).IgnoreError();  // checked above
  }
  s.needs_load = false;
  return ++s.load_generation;
}

absl::Status SchedulerImpl::CheckLoadFitsLocked(const Session& s,
                                                const std::vector<uint64_t>& bytes_per_ipu) const {
  if (bytes_per_ipu.size() != static_cast<size_t>(s.block.size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a load of session %s must charge each of its %d IPUs; got %d entries",
                        s.id, s.block.size, bytes_per_ipu.size()));
  }
  for (int i = 0; i < s.block.size; ++i) {
    const device::Ipu& ipu = ipus_[s.block.start + i];
    if (bytes_per_ipu[i] > ipu.memory_total_bytes()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "IPU %d of session %s is out of memory: the executable needs %d bytes on it but it "
          "has %d bytes; compile for more IPUs (ipus_per_replica) or a smaller batch",
          ipu.id(), s.id, bytes_per_ipu[i], ipu.memory_total_bytes()));
    }
  }
  return absl::OkStatus();
}

void SchedulerImpl::ClearLoadLocked(Session& s) {
  for (int i = s.block.start; i < s.block.start + s.block.size; ++i) {
    ipus_[i].Free(ipus_[i].memory_used_bytes());
  }
  s.needs_load = true;
  ++s.load_generation;
}

}  // namespace ipupod::scheduler
