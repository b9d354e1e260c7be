#include "device/compiler/compile.h"

#include <filesystem>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "device/compiler/memory_plan.h"
#include "device/compiler/onnx_annotations.h"
#include "device/compiler/onnx_state.h"
#include "device/graph/interpreter.h"
#include "device/graph/onnx_import.h"
#include "device/graph/run_context.h"

#ifndef IPUPOD_COMPILER_VERSION
#define IPUPOD_COMPILER_VERSION "unknown"
#endif

namespace ipupod::compiler {
namespace {

constexpr absl::string_view kProducer = "ipupod " IPUPOD_COMPILER_VERSION;

// The method Compile uses: explicit, else module map, else attributes, else layers.
absl::StatusOr<PlacementMethod> ChooseMethod(const CompileOptions& options,
                                             const NodeAnnotations& annotations) {
  if (options.placement.has_value()) {
    if (*options.placement == PlacementMethod::kModuleMap && !options.module_map.has_value()) {
      return absl::InvalidArgumentError("placement by module map needs a module map");
    }
    if (*options.placement == PlacementMethod::kOnnxAttributes && annotations.empty()) {
      return absl::InvalidArgumentError(
          "placement by ONNX attributes needs nodes with __ipu_number or __pipeline_stage; "
          "the model has none");
    }
    return *options.placement;
  }
  if (options.module_map.has_value()) return PlacementMethod::kModuleMap;
  if (!annotations.empty()) return PlacementMethod::kOnnxAttributes;
  return PlacementMethod::kLayersPerIpu;
}

bool HasPhases(const NodeAnnotations& annotations) {
  for (const auto& [node, a] : annotations) {
    if (a.phase.has_value()) return true;
  }
  return false;
}

// Phased strategies place by the model's __execution_phase attributes;
// the other strategies ignore them (as PopART does without phases).
absl::Status CheckPhasedMethod(PlacementMethod method, const CompileOptions& options,
                               const NodeAnnotations& annotations,
                               std::vector<std::string>& warnings) {
  if (!IsPhased(options.strategy)) {
    if (HasPhases(annotations)) {
      warnings.push_back(
          absl::StrCat("the model's __execution_phase attributes are ignored: execution is ",
                       ExecutionStrategyName(options.strategy),
                       " (execution_strategy=serial_phased or parallel_phased runs the phases)"));
    }
    return absl::OkStatus();
  }
  if (method == PlacementMethod::kOnnxAttributes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ExecutionStrategyName(options.strategy),
      " execution places the model by its __execution_phase and __ipu_number attributes "
      "(PopTorch's Phase and Stage), not by ",
      PlacementMethodName(method), ": annotate the model, or use execution_strategy=pipelined"));
}

absl::StatusOr<Placement> Place(const graph::Graph& graph, const ModeConfig& mode,
                                const CompileOptions& options, const NodeAnnotations& annotations,
                                std::vector<std::string>& warnings) {
  IPUPOD_ASSIGN_OR_RETURN(PlacementMethod method, ChooseMethod(options, annotations));
  IPUPOD_RETURN_IF_ERROR(CheckPhasedMethod(method, options, annotations, warnings));
  if (method == PlacementMethod::kLayersPerIpu) {
    return PlaceByLayers(graph, mode.layers_per_ipu, mode.ipus_per_replica);
  }
  if (method == PlacementMethod::kModuleMap && !annotations.empty()) {
    warnings.push_back(
        "the model's __ipu_number/__pipeline_stage attributes are ignored: the "
        "module map places it");
  }
  auto placement = method == PlacementMethod::kModuleMap
                       ? PlaceByModuleMap(graph, *options.module_map)
                       : PlaceByAnnotations(graph, annotations, options.strategy);
  if (placement.ok() && placement->ipus_per_replica != mode.ipus_per_replica) {
    warnings.push_back(absl::StrCat("the ", PlacementMethodName(method), " uses ",
                                    placement->ipus_per_replica, " IPUs per replica; the config's ",
                                    mode.for_inference ? "inference_" : "", "ipus_per_replica (",
                                    mode.ipus_per_replica, ") and layers_per_ipu are ignored"));
  }
  return placement;
}

std::vector<TensorSpec> Specs(const std::vector<graph::ValueInfo>& values, const graph::Graph& g) {
  std::vector<TensorSpec> specs;
  for (const graph::ValueInfo& v : values) {
    const graph::TensorType* type = g.FindType(v.name);
    const graph::TensorType& t = type != nullptr ? *type : v.type;
    specs.push_back({v.name, t.dtype, t.shape});
  }
  return specs;
}

int64_t MicroBatchSize(const graph::Graph& g) {
  for (const graph::ValueInfo& in : g.inputs) {
    if (!in.type.shape.empty()) return std::max<int64_t>(in.type.shape[0], 1);
  }
  return 1;
}

struct Imported {
  AnnotatedModel model;
  std::vector<std::string> warnings;  // what the exporter folded (device/compiler/onnx_state.h)
  std::unique_ptr<graph::Interpreter> interpreter;  // owns the graph; gives node FLOPs
};

absl::StatusOr<Imported> Import(absl::string_view onnx_bytes, const IpuConfig& config,
                                const CompileOptions& options) {
  Imported out;
  IPUPOD_ASSIGN_OR_RETURN(WritableModel writable, KeepModuleStateWritable(onnx_bytes));
  out.warnings = std::move(writable.warnings);
  IPUPOD_ASSIGN_OR_RETURN(out.model, ExtractPlacementAttributes(writable.onnx_bytes));
  // Weights stay initializers in every mode: a session writes them, training
  // trains them, and buffers' updates are computed (device/graph/shape_inference.h).
  IPUPOD_ASSIGN_OR_RETURN(
      graph::Graph graph,
      graph::ImportOnnx(out.model.onnx_bytes,
                        graph::FoldOptions{.keep_weights = true,
                                           .cancelled = options.cancelled,
                                           .half_partials = config.enable_half_partials},
                        options.custom_ops));
  IPUPOD_ASSIGN_OR_RETURN(out.interpreter, graph::Interpreter::Create(std::move(graph)));
  return out;
}

Executable Assemble(Imported& imported, const IpuConfig& config, const ModeConfig& mode,
                    const CompileOptions& options, Placement placement, const IpuCount& count,
                    const Report& report, std::vector<std::string> warnings) {
  const graph::Graph& g = imported.interpreter->graph();
  Executable e;
  e.producer = std::string(kProducer);
  e.mode = mode.for_inference ? ExecutableMode::kInference : ExecutableMode::kTraining;
  e.strategy = options.strategy;
  e.output_mode = mode.output_mode;
  e.micro_batch_size = MicroBatchSize(g);
  e.replication_factor = mode.replication_factor;
  e.device_iterations = mode.device_iterations;
  e.batch_size_factor = BatchSizeFactor(config, mode.for_inference);
  e.ipus = count;
  e.config = config;
  e.placement = std::move(placement);
  e.inputs = Specs(g.inputs, g);
  e.outputs = Specs(g.outputs, g);
  e.report_json = report.Json();
  e.warnings = std::move(warnings);
  e.model_bytes = std::move(imported.model.onnx_bytes);
  return e;
}

PlanOptions MakePlanOptions(const graph::Graph& g, const IpuConfig& config, const ModeConfig& mode,
                            const CompileOptions& options, const IpuCount& count,
                            const TrainingSpec& training) {
  PlanOptions plan;
  plan.strategy = options.strategy;
  plan.liveness = ConfiguredLiveness(config).value_or(Liveness::kAlwaysLive);  // validated
  plan.count = count;
  plan.micro_batch_size = MicroBatchSize(g);
  plan.device_iterations = mode.device_iterations;
  plan.output_mode = mode.output_mode;
  plan.matmul_proportion = mode.matmul_proportion;
  plan.embedding_serialization_factor = config.embedding_serialization_factor;
  plan.synthetic_data = config.synthetic_data;
  if (!options.for_inference) plan.training = MakeTrainingPlan(training, config, g);
  SetPlanBuffers(options.for_inference ? options.training.buffers : training.buffers, config, plan);
  return plan;
}

// The config's execution_strategy, or optimum-graphcore's
// sharded_execution_for_inference (PopTorch's ShardedExecution for
// inference), when set; otherwise the options say.
absl::StatusOr<CompileOptions> WithConfiguredStrategy(const IpuConfig& config,
                                                      const CompileOptions& options) {
  CompileOptions out = options;
  if (config.execution_strategy.has_value() ||
      (options.for_inference && config.sharded_execution_for_inference)) {
    IPUPOD_ASSIGN_OR_RETURN(out.strategy, ConfiguredStrategy(config, options.for_inference));
  }
  return out;
}

// The training options and buffers as cache-key text ("" for inference
// without buffers, so those keys are unchanged).
std::string TrainingKey(const CompileOptions& options) {
  const TrainingOptions& t = options.training;
  // Buffers only when given, so the keys of compiles without them are unchanged.
  const std::string buffers =
      t.buffers.empty() ? ""
                        : absl::StrCat("\nbuffers ", nlohmann::json(t.buffers).dump(
                                                         -1, ' ', /*ensure_ascii=*/true,
                                                         nlohmann::json::error_handler_t::replace));
  if (options.for_inference) return buffers;
  nlohmann::json doc = {{"loss", t.loss},
                        {"optimizer", t.optimizer},
                        {"attrs", t.optimizer_attrs},
                        {"frozen", t.frozen}};
  // Param groups only when given, so the keys of compiles without them are unchanged.
  for (const ParamGroup& g : t.param_groups) {
    doc["param_groups"].push_back({{"weights", g.weights}, {"attrs", g.variables}});
  }
  return absl::StrCat(
      "\ntraining ",
      doc.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace), buffers);
}

// An inference program's buffers (PopTorch 4.8): each a float initializer
// of the model (float32 or float16), each replaced by a value the model computes, of its dtype
// and shape.
absl::Status CheckInferenceBuffers(const graph::Graph& g,
                                   const std::map<std::string, std::string>& buffers) {
  for (const auto& [buffer, value] : buffers) {
    const tensor::Tensor* t = g.FindInitializer(buffer);
    if (t == nullptr || !tensor::IsFloat(t->dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--buffer '", buffer,
                       "' is not a float initializer of the model; name "
                       "a buffer it updates in place (torch's register_buffer)"));
    }
    const graph::TensorType* type = g.FindType(value);
    if (type == nullptr || g.FindInitializer(value) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--buffer '", buffer, "': '", value,
                       "' is not a value the model "
                       "computes (make the buffer's new value a graph output)"));
    }
    if (type->dtype != t->dtype() || type->shape != t->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--buffer '", buffer, "' is ", graph::TypeString({t->dtype(), t->shape()}), " but '",
          value, "' is ", graph::TypeString(*type), "; the update must match the buffer"));
    }
  }
  return absl::OkStatus();
}

// A model with random ops (training-mode Dropout) and no seed gets one
// chosen here, recorded in the executable's config (so every load and
// restart of it draws the same masks) and reported, so the run can be
// repeated with --set seed=N.
IpuConfig WithSeed(const graph::Graph& g, const IpuConfig& config, bool for_inference,
                   std::vector<std::string>& warnings) {
  IpuConfig out = config;
  if (config.seed.has_value() || !graph::HasRandomOps(g, !for_inference)) return out;
  std::random_device device;
  const uint64_t bits = (uint64_t{device()} << 32) | device();
  out.seed = static_cast<int64_t>(bits >> 33);  // small enough to type
  warnings.push_back(absl::StrCat(
      "ipu config key 'seed' is not set and the model has random ops (training-mode Dropout): "
      "ipupod chose seed=",
      *out.seed, " and recorded it in the executable; set seed=", *out.seed,
      " to compile the same masks again"));
  return out;
}

}  // namespace

absl::StatusOr<Executable> Compile(absl::string_view onnx_bytes, const IpuConfig& config,
                                   const CompileOptions& given, Report* report_out) {
  IPUPOD_ASSIGN_OR_RETURN(ModeConfig mode, ResolveMode(config, given.for_inference));
  IPUPOD_ASSIGN_OR_RETURN(const CompileOptions options, WithConfiguredStrategy(config, given));
  IPUPOD_ASSIGN_OR_RETURN(Imported imported, Import(onnx_bytes, config, options));
  const graph::Graph& g = imported.interpreter->graph();
  TrainingSpec training;
  if (!options.for_inference) {
    IPUPOD_ASSIGN_OR_RETURN(
        training, MakeTrainingSpec(g, options.training, mode.gradient_accumulation_steps));
  }
  if (options.for_inference) {
    IPUPOD_RETURN_IF_ERROR(CheckInferenceBuffers(g, options.training.buffers));
  }
  std::vector<std::string> warnings = IgnoredKeyWarnings(config, options.for_inference);
  warnings.insert(warnings.begin(), imported.warnings.begin(), imported.warnings.end());
  const IpuConfig seeded = WithSeed(g, config, options.for_inference, warnings);
  IPUPOD_ASSIGN_OR_RETURN(Placement placement,
                          Place(g, mode, options, imported.model.annotations, warnings));
  IPUPOD_ASSIGN_OR_RETURN(IpuCount count,
                          CheckIpuCount(placement.ipus_per_replica, mode.replication_factor,
                                        config.auto_round_num_ipus));
  IPUPOD_RETURN_IF_ERROR(CheckPipelineDepth(placement.num_stages(), mode, options.strategy));
  IPUPOD_RETURN_IF_ERROR(CheckOutputMode(mode));
  const PlanOptions plan = MakePlanOptions(g, config, mode, options, count, training);
  if (plan.training.has_value()) {
    for (std::string& w : CheckpointWarnings(*plan.training, plan.strategy, placement.num_stages()))
      warnings.push_back(std::move(w));
  }
  IPUPOD_ASSIGN_OR_RETURN(Report report,
                          PlanMemory(g, imported.interpreter->node_costs(), placement, plan));
  report.notes.insert(report.notes.begin(), placement.notes.begin(), placement.notes.end());
  report.notes.insert(report.notes.end(), warnings.begin(), warnings.end());
  if (report_out != nullptr) *report_out = report;
  IPUPOD_RETURN_IF_ERROR(CheckMemoryFits(report));
  Executable e = Assemble(imported, seeded, mode, options, std::move(placement), count, report,
                          std::move(warnings));
  e.training = std::move(training);
  if (options.for_inference) e.inference_buffers = options.training.buffers;
  IPUPOD_ASSIGN_OR_RETURN(std::string bytes, WriteExecutable(e));
  e.content_hash = DigestHex(Sha256Of(absl::string_view(bytes).substr(kExecutableHeaderBytes)));
  return e;
}

std::string ExecutableCacheKey(absl::string_view onnx_bytes, const IpuConfig& config,
                               const CompileOptions& options) {
  IpuConfig keyed = config;
  keyed.executable_cache_dir.clear();
  nlohmann::json map = nlohmann::json::object();
  if (options.module_map.has_value()) {
    for (const auto& [module, ipu] : *options.module_map) map[module] = ipu;
  }
  Sha256 hasher;
  hasher.Update(absl::StrCat(
      "ipupod executable cache key\n", kProducer, "\nformat ", kExecutableFormatVersion,
      "\nconfig ", IpuConfigToJson(keyed), "\ninference ", options.for_inference,
      TrainingKey(options), "\nstrategy ", ExecutionStrategyName(options.strategy), "\nplacement ",
      options.placement.has_value() ? PlacementMethodName(*options.placement)
                                    : absl::string_view("auto"),
      "\nmodule_map ", options.module_map.has_value() ? "1" : "0",
      map.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace),
      "\nmodel "));
  hasher.Update(DigestHex(Sha256Of(onnx_bytes)));
  return DigestHex(hasher.Finish());
}

absl::StatusOr<CachedCompile> CompileCached(absl::string_view onnx_bytes, const IpuConfig& config,
                                            const CompileOptions& options, Report* report) {
  CachedCompile out;
  const std::string& dir = config.executable_cache_dir;
  if (dir.empty() || dir == "disabled") {
    IPUPOD_ASSIGN_OR_RETURN(out.executable, Compile(onnx_bytes, config, options, report));
    return out;
  }
  out.path = (std::filesystem::path(dir) /
              absl::StrCat(ExecutableCacheKey(onnx_bytes, config, options), kExecutableExtension))
                 .string();
  auto cached = ReadExecutableFile(out.path);
  if (cached.ok()) {
    auto stored = ReportFromJson(cached->report_json);
    if (stored.ok()) {
      if (report != nullptr) *report = *std::move(stored);
      out.executable = *std::move(cached);
      out.cache_hit = true;
      return out;
    }
  }
  IPUPOD_ASSIGN_OR_RETURN(out.executable, Compile(onnx_bytes, config, options, report));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const absl::Status written =
      ec ? absl::InternalError(ec.message()) : WriteExecutableFile(out.path, out.executable);
  if (!written.ok()) {
    out.executable.warnings.push_back(
        absl::StrCat("could not store the executable in cache '", dir, "': ", written.message()));
  }
  return out;
}

}  // namespace ipupod::compiler
