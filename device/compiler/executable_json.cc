#include "device/compiler/executable_json.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/json_reader.h"
#include "common/status_macros.h"
#include "device/hardware.h"

namespace ipupod::compiler::internal {

using Json = json::Json;  // as in ipu_config_codec.h

namespace {

Json SpecsJson(const std::vector<TensorSpec>& specs) {
  Json list = Json::array();
  for (const TensorSpec& s : specs) {
    list.push_back(
        {{"name", s.name}, {"dtype", std::string(tensor::DTypeName(s.dtype))}, {"shape", s.shape}});
  }
  return list;
}

Json PlacementJson(const Placement& p) {
  Json out = {{"method", std::string(PlacementMethodName(p.method))},
              {"ipus_per_replica", p.ipus_per_replica},
              {"stage_ipus", p.stage_ipu},
              {"nodes", p.node_names},
              {"node_stages", p.node_stage},
              {"notes", p.notes}};
  if (p.phased()) out["stage_phases"] = p.stage_phase;  // phased strategies only
  return out;
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

absl::StatusOr<std::map<std::string, double>> ReadAttributes(const Json& doc,
                                                             const json::JsonPath& at) {
  if (!doc.is_object()) return at.TypeError("an object", doc);
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

// "param_groups" only when there are groups, so executables without them
// keep their bytes (and content hashes).
Json TrainingJson(const TrainingSpec& t) {
  Json doc = {{"loss", t.loss},
              {"weights", t.weights},
              {"gradient_accumulation_steps", t.gradient_accumulation_steps},
              {"optimizer", t.optimizer},
              {"variables", AttributesJson(t.variables)},
              {"constants", AttributesJson(t.constants)},
              {"buffers", t.buffers}};
  if (t.param_groups.empty()) return doc;
  Json groups = Json::array();
  for (const ParamGroup& g : t.param_groups) {
    groups.push_back({{"weights", g.weights}, {"variables", AttributesJson(g.variables)}});
  }
  doc["param_groups"] = std::move(groups);
  return doc;
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
  // Absent without buffers, so such inference executables keep their bytes.
  if (!e.inference_buffers.empty()) doc["inference_buffers"] = e.inference_buffers;
  return doc;
}

absl::StatusOr<TensorSpec> ReadSpec(const Json& item, const json::JsonPath& at) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader reader, json::ObjectReader::Open(item, at));
  TensorSpec s;
  IPUPOD_ASSIGN_OR_RETURN(s.name, reader.String("name"));
  IPUPOD_ASSIGN_OR_RETURN(std::string dtype, reader.String("dtype"));
  IPUPOD_ASSIGN_OR_RETURN(s.dtype, tensor::ParseDTypeName(dtype));
  IPUPOD_ASSIGN_OR_RETURN(s.shape, reader.IntList("shape"));
  for (int64_t d : s.shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("'", s.name, "' has a negative dim"));
  }
  return s;
}

absl::StatusOr<std::vector<TensorSpec>> ReadSpecs(json::ObjectReader& doc, absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* list, doc.Get(key));
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(*list, doc.PathOf(key)));
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < list->size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(TensorSpec s, ReadSpec((*list)[i], doc.PathOf(key).Index(i)));
    specs.push_back(std::move(s));
  }
  return specs;
}

absl::Status CheckPlacementShape(const Placement& p) {
  const bool ok_ipus = p.ipus_per_replica >= 1 && p.ipus_per_replica <= device::kMaxPodIpus;
  bool ok = ok_ipus && p.node_names.size() == p.node_stage.size() && !p.stage_ipu.empty();
  for (int64_t s : p.node_stage) ok = ok && s >= 0 && s < p.num_stages();
  for (int64_t ipu : p.stage_ipu) ok = ok && ipu >= 0 && ipu < p.ipus_per_replica;
  ok = ok && (!p.phased() || p.stage_phase.size() == p.stage_ipu.size());
  for (int64_t phase : p.stage_phase) ok = ok && phase >= 0;
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError("placement is inconsistent (stage, IPU or phase out of range)");
}

absl::StatusOr<Placement> ReadPlacement(json::ObjectReader& parent) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader doc, parent.Object("placement"));
  Placement p;
  IPUPOD_ASSIGN_OR_RETURN(std::string method, doc.String("method"));
  IPUPOD_ASSIGN_OR_RETURN(p.method, ParsePlacementMethod(method));
  IPUPOD_ASSIGN_OR_RETURN(p.ipus_per_replica, doc.Int("ipus_per_replica"));
  IPUPOD_ASSIGN_OR_RETURN(p.stage_ipu, doc.IntList("stage_ipus"));
  IPUPOD_ASSIGN_OR_RETURN(p.node_names, doc.StringList("nodes"));
  IPUPOD_ASSIGN_OR_RETURN(p.node_stage, doc.IntList("node_stages"));
  IPUPOD_ASSIGN_OR_RETURN(p.notes, doc.StringList("notes"));
  IPUPOD_RETURN_IF_ERROR(
      doc.IfPresent("stage_phases", [&p](const Json& v, const json::JsonPath& at) -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(p.stage_phase, json::ReadIntList(v, at));
        return absl::OkStatus();
      }));
  IPUPOD_RETURN_IF_ERROR(CheckPlacementShape(p));
  return p;
}

absl::StatusOr<ExecutableMode> ModeFromName(const std::string& name) {
  if (name == "inference") return ExecutableMode::kInference;
  if (name == "training") return ExecutableMode::kTraining;
  return absl::InvalidArgumentError(absl::StrCat("unknown mode '", name, "'"));
}

absl::Status ReadModes(json::ObjectReader& doc, Executable& e) {
  IPUPOD_ASSIGN_OR_RETURN(e.producer, doc.String("producer"));
  IPUPOD_ASSIGN_OR_RETURN(std::string mode, doc.String("mode"));
  IPUPOD_ASSIGN_OR_RETURN(e.mode, ModeFromName(mode));
  IPUPOD_ASSIGN_OR_RETURN(std::string execution, doc.String("execution"));
  IPUPOD_ASSIGN_OR_RETURN(e.strategy, ParseExecutionStrategy(execution));
  IPUPOD_ASSIGN_OR_RETURN(std::string output_mode, doc.String("output_mode"));
  IPUPOD_ASSIGN_OR_RETURN(e.output_mode,
                          ParseOutputMode(output_mode, e.mode == ExecutableMode::kInference));
  return absl::OkStatus();
}

absl::Status ReadRunShape(json::ObjectReader& doc, Executable& e) {
  IPUPOD_RETURN_IF_ERROR(ReadModes(doc, e));
  IPUPOD_ASSIGN_OR_RETURN(e.micro_batch_size, doc.Int("micro_batch_size"));
  IPUPOD_ASSIGN_OR_RETURN(e.replication_factor, doc.Int("replication_factor"));
  IPUPOD_ASSIGN_OR_RETURN(e.device_iterations, doc.Int("device_iterations"));
  IPUPOD_ASSIGN_OR_RETURN(e.batch_size_factor, doc.Int("batch_size_factor"));
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader ipus, doc.Object("ipus"));
  IPUPOD_ASSIGN_OR_RETURN(e.ipus.ipus_per_replica, ipus.Int("per_replica"));
  e.ipus.replication_factor = e.replication_factor;
  IPUPOD_ASSIGN_OR_RETURN(e.ipus.needed, ipus.Int("needed"));
  IPUPOD_ASSIGN_OR_RETURN(e.ipus.reserved, ipus.Int("reserved"));
  if (e.micro_batch_size < 1 || e.replication_factor < 1 || e.device_iterations < 1 ||
      e.batch_size_factor < 1 || e.ipus.needed < 1 || e.ipus.reserved < e.ipus.needed ||
      e.ipus.reserved > device::kMaxPodIpus) {
    return absl::InvalidArgumentError("run shape out of range (batch, iterations or IPU counts)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ParamGroup>> ReadParamGroups(const Json& list,
                                                        const json::JsonPath& at) {
  IPUPOD_RETURN_IF_ERROR(json::ExpectArray(list, at));
  std::vector<ParamGroup> groups;
  for (size_t i = 0; i < list.size(); ++i) {
    IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader group,
                            json::ObjectReader::Open(list[i], at.Index(i)));
    ParamGroup g;
    IPUPOD_ASSIGN_OR_RETURN(g.weights, group.StringList("weights"));
    IPUPOD_ASSIGN_OR_RETURN(const Json* variables, group.Get("variables"));
    IPUPOD_ASSIGN_OR_RETURN(g.variables, ReadAttributes(*variables, group.PathOf("variables")));
    groups.push_back(std::move(g));
  }
  return groups;
}

absl::Status ReadTrainingSpec(json::ObjectReader& doc, TrainingSpec& t) {
  IPUPOD_ASSIGN_OR_RETURN(t.loss, doc.String("loss"));
  IPUPOD_ASSIGN_OR_RETURN(t.weights, doc.StringList("weights"));
  IPUPOD_ASSIGN_OR_RETURN(t.gradient_accumulation_steps, doc.Int("gradient_accumulation_steps"));
  IPUPOD_ASSIGN_OR_RETURN(t.optimizer, doc.String("optimizer"));
  IPUPOD_ASSIGN_OR_RETURN(const Json* variables, doc.Get("variables"));
  IPUPOD_ASSIGN_OR_RETURN(t.variables, ReadAttributes(*variables, doc.PathOf("variables")));
  IPUPOD_ASSIGN_OR_RETURN(const Json* constants, doc.Get("constants"));
  IPUPOD_ASSIGN_OR_RETURN(t.constants, ReadAttributes(*constants, doc.PathOf("constants")));
  // Absent in executables of ipupod versions without buffers.
  t.buffers.clear();
  IPUPOD_RETURN_IF_ERROR(
      doc.IfPresent("buffers", [&t](const Json& v, const json::JsonPath& at) -> absl::Status {
        IPUPOD_ASSIGN_OR_RETURN(t.buffers, json::ReadStringMap(v, at));
        return absl::OkStatus();
      }));
  // Absent without param groups, and in executables of earlier versions.
  t.param_groups.clear();
  return doc.IfPresent("param_groups",
                       [&t](const Json& v, const json::JsonPath& at) -> absl::Status {
                         IPUPOD_ASSIGN_OR_RETURN(t.param_groups, ReadParamGroups(v, at));
                         return absl::OkStatus();
                       });
}

absl::Status ReadTraining(json::ObjectReader& doc, Executable& e) {
  const Json* training = doc.Find("training");
  if (e.mode != ExecutableMode::kTraining) {
    if (training != nullptr && !training->is_null()) {
      return absl::InvalidArgumentError("an inference executable with a training section");
    }
    e.inference_buffers.clear();
    return doc.IfPresent("inference_buffers",
                         [&e](const Json& v, const json::JsonPath& at) -> absl::Status {
                           IPUPOD_ASSIGN_OR_RETURN(e.inference_buffers, json::ReadStringMap(v, at));
                           return absl::OkStatus();
                         });
  }
  if (training == nullptr || !training->is_object()) {
    return absl::InvalidArgumentError("a training executable without its training section");
  }
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader section, doc.Object("training"));
  TrainingSpec& t = e.training;
  IPUPOD_RETURN_IF_ERROR(ReadTrainingSpec(section, t));
  if (t.loss.empty() || t.gradient_accumulation_steps < 1 ||
      e.batch_size_factor !=
          e.device_iterations * e.replication_factor * t.gradient_accumulation_steps) {
    return absl::InvalidArgumentError(
        "training section out of range (loss, gradient_accumulation_steps or batch_size_factor)");
  }
  for (const ParamGroup& group : t.param_groups) {
    for (const std::string& w : group.weights) {
      if (std::find(t.weights.begin(), t.weights.end(), w) == t.weights.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("param group weight '", w, "' is not a trainable weight"));
      }
    }
  }
  return absl::OkStatus();
}

// Unknown keys are ignored: the format version, not the key set, says what
// a reader must understand.
absl::Status ReadDoc(const Json& root, Executable& e) {
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader doc,
                          json::ObjectReader::Open(root, json::JsonPath("executable metadata")));
  IPUPOD_RETURN_IF_ERROR(ReadRunShape(doc, e));
  IPUPOD_RETURN_IF_ERROR(ReadTraining(doc, e));
  IPUPOD_ASSIGN_OR_RETURN(const Json* ipu_config, doc.Get("ipu_config"));
  IPUPOD_ASSIGN_OR_RETURN(ParsedIpuConfig config, ParseIpuConfigJson(ipu_config->dump()));
  e.config = std::move(config.config);
  IPUPOD_ASSIGN_OR_RETURN(e.placement, ReadPlacement(doc));
  if (e.placement.ipus_per_replica != e.ipus.ipus_per_replica) {
    return absl::InvalidArgumentError("placement and run shape disagree on IPUs per replica");
  }
  IPUPOD_ASSIGN_OR_RETURN(e.inputs, ReadSpecs(doc, "inputs"));
  IPUPOD_ASSIGN_OR_RETURN(e.outputs, ReadSpecs(doc, "outputs"));
  IPUPOD_ASSIGN_OR_RETURN(const Json* report, doc.Get("report"));
  e.report_json = report->is_null() ? "" : report->dump();
  IPUPOD_ASSIGN_OR_RETURN(e.warnings, doc.StringList("warnings"));
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
  auto doc = json::Parse(text, "executable metadata");
  if (!doc.ok()) {
    status = doc.status();
  } else {
    try {  // dump() of a value with invalid UTF-8 throws
      status = ReadDoc(*doc, executable);
    } catch (const Json::exception& e) {
      status = absl::InvalidArgumentError(e.what());
    }
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
