#include "server/execution/session_execution.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "device/compiler/checks.h"
#include "device/compiler/report.h"
#include "device/kernels/interrupt.h"

namespace ipupod::execution {
namespace {

// What a load may fold beyond its host-memory charge (see Load).
constexpr int64_t kFoldSlackBytes = int64_t{64} << 10;

// Reserves the host memory the executable's report says its program holds.
// The import then checks the report against the model, so a report that
// understates it gets no further.
absl::StatusOr<std::shared_ptr<const MemoryBudget::Charge>> ReserveHostMemory(
    MemoryBudget& budget, const runtime::CachedExecutable& cached, const std::string& session) {
  absl::StatusOr<compiler::Report> report =
      compiler::ReportFromJson(cached.executable->report_json);
  if (!report.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the executable's report is malformed (",
                                                   report.status().message(),
                                                   "); recompile it with ipupod compile"));
  }
  return budget.Reserve(runtime::HostMemoryBytes(*report),
                        absl::StrCat("executable ", cached.executable->content_hash.substr(0, 16),
                                     " for session ", session));
}

}  // namespace

SessionExecution::Operation::~Operation() {
  scheduler_->EndSessionOperation(op_.session.id);
  slot_->Release();
}

absl::StatusOr<LoadedState> SessionExecution::Operation::Loaded() const {
  LoadedState state = slot_->state();
  const std::string& id = op_.session.id;
  if (state.program == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no executable is loaded in session %s: load one first (ipupod run loads it for you)", id));
  }
  if (state.load_generation != op_.load_generation || op_.session.needs_load) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "IPUs of session %s were reset since the executable was loaded: load it again", id));
  }
  return state;
}

absl::StatusOr<std::unique_ptr<SessionExecution::Operation>> SessionExecution::Begin(
    const scheduler::Caller& caller, absl::string_view session) {
  IPUPOD_ASSIGN_OR_RETURN(std::shared_ptr<SessionSlot> slot, r_.programs->Acquire(session));
  absl::StatusOr<scheduler::SessionOperation> op =
      r_.scheduler->BeginSessionOperation(caller, session);
  if (!op.ok()) {
    if (absl::IsNotFound(op.status())) r_.programs->DropIfUnloaded(session, slot.get());
    slot->Release();
    return op.status();
  }
  return std::unique_ptr<Operation>(new Operation(r_.scheduler, std::move(slot), *std::move(op)));
}

absl::StatusOr<LoadedState> SessionExecution::Load(Operation& op, const scheduler::Caller& caller,
                                                   absl::string_view sha256,
                                                   const Cancelled& cancelled) {
  IPUPOD_ASSIGN_OR_RETURN(runtime::CachedExecutable cached,
                          r_.cache->Get(std::string(sha256), caller.user));
  const scheduler::SessionView& session = op.session();
  IPUPOD_RETURN_IF_ERROR(compiler::CheckSessionIpus(
      cached.executable->ipus, static_cast<int64_t>(session.ipus.size()), session.id));
  IPUPOD_ASSIGN_OR_RETURN(std::shared_ptr<const MemoryBudget::Charge> host_memory,
                          ReserveHostMemory(*r_.load_memory, cached, session.id));
  runtime::LoadOptions load;
  load.cancelled = cancelled;
  // Folding past the charge is refused. The slack covers the few bytes of
  // index and shape constants a tiny model folds (its charge can be 0), which
  // the compile folded too: without it the load would keep nodes the
  // compile's placement does not have.
  load.max_folded_bytes = host_memory->bytes() + kFoldSlackBytes;
  load.custom_ops = r_.custom_ops;
  kernels::ScopedInterrupt interrupt([&] { return Poll(cancelled, "load", nullptr); });
  load.cancelled = [&] { return !kernels::CheckInterrupt().ok(); };
  absl::StatusOr<std::unique_ptr<runtime::Program>> created =
      runtime::Program::Create(cached.executable, load);
  IPUPOD_RETURN_IF_ERROR(kernels::CheckInterrupt());  // whatever Create made of it
  IPUPOD_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Program> program, std::move(created));
  const std::vector<uint64_t> charge = program->MemoryChargePerIpu(session.ipus.size());
  IPUPOD_ASSIGN_OR_RETURN(const uint64_t generation,
                          r_.scheduler->RecordLoad(session.id, op.load_generation(), charge));
  LoadedState state;
  state.simulated_load_seconds = program->SimulatedLoadSeconds();
  state.program = std::move(program);
  state.host_memory = std::move(host_memory);
  state.executable_size_bytes = cached.size_bytes;
  state.load_generation = generation;
  op.slot().set_state(state);
  ExecutionCounters::Add(counters_.loads, 1);
  return state;
}

absl::StatusOr<runtime::StepResult> SessionExecution::RunStep(runtime::Program& program,
                                                              const tensor::NamedTensors& inputs,
                                                              const Cancelled& cancelled) {
  // The slot is given back when this returns, before the caller sends the
  // outputs anywhere: a slow reader never holds the server's compute.
  IPUPOD_ASSIGN_OR_RETURN(runtime::ComputeGate::Slot slot,
                          r_.compute->Acquire(kComputeWait, cancelled));
  kernels::ScopedInterrupt interrupt([&] { return Poll(cancelled, "run", &slot); });
  absl::StatusOr<runtime::StepResult> step = program.RunStep(inputs);
  // A step stopped inside its kernels computed nothing usable, whatever the
  // program made of it.
  IPUPOD_RETURN_IF_ERROR(kernels::InterruptStatus());
  if (step.ok()) {
    ExecutionCounters::Add(counters_.runs, 1);
    ExecutionCounters::Add(counters_.input_bytes, TensorBytes(inputs));
    ExecutionCounters::Add(counters_.output_bytes, TensorBytes(step->outputs));
    ExecutionCounters::AddSeconds(counters_.device_nanos, step->simulated.total_s());
    ExecutionCounters::AddSeconds(counters_.wall_nanos, step->wall_s);
  }
  return step;
}

absl::Status SessionExecution::Poll(const Cancelled& cancelled, absl::string_view what,
                                    runtime::ComputeGate::Slot* slot) const {
  if (stopping_.load()) {
    return absl::UnavailableError(absl::StrCat("ipupodd is shutting down; the ", what,
                                               " was stopped, retry when it is back"));
  }
  if (cancelled && cancelled()) {
    return absl::CancelledError(absl::StrCat("the client cancelled the ", what));
  }
  if (slot == nullptr) return absl::OkStatus();
  return r_.compute->YieldIfDue(*slot, kComputeWait, cancelled);
}

}  // namespace ipupod::execution
