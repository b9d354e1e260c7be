#include "device/compiler/compile_request.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/compiler/placement.h"
#include "device/compiler/training_spec.h"
#include "nlohmann/json.hpp"

namespace ipupod::compiler {
namespace {

using OrderedJson = nlohmann::ordered_json;

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

OrderedJson SpecsJson(const Executable& e, const std::vector<TensorSpec>& specs, bool inputs) {
  OrderedJson list = OrderedJson::array();
  for (const TensorSpec& spec : specs) {
    list.push_back({{"name", spec.name},
                    {"dtype", std::string(tensor::DTypeName(spec.dtype))},
                    {"shape", inputs ? HostInputShape(e, spec) : HostOutputShape(e, spec)}});
  }
  return list;
}

bool NamesTraining(const TrainingOptions& t) {
  return !t.loss.empty() || !t.optimizer.empty() || !t.optimizer_attrs.empty() ||
         !t.param_groups.empty() || !t.frozen.empty();  // buffers describe inference programs too
}

}  // namespace

absl::Status CheckTrainingOptionsNeedTrain(const CompileInputs& inputs, absl::string_view how) {
  if (inputs.train || !NamesTraining(inputs.training)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("loss, optimizer, optimizer attributes, param groups and frozen weights need ",
                   how, " (they describe training)"));
}

absl::StatusOr<PreparedCompile> PrepareCompile(const CompileInputs& inputs,
                                               absl::string_view config_name,
                                               absl::string_view map_name) {
  IPUPOD_RETURN_IF_ERROR(CheckTrainingOptionsNeedTrain(inputs));
  PreparedCompile out;
  if (!inputs.ipu_config_json.empty()) {
    absl::StatusOr<ParsedIpuConfig> parsed = ParseIpuConfigJson(inputs.ipu_config_json);
    if (!parsed.ok()) return WithContext(parsed.status(), absl::StrCat("in ", config_name));
    for (const std::string& warning : parsed->warnings) {
      out.warnings.push_back(absl::StrCat(config_name, ": ", warning));
    }
    out.config = std::move(parsed->config);
  }
  for (const std::string& update : inputs.sets) {
    absl::Status updated = UpdateFromString(out.config, update);
    if (!updated.ok()) return WithContext(updated, absl::StrCat("--set '", update, "'"));
  }
  if (!inputs.module_map_json.empty()) {
    absl::StatusOr<ModuleMap> map = ParseModuleMapJson(inputs.module_map_json);
    if (!map.ok()) return WithContext(map.status(), absl::StrCat("in ", map_name));
    out.options.module_map = *std::move(map);
  }
  out.options.for_inference = !inputs.train;
  if (inputs.train) {
    out.options.training = inputs.training;
  } else {
    out.options.training.buffers = inputs.training.buffers;  // an inference program's buffers
  }
  return out;
}

std::string ExecutableSummaryJson(const Executable& e) {
  const bool training = e.mode == ExecutableMode::kTraining;
  OrderedJson doc = {{"sha256", e.content_hash},
                     {"ipus",
                      {{"per_replica", e.ipus.ipus_per_replica},
                       {"needed", e.ipus.needed},
                       {"reserved", e.ipus.reserved}}},
                     {"execution", std::string(ExecutionStrategyName(e.strategy))},
                     {"stages", e.placement.num_stages()},
                     {"micro_batch_size", e.micro_batch_size},
                     {"device_iterations", e.device_iterations},
                     {"replication_factor", e.replication_factor},
                     {"mode", std::string(ExecutableModeName(e.mode))},
                     {"samples_per_step", e.micro_batch_size * e.batch_size_factor},
                     {"output_mode", OutputModeName(e.output_mode)},
                     {"inputs", SpecsJson(e, e.inputs, true)},
                     {"outputs", SpecsJson(e, e.outputs, false)},
                     {"warnings", e.warnings}};
  if (training) {
    doc["gradient_accumulation_steps"] = e.training.gradient_accumulation_steps;
    doc["training"] = OrderedJson::parse(TrainingSpecJson(e.training));
  }
  if (e.placement.phased()) {
    const std::set<int64_t> phases(e.placement.stage_phase.begin(), e.placement.stage_phase.end());
    doc["phases"] = phases.size();
    doc["liveness"] = e.config.tensors_liveness;
  }
  return doc.dump();
}

}  // namespace ipupod::compiler
