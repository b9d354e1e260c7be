// File: device/graph/run_context.h
//
// What one run of a graph knows beyond its inputs: where its random ops
// (training-mode Dropout) are in the run's random stream, and the log its
// IpuPrint ops write to. Ops read it with CurrentRunContext(); whoever runs
// a graph (device/runtime/'s programs, training::Trainer per micro-batch) sets it
// for the calling thread with a ScopedRunContext around the run. A run
// context is per thread because every op of a run executes on the thread
// that called Interpreter::Run or Autodiff::Run (kernels may fan out to
// BLAS or oneDNN workers inside one op, never across ops).
//
// Random stream: the mask of element i of a random op is a pure function
// of (seed, step, replica, micro_batch, node name, i): Philox4x32-10
// (Random123, Salmon et al., SC'11) keyed by the seed derives one key per
// (step, replica, micro-batch, node); that key and i / 4 give four 32-bit
// words, one per element. So the same seed gives bit-identical masks in
// every process, job and restart (the step is the optimizer's update
// count, which checkpoints keep), replicas and micro-batches draw
// different masks, and a backward rule recomputes its forward's mask.
//
// Thread safety: a RunContext belongs to one thread while installed.
// Errors: RandomBits - FAILED_PRECONDITION when no context with a seed is
// installed (a random op run outside a program, e.g. in a unit test that
// forgot one).
#ifndef IPUPOD_GRAPH_RUN_CONTEXT_H_
#define IPUPOD_GRAPH_RUN_CONTEXT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/graph/graph.h"

namespace ipupod::graph {

// Lines one run may log; further lines are counted in log_dropped.
inline constexpr int64_t kRunLogLinesMax = 10000;

struct RunContext {
  std::optional<uint64_t> seed;  // none: random ops cannot run
  uint64_t step = 0;             // training: updates done before this one; inference: runs
  uint64_t replica = 0;
  uint64_t micro_batch = 0;  // within the replica's share of the step
  bool training = false;     // a training pass (Dropout before opset 12 drops only then)
  std::vector<std::string>* log = nullptr;  // IpuPrint's lines; nullptr: discarded
  int64_t* log_dropped = nullptr;           // lines beyond kRunLogLinesMax
};

// Installs `context` for this thread until destroyed, then restores the
// previous one. `context` must outlive the scope.
class ScopedRunContext {
 public:
  explicit ScopedRunContext(const RunContext* context);
  ScopedRunContext(const ScopedRunContext&) = delete;
  ScopedRunContext& operator=(const ScopedRunContext&) = delete;
  ~ScopedRunContext();

 private:
  const RunContext* previous_;
};

// The context installed on this thread, or nullptr.
const RunContext* CurrentRunContext();

// The current context (or a default one) at these coordinates: what a
// program installs around one micro-batch.
RunContext MicroBatchRunContext(uint64_t step, uint64_t replica, uint64_t micro_batch,
                                bool training);

// Appends a line to the current context's log (dropped, and counted, past
// kRunLogLinesMax; discarded without a context).
void AppendToRunLog(std::string line);

// `count` words of the current context's random stream for node `node`:
// word i is element i's. FAILED_PRECONDITION without a seeded context.
absl::StatusOr<std::vector<uint32_t>> RandomBits(absl::string_view node, int64_t count);

// The same stream for explicit coordinates (what RandomBits reads from the
// context), for tests and tools.
std::vector<uint32_t> RandomBitsAt(uint64_t seed, uint64_t step, uint64_t replica,
                                   uint64_t micro_batch, absl::string_view node, int64_t count);

// True if `graph` has an op that draws random numbers when run in a
// training (`training`) or inference program: a Dropout with a ratio that
// is not 0 in training mode (from opset 12 its training_mode input; before,
// every training pass). A value that is not a constant counts as random.
bool HasRandomOps(const Graph& graph, bool training);

}  // namespace ipupod::graph

#endif  // IPUPOD_GRAPH_RUN_CONTEXT_H_
