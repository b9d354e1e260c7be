#include "compiler/executable_json.h"

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "device/hardware.h"

namespace ipupod::compiler::internal {
namespace {

using Json = nlohmann::json;

Json SpecsJson(const std::vector<TensorSpec>& specs) {
  Json list = Json::array();
  for (const TensorSpec& s : specs) {
    list.push_back(
        {{"name", s.name}, {"dtype", std::string(tensor::DTypeName(s.dtype))}, {"shape", s.shape}});
  }
  return list;
}

Json PlacementJson(const Placement& p) {
  return {{"method", std::string(PlacementMethodName(p.method))},
          {"ipus_per_replica", p.ipus_per_replica},
          {"stage_ipus", p.stage_ipu},
          {"nodes", p.node_names},
          {"node_stages", p.node_stage},
          {"notes", p.notes}};
}

// JSON has no infinity (nlohmann writes null), and LAMB's max_weight_norm
// defaults to inf: non-finite values are written as "inf" / "-inf".
Json AttributesJson(const std::map<std::string, double>& attrs) {
  Json out = Json::object();
  for (const auto& [name, value] : attrs) {
    out[name] = std::isfinite(value) ? Json(value) : Json(value > 0 ? "inf" : "-inf");
  }
  return out;
}

absl::StatusOr<std::map<std::string, double>> ReadAttributes(const Json& doc) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : doc.items()) {
    if (value.is_number()) {
      out[name] = value.get<double>();
    } else if (value == "inf" || value == "-inf") {
      out[name] = value == "inf" ? HUGE_VAL : -HUGE_VAL;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("optimizer attribute '", name, "' is ",
                                                     value.dump(),
                                                     ", not a number, \"inf\" or \"-inf\""));
    }
  }
  return out;
}

Json TrainingJson(const TrainingSpec& t) {
  return {{"loss", t.loss},
          {"weights", t.weights},
          {"gradient_accumulation_steps", t.gradient_accumulation_steps},
          {"optimizer", t.optimizer},
          {"variables", AttributesJson(t.variables)},
          {"constants", AttributesJson(t.constants)},
          {"buffers", t.buffers}};
}

Json RunDoc(const Executable& e) {
  return {{"producer", e.producer},
          {"mode", std::string(ExecutableModeName(e.mode))},
          {"execution", std::string(ExecutionStrategyName(e.strategy))},
          {"output_mode", OutputModeName(e.output_mode)},
          {"micro_batch_size", e.micro_batch_size},
          {"replication_factor", e.replication_factor},
          {"device_iterations", e.device_iterations},
          {"batch_size_factor", e.batch_size_factor},
          {"ipus",
           {{"per_replica", e.ipus.ipus_per_replica},
            {"needed", e.ipus.needed},
            {"reserved", e.ipus.reserved}}},
          {"ipu_config", Json::parse(IpuConfigToJson(e.config))},
          {"placement", PlacementJson(e.placement)},
          {"inputs", SpecsJson(e.inputs)},
          {"outputs", SpecsJson(e.outputs)},
          {"report", e.report_json.empty() ? Json(nullptr) : Json::parse(e.report_json)},
          {"warnings", e.warnings}};
}

// Inference executables have no "training" key (their bytes are those of
// the first format version).
Json MetadataDoc(const Executable& e) {
  Json doc = RunDoc(e);
  if (e.mode == ExecutableMode::kTraining) doc["training"] = TrainingJson(e.training);
  return doc;
}

absl::StatusOr<std::vector<TensorSpec>> ReadSpecs(const Json& list) {
  std::vector<TensorSpec> specs;
  for (const Json& item : list) {
    TensorSpec s;
    s.name = item.at("name").get<std::string>();
    IPUPOD_ASSIGN_OR_RETURN(s.dtype, tensor::ParseDTypeName(item.at("dtype").get<std::string>()));
    s.shape = item.at("shape").get<tensor::Shape>();
    for (int64_t d : s.shape) {
      if (d < 0)
        return absl::InvalidArgumentError(absl::StrCat("'", s.name, "' has a negative dim"));
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

absl::Status CheckPlacementShape(const Placement& p) {
  const bool ok_ipus = p.ipus_per_replica >= 1 && p.ipus_per_replica <= device::kMaxPodIpus;
  bool ok = ok_ipus && p.node_names.size() == p.node_stage.size() && !p.stage_ipu.empty();
  for (int64_t s : p.node_stage) ok = ok && s >= 0 && s < p.num_stages();
  for (int64_t ipu : p.stage_ipu) ok = ok && ipu >= 0 && ipu < p.ipus_per_replica;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError("placement is inconsistent (stage or IPU out of range)");
}

absl::StatusOr<Placement> ReadPlacement(const Json& doc) {
  Placement p;
  IPUPOD_ASSIGN_OR_RETURN(p.method, ParsePlacementMethod(doc.at("method").get<std::string>()));
  p.ipus_per_replica = doc.at("ipus_per_replica").get<int64_t>();
  p.stage_ipu = doc.at("stage_ipus").get<std::vector<int64_t>>();
  p.node_names = doc.at("nodes").get<std::vector<std::string>>();
  p.node_stage = doc.at("node_stages").get<std::vector<int64_t>>();
  p.notes = doc.at("notes").get<std::vector<std::string>>();
  IPUPOD_RETURN_IF_ERROR(CheckPlacementShape(p));
  return p;
}

absl::StatusOr<ExecutableMode> ModeFromName(const std::string& name) {
  if (name == "inference") return ExecutableMode::kInference;
  if (name == "training") return ExecutableMode::kTraining;
  return absl::InvalidArgumentError(absl::StrCat("unknown mode '", name, "'"));
}

absl::Status ReadRunShape(const Json& doc, Executable& e) {
  e.producer = doc.at("producer").get<std::string>();
  IPUPOD_ASSIGN_OR_RETURN(e.mode, ModeFromName(doc.at("mode").get<std::string>()));
  IPUPOD_ASSIGN_OR_RETURN(e.strategy,
                          ParseExecutionStrategy(doc.at("execution").get<std::string>()));
  IPUPOD_ASSIGN_OR_RETURN(e.output_mode, ParseOutputMode(doc.at("output_mode").get<std::string>(),
                                                         e.mode == ExecutableMode::kInference));
  e.micro_batch_size = doc.at("micro_batch_size").get<int64_t>();
  e.replication_factor = doc.at("replication_factor").get<int64_t>();
  e.device_iterations = doc.at("device_iterations").get<int64_t>();
  e.batch_size_factor = doc.at("batch_size_factor").get<int64_t>();
  const Json& ipus = doc.at("ipus");
  e.ipus.ipus_per_replica = ipus.at("per_replica").get<int64_t>();
  e.ipus.replication_factor = e.replication_factor;
  e.ipus.needed = ipus.at("needed").get<int64_t>();
  e.ipus.reserved = ipus.at("reserved").get<int64_t>();
  if (e.micro_batch_size < 1 || e.replication_factor < 1 || e.device_iterations < 1 ||
      e.batch_size_factor < 1 || e.ipus.needed < 1 || e.ipus.reserved < e.ipus.needed ||
      e.ipus.reserved > device::kMaxPodIpus) {
    return absl::InvalidArgumentError("run shape out of range (batch, iterations or IPU counts)");
  }
  return absl::OkStatus();
}

absl::Status ReadTraining(const Json& doc, Executable& e) {
  const auto it = doc.find("training");
  if (e.mode != ExecutableMode::kTraining) {
    if (it != doc.end() && !it->is_null()) {
      return absl::InvalidArgumentError("an inference executable with a training section");
    }
    return absl::OkStatus();
  }
  if (it == doc.end() || !it->is_object()) {
    return absl::InvalidArgumentError("a training executable without its training section");
  }
  TrainingSpec& t = e.training;
  t.loss = it->at("loss").get<std::string>();
  t.weights = it->at("weights").get<std::vector<std::string>>();
  t.gradient_accumulation_steps = it->at("gradient_accumulation_steps").get<int64_t>();
  t.optimizer = it->at("optimizer").get<std::string>();
  IPUPOD_ASSIGN_OR_RETURN(t.variables, ReadAttributes(it->at("variables")));
  IPUPOD_ASSIGN_OR_RETURN(t.constants, ReadAttributes(it->at("constants")));
  // Absent in executables of ipupod versions without buffers.
  t.buffers = it->value("buffers", Json::object()).get<std::map<std::string, std::string>>();
  if (t.loss.empty() || t.gradient_accumulation_steps < 1 ||
      e.batch_size_factor !=
          e.device_iterations * e.replication_factor * t.gradient_accumulation_steps) {
    return absl::InvalidArgumentError(
        "training section out of range (loss, gradient_accumulation_steps or batch_size_factor)");
  }
  return absl::OkStatus();
}

absl::Status ReadDoc(const Json& doc, Executable& e) {
  IPUPOD_RETURN_IF_ERROR(ReadRunShape(doc, e));
  IPUPOD_RETURN_IF_ERROR(ReadTraining(doc, e));
  IPUPOD_ASSIGN_OR_RETURN(ParsedIpuConfig config, ParseIpuConfigJson(doc.at("ipu_config").dump()));
  e.config = std::move(config.config);
  IPUPOD_ASSIGN_OR_RETURN(e.placement, ReadPlacement(doc.at("placement")));
  if (e.placement.ipus_per_replica != e.ipus.ipus_per_replica) {
    return absl::InvalidArgumentError("placement and run shape disagree on IPUs per replica");
  }
  IPUPOD_ASSIGN_OR_RETURN(e.inputs, ReadSpecs(doc.at("inputs")));
  IPUPOD_ASSIGN_OR_RETURN(e.outputs, ReadSpecs(doc.at("outputs")));
  const Json& report = doc.at("report");
  e.report_json = report.is_null() ? "" : report.dump();
  e.warnings = doc.at("warnings").get<std::vector<std::string>>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ExecutableMetadataJson(const Executable& executable) {
  try {
    return MetadataDoc(executable).dump();
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write the executable's metadata: ", e.what(),
                     " (names must be UTF-8 and the report valid JSON)"));
  }
}

absl::Status ReadExecutableMetadata(absl::string_view text, Executable& executable) {
  absl::Status status;
  try {
    status = ReadDoc(Json::parse(text.begin(), text.end()), executable);
  } catch (const Json::exception& e) {
    status = absl::InvalidArgumentError(e.what());
  }
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(
      "executable metadata is malformed: ", status.message(), "; recompile the model"));
}

}  // namespace ipupod::compiler::internal

namespace ipupod::compiler {

std::string TrainingSpecJson(const TrainingSpec& spec) {
  return internal::TrainingJson(spec).dump(-1, ' ', /*ensure_ascii=*/false,
                                           nlohmann::json::error_handler_t::replace);
}

}  // namespace ipupod::compiler
