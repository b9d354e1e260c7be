#include "device/compiler/memory_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "device/compiler/layer_blocks.h"
#include "device/compiler/phase_plan.h"
#include "device/compiler/temporaries.h"
#include "device/graph/ops.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

constexpr const device::IpuSpec& kIpu = device::kGc200;

// Who makes and who reads one non-constant value.
struct ValueUse {
  int64_t producer = -1;        // node index; -1 for a graph input
  std::vector<size_t> readers;  // node indices
  bool graph_output = false;
  bool is_float = false;  // has a gradient in training
  int64_t bytes = 0;
};

bool IsFloat(const graph::Graph& g, const std::string& value) {
  const graph::TensorType* type = g.FindType(value);
  return type != nullptr && tensor::IsFloat(type->dtype);
}

std::map<std::string, ValueUse> CollectValues(const graph::Graph& g) {
  std::map<std::string, ValueUse> values;
  for (const graph::ValueInfo& in : g.inputs) values[in.name].bytes = ValueBytes(g, in.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const std::string& v : g.nodes[i].inputs) {
      if (v.empty() || g.FindInitializer(v) != nullptr) continue;
      values[v].readers.push_back(i);
    }
    for (const std::string& v : g.nodes[i].outputs) {
      if (v.empty()) continue;
      values[v].producer = static_cast<int64_t>(i);
      values[v].bytes = ValueBytes(g, v);
      values[v].is_float = IsFloat(g, v);
    }
  }
  for (const graph::ValueInfo& out : g.outputs) {
    if (values.count(out.name) > 0) values[out.name].graph_output = true;
  }
  return values;
}

// One micro-batch of a stage (see the header).
struct StageBytes {
  int64_t peak = 0;         // live bytes at the busiest point
  int64_t all = 0;          // every value the stage makes or reads
  int64_t inputs = 0;       // the values it reads from the host or other stages
  int64_t checkpoints = 0;  // recomputing: the values its segments read from outside them
  int64_t segment_all = 0;  // recomputing: the largest segment's `all`
};

// Where recomputation segments end: layer changes (empty: none) and
// checkpoint nodes (empty: none).
struct SegmentBounds {
  const std::vector<int64_t>& node_layer;
  const std::vector<bool>& node_checkpoint;
};

// The recompute segment of each node of `stage` (its position order): a new
// segment starts where the node's layer changes and after a checkpoint node;
// one segment without either.
std::vector<int64_t> Segments(const Placement& p, int64_t stage, const SegmentBounds& bounds) {
  std::vector<int64_t> segment(p.node_stage.size(), -1);
  int64_t current = -1;
  bool boundary = true;  // the stage's first node starts a segment
  int64_t previous_layer = 0;
  for (size_t i = 0; i < p.node_stage.size(); ++i) {
    if (p.node_stage[i] != stage) continue;
    const int64_t layer = bounds.node_layer.empty() ? 0 : bounds.node_layer[i];
    if (boundary || layer != previous_layer) ++current;
    boundary = !bounds.node_checkpoint.empty() && bounds.node_checkpoint[i];
    previous_layer = layer;
    segment[i] = current;
  }
  return segment;
}

// Adds one value's bytes to its segments' `all` and, when a segment other
// than its producer's reads it, to the checkpoints.
void AddToSegments(const ValueUse& use, const std::vector<int64_t>& segment,
                   std::vector<int64_t>& segment_all, StageBytes& out) {
  std::set<int64_t> touched;
  const int64_t made = use.producer >= 0 ? segment[use.producer] : -1;
  if (made >= 0) touched.insert(made);
  bool crosses = false;
  for (size_t r : use.readers) {
    if (segment[r] < 0) continue;
    touched.insert(segment[r]);
    crosses = crosses || segment[r] != made;
  }
  for (int64_t s : touched) segment_all[s] += use.bytes;
  if (crosses) out.checkpoints += use.bytes;
}

StageBytes MeasureStage(const Placement& p, int64_t stage,
                        const std::map<std::string, ValueUse>& values,
                        const SegmentBounds& bounds) {
  StageBytes out;
  const std::vector<int64_t> segment = Segments(p, stage, bounds);
  std::vector<int64_t> position(p.node_stage.size(), -1);
  int64_t n = 0;
  for (size_t i = 0; i < p.node_stage.size(); ++i) {
    if (p.node_stage[i] == stage) position[i] = n++;
  }
  if (n == 0) return out;
  std::vector<int64_t> delta(n + 1, 0);
  std::vector<int64_t> segment_all(n, 0);
  for (const auto& [name, use] : values) {
    const bool here = use.producer >= 0 && position[use.producer] >= 0;
    int64_t start = here ? position[use.producer] : -1;
    int64_t end = start;
    bool escapes = use.graph_output;
    for (size_t r : use.readers) {
      if (position[r] >= 0) {
        end = std::max(end, position[r]);
        if (start < 0) start = 0;
      } else {
        escapes = true;
      }
    }
    if (start < 0) continue;  // neither made nor read here
    if (here && escapes) end = n - 1;
    delta[start] += use.bytes;
    delta[end + 1] -= use.bytes;
    out.all += use.bytes;
    if (!here) out.inputs += use.bytes;
    AddToSegments(use, segment, segment_all, out);
  }
  int64_t live = 0;
  for (int64_t i = 0; i < n; ++i) out.peak = std::max(out.peak, live += delta[i]);
  out.segment_all = *std::max_element(segment_all.begin(), segment_all.end());
  return out;
}

// Gradients and optimizer state of a trainable weight on one IPU: the
// gradient in the weight's type (`bytes`, `element_bytes` each), the state in
// float32 (device/training/optimizer.h). With replicated_tensor_sharding each of R
// replicas holds 1/R of the state.
void AddTrainingState(const TrainingPlan& t, const std::string& name, int64_t bytes,
                      int64_t element_bytes, int64_t replicas, IpuPlan& plan) {
  auto per_element = t.state_element_bytes.find(name);
  if (per_element == t.state_element_bytes.end()) return;  // not trained
  plan.gradient_bytes += bytes;
  int64_t state = per_element->second * (bytes / element_bytes);
  if (t.replicated_tensor_sharding && replicas > 1) state = (state + replicas - 1) / replicas;
  (t.optimizer_state_offchip ? plan.optimizer_state_offchip_bytes : plan.optimizer_state_bytes) +=
      state;
}

// A serialized embedding's table counts its padded rows (optimum resizes it).
void AddWeights(const graph::Graph& g, const Placement& p, const PlanOptions& o,
                const std::optional<SerializedEmbedding>& embedding, std::vector<IpuPlan>& ipus,
                std::vector<std::vector<TensorUse>>& tensors) {
  std::vector<std::set<std::string>> seen(ipus.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int64_t ipu = p.NodeIpu(i);
    for (const std::string& v : g.nodes[i].inputs) {
      const tensor::Tensor* w = v.empty() ? nullptr : g.FindInitializer(v);
      if (w == nullptr || !seen[ipu].insert(v).second) continue;
      int64_t bytes = static_cast<int64_t>(w->byte_size());
      if (embedding.has_value() && embedding->table == v) bytes += embedding->PaddingBytes();
      ipus[ipu].weight_bytes += bytes;
      tensors[ipu].push_back({v, bytes, true});
      if (o.training.has_value()) {
        AddTrainingState(*o.training, v, bytes, static_cast<int64_t>(tensor::DTypeSize(w->dtype())),
                         o.count.replication_factor, ipus[ipu]);
      }
    }
  }
}

// IPU-Link bytes (charged to the sender; in training a float value's
// gradient goes back, charged to each reader), host bytes and activations.
void AddTraffic(const Placement& p, const PlanOptions& o,
                const std::map<std::string, ValueUse>& values, std::vector<IpuPlan>& ipus,
                std::vector<std::vector<TensorUse>>& tensors) {
  for (const auto& [name, use] : values) {
    std::set<int64_t> reader_ipus;
    for (size_t r : use.readers) reader_ipus.insert(p.NodeIpu(r));
    if (use.producer < 0) {  // a graph input, streamed from the host to every IPU reading it
      for (int64_t ipu : reader_ipus) {
        ipus[ipu].host_in_bytes += use.bytes;
        tensors[ipu].push_back({name, use.bytes, false});
      }
      continue;
    }
    const int64_t from = p.NodeIpu(use.producer);
    reader_ipus.erase(from);
    ipus[from].ipu_link_bytes += use.bytes * static_cast<int64_t>(reader_ipus.size());
    if (o.training.has_value() && use.is_float) {
      for (int64_t ipu : reader_ipus) ipus[ipu].ipu_link_bytes += use.bytes;
    }
    if (use.graph_output) ipus[from].host_out_bytes += use.bytes;
    tensors[from].push_back({name, use.bytes, false});
  }
}

// Micro-batches a stage holds: inference S - s; training PopART's stash
// 2(S - s) - 1; sharded or one stage, 1.
int64_t InFlight(const PlanOptions& o, int64_t stages, int64_t s) {
  if (o.strategy != ExecutionStrategy::kPipelined || stages <= 1) return 1;
  return o.training.has_value() ? 2 * (stages - s) - 1 : stages - s;
}

bool Pipelined(ExecutionStrategy strategy, int64_t stages) {
  return strategy == ExecutionStrategy::kPipelined && stages > 1;
}

// Whether stage `s` recomputes its forward in the backward pass: with
// checkpoints per layer every stage does; otherwise all but the last of a
// pipeline (PopART's RecomputationType::Pipeline: the last stage's backward
// follows its forward at once).
bool StageRecomputes(const PlanOptions& o, int64_t stages, int64_t s) {
  if (!o.training.has_value() || !Recomputes(*o.training, o.strategy, stages)) return false;
  const TrainingPlan& t = *o.training;
  if (t.recompute_checkpoint_every_layer && !t.node_layer.empty()) return true;
  return !Pipelined(o.strategy, stages) || s < stages - 1;
}

// What one micro-batch of a stage keeps (see the header): inference its
// peak; training every value, or only its checkpoints when recomputing.
int64_t KeptPerMicroBatch(const PlanOptions& o, const StageBytes& b, bool recomputes) {
  if (!o.training.has_value()) return b.peak;
  return recomputes ? b.checkpoints : b.all;
}

// Forward FLOPs x 3 for training (backward ~ 2x forward), x 4 recomputing.
int64_t FlopsFactor(const PlanOptions& o, int64_t stages) {
  if (!o.training.has_value()) return 1;
  return Recomputes(*o.training, o.strategy, stages) ? 4 : 3;
}

void AddStages(const graph::Graph& g, absl::Span<const graph::NodeCost> costs, const Placement& p,
               const PlanOptions& o, const std::map<std::string, ValueUse>& values,
               std::vector<IpuPlan>& ipus) {
  const int64_t stages = p.num_stages();
  static const std::vector<int64_t> kNoLayers;
  static const std::vector<bool> kNoCheckpoints;
  const SegmentBounds bounds{o.training.has_value() ? o.training->node_layer : kNoLayers,
                             o.training.has_value() ? o.training->node_checkpoint : kNoCheckpoints};
  for (int64_t s = 0; s < stages; ++s) {
    IpuPlan& plan = ipus[p.stage_ipu[s]];
    const StageBytes bytes = MeasureStage(p, s, values, bounds);
    const bool recomputes = StageRecomputes(o, stages, s);
    const int64_t kept = KeptPerMicroBatch(o, bytes, recomputes);
    const int64_t in_flight = InFlight(o, stages, s);
    plan.stages.push_back(s);
    plan.activation_bytes_per_micro_batch += kept;
    plan.activation_bytes += kept * in_flight;
    plan.micro_batches_in_flight = std::max(plan.micro_batches_in_flight, in_flight);
    if (recomputes) plan.recompute_bytes = std::max(plan.recompute_bytes, bytes.segment_all);
  }
  for (IpuPlan& plan : ipus) plan.activation_bytes += plan.recompute_bytes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    IpuPlan& plan = ipus[p.NodeIpu(i)];
    ++plan.nodes;
    plan.flops += costs[i].flops * FlopsFactor(o, stages);
  }
}

// The proportion of IPU `ipu`'s memory its products may use: the node's
// own (poptorch.set_available_memory), else the config's for the IPU.
double Proportion(const graph::Node& node, const PlanOptions& o, int64_t ipu) {
  if (const graph::AttributeValue* own = node.FindAttribute(graph::kAvailableMemoryProportion)) {
    if (const float* f = std::get_if<float>(own)) return *f;
  }
  const PerIpuFloat& p = o.matmul_proportion;
  if (p.values.empty()) return kDefaultMatmulProportion;
  if (!p.is_list) return p.values[0];
  return p.values[std::min<size_t>(static_cast<size_t>(ipu), p.values.size() - 1)];
}

// Each IPU holds its largest op temporary; passes beyond the first cost
// time (device/compiler/temporaries.h), in training for the backward's products
// too (the same factor as FLOPs).
void AddTemporaries(const graph::Graph& g, const Placement& p, const PlanOptions& o,
                    const std::optional<SerializedEmbedding>& embedding,
                    std::vector<IpuPlan>& ipus) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int64_t ipu = p.NodeIpu(i);
    const NodeTemporary t = PlanNodeTemporary(g, g.nodes[i], Proportion(g.nodes[i], o, ipu),
                                              static_cast<int64_t>(kIpu.memory_bytes), embedding);
    IpuPlan& plan = ipus[ipu];
    plan.serial_passes += (t.passes - 1) * FlopsFactor(o, p.num_stages());
    if (t.bytes > plan.temporary_bytes) {
      plan.temporary_bytes = t.bytes;
      plan.temporary_node = g.nodes[i].name;
      plan.temporary_node_passes = t.passes;
    }
  }
}

// Phased: each stage's weights and their training state (a weight two
// stages read counts in both).
void AddStageWeights(const graph::Graph& g, const Placement& p, const PlanOptions& o,
                     const std::optional<SerializedEmbedding>& embedding,
                     std::vector<StageNeeds>& needs) {
  std::vector<std::set<std::string>> seen(needs.size());
  std::vector<IpuPlan> state(needs.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int64_t stage = p.node_stage[i];
    for (const std::string& v : g.nodes[i].inputs) {
      const tensor::Tensor* w = v.empty() ? nullptr : g.FindInitializer(v);
      if (w == nullptr || !seen[stage].insert(v).second) continue;
      int64_t bytes = static_cast<int64_t>(w->byte_size());
      if (embedding.has_value() && embedding->table == v) bytes += embedding->PaddingBytes();
      needs[stage].weight_bytes += bytes;
      if (o.training.has_value()) {
        AddTrainingState(*o.training, v, bytes, static_cast<int64_t>(tensor::DTypeSize(w->dtype())),
                         o.count.replication_factor, state[stage]);
      }
    }
  }
  for (size_t s = 0; s < needs.size(); ++s) {
    needs[s].gradient_bytes = state[s].gradient_bytes;
    needs[s].optimizer_state_bytes = state[s].optimizer_state_bytes;
  }
}

// Phased: what each stage keeps per micro-batch, and its forward time.
void AddStageWork(const graph::Graph& g, absl::Span<const graph::NodeCost> costs,
                  const Placement& p, const PlanOptions& o,
                  const std::map<std::string, ValueUse>& values,
                  const std::optional<SerializedEmbedding>& embedding,
                  std::vector<StageNeeds>& needs) {
  static const std::vector<int64_t> kNoLayers;
  static const std::vector<bool> kNoCheckpoints;
  const SegmentBounds bounds{o.training.has_value() ? o.training->node_layer : kNoLayers,
                             o.training.has_value() ? o.training->node_checkpoint : kNoCheckpoints};
  const int64_t stages = p.num_stages();
  for (int64_t s = 0; s < stages; ++s) {
    const StageBytes bytes = MeasureStage(p, s, values, bounds);
    const bool recomputes = StageRecomputes(o, stages, s);
    needs[s].kept_bytes = KeptPerMicroBatch(o, bytes, recomputes);
    needs[s].recompute_bytes = recomputes ? bytes.segment_all : 0;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeTemporary t =
        PlanNodeTemporary(g, g.nodes[i], Proportion(g.nodes[i], o, p.NodeIpu(i)),
                          static_cast<int64_t>(kIpu.memory_bytes), embedding);
    needs[p.node_stage[i]].compute_s += static_cast<double>(costs[i].flops) / kIpu.fp32_flops +
                                        static_cast<double>(t.passes - 1) * kSerialPassSeconds;
  }
}

// Phased: the values each stage takes from other stages and gives to later
// phases (graph inputs come from the host, not from a stage).
void AddStageExchanges(const Placement& p, const std::map<std::string, ValueUse>& values,
                       std::vector<StageNeeds>& needs) {
  for (const auto& [name, use] : values) {
    if (use.producer < 0) continue;
    const int64_t from = p.node_stage[use.producer];
    std::set<int64_t> readers;
    for (size_t r : use.readers) readers.insert(p.node_stage[r]);
    readers.erase(from);
    bool later = false;
    for (int64_t to : readers) {
      StageNeeds& n = needs[to];
      const bool other_ipu = n.ipu != needs[from].ipu;
      if (n.phase == needs[from].phase) {
        n.link_bytes += other_ipu ? use.bytes : 0;
        continue;
      }
      later = true;
      n.earlier_bytes += use.bytes;
      n.earlier_link_bytes += other_ipu ? use.bytes : 0;
    }
    if (later) needs[from].later_bytes += use.bytes;
  }
}

absl::Status CheckPhasedPlacement(const Placement& p, const PlanOptions& o) {
  if (p.phased() == IsPhased(o.strategy)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the placement ", p.phased() ? "has" : "has no", " execution phases but the strategy is ",
      ExecutionStrategyName(o.strategy), ": recompile the executable"));
}

PhaseModel MakePhaseModel(const PlanOptions& o) {
  return PhaseModel{
      .strategy = o.strategy,
      .liveness = o.liveness,
      .training = o.training.has_value(),
      .recompute = o.training.has_value() && o.training->recompute_checkpoint_every_layer};
}

std::vector<StageNeeds> CollectStageNeeds(const graph::Graph& g,
                                          absl::Span<const graph::NodeCost> costs,
                                          const Placement& p, const PlanOptions& o,
                                          const std::map<std::string, ValueUse>& values,
                                          const std::optional<SerializedEmbedding>& embedding) {
  std::vector<StageNeeds> needs(p.num_stages());
  for (int64_t s = 0; s < p.num_stages(); ++s) {
    needs[s].phase = p.stage_phase[s];
    needs[s].ipu = p.stage_ipu[s];
  }
  AddStageWeights(g, p, o, embedding, needs);
  AddStageWork(g, costs, p, o, values, embedding, needs);
  AddStageExchanges(p, values, needs);
  return needs;
}

// The share of micro-batches whose outputs go to the host: of a step's
// device_iterations (x gradient_accumulation_steps in training).
double OutputFraction(const PlanOptions& o) {
  const double accumulation =
      o.training.has_value() ? static_cast<double>(o.training->gradient_accumulation_steps) : 1.0;
  switch (o.output_mode.kind) {
    case OutputMode::Kind::kAll:
      return 1.0;
    case OutputMode::Kind::kEveryN:
      return 1.0 / (static_cast<double>(o.output_mode.every_n) * accumulation);
    case OutputMode::Kind::kFinal:
    case OutputMode::Kind::kSum:
      return 1.0 / (static_cast<double>(o.device_iterations) * accumulation);
  }
  return 1.0;
}

// Per weight update: the replicas' gradient all-reduce and off-chip state traffic.
void FinishUpdate(IpuPlan& plan, const PlanOptions& o) {
  const int64_t r = o.count.replication_factor;
  if (r > 1) plan.all_reduce_bytes = 2 * plan.gradient_bytes * (r - 1) / r;
  plan.update_ipu_link_s = static_cast<double>(plan.all_reduce_bytes) / kIpu.ipu_link_bytes_per_s;
  plan.update_host_s =
      2.0 * static_cast<double>(plan.optimizer_state_offchip_bytes) / kIpu.host_link_bytes_per_s;
}

void Finish(IpuPlan& plan, const PlanOptions& o, std::vector<TensorUse> tensors) {
  if (plan.nodes > 0) {
    plan.code_bytes = int64_t{kIpu.tiles} * kCodeBytesPerTile + plan.nodes * kCodeBytesPerNode;
  }
  plan.total_bytes = plan.weight_bytes + plan.gradient_bytes + plan.optimizer_state_bytes +
                     plan.activation_bytes + plan.temporary_bytes + plan.code_bytes;
  plan.compute_s = static_cast<double>(plan.flops) / kIpu.fp32_flops +
                   static_cast<double>(plan.serial_passes) * kSerialPassSeconds;
  plan.ipu_link_s = static_cast<double>(plan.ipu_link_bytes) / kIpu.ipu_link_bytes_per_s;
  // Synthetic data (PopTorch's enableSyntheticData): no host I/O.
  plan.host_s = o.synthetic_data ? 0.0
                                 : (static_cast<double>(plan.host_in_bytes) +
                                    static_cast<double>(plan.host_out_bytes) * OutputFraction(o)) /
                                       kIpu.host_link_bytes_per_s;
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorUse& a, const TensorUse& b) { return a.bytes > b.bytes; });
  if (tensors.size() > kLargestTensorsReported) tensors.resize(kLargestTensorsReported);
  plan.largest = std::move(tensors);
  if (o.training.has_value()) FinishUpdate(plan, o);
}

// Inference: one pass of device_iterations micro-batches. Training:
// device_iterations weight updates, each a pipeline fill, GA micro-batches
// and a drain (forward and backward), then the update (see the header).
void EstimateStep(Report& r) {
  const double iterations = static_cast<double>(r.device_iterations);
  const double stages = static_cast<double>(r.num_stages);
  double slowest = 0, sum = 0, update = 0;
  for (const IpuPlan& p : r.ipus) {
    slowest = std::max(slowest, p.busy_s());
    sum += p.busy_s();
    update = std::max(update, p.update_s());
  }
  if (IsPhased(r.strategy)) {  // phases one after another, plus every IPU's host transfers
    sum = 0;
    for (const PhasePlan& phase : r.phases) sum += phase.time_s;
    for (const IpuPlan& p : r.ipus) sum += p.host_s;
  }
  const bool pipelined = r.strategy == ExecutionStrategy::kPipelined && r.num_stages > 1;
  if (r.training()) {
    const double accumulation = static_cast<double>(r.gradient_accumulation_steps);
    const double per_update =
        pipelined ? (accumulation + 2 * stages - 2) * slowest : accumulation * sum;
    r.step_s = iterations * (per_update + update);
  } else if (pipelined) {
    r.step_s = (iterations + stages - 1) * slowest;
  } else {
    r.step_s = iterations * sum;
  }
  r.samples_per_s = r.step_s > 0 ? static_cast<double>(r.samples_per_step()) / r.step_s : 0;
}

// "weights X, [gradients, optimizer state,] activations Y for N micro-batches in flight, code Z".
std::string Breakdown(const Report& r, const IpuPlan& p) {
  std::string out = absl::StrCat("weights ", FormatBytesFixed(p.weight_bytes));
  if (r.training()) {
    absl::StrAppend(&out, ", gradients ", FormatBytesFixed(p.gradient_bytes), ", optimizer state ",
                    FormatBytesFixed(p.optimizer_state_bytes));
    if (p.optimizer_state_offchip_bytes > 0) {
      absl::StrAppend(&out, " (+", FormatBytesFixed(p.optimizer_state_offchip_bytes), " off-chip)");
    }
  }
  absl::StrAppend(&out, ", activations ", FormatBytesFixed(p.activation_bytes), " for ",
                  p.micro_batches_in_flight,
                  p.micro_batches_in_flight == 1 ? " micro-batch" : " micro-batches", " in flight");
  if (r.training()) {
    absl::StrAppend(&out, r.recompute ? " (recomputing)" : " (kept for the backward pass)");
  }
  if (p.temporary_bytes > 0) {
    absl::StrAppend(&out, ", temporary ", FormatBytesFixed(p.temporary_bytes), " for '",
                    p.temporary_node, "'");
  }
  absl::StrAppend(&out, ", code ", FormatBytesFixed(p.code_bytes));
  return out;
}

// The levers (temporaries; in training state and recompute) that would lower this IPU's need, or
// "".
std::string Advice(const Report& r, const IpuPlan& p) {
  std::string out;
  if (p.temporary_bytes * 10 > r.memory_bytes_per_ipu) {
    absl::StrAppend(&out, "; or lower matmul_proportion for IPU ", p.ipu, " (its largest ",
                    "temporary is ", FormatBytesFixed(p.temporary_bytes), " for '",
                    p.temporary_node, "')");
  }
  if (r.liveness == LivenessName(Liveness::kAlwaysLive)) {
    absl::StrAppend(&out,
                    "; or hold one phase at a time, the others in streaming memory "
                    "(tensors_liveness=off_chip_after_fwd: PopTorch's Liveness.OffChipAfterFwd)");
  }
  if (!r.training()) return out;
  if (p.optimizer_state_bytes > 0) {
    absl::StrAppend(&out, "; or set optimizer_state_offchip=true (frees ",
                    FormatBytesFixed(p.optimizer_state_bytes), " of optimizer state)");
    if (!r.replicated_tensor_sharding && r.count.replication_factor > 1) {
      absl::StrAppend(&out, "; or replicated_tensor_sharding=true (keeps 1/",
                      r.count.replication_factor, " of it on each replica)");
    }
  }
  if (!r.recompute && p.activation_bytes > 0) {
    absl::StrAppend(&out,
                    "; or set recompute_checkpoint_every_layer=true (keeps only the values "
                    "crossing each layer boundary for the backward pass, at 4/3 the compute)");
  }
  return out;
}

// The report's recompute_checkpoints: "layer" or "stage" boundaries
// (recompute_checkpoint_every_layer), "checkpoint" (the model's own), or
// both joined by '+'.
std::string CheckpointKinds(const TrainingPlan& t) {
  std::string out;
  if (t.recompute_checkpoint_every_layer) out = t.node_layer.empty() ? "stage" : "layer";
  if (!t.node_checkpoint.empty()) {
    out = out.empty() ? "checkpoint" : absl::StrCat(out, "+checkpoint");
  }
  return out;
}

// "24.4 MB (24412160 bytes)": close figures can round alike.
std::string ExactBytes(int64_t bytes) {
  return absl::StrCat(FormatBytesFixed(bytes), " (", bytes, " bytes)");
}

// "embedding 'wte' (vocabulary 50257, padded to 50260) is looked up in 4 slices of 12565 rows".
std::string EmbeddingNote(const SerializedEmbedding& e) {
  return absl::StrCat(
      "embedding_serialization_factor ", e.factor, ": embedding '", e.table, "' (vocabulary ",
      e.vocab, e.padded_vocab > e.vocab ? absl::StrCat(", padded to ", e.padded_vocab) : "",
      ") is looked up in ", e.factor, " slices of ", e.padded_vocab / e.factor,
      " rows, one pass each",
      e.tied_products.empty()
          ? ""
          : absl::StrCat("; its tied product '", *e.tied_products.begin(), "' runs in ", e.factor,
                         " passes over its output channels"));
}

// One note per PopART builder attribute name the model's nodes carry
// (graph::IsPopartBuilderAttribute): none changes the plan.
std::vector<std::string> PopartAttributeNotes(const graph::Graph& g) {
  std::map<std::string, int64_t> nodes_with;
  for (const graph::Node& node : g.nodes) {
    for (const auto& [name, value] : node.attributes) {
      if (graph::IsPopartBuilderAttribute(name)) ++nodes_with[name];
    }
  }
  std::vector<std::string> notes;
  for (const auto& [name, count] : nodes_with) {
    notes.push_back(absl::StrCat(
        "PopART attribute '", name, "' (poptorch.Attribute) on ", count,
        count == 1 ? " node" : " nodes", " changes nothing: ",
        name == "__outline" ? "it only steers PopART's outlining, and ipupod's code model charges "
                              "every node without outlining"
                            : "ipupod carries PopART's builder attributes without effect"));
  }
  return notes;
}

// Replicas 1..R-1's own copies of the buffers (PlanOptions::buffers), which
// the host holds besides replica 0's weights; 0 unless replica_buffers.
absl::StatusOr<int64_t> ReplicaBufferBytes(const graph::Graph& g, const PlanOptions& o) {
  const int64_t copies = o.count.replication_factor - 1;
  if (!o.replica_buffers || copies < 1) return 0;
  int64_t bytes = 0;
  for (const std::string& name : o.buffers) {
    const tensor::Tensor* t = g.FindInitializer(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer '", name, "' is not an initializer of the model"));
    }
    bytes += static_cast<int64_t>(t->byte_size());
  }
  return copies * bytes;
}

// The run shape of the report (PlanMemory fills in the rest).
Report StartReport(const Placement& placement, const PlanOptions& options) {
  Report r;
  r.memory_bytes_per_ipu = static_cast<int64_t>(kIpu.memory_bytes);
  r.strategy = options.strategy;
  r.num_stages = placement.num_stages();
  r.count = options.count;
  r.micro_batch_size = options.micro_batch_size;
  r.device_iterations = options.device_iterations;
  r.output_mode = OutputModeName(options.output_mode);
  if (options.training.has_value()) {
    r.mode = "training";
    r.gradient_accumulation_steps = options.training->gradient_accumulation_steps;
    r.recompute = Recomputes(*options.training, options.strategy, placement.num_stages());
    if (r.recompute) r.recompute_checkpoints = CheckpointKinds(*options.training);
    r.replicated_tensor_sharding =
        options.training->replicated_tensor_sharding && options.count.replication_factor > 1;
  }
  return r;
}

}  // namespace

absl::StatusOr<Report> PlanMemory(const graph::Graph& graph,
                                  absl::Span<const graph::NodeCost> costs,
                                  const Placement& placement, const PlanOptions& options) {
  IPUPOD_RETURN_IF_ERROR(CheckPlacementMatchesGraph(placement, graph));
  IPUPOD_RETURN_IF_ERROR(CheckPhasedPlacement(placement, options));
  if (costs.size() != graph.nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node costs cover ", costs.size(), " nodes but the graph has ", graph.nodes.size()));
  }
  Report r = StartReport(placement, options);
  IPUPOD_RETURN_IF_ERROR(CheckPlanningAttributes(graph));
  IPUPOD_ASSIGN_OR_RETURN(std::optional<SerializedEmbedding> embedding,
                          FindSerializedEmbedding(graph, options.embedding_serialization_factor));
  if (embedding.has_value()) {
    r.notes.push_back(EmbeddingNote(*embedding));
  } else if (options.embedding_serialization_factor > 1) {
    r.notes.push_back(absl::StrCat(
        "embedding_serialization_factor ", options.embedding_serialization_factor,
        " changes nothing: the model looks up no embedding on a weight with ids from its inputs "
        "(a model that serializes its own lookup, as optimum's SerializedEmbedding does, runs "
        "its slices as exported)"));
  }
  for (std::string& note : PopartAttributeNotes(graph)) r.notes.push_back(std::move(note));
  IPUPOD_ASSIGN_OR_RETURN(r.replica_buffer_bytes, ReplicaBufferBytes(graph, options));
  r.ipus.resize(placement.ipus_per_replica);
  for (size_t i = 0; i < r.ipus.size(); ++i) r.ipus[i].ipu = static_cast<int64_t>(i);
  std::vector<std::vector<TensorUse>> tensors(r.ipus.size());
  const std::map<std::string, ValueUse> values = CollectValues(graph);
  AddWeights(graph, placement, options, embedding, r.ipus, tensors);
  AddTraffic(placement, options, values, r.ipus, tensors);
  AddStages(graph, costs, placement, options, values, r.ipus);
  AddTemporaries(graph, placement, options, embedding, r.ipus);
  std::vector<StageNeeds> phased;
  if (placement.phased()) {
    phased = CollectStageNeeds(graph, costs, placement, options, values, embedding);
    HoldLargestPhase(phased, MakePhaseModel(options), r.ipus);
    r.liveness = std::string(LivenessName(options.liveness));
  }
  for (size_t i = 0; i < r.ipus.size(); ++i) Finish(r.ipus[i], options, std::move(tensors[i]));
  if (placement.phased()) r.phases = PlanPhaseTimes(phased, MakePhaseModel(options));
  EstimateStep(r);
  return r;
}

void SetPlanBuffers(const std::map<std::string, std::string>& buffers, const IpuConfig& config,
                    PlanOptions& options) {
  options.buffers.clear();
  for (const auto& [buffer, update] : buffers) options.buffers.push_back(buffer);
  options.replica_buffers = !config.broadcast_buffers;
}

TrainingPlan MakeTrainingPlan(const TrainingSpec& spec, const IpuConfig& config,
                              const graph::Graph& graph) {
  TrainingPlan t;
  t.gradient_accumulation_steps = spec.gradient_accumulation_steps;
  for (const std::string& w : spec.weights) {
    const tensor::Tensor* init = graph.FindInitializer(w);
    t.state_element_bytes[w] =
        OptimizerStateElementBytes(spec, init ? init->dtype() : tensor::DType::kFloat32);
  }
  t.optimizer_state_offchip = config.optimizer_state_offchip;
  t.recompute_checkpoint_every_layer = config.recompute_checkpoint_every_layer;
  t.replicated_tensor_sharding = config.replicated_tensor_sharding;
  if (t.recompute_checkpoint_every_layer) {
    absl::StatusOr<LayerBlocks> layers = FindLayerBlocks(graph);
    if (layers.ok()) t.node_layer = std::move(layers->node_layer);  // else: per stage
  }
  t.node_checkpoint = NodeCheckpoints(graph);
  return t;
}

std::vector<bool> NodeCheckpoints(const graph::Graph& graph) {
  std::vector<bool> out(graph.nodes.size(), false);
  bool any = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const graph::AttributeValue* a = graph.nodes[i].FindAttribute(graph::kRecomputeCheckpoint);
    const int64_t* on = a == nullptr ? nullptr : std::get_if<int64_t>(a);
    out[i] = on != nullptr && *on != 0;
    any = any || out[i];
  }
  if (!any) out.clear();
  return out;
}

bool Recomputes(const TrainingPlan& t, ExecutionStrategy strategy, int64_t stages) {
  if (t.recompute_checkpoint_every_layer) return true;
  return !t.node_checkpoint.empty() && Pipelined(strategy, stages);
}

std::vector<std::string> CheckpointWarnings(const TrainingPlan& t, ExecutionStrategy strategy,
                                            int64_t stages) {
  if (t.node_checkpoint.empty() || Recomputes(t, strategy, stages)) return {};
  const int64_t count = std::count(t.node_checkpoint.begin(), t.node_checkpoint.end(), true);
  return {absl::StrCat(
      "the model's ", count,
      count == 1 ? " recomputation checkpoint" : " recomputation checkpoints",
      " (poptorch.recomputationCheckpoint) change nothing: a model of one pipeline stage is not "
      "recomputed (PopTorch recomputes pipelines of several IPUs); set "
      "recompute_checkpoint_every_layer=true to recompute it")};
}

absl::Status CheckReportCoversModel(const Executable& executable, const Report& report,
                                    const graph::Graph& graph) {
  PlanOptions options;
  options.strategy = executable.strategy;
  IPUPOD_ASSIGN_OR_RETURN(options.liveness, ConfiguredLiveness(executable.config));
  options.count = executable.ipus;
  options.micro_batch_size = executable.micro_batch_size;
  options.device_iterations = executable.device_iterations;
  options.output_mode = executable.output_mode;
  const bool for_inference = executable.mode != ExecutableMode::kTraining;
  if (!for_inference) {
    options.training = MakeTrainingPlan(executable.training, executable.config, graph);
  }
  IPUPOD_ASSIGN_OR_RETURN(ModeConfig mode, ResolveMode(executable.config, for_inference));
  options.matmul_proportion = mode.matmul_proportion;
  options.embedding_serialization_factor = executable.config.embedding_serialization_factor;
  SetPlanBuffers(for_inference ? executable.inference_buffers : executable.training.buffers,
                 executable.config, options);
  std::vector<graph::NodeCost> costs;  // memory does not depend on FLOPs
  for (const graph::Node& node : graph.nodes) {
    costs.push_back({node.name, node.op_type, node.module_path, 0});
  }
  IPUPOD_ASSIGN_OR_RETURN(Report model, PlanMemory(graph, costs, executable.placement, options));
  if (model.ipus.size() != report.ipus.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the executable's report plans ", report.ipus.size(), " IPUs but its model places on ",
        model.ipus.size(), "; recompile it with ipupod compile"));
  }
  for (size_t i = 0; i < model.ipus.size(); ++i) {
    if (model.ipus[i].total_bytes <= report.ipus[i].total_bytes) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "the executable's report charges IPU ", i, " ", ExactBytes(report.ipus[i].total_bytes),
        " but its model needs ", ExactBytes(model.ipus[i].total_bytes),
        " (an executable compiled before a change to the memory plan, or a crafted report); "
        "recompile it with ipupod compile"));
  }
  // What a server charges the host (Report::host_bytes) must cover the model too: a
  // report must not move bytes into code or temporaries, which the host does not hold.
  if (model.host_bytes() > report.host_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the executable's report charges ", ExactBytes(report.host_bytes()),
                     " of host memory but its model needs ", ExactBytes(model.host_bytes()),
                     "; recompile it with ipupod compile"));
  }
  return absl::OkStatus();
}

absl::Status CheckMemoryFits(const Report& report) {
  std::vector<const IpuPlan*> over;
  for (const IpuPlan& p : report.ipus) {
    if (p.total_bytes > report.memory_bytes_per_ipu) over.push_back(&p);
  }
  if (over.empty()) return absl::OkStatus();
  const IpuPlan& p = *over.front();
  std::vector<std::string> largest;
  for (const TensorUse& t : p.largest) {
    largest.push_back(absl::StrCat("'", t.name, "' ", FormatBytesFixed(t.bytes),
                                   t.is_weight ? " (weight)" : " (activation)"));
  }
  std::string others;
  for (size_t i = 1; i < over.size(); ++i) {
    absl::StrAppend(&others, i == 1 ? "; also over: IPU " : ", IPU ", over[i]->ipu, " (",
                    FormatBytesFixed(over[i]->total_bytes), ")");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "out of memory on IPU ", p.ipu, ": needs ", FormatBytesFixed(p.total_bytes), " of ",
      FormatBytesFixed(report.memory_bytes_per_ipu), " (", Breakdown(report, p),
      "); largest tensors: ", absl::StrJoin(largest, ", "), others, ". Move layers off IPU ", p.ipu,
      " (layers_per_ipu or a module map), use more IPUs per replica, or a smaller micro-batch",
      Advice(report, p)));
}

}  // namespace ipupod::compiler
