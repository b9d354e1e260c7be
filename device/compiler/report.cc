#include "device/compiler/report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/format.h"
#include "common/json_reader.h"
#include "common/status_macros.h"

namespace ipupod::compiler {
namespace {

using Json = nlohmann::json;

std::string StagesText(const std::vector<int64_t>& stages) {
  return stages.empty() ? "-" : absl::StrJoin(stages, ",");
}

std::string Row(const IpuPlan& p, int64_t memory) {
  const double used = memory > 0 ? 100.0 * static_cast<double>(p.total_bytes) / memory : 0;
  const std::string activations = absl::StrCat(FormatBytesFixed(p.activation_bytes_per_micro_batch),
                                               " x", p.micro_batches_in_flight);
  return absl::StrFormat("%4d  %-7s %6d  %10s  %-16s %10s  %10s  %10s  %5.1f%%  %9s  %10s\n", p.ipu,
                         StagesText(p.stages), p.nodes, FormatBytesFixed(p.weight_bytes),
                         activations, FormatBytesFixed(p.temporary_bytes),
                         FormatBytesFixed(p.code_bytes), FormatBytesFixed(p.total_bytes), used,
                         FormatCount(p.flops), FormatSiDuration(p.busy_s()));
}

// Training: gradients and on-chip optimizer state get their own columns;
// activations add the recompute buffer ("1.2 kB x3 + 4.5 kB").
std::string TrainingRow(const IpuPlan& p, int64_t memory) {
  const double used = memory > 0 ? 100.0 * static_cast<double>(p.total_bytes) / memory : 0;
  std::string activations = absl::StrCat(FormatBytesFixed(p.activation_bytes_per_micro_batch), " x",
                                         p.micro_batches_in_flight);
  if (p.recompute_bytes > 0)
    absl::StrAppend(&activations, " + ", FormatBytesFixed(p.recompute_bytes));
  return absl::StrFormat(
      "%4d  %-7s %6d  %10s  %10s  %10s  %-24s %10s  %10s  %10s  %5.1f%%  %9s  %10s\n", p.ipu,
      StagesText(p.stages), p.nodes, FormatBytesFixed(p.weight_bytes),
      FormatBytesFixed(p.gradient_bytes), FormatBytesFixed(p.optimizer_state_bytes), activations,
      FormatBytesFixed(p.temporary_bytes), FormatBytesFixed(p.code_bytes),
      FormatBytesFixed(p.total_bytes), used, FormatCount(p.flops), FormatSiDuration(p.busy_s()));
}

void AddTrainingJson(const IpuPlan& p, Json& j) {
  j["gradient_bytes"] = p.gradient_bytes;
  j["optimizer_state_bytes"] = p.optimizer_state_bytes;
  j["optimizer_state_offchip_bytes"] = p.optimizer_state_offchip_bytes;
  j["recompute_bytes"] = p.recompute_bytes;
  j["all_reduce_bytes_per_update"] = p.all_reduce_bytes;
  j["update_ipu_link_s"] = p.update_ipu_link_s;
  j["update_host_s"] = p.update_host_s;
}

Json IpuJson(const IpuPlan& p) {
  Json largest = Json::array();
  for (const TensorUse& t : p.largest) {
    largest.push_back(
        {{"name", t.name}, {"bytes", t.bytes}, {"kind", t.is_weight ? "weight" : "activation"}});
  }
  return {{"ipu", p.ipu},
          {"stages", p.stages},
          {"nodes", p.nodes},
          {"weight_bytes", p.weight_bytes},
          {"activation_bytes_per_micro_batch", p.activation_bytes_per_micro_batch},
          {"micro_batches_in_flight", p.micro_batches_in_flight},
          {"activation_bytes", p.activation_bytes},
          {"code_bytes", p.code_bytes},
          {"total_bytes", p.total_bytes},
          {"flops_per_micro_batch", p.flops},
          {"ipu_link_bytes_per_micro_batch", p.ipu_link_bytes},
          {"host_in_bytes_per_micro_batch", p.host_in_bytes},
          {"host_out_bytes_per_micro_batch", p.host_out_bytes},
          {"compute_s", p.compute_s},
          {"ipu_link_s", p.ipu_link_s},
          {"host_s", p.host_s},
          {"temporary_bytes", p.temporary_bytes},
          {"temporary_node", p.temporary_node},
          {"temporary_node_passes", p.temporary_node_passes},
          {"serial_passes_per_micro_batch", p.serial_passes},
          {"largest_tensors", largest}};
}

// Report JSON is written by ipupod (IpuJson, Report::ToJson) and read back from .ipx files, which
// may come from anywhere: every field is type-checked and unknown keys are refused.
absl::StatusOr<double> Number(json::ObjectReader& reader, absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, reader.Get(key));
  return json::ReadNumber(*value, reader.PathOf(key));
}

absl::Status OptionalInt(json::ObjectReader& reader, absl::string_view key, int64_t& out) {
  return reader.IfPresent(key, [&out](const Json& v, const json::JsonPath& at) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(out, json::ReadInt(v, at));
    return absl::OkStatus();
  });
}

absl::Status OptionalNumber(json::ObjectReader& reader, absl::string_view key, double& out) {
  return reader.IfPresent(key, [&out](const Json& v, const json::JsonPath& at) -> absl::Status {
    IPUPOD_ASSIGN_OR_RETURN(out, json::ReadNumber(v, at));
    return absl::OkStatus();
  });
}

// The training fields of an IPU's plan; absent in inference reports.
absl::Status ReadTrainingJson(json::ObjectReader& j, IpuPlan& p) {
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "gradient_bytes", p.gradient_bytes));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "optimizer_state_bytes", p.optimizer_state_bytes));
  IPUPOD_RETURN_IF_ERROR(
      OptionalInt(j, "optimizer_state_offchip_bytes", p.optimizer_state_offchip_bytes));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "recompute_bytes", p.recompute_bytes));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "all_reduce_bytes_per_update", p.all_reduce_bytes));
  IPUPOD_RETURN_IF_ERROR(OptionalNumber(j, "update_ipu_link_s", p.update_ipu_link_s));
  return OptionalNumber(j, "update_host_s", p.update_host_s);
}

// The op temporaries of an IPU's plan; absent in reports older than them.
absl::Status ReadTemporaryJson(json::ObjectReader& j, IpuPlan& p) {
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "temporary_bytes", p.temporary_bytes));
  IPUPOD_RETURN_IF_ERROR(
      j.IfPresent("temporary_node", [&p](const Json& v, const json::JsonPath& at) -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(p.temporary_node, json::ReadString(v, at));
        return absl::OkStatus();
      }));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "temporary_node_passes", p.temporary_node_passes));
  return OptionalInt(j, "serial_passes_per_micro_batch", p.serial_passes);
}

absl::StatusOr<TensorUse> TensorUseFromJson(const Json& item, const json::JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader t, json::ObjectReader::Open(item, at));
  TensorUse use;
  IPUPOD_ASSIGN_OR_RETURN(use.name, t.String("name"));
  IPUPOD_ASSIGN_OR_RETURN(use.bytes, t.Int("bytes"));
  IPUPOD_ASSIGN_OR_RETURN(std::string kind, t.String("kind"));
  if (kind != "weight" && kind != "activation") {
    return t.PathOf("kind").Error(
        absl::StrCat("is '", kind, "'; expected 'weight' or 'activation'"));
  }
  use.is_weight = kind == "weight";
  IPUPOD_RETURN_IF_ERROR(t.RejectUnknownKeys());
  return use;
}

absl::StatusOr<IpuPlan> IpuFromJson(const Json& item, const json::JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader j, json::ObjectReader::Open(item, at));
  IpuPlan p;
  IPUPOD_ASSIGN_OR_RETURN(p.ipu, j.Int("ipu"));
  IPUPOD_ASSIGN_OR_RETURN(p.stages, j.IntList("stages"));
  IPUPOD_ASSIGN_OR_RETURN(p.nodes, j.Int("nodes"));
  IPUPOD_ASSIGN_OR_RETURN(p.weight_bytes, j.Int("weight_bytes"));
  IPUPOD_ASSIGN_OR_RETURN(p.activation_bytes_per_micro_batch,
                          j.Int("activation_bytes_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.micro_batches_in_flight, j.Int("micro_batches_in_flight"));
  IPUPOD_ASSIGN_OR_RETURN(p.activation_bytes, j.Int("activation_bytes"));
  IPUPOD_ASSIGN_OR_RETURN(p.code_bytes, j.Int("code_bytes"));
  IPUPOD_ASSIGN_OR_RETURN(p.total_bytes, j.Int("total_bytes"));
  IPUPOD_ASSIGN_OR_RETURN(p.flops, j.Int("flops_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.ipu_link_bytes, j.Int("ipu_link_bytes_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.host_in_bytes, j.Int("host_in_bytes_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.host_out_bytes, j.Int("host_out_bytes_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.compute_s, Number(j, "compute_s"));
  IPUPOD_ASSIGN_OR_RETURN(p.ipu_link_s, Number(j, "ipu_link_s"));
  IPUPOD_ASSIGN_OR_RETURN(p.host_s, Number(j, "host_s"));
  IPUPOD_ASSIGN_OR_RETURN(const Json* largest, j.Get("largest_tensors"));
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(*largest, j.PathOf("largest_tensors")));
  for (size_t i = 0; i < largest->size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(TensorUse use,
                            TensorUseFromJson((*largest)[i], j.PathOf("largest_tensors").Index(i)));
    p.largest.push_back(std::move(use));
  }
  IPUPOD_RETURN_IF_ERROR(ReadTrainingJson(j, p));
  IPUPOD_RETURN_IF_ERROR(ReadTemporaryJson(j, p));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "held_phase", p.held_phase));
  IPUPOD_RETURN_IF_ERROR(OptionalInt(j, "streaming_memory_bytes", p.streaming_memory_bytes));
  IPUPOD_RETURN_IF_ERROR(j.RejectUnknownKeys());
  return p;
}

Json PhaseJson(const PhasePlan& p) {
  return {{"phase", p.phase},
          {"ipus", p.ipus},
          {"compute_s", p.compute_s},
          {"ipu_link_s", p.ipu_link_s},
          {"streaming_bytes_per_micro_batch", p.streaming_bytes},
          {"streaming_s", p.streaming_s},
          {"time_s", p.time_s}};
}

absl::StatusOr<PhasePlan> PhaseFromJson(const Json& item, const json::JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader j, json::ObjectReader::Open(item, at));
  PhasePlan p;
  IPUPOD_ASSIGN_OR_RETURN(p.phase, j.Int("phase"));
  IPUPOD_ASSIGN_OR_RETURN(p.ipus, j.IntList("ipus"));
  IPUPOD_ASSIGN_OR_RETURN(p.compute_s, Number(j, "compute_s"));
  IPUPOD_ASSIGN_OR_RETURN(p.ipu_link_s, Number(j, "ipu_link_s"));
  IPUPOD_ASSIGN_OR_RETURN(p.streaming_bytes, j.Int("streaming_bytes_per_micro_batch"));
  IPUPOD_ASSIGN_OR_RETURN(p.streaming_s, Number(j, "streaming_s"));
  IPUPOD_ASSIGN_OR_RETURN(p.time_s, Number(j, "time_s"));
  IPUPOD_RETURN_IF_ERROR(j.RejectUnknownKeys());
  return p;
}

// The phased fields of a report; absent for the other strategies.
absl::Status ReadPhases(json::ObjectReader& doc, Report& r) {
  IPUPOD_RETURN_IF_ERROR(doc.IfPresent("liveness", [&r](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(r.liveness, json::ReadString(v, at));
    return ParseLiveness(r.liveness).status();
  }));
  return doc.IfPresent("phases", [&r](const Json& v, const json::JsonPath& at) -> absl::Status {
    IPUPOD_RETURN_IF_ERROR(json::ExpectArray(v, at));
    for (size_t i = 0; i < v.size(); ++i) {
      IPUPOD_ASSIGN_OR_RETURN(PhasePlan phase, PhaseFromJson(v[i], at.Index(i)));
      r.phases.push_back(std::move(phase));
    }
    return absl::OkStatus();
  });
}

absl::Status ReadIpus(json::ObjectReader& doc, Report& r) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* ipus, doc.Get("ipus"));
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(*ipus, doc.PathOf("ipus")));
  for (size_t i = 0; i < ipus->size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(IpuPlan plan, IpuFromJson((*ipus)[i], doc.PathOf("ipus").Index(i)));
    r.ipus.push_back(std::move(plan));
  }
  return absl::OkStatus();
}

absl::Status ReadMode(json::ObjectReader& doc, Report& r) {
  r.mode = "inference";
  IPUPOD_RETURN_IF_ERROR(doc.IfPresent("mode", [&r](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(r.mode, json::ReadString(v, at));
    if (r.mode == "inference" || r.mode == "training") return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("mode is '", r.mode, "'; expected inference or training"));
  }));
  IPUPOD_RETURN_IF_ERROR(
      OptionalInt(doc, "gradient_accumulation_steps", r.gradient_accumulation_steps));
  IPUPOD_RETURN_IF_ERROR(doc.IfPresent("recompute", [&r](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(r.recompute, json::ReadBool(v, at));
    return absl::OkStatus();
  }));
  IPUPOD_RETURN_IF_ERROR(
      doc.IfPresent("recompute_checkpoints", [&r](const Json& v, const json::JsonPath& at) {
        IPUPOD_ASSIGN_OR_RETURN(r.recompute_checkpoints, json::ReadString(v, at));
        return absl::OkStatus();
      }));
  return doc.IfPresent("replicated_tensor_sharding", [&r](const Json& v, const json::JsonPath& at) {
    IPUPOD_ASSIGN_OR_RETURN(r.replicated_tensor_sharding, json::ReadBool(v, at));
    return absl::OkStatus();
  });
}

// Absent unless broadcast_buffers false gave replicas their own copies
// (and in reports written before the field): 0, as those charged.
absl::Status ReadReplicaBuffers(json::ObjectReader& doc, Report& r) {
  IPUPOD_RETURN_IF_ERROR(OptionalInt(doc, "replica_buffer_bytes", r.replica_buffer_bytes));
  if (r.replica_buffer_bytes >= 0) return absl::OkStatus();
  return doc.PathOf("replica_buffer_bytes").Error("is negative");
}

absl::StatusOr<Report> ReportFromDoc(const Json& root) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader doc,
                          json::ObjectReader::Open(root, json::JsonPath("compile report")));
  Report r;
  IPUPOD_RETURN_IF_ERROR(ReadIpus(doc, r));
  IPUPOD_ASSIGN_OR_RETURN(r.memory_bytes_per_ipu, doc.Int("memory_bytes_per_ipu"));
  IPUPOD_ASSIGN_OR_RETURN(std::string execution, doc.String("execution"));
  IPUPOD_ASSIGN_OR_RETURN(r.strategy, ParseExecutionStrategy(execution));
  IPUPOD_ASSIGN_OR_RETURN(r.num_stages, doc.Int("stages"));
  IPUPOD_ASSIGN_OR_RETURN(r.count.ipus_per_replica, doc.Int("ipus_per_replica"));
  IPUPOD_ASSIGN_OR_RETURN(r.count.replication_factor, doc.Int("replication_factor"));
  IPUPOD_ASSIGN_OR_RETURN(r.count.needed, doc.Int("ipus_needed"));
  IPUPOD_ASSIGN_OR_RETURN(r.count.reserved, doc.Int("ipus_reserved"));
  IPUPOD_ASSIGN_OR_RETURN(r.micro_batch_size, doc.Int("micro_batch_size"));
  IPUPOD_ASSIGN_OR_RETURN(r.device_iterations, doc.Int("device_iterations"));
  IPUPOD_ASSIGN_OR_RETURN(r.output_mode, doc.String("output_mode"));
  IPUPOD_ASSIGN_OR_RETURN(r.step_s, Number(doc, "step_s"));
  IPUPOD_ASSIGN_OR_RETURN(r.samples_per_s, Number(doc, "samples_per_s"));
  IPUPOD_ASSIGN_OR_RETURN(r.notes, doc.StringList("notes"));
  IPUPOD_RETURN_IF_ERROR(ReadMode(doc, r));
  IPUPOD_RETURN_IF_ERROR(ReadPhases(doc, r));
  IPUPOD_RETURN_IF_ERROR(ReadReplicaBuffers(doc, r));
  if (IsPhased(r.strategy) != !r.liveness.empty()) {
    return absl::InvalidArgumentError(
        "a phased report needs its liveness and phases, and only a phased report has them");
  }
  doc.Find("samples_per_step");  // derived (samples_per_step()), written for readers of the JSON
  IPUPOD_RETURN_IF_ERROR(doc.RejectUnknownKeys());
  return r;
}

}  // namespace

absl::StatusOr<Report> ReportFromJson(absl::string_view text) {
  IPUPOD_ASSIGN_OR_RETURN(Json doc, json::Parse(text, "compile report"));
  absl::StatusOr<Report> report = ReportFromDoc(doc);
  if (report.ok()) return report;
  return absl::InvalidArgumentError(
      absl::StrCat("compile report is malformed: ", report.status().message()));
}

std::string FormatCount(int64_t n) {
  const double x = static_cast<double>(n);
  if (n < 1000) return absl::StrCat(n);
  if (n < 1000 * 1000) return absl::StrFormat("%.1f k", x / 1e3);
  if (n < 1000 * 1000 * 1000) return absl::StrFormat("%.1f M", x / 1e6);
  if (n < int64_t{1000} * 1000 * 1000 * 1000) return absl::StrFormat("%.1f G", x / 1e9);
  return absl::StrFormat("%.1f T", x / 1e12);
}

std::string Report::Header() const {
  if (!training()) {
    return absl::StrFormat("%4s  %-7s %6s  %10s  %-16s %10s  %10s  %10s  %6s  %9s  %10s\n", "IPU",
                           "stages", "nodes", "weights", "activations", "temporary", "code",
                           "total", "used", "FLOP/mb", "time/mb");
  }
  return absl::StrFormat(
      "%4s  %-7s %6s  %10s  %10s  %10s  %-24s %10s  %10s  %10s  %6s  %9s  %10s\n", "IPU", "stages",
      "nodes", "weights", "gradients", "opt state", "activations", "temporary", "code", "total",
      "used", "FLOP/mb", "time/mb");
}

std::string Report::RunShapeLine() const {
  std::string line = absl::StrCat(ExecutionStrategyName(strategy), " over ", num_stages,
                                  num_stages == 1 ? " stage" : " stages");
  if (IsPhased(strategy)) {
    absl::StrAppend(&line, " in ", phases.size(), phases.size() == 1 ? " phase" : " phases",
                    " (liveness ", liveness, ")");
  }
  absl::StrAppend(&line, "; micro-batch ", micro_batch_size, " x ");
  if (training()) absl::StrAppend(&line, gradient_accumulation_steps, " accumulated x ");
  absl::StrAppend(&line, device_iterations, " device iterations x ", count.replication_factor,
                  count.replication_factor == 1 ? " replica" : " replicas", " = ",
                  samples_per_step(), " samples per step; output mode ", output_mode, "\n");
  return line;
}

namespace {

// What a training step keeps for the backward pass (recompute_checkpoints:
// "layer", "stage", "checkpoint", or one of the first two + "+checkpoint").
std::string CheckpointLine(bool recompute, const std::string& kinds) {
  if (!recompute) return "every value of a stage per micro-batch in flight";
  if (kinds == "layer") {
    return "checkpoints at every layer boundary per micro-batch in flight + one layer's values "
           "to recompute in";
  }
  if (kinds == "stage") {
    return "each stage's inputs per micro-batch in flight + one stage's values to recompute in "
           "(the last pipeline stage keeps its values)";
  }
  return absl::StrCat(
      "the model's recomputation checkpoints",
      absl::StartsWith(kinds, "layer") ? ", every layer boundary" : "",
      " and each stage's inputs per micro-batch in flight + one segment's values to recompute in",
      absl::StartsWith(kinds, "layer") ? "" : " (the last pipeline stage keeps its values)");
}

}  // namespace

std::string Report::TrainingLines() const {
  int64_t offchip = 0, all_reduce = 0;
  double update = 0;
  for (const IpuPlan& p : ipus) {
    offchip += p.optimizer_state_offchip_bytes;
    all_reduce = std::max(all_reduce, p.all_reduce_bytes);
    update = std::max(update, p.update_s());
  }
  std::string out = absl::StrCat(
      "training: ", device_iterations,
      device_iterations == 1 ? " weight update" : " weight updates",
      " per step; a micro-batch costs ",
      recompute ? "4x its forward FLOPs (forward, recomputed forward, backward)\n"
                : "3x its forward FLOPs (forward and backward)\n",
      "activations for the backward pass: ", CheckpointLine(recompute, recompute_checkpoints),
      "\n");
  if (replicated_tensor_sharding) {
    absl::StrAppend(&out, "optimizer state sharded over ", count.replication_factor,
                    " replicas (replicated_tensor_sharding): gradients reduce-scattered and "
                    "updated weights all-gathered every weight update\n");
  }
  if (offchip > 0) {
    absl::StrAppend(&out, "optimizer state off-chip: ", FormatBytesFixed(offchip),
                    " per replica in streaming memory (not in total), read and written every "
                    "weight update\n");
  }
  if (update > 0) {
    absl::StrAppend(&out, "per weight update: ", FormatSiDuration(update),
                    all_reduce > 0
                        ? absl::StrCat(replicated_tensor_sharding
                                           ? " (reduce-scatter of gradients and all-gather of "
                                             "weights, "
                                           : " (all-reduce of ",
                                       FormatBytesFixed(all_reduce), " per IPU over IPU-Link)")
                        : "",
                    "\n");
  }
  return out;
}

int64_t Report::host_bytes() const {
  int64_t bytes = replica_buffer_bytes;
  for (const IpuPlan& p : ipus) {
    bytes += p.total_bytes - p.code_bytes - p.temporary_bytes + p.streaming_memory_bytes;
    if (replicated_tensor_sharding) {
      bytes += p.optimizer_state_bytes * (count.replication_factor - 1);
    }
  }
  return bytes;
}

std::string Report::TemporaryLines() const {
  std::string out;
  for (const IpuPlan& p : ipus) {
    if (p.temporary_bytes == 0) continue;
    absl::StrAppend(&out, "temporary memory on IPU ", p.ipu, ": ",
                    FormatBytesFixed(p.temporary_bytes), " for '", p.temporary_node, "'",
                    p.temporary_node_passes > 1
                        ? absl::StrCat(" in ", p.temporary_node_passes, " serial passes")
                        : "",
                    p.serial_passes > 0 ? absl::StrCat("; ", p.serial_passes,
                                                       " extra serial passes per micro-batch")
                                        : "",
                    "\n");
  }
  return out;
}

// Per phase its IPUs and time; per IPU the phase it holds when the others
// wait in streaming memory.
std::string Report::PhaseLines() const {
  std::string out;
  for (const PhasePlan& p : phases) {
    absl::StrAppend(&out, "phase ", p.phase, " on IPU ", absl::StrJoin(p.ipus, ","), ": ",
                    FormatSiDuration(p.time_s), " per micro-batch (compute ",
                    FormatSiDuration(p.compute_s), ", IPU-Link ", FormatSiDuration(p.ipu_link_s),
                    ", streaming memory ", FormatBytesFixed(p.streaming_bytes), " of which ",
                    FormatSiDuration(p.streaming_s), " not hidden by compute)\n");
  }
  for (const IpuPlan& p : ipus) {
    if (p.held_phase < 0) continue;
    absl::StrAppend(&out, "IPU ", p.ipu, " holds one phase at a time: its largest, phase ",
                    p.held_phase, ", sets its total; ", FormatBytesFixed(p.streaming_memory_bytes),
                    " waits in streaming memory (not in total)\n");
  }
  return out;
}

std::string Report::ReplicaBufferLine() const {
  if (replica_buffer_bytes == 0) return "";
  const int64_t last = count.replication_factor - 1;
  return absl::StrCat("buffers (broadcast_buffers=false): ",
                      last == 1 ? "replica 1 keeps its own copy"
                                : absl::StrCat("replicas 1..", last, " keep their own copies"),
                      " beside replica 0's weights: ", FormatBytesFixed(replica_buffer_bytes),
                      " more host memory\n");
}

std::string Report::Table() const {
  std::string out = Header();
  for (const IpuPlan& p : ipus) {
    absl::StrAppend(
        &out, training() ? TrainingRow(p, memory_bytes_per_ipu) : Row(p, memory_bytes_per_ipu));
  }
  absl::StrAppend(&out, count.ipus_per_replica, " IPUs per replica x replication factor ",
                  count.replication_factor, " = ", count.needed, " IPUs");
  if (count.idle() > 0) {
    absl::StrAppend(&out, "; reserves ", count.reserved, " (", count.idle(), " idle, auto-round)");
  }
  absl::StrAppend(&out, "\n", RunShapeLine());
  if (training()) absl::StrAppend(&out, TrainingLines());
  absl::StrAppend(&out, TemporaryLines());
  absl::StrAppend(&out, PhaseLines());
  absl::StrAppend(&out, ReplicaBufferLine());
  absl::StrAppend(&out, "estimated ", FormatSiDuration(step_s), " per step",
                  samples_per_s > 0 ? absl::StrFormat(" (%.0f samples/s)", samples_per_s) : "",
                  " at FP32 peak, with IPU-Link and host-link transfers\n");
  for (const std::string& note : notes) absl::StrAppend(&out, "note: ", note, "\n");
  return out;
}

std::string Report::Json(int indent) const {
  nlohmann::json ipu_list = nlohmann::json::array();
  for (const IpuPlan& p : ipus) {
    ipu_list.push_back(IpuJson(p));
    if (training()) AddTrainingJson(p, ipu_list.back());
    if (IsPhased(strategy)) {
      ipu_list.back()["held_phase"] = p.held_phase;
      ipu_list.back()["streaming_memory_bytes"] = p.streaming_memory_bytes;
    }
  }
  nlohmann::json doc = {{"ipus", ipu_list},
                        {"memory_bytes_per_ipu", memory_bytes_per_ipu},
                        {"execution", std::string(ExecutionStrategyName(strategy))},
                        {"stages", num_stages},
                        {"ipus_per_replica", count.ipus_per_replica},
                        {"replication_factor", count.replication_factor},
                        {"ipus_needed", count.needed},
                        {"ipus_reserved", count.reserved},
                        {"micro_batch_size", micro_batch_size},
                        {"device_iterations", device_iterations},
                        {"samples_per_step", samples_per_step()},
                        {"output_mode", output_mode},
                        {"step_s", step_s},
                        {"samples_per_s", samples_per_s},
                        {"notes", notes},
                        {"mode", mode}};
  if (training()) {
    doc["gradient_accumulation_steps"] = gradient_accumulation_steps;
    doc["recompute"] = recompute;
    if (recompute) doc["recompute_checkpoints"] = recompute_checkpoints;
    doc["replicated_tensor_sharding"] = replicated_tensor_sharding;
  }
  // Only when there are copies, so other executables keep their bytes.
  if (replica_buffer_bytes > 0) doc["replica_buffer_bytes"] = replica_buffer_bytes;
  if (IsPhased(strategy)) {
    doc["liveness"] = liveness;
    doc["phases"] = nlohmann::json::array();
    for (const PhasePlan& p : phases) doc["phases"].push_back(PhaseJson(p));
  }
  return doc.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ipupod::compiler
