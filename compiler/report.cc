#include "compiler/report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/format.h"

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
  return absl::StrFormat(
      "%4d  %-7s %6d  %10s  %-16s %10s  %10s  %5.1f%%  %9s  %10s\n", p.ipu, StagesText(p.stages),
      p.nodes, FormatBytesFixed(p.weight_bytes), activations, FormatBytesFixed(p.code_bytes),
      FormatBytesFixed(p.total_bytes), used, FormatCount(p.flops), FormatSiDuration(p.busy_s()));
}

// Training: gradients and on-chip optimizer state get their own columns;
// activations add the recompute buffer ("1.2 kB x3 + 4.5 kB").
std::string TrainingRow(const IpuPlan& p, int64_t memory) {
  const double used = memory > 0 ? 100.0 * static_cast<double>(p.total_bytes) / memory : 0;
  std::string activations = absl::StrCat(FormatBytesFixed(p.activation_bytes_per_micro_batch), " x",
                                         p.micro_batches_in_flight);
  if (p.recompute_bytes > 0)
    absl::StrAppend(&activations, " + ", FormatBytesFixed(p.recompute_bytes));
  return absl::StrFormat("%4d  %-7s %6d  %10s  %10s  %10s  %-24s %10s  %10s  %5.1f%%  %9s  %10s\n",
                         p.ipu, StagesText(p.stages), p.nodes, FormatBytesFixed(p.weight_bytes),
                         FormatBytesFixed(p.gradient_bytes),
                         FormatBytesFixed(p.optimizer_state_bytes), activations,
                         FormatBytesFixed(p.code_bytes), FormatBytesFixed(p.total_bytes), used,
                         FormatCount(p.flops), FormatSiDuration(p.busy_s()));
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

// Absent keys (inference, older reports) leave the defaults.
void ReadTrainingJson(const Json& j, IpuPlan& p) {
  p.gradient_bytes = j.value("gradient_bytes", int64_t{0});
  p.optimizer_state_bytes = j.value("optimizer_state_bytes", int64_t{0});
  p.optimizer_state_offchip_bytes = j.value("optimizer_state_offchip_bytes", int64_t{0});
  p.recompute_bytes = j.value("recompute_bytes", int64_t{0});
  p.all_reduce_bytes = j.value("all_reduce_bytes_per_update", int64_t{0});
  p.update_ipu_link_s = j.value("update_ipu_link_s", 0.0);
  p.update_host_s = j.value("update_host_s", 0.0);
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
          {"largest_tensors", largest}};
}

IpuPlan IpuFromJson(const Json& j) {
  IpuPlan p;
  p.ipu = j.at("ipu").get<int64_t>();
  p.stages = j.at("stages").get<std::vector<int64_t>>();
  p.nodes = j.at("nodes").get<int64_t>();
  p.weight_bytes = j.at("weight_bytes").get<int64_t>();
  p.activation_bytes_per_micro_batch = j.at("activation_bytes_per_micro_batch").get<int64_t>();
  p.micro_batches_in_flight = j.at("micro_batches_in_flight").get<int64_t>();
  p.activation_bytes = j.at("activation_bytes").get<int64_t>();
  p.code_bytes = j.at("code_bytes").get<int64_t>();
  p.total_bytes = j.at("total_bytes").get<int64_t>();
  p.flops = j.at("flops_per_micro_batch").get<int64_t>();
  p.ipu_link_bytes = j.at("ipu_link_bytes_per_micro_batch").get<int64_t>();
  p.host_in_bytes = j.at("host_in_bytes_per_micro_batch").get<int64_t>();
  p.host_out_bytes = j.at("host_out_bytes_per_micro_batch").get<int64_t>();
  p.compute_s = j.at("compute_s").get<double>();
  p.ipu_link_s = j.at("ipu_link_s").get<double>();
  p.host_s = j.at("host_s").get<double>();
  for (const Json& t : j.at("largest_tensors")) {
    p.largest.push_back({t.at("name").get<std::string>(), t.at("bytes").get<int64_t>(),
                         t.at("kind").get<std::string>() == "weight"});
  }
  ReadTrainingJson(j, p);
  return p;
}

absl::StatusOr<Report> ReportFromDoc(const Json& doc) {
  Report r;
  for (const Json& ipu : doc.at("ipus")) r.ipus.push_back(IpuFromJson(ipu));
  r.memory_bytes_per_ipu = doc.at("memory_bytes_per_ipu").get<int64_t>();
  auto strategy = ParseExecutionStrategy(doc.at("execution").get<std::string>());
  if (!strategy.ok()) return strategy.status();
  r.strategy = *strategy;
  r.num_stages = doc.at("stages").get<int64_t>();
  r.count.ipus_per_replica = doc.at("ipus_per_replica").get<int64_t>();
  r.count.replication_factor = doc.at("replication_factor").get<int64_t>();
  r.count.needed = doc.at("ipus_needed").get<int64_t>();
  r.count.reserved = doc.at("ipus_reserved").get<int64_t>();
  r.micro_batch_size = doc.at("micro_batch_size").get<int64_t>();
  r.device_iterations = doc.at("device_iterations").get<int64_t>();
  r.output_mode = doc.at("output_mode").get<std::string>();
  r.step_s = doc.at("step_s").get<double>();
  r.samples_per_s = doc.at("samples_per_s").get<double>();
  r.notes = doc.at("notes").get<std::vector<std::string>>();
  r.mode = doc.value("mode", std::string("inference"));
  if (r.mode != "inference" && r.mode != "training") {
    return absl::InvalidArgumentError(
        absl::StrCat("mode is '", r.mode, "'; expected inference or training"));
  }
  r.gradient_accumulation_steps = doc.value("gradient_accumulation_steps", int64_t{1});
  r.recompute = doc.value("recompute", false);
  return r;
}

}  // namespace

absl::StatusOr<Report> ReportFromJson(absl::string_view text) {
  absl::StatusOr<Report> report;
  try {
    report = ReportFromDoc(Json::parse(text.begin(), text.end()));
  } catch (const Json::exception& e) {
    report = absl::InvalidArgumentError(e.what());
  }
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
    return absl::StrFormat("%4s  %-7s %6s  %10s  %-16s %10s  %10s  %6s  %9s  %10s\n", "IPU",
                           "stages", "nodes", "weights", "activations", "code", "total", "used",
                           "FLOP/mb", "time/mb");
  }
  return absl::StrFormat("%4s  %-7s %6s  %10s  %10s  %10s  %-24s %10s  %10s  %6s  %9s  %10s\n",
                         "IPU", "stages", "nodes", "weights", "gradients", "opt state",
                         "activations", "code", "total", "used", "FLOP/mb", "time/mb");
}

std::string Report::RunShapeLine() const {
  std::string line = absl::StrCat(ExecutionStrategyName(strategy), " over ", num_stages,
                                  num_stages == 1 ? " stage" : " stages", "; micro-batch ",
                                  micro_batch_size, " x ");
  if (training()) absl::StrAppend(&line, gradient_accumulation_steps, " accumulated x ");
  absl::StrAppend(&line, device_iterations, " device iterations x ", count.replication_factor,
                  count.replication_factor == 1 ? " replica" : " replicas", " = ",
                  samples_per_step(), " samples per step; output mode ", output_mode, "\n");
  return line;
}

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
                  "activations for the backward pass: each stage's inputs per micro-batch in "
                  "flight + one micro-batch to recompute in"
                : "3x its forward FLOPs (forward and backward)\n"
                  "activations for the backward pass: every value of a stage per micro-batch in "
                  "flight",
      "\n");
  if (offchip > 0) {
    absl::StrAppend(&out, "optimizer state off-chip: ", FormatBytesFixed(offchip),
                    " per replica in streaming memory (not in total), read and written every "
                    "weight update\n");
  }
  if (update > 0) {
    absl::StrAppend(&out, "per weight update: ", FormatSiDuration(update),
                    all_reduce > 0 ? absl::StrCat(" (all-reduce of ", FormatBytesFixed(all_reduce),
                                                  " per IPU over IPU-Link)")
                                   : "",
                    "\n");
  }
  return out;
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
  }
  return doc.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ipupod::compiler
