#include "compiler/memory_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

constexpr const device::IpuSpec& kIpu = device::kGc200;

// Who makes and who reads one non-constant value.
struct ValueUse {
  int64_t producer = -1;        // node index; -1 for a graph input
  std::vector<size_t> readers;  // node indices
  bool graph_output = false;
  int64_t bytes = 0;
};

int64_t TypeBytes(const graph::Graph& g, const std::string& value) {
  const graph::TensorType* type = g.FindType(value);
  if (type == nullptr) return 0;
  int64_t n = static_cast<int64_t>(graph::DTypeSize(type->dtype));
  for (int64_t d : type->shape) {
    if (d < 0) return 0;
    n *= d;
  }
  return n;
}

std::map<std::string, ValueUse> CollectValues(const graph::Graph& g) {
  std::map<std::string, ValueUse> values;
  for (const graph::ValueInfo& in : g.inputs) values[in.name].bytes = TypeBytes(g, in.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const std::string& v : g.nodes[i].inputs) {
      if (v.empty() || g.FindInitializer(v) != nullptr) continue;
      values[v].readers.push_back(i);
    }
    for (const std::string& v : g.nodes[i].outputs) {
      if (v.empty()) continue;
      values[v].producer = static_cast<int64_t>(i);
      values[v].bytes = TypeBytes(g, v);
    }
  }
  for (const graph::ValueInfo& out : g.outputs) {
    if (values.count(out.name) > 0) values[out.name].graph_output = true;
  }
  return values;
}

// Peak live bytes of one micro-batch in `stage` (see the header).
int64_t StagePeak(const Placement& p, int64_t stage,
                  const std::map<std::string, ValueUse>& values) {
  std::vector<int64_t> position(p.node_stage.size(), -1);
  int64_t n = 0;
  for (size_t i = 0; i < p.node_stage.size(); ++i) {
    if (p.node_stage[i] == stage) position[i] = n++;
  }
  if (n == 0) return 0;
  std::vector<int64_t> delta(n + 1, 0);
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
  }
  int64_t live = 0, peak = 0;
  for (int64_t i = 0; i < n; ++i) peak = std::max(peak, live += delta[i]);
  return peak;
}

void AddWeights(const graph::Graph& g, const Placement& p, std::vector<IpuPlan>& ipus,
                std::vector<std::vector<TensorUse>>& tensors) {
  std::vector<std::set<std::string>> seen(ipus.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const int64_t ipu = p.NodeIpu(i);
    for (const std::string& v : g.nodes[i].inputs) {
      const graph::Tensor* w = v.empty() ? nullptr : g.FindInitializer(v);
      if (w == nullptr || !seen[ipu].insert(v).second) continue;
      ipus[ipu].weight_bytes += static_cast<int64_t>(w->byte_size());
      tensors[ipu].push_back({v, static_cast<int64_t>(w->byte_size()), true});
    }
  }
}

// IPU-Link bytes (charged to the sender), host bytes and activations per IPU.
void AddTraffic(const Placement& p, const std::map<std::string, ValueUse>& values,
                std::vector<IpuPlan>& ipus, std::vector<std::vector<TensorUse>>& tensors) {
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
    if (use.graph_output) ipus[from].host_out_bytes += use.bytes;
    tensors[from].push_back({name, use.bytes, false});
  }
}

void AddStages(const graph::Graph& g, absl::Span<const graph::NodeCost> costs, const Placement& p,
               const PlanOptions& o, const std::map<std::string, ValueUse>& values,
               std::vector<IpuPlan>& ipus) {
  const int64_t stages = p.num_stages();
  const bool pipelined = o.strategy == ExecutionStrategy::kPipelined && stages > 1;
  for (int64_t s = 0; s < stages; ++s) {
    IpuPlan& plan = ipus[p.stage_ipu[s]];
    const int64_t peak = StagePeak(p, s, values);
    const int64_t in_flight = pipelined ? stages - s : 1;
    plan.stages.push_back(s);
    plan.activation_bytes_per_micro_batch += peak;
    plan.activation_bytes += peak * in_flight;
    plan.micro_batches_in_flight = std::max(plan.micro_batches_in_flight, in_flight);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    IpuPlan& plan = ipus[p.NodeIpu(i)];
    ++plan.nodes;
    plan.flops += costs[i].flops;
  }
}

double OutputFraction(const PlanOptions& o) {
  switch (o.output_mode.kind) {
    case OutputMode::Kind::kAll:
      return 1.0;
    case OutputMode::Kind::kEveryN:
      return 1.0 / static_cast<double>(o.output_mode.every_n);
    case OutputMode::Kind::kFinal:
    case OutputMode::Kind::kSum:
      return 1.0 / static_cast<double>(o.device_iterations);
  }
  return 1.0;
}

void Finish(IpuPlan& plan, const PlanOptions& o, std::vector<TensorUse> tensors) {
  if (plan.nodes > 0) {
    plan.code_bytes = int64_t{kIpu.tiles} * kCodeBytesPerTile + plan.nodes * kCodeBytesPerNode;
  }
  plan.total_bytes = plan.weight_bytes + plan.activation_bytes + plan.code_bytes;
  plan.compute_s = static_cast<double>(plan.flops) / kIpu.fp32_flops;
  plan.ipu_link_s = static_cast<double>(plan.ipu_link_bytes) / kIpu.ipu_link_bytes_per_s;
  plan.host_s = (static_cast<double>(plan.host_in_bytes) +
                 static_cast<double>(plan.host_out_bytes) * OutputFraction(o)) /
                kIpu.host_link_bytes_per_s;
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorUse& a, const TensorUse& b) { return a.bytes > b.bytes; });
  if (tensors.size() > kLargestTensorsReported) tensors.resize(kLargestTensorsReported);
  plan.largest = std::move(tensors);
}

void EstimateStep(Report& r) {
  const double iterations = static_cast<double>(r.device_iterations);
  double slowest = 0, sum = 0;
  for (const IpuPlan& p : r.ipus) {
    slowest = std::max(slowest, p.busy_s());
    sum += p.busy_s();
  }
  if (r.strategy == ExecutionStrategy::kPipelined && r.num_stages > 1) {
    r.step_s = (iterations + static_cast<double>(r.num_stages) - 1) * slowest;
  } else {
    r.step_s = iterations * sum;
  }
  r.samples_per_s = r.step_s > 0 ? static_cast<double>(r.samples_per_step()) / r.step_s : 0;
}

}  // namespace

absl::StatusOr<Report> PlanMemory(const graph::Graph& graph,
                                  absl::Span<const graph::NodeCost> costs,
                                  const Placement& placement, const PlanOptions& options) {
  IPUPOD_RETURN_IF_ERROR(CheckPlacementMatchesGraph(placement, graph));
  if (costs.size() != graph.nodes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node costs cover ", costs.size(), " nodes but the graph has ", graph.nodes.size()));
  }
  Report r;
  r.memory_bytes_per_ipu = static_cast<int64_t>(kIpu.memory_bytes);
  r.strategy = options.strategy;
  r.num_stages = placement.num_stages();
  r.count = options.count;
  r.micro_batch_size = options.micro_batch_size;
  r.device_iterations = options.device_iterations;
  r.output_mode = OutputModeName(options.output_mode);
  r.ipus.resize(placement.ipus_per_replica);
  for (size_t i = 0; i < r.ipus.size(); ++i) r.ipus[i].ipu = static_cast<int64_t>(i);
  std::vector<std::vector<TensorUse>> tensors(r.ipus.size());
  const std::map<std::string, ValueUse> values = CollectValues(graph);
  AddWeights(graph, placement, r.ipus, tensors);
  AddTraffic(placement, values, r.ipus, tensors);
  AddStages(graph, costs, placement, options, values, r.ipus);
  for (size_t i = 0; i < r.ipus.size(); ++i) Finish(r.ipus[i], options, std::move(tensors[i]));
  EstimateStep(r);
  return r;
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
    largest.push_back(absl::StrCat("'", t.name, "' ", FormatBytes(t.bytes),
                                   t.is_weight ? " (weight)" : " (activation)"));
  }
  std::string others;
  for (size_t i = 1; i < over.size(); ++i) {
    absl::StrAppend(&others, i == 1 ? "; also over: IPU " : ", IPU ", over[i]->ipu, " (",
                    FormatBytes(over[i]->total_bytes), ")");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "out of memory on IPU ", p.ipu, ": needs ", FormatBytes(p.total_bytes), " of ",
      FormatBytes(report.memory_bytes_per_ipu), " (weights ", FormatBytes(p.weight_bytes),
      ", activations ", FormatBytes(p.activation_bytes), " for ", p.micro_batches_in_flight,
      p.micro_batches_in_flight == 1 ? " micro-batch" : " micro-batches", " in flight, code ",
      FormatBytes(p.code_bytes), "); largest tensors: ", absl::StrJoin(largest, ", "), others,
      ". Move layers off IPU ", p.ipu,
      " (layers_per_ipu or a module map), use more IPUs per replica, or a smaller micro-batch"));
}

}  // namespace ipupod::compiler
