#include "device/graph/run_context.h"

#include <optional>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include <Random123/philox.h>

namespace ipupod::graph {
namespace {

thread_local const RunContext* current_context = nullptr;

// FNV-1a, 64 bits: a stable name -> number map (the same in every process).
uint64_t NameHash(absl::string_view name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

uint32_t Lo(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t Hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

philox4x32_ctr_t Philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                        uint32_t k1) {
  const philox4x32_ctr_t ctr = {{c0, c1, c2, c3}};
  const philox4x32_key_t key = {{k0, k1}};
  return philox4x32(ctr, key);
}

}  // namespace

ScopedRunContext::ScopedRunContext(const RunContext* context) : previous_(current_context) {
  current_context = context;
}

ScopedRunContext::~ScopedRunContext() { current_context = previous_; }

const RunContext* CurrentRunContext() { return current_context; }

RunContext MicroBatchRunContext(uint64_t step, uint64_t replica, uint64_t micro_batch,
                                bool training) {
  RunContext c = current_context != nullptr ? *current_context : RunContext{};
  c.step = step;
  c.replica = replica;
  c.micro_batch = micro_batch;
  c.training = training;
  return c;
}

void AppendToRunLog(std::string line) {
  const RunContext* c = current_context;
  if (c == nullptr || c->log == nullptr) return;
  if (static_cast<int64_t>(c->log->size()) < kRunLogLinesMax) {
    c->log->push_back(std::move(line));
  } else if (c->log_dropped != nullptr) {
    ++*c->log_dropped;
  }
}

std::vector<uint32_t> RandomBitsAt(uint64_t seed, uint64_t step, uint64_t replica,
                                   uint64_t micro_batch, absl::string_view node, int64_t count) {
  // Two Philox calls derive a key for (seed, node, replica, micro-batch,
  // step); the element stream is that key over counters i / 4.
  const uint64_t name = NameHash(node);
  const philox4x32_ctr_t a = Philox(Lo(name), Hi(name), Lo(replica), Lo(micro_batch), Lo(seed),
                                    Hi(seed) ^ Hi(replica) ^ Hi(micro_batch));
  const philox4x32_ctr_t b = Philox(Lo(step), Hi(step), a.v[0], a.v[1], a.v[2], a.v[3]);
  std::vector<uint32_t> out(static_cast<size_t>(count));
  for (int64_t block = 0; block * 4 < count; ++block) {
    const philox4x32_ctr_t r =
        Philox(Lo(static_cast<uint64_t>(block)), Hi(static_cast<uint64_t>(block)), b.v[2], b.v[3],
               b.v[0], b.v[1]);
    for (int64_t k = 0; k < 4 && block * 4 + k < count; ++k) out[block * 4 + k] = r.v[k];
  }
  return out;
}

absl::StatusOr<std::vector<uint32_t>> RandomBits(absl::string_view node, int64_t count) {
  const RunContext* c = current_context;
  if (c == nullptr || !c->seed.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "random op '", node, "' runs without a seeded run context (device/graph/run_context.h)"));
  }
  return RandomBitsAt(*c->seed, c->step, c->replica, c->micro_batch, node, count);
}

namespace {

// The value of a node input as a number, if it is a one-element constant.
std::optional<double> ConstantNumber(const Graph& graph, const Node& node, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i].empty()) return std::nullopt;
  const Tensor* t = graph.FindInitializer(node.inputs[i]);
  if (t == nullptr || t->num_elements() != 1) return std::nullopt;
  if (t->dtype() == DType::kFloat32) return t->data<float>()[0];
  return static_cast<double>(t->IntAt(0));
}

bool DropoutMayDrop(const Graph& graph, const Node& node, bool training) {
  if (graph.opset < 12) {
    const AttributeValue* ratio = node.FindAttribute("ratio");
    const float* r = ratio == nullptr ? nullptr : std::get_if<float>(ratio);
    return training && (r == nullptr || *r != 0.0f);
  }
  if (node.inputs.size() < 3 || node.inputs[2].empty()) return false;  // inference mode
  const std::optional<double> mode = ConstantNumber(graph, node, 2);
  if (mode.has_value() && *mode == 0.0) return false;
  if (node.inputs.size() < 2 || node.inputs[1].empty()) return true;  // ratio 0.5
  const std::optional<double> ratio = ConstantNumber(graph, node, 1);
  return !ratio.has_value() || *ratio != 0.0;
}

}  // namespace

bool HasRandomOps(const Graph& graph, bool training) {
  for (const Node& node : graph.nodes) {
    if (node.op_type == "Dropout" && DropoutMayDrop(graph, node, training)) return true;
  }
  return false;
}

}  // namespace ipupod::graph
