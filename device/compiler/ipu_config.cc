#include "device/compiler/ipu_config.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/json_reader.h"
#include "common/status_macros.h"
#include "common/text_match.h"
#include "device/compiler/checks.h"
#include "device/compiler/ipu_config_codec.h"
#include "device/hardware.h"

namespace ipupod::compiler {
namespace {

using Json = internal::Json;

constexpr absl::string_view kOutputModes = "all, final, sum, every_n:N or default";

// optimum-graphcore's files carry keys ipupod does not model: unknown keys
// warn (a server config's unknown keys are errors).
void WarnUnknownKeys(const json::ObjectReader& reader, std::vector<std::string>& warnings) {
  for (const json::UnknownKey& unknown : reader.UnknownKeys()) {
    if (internal::IsForeignOptimumKey(unknown.path)) {
      warnings.push_back(absl::StrCat("ignored '", unknown.path,
                                      "': an optimum-graphcore option ipupod does not model"));
    } else {
      warnings.push_back(absl::StrCat("ignored unknown key '", unknown.path, "'", unknown.Hint()));
    }
  }
}

absl::Status ParseInto(IpuConfig& config, const Json& doc, std::vector<std::string>& warnings) {
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ipu config must be a JSON object of keys, got ", json::Describe(doc)));
  }
  IPUPOD_ASSIGN_OR_RETURN(json::ObjectReader reader,
                          json::ObjectReader::Open(doc, json::JsonPath("ipu config")));
  for (const internal::Field& field : internal::Fields()) {
    const Json* value = reader.Find(field.key);
    if (value == nullptr) continue;
    // Python writes None for "use the default"; optional keys keep null.
    const Json& given = value->is_null() ? internal::GetField(IpuConfig(), field) : *value;
    IPUPOD_RETURN_IF_ERROR(internal::SetField(config, field, given));
  }
  WarnUnknownKeys(reader, warnings);
  return absl::OkStatus();
}

absl::Status UnknownKeyError(absl::string_view key) {
  if (internal::IsForeignOptimumKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ipu config key '", key, "' is an optimum-graphcore option ipupod does not model"));
  }
  const std::vector<std::string> close = internal::CloseKeys(key);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ipu config key '", key, "'; ",
                   close.empty() ? absl::StrCat("keys are: ", absl::StrJoin(IpuConfigKeys(), ", "))
                                 : DidYouMean(close)));
}

// Splits "a=1,b=[1, 2]" at commas outside brackets.
std::vector<std::string> SplitUpdates(absl::string_view update) {
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : update) {
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      items.emplace_back();
    } else {
      items.back().push_back(c);
    }
  }
  return items;
}

absl::Status ApplyUpdate(IpuConfig& config, absl::string_view item) {
  const size_t eq = item.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("ipu config update '", item, "' is not key=value"));
  }
  const absl::string_view key = absl::StripAsciiWhitespace(item.substr(0, eq));
  const absl::string_view text = absl::StripAsciiWhitespace(item.substr(eq + 1));
  const internal::Field* field = internal::FindField(key);
  if (field == nullptr) return UnknownKeyError(key);
  IPUPOD_ASSIGN_OR_RETURN(Json value, internal::FieldFromText(*field, text));
  return internal::SetField(config, *field, value);
}

absl::Status CheckRange(absl::string_view key, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("ipu config key '", key, "' is ", value,
                                                 "; it must be between ", min, " and ", max));
}

absl::Status CheckCounts(const IpuConfig& c) {
  const int64_t pod = device::kMaxPodIpus;
  IPUPOD_RETURN_IF_ERROR(CheckRange("replication_factor", c.replication_factor, 1, pod));
  IPUPOD_RETURN_IF_ERROR(
      CheckRange("inference_replication_factor", c.inference_replication_factor, 1, pod));
  IPUPOD_RETURN_IF_ERROR(
      CheckRange("gradient_accumulation_steps", c.gradient_accumulation_steps, 1, kIterationsMax));
  IPUPOD_RETURN_IF_ERROR(CheckRange("device_iterations", c.device_iterations, 1, kIterationsMax));
  IPUPOD_RETURN_IF_ERROR(
      CheckRange("inference_device_iterations", c.inference_device_iterations, 1, kIterationsMax));
  IPUPOD_RETURN_IF_ERROR(CheckRange("embedding_serialization_factor",
                                    c.embedding_serialization_factor, 1, kLayersMax));
  if (c.ipus_per_replica.has_value()) {
    IPUPOD_RETURN_IF_ERROR(CheckRange("ipus_per_replica", *c.ipus_per_replica, 1, pod));
  }
  if (c.inference_ipus_per_replica.has_value()) {
    IPUPOD_RETURN_IF_ERROR(
        CheckRange("inference_ipus_per_replica", *c.inference_ipus_per_replica, 1, pod));
  }
  return absl::OkStatus();
}

absl::Status CheckLayers(absl::string_view key, const std::vector<int64_t>& layers) {
  if (layers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ipu config key '", key, "' is empty; give one entry per IPU, or [-1] to split evenly"));
  }
  for (int64_t n : layers) IPUPOD_RETURN_IF_ERROR(CheckRange(key, n, -1, kLayersMax));
  return absl::OkStatus();
}

absl::Status CheckProportion(absl::string_view key, const PerIpuFloat& p) {
  if (p.values.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ipu config key '", key, "' is an empty list; give one value per IPU"));
  }
  for (double v : p.values) {
    if (!(v >= 0.0 && v <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ipu config key '", key, "' has value ", v, "; it must be between 0 and 1"));
    }
  }
  return absl::OkStatus();
}

std::string ListText(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// optimum-graphcore's _validate_ipu_config for one mode.
absl::Status CheckCoherence(const ModeConfig& m) {
  const absl::string_view prefix = m.for_inference ? "inference_" : "";
  if (m.matmul_proportion.is_list &&
      static_cast<int64_t>(m.matmul_proportion.values.size()) != m.ipus_per_replica) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "matmul_proportion has ", m.matmul_proportion.values.size(), " values but ", prefix,
        "ipus_per_replica is ", m.ipus_per_replica, ": give one value per IPU"));
  }
  const bool wildcard =
      std::find(m.layers_per_ipu.begin(), m.layers_per_ipu.end(), -1) != m.layers_per_ipu.end();
  if (!wildcard && static_cast<int64_t>(m.layers_per_ipu.size()) != m.ipus_per_replica) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "layers_per_ipu=", ListText(m.layers_per_ipu),
                     " should use the same number of IPUs as ", prefix,
                     "ipus_per_replica=", m.ipus_per_replica, ": give ", m.ipus_per_replica,
                     " entries or set ", prefix, "ipus_per_replica=", m.layers_per_ipu.size()));
  }
  return absl::OkStatus();
}

// Resolution without validation (ValidateIpuConfig uses it on a config
// whose ranges are already checked).
absl::StatusOr<ModeConfig> Resolve(const IpuConfig& c, bool for_inference) {
  ModeConfig m;
  m.for_inference = for_inference;
  const int64_t train_ipus =
      c.ipus_per_replica.value_or(static_cast<int64_t>(c.layers_per_ipu.size()));
  if (!for_inference) {
    m.layers_per_ipu = c.layers_per_ipu;
    m.ipus_per_replica = train_ipus;
    m.matmul_proportion = c.matmul_proportion;
    m.replication_factor = c.replication_factor;
    m.gradient_accumulation_steps = c.gradient_accumulation_steps;
    m.device_iterations = c.device_iterations;
    IPUPOD_ASSIGN_OR_RETURN(m.output_mode, ParseOutputMode(c.output_mode, false));
    return m;
  }
  const bool own_layers =
      c.inference_layers_per_ipu.has_value() && !c.inference_layers_per_ipu->empty();
  m.layers_per_ipu = own_layers ? *c.inference_layers_per_ipu : c.layers_per_ipu;
  int64_t fallback = train_ipus;
  if (fallback == static_cast<int64_t>(c.layers_per_ipu.size()) ||
      m.layers_per_ipu != std::vector<int64_t>{-1}) {
    fallback = static_cast<int64_t>(m.layers_per_ipu.size());
  }
  m.ipus_per_replica = c.inference_ipus_per_replica.value_or(fallback);
  if (c.inference_matmul_proportion.has_value()) {
    m.matmul_proportion = *c.inference_matmul_proportion;
  } else if (!c.matmul_proportion.is_list ||
             static_cast<int64_t>(c.matmul_proportion.values.size()) == m.ipus_per_replica) {
    m.matmul_proportion = c.matmul_proportion;
  }  // else: optimum falls back to the default single value
  m.replication_factor = c.inference_replication_factor;
  m.device_iterations = c.inference_device_iterations;
  IPUPOD_ASSIGN_OR_RETURN(m.output_mode,
                          ParseOutputMode(c.inference_output_mode.value_or("all"), true));
  return m;
}

// execution_strategy and tensors_liveness name known values, and the
// liveness suits the strategy (PopTorch: "only supported for serial phase
// execution").
absl::Status CheckStrategy(const IpuConfig& c) {
  auto prefixed = [](absl::string_view key, const absl::Status& s) {
    return absl::InvalidArgumentError(absl::StrCat("ipu config key '", key, "': ", s.message()));
  };
  absl::StatusOr<Liveness> liveness = ParseLiveness(c.tensors_liveness);
  if (!liveness.ok()) return prefixed("tensors_liveness", liveness.status());
  if (!c.execution_strategy.has_value()) return absl::OkStatus();
  absl::StatusOr<ExecutionStrategy> strategy = ParseExecutionStrategy(*c.execution_strategy);
  if (!strategy.ok()) return prefixed("execution_strategy", strategy.status());
  if (*strategy == ExecutionStrategy::kParallelPhased &&
      (*liveness == Liveness::kOffChipAfterFwdNoOverlap ||
       *liveness == Liveness::kOffChipAfterEachPhase)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensors_liveness=", c.tensors_liveness,
        " is only supported for serial phased execution (PopTorch's SerialPhasedExecution); "
        "with parallel_phased use always_live or off_chip_after_fwd"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OutputMode> ParseOutputMode(absl::string_view text, bool for_inference) {
  OutputMode mode;
  if (text == "all" || (text == "default" && for_inference)) return mode;
  if (text == "final" || text == "default") {
    mode.kind = OutputMode::Kind::kFinal;
    return mode;
  }
  if (text == "sum") {
    mode.kind = OutputMode::Kind::kSum;
    return mode;
  }
  absl::string_view n = text;
  if (absl::ConsumePrefix(&n, "every_n:") && absl::SimpleAtoi(n, &mode.every_n) &&
      mode.every_n >= 1 && mode.every_n <= kIterationsMax) {
    mode.kind = OutputMode::Kind::kEveryN;
    return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("output mode '", text, "' is not one of ", kOutputModes));
}

std::string OutputModeName(const OutputMode& mode) {
  switch (mode.kind) {
    case OutputMode::Kind::kAll:
      return "all";
    case OutputMode::Kind::kFinal:
      return "final";
    case OutputMode::Kind::kSum:
      return "sum";
    case OutputMode::Kind::kEveryN:
      return absl::StrCat("every_n:", mode.every_n);
  }
  return "all";
}

std::vector<std::string> IpuConfigKeys() {
  std::vector<std::string> keys;
  for (const internal::Field& field : internal::Fields()) keys.emplace_back(field.key);
  return keys;
}

absl::StatusOr<ParsedIpuConfig> ParseIpuConfigJson(absl::string_view text) {
  IPUPOD_ASSIGN_OR_RETURN(Json doc, json::Parse(text, "ipu config"));
  ParsedIpuConfig parsed;
  IPUPOD_RETURN_IF_ERROR(ParseInto(parsed.config, doc, parsed.warnings));
  IPUPOD_RETURN_IF_ERROR(ValidateIpuConfig(parsed.config));
  return parsed;
}

std::string IpuConfigToJson(const IpuConfig& config, int indent) {
  Json doc = Json::object();
  for (const internal::Field& field : internal::Fields()) {
    doc[std::string(field.key)] = internal::GetField(config, field);
  }
  return doc.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

absl::Status UpdateFromString(IpuConfig& config, absl::string_view update) {
  IpuConfig updated = config;
  for (const std::string& item : SplitUpdates(update)) {
    if (absl::StripAsciiWhitespace(item).empty()) continue;
    IPUPOD_RETURN_IF_ERROR(ApplyUpdate(updated, item));
  }
  IPUPOD_RETURN_IF_ERROR(ValidateIpuConfig(updated));
  config = std::move(updated);
  return absl::OkStatus();
}

absl::Status ValidateIpuConfig(const IpuConfig& c) {
  IPUPOD_RETURN_IF_ERROR(CheckCounts(c));
  IPUPOD_RETURN_IF_ERROR(CheckStrategy(c));
  IPUPOD_RETURN_IF_ERROR(CheckLayers("layers_per_ipu", c.layers_per_ipu));
  if (c.inference_layers_per_ipu.has_value() && !c.inference_layers_per_ipu->empty()) {
    IPUPOD_RETURN_IF_ERROR(CheckLayers("inference_layers_per_ipu", *c.inference_layers_per_ipu));
  }
  IPUPOD_RETURN_IF_ERROR(CheckProportion("matmul_proportion", c.matmul_proportion));
  if (c.inference_matmul_proportion.has_value()) {
    IPUPOD_RETURN_IF_ERROR(
        CheckProportion("inference_matmul_proportion", *c.inference_matmul_proportion));
  }
  for (bool for_inference : {false, true}) {
    auto mode = Resolve(c, for_inference);
    if (!mode.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ipu config key '", for_inference ? "inference_output_mode" : "output_mode",
                       "': ", mode.status().message()));
    }
    IPUPOD_RETURN_IF_ERROR(CheckCoherence(*mode));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModeConfig> ResolveMode(const IpuConfig& config, bool for_inference) {
  IPUPOD_RETURN_IF_ERROR(ValidateIpuConfig(config));
  return Resolve(config, for_inference);
}

std::vector<std::string> IgnoredKeyWarnings(const IpuConfig& config, bool for_inference) {
  const IpuConfig defaults;
  std::vector<std::string> out;
  auto ignored = [&out](bool set, absl::string_view key, absl::string_view why) {
    if (set) out.push_back(absl::StrCat("ipu config key '", key, "' is ignored: ", why));
  };
  const bool phased = config.execution_strategy.has_value() &&
                      absl::EndsWith(*config.execution_strategy, "_phased");
  ignored(!phased && config.tensors_liveness != defaults.tensors_liveness, "tensors_liveness",
          "it applies to the phased strategies only (execution_strategy=serial_phased or "
          "parallel_phased)");
  ignored(for_inference && config.sharded_execution_for_inference &&
              config.execution_strategy.has_value(),
          "sharded_execution_for_inference",
          absl::StrCat("execution_strategy=", config.execution_strategy.value_or(""),
                       " chooses the strategy"));
  const int64_t replicas =
      for_inference ? config.inference_replication_factor : config.replication_factor;
  ignored(!config.broadcast_buffers && replicas == 1, "broadcast_buffers",
          "with one replica there is one copy of each buffer either way");
  if (!for_inference) {
    ignored(config.replicated_tensor_sharding && config.replication_factor == 1,
            "replicated_tensor_sharding",
            "with replication_factor 1 there are no other replicas to shard the optimizer state "
            "over");
  }
  return out;
}

int64_t BatchSizeFactor(const IpuConfig& config, bool for_inference) {
  if (for_inference)
    return config.inference_replication_factor * config.inference_device_iterations;
  return config.replication_factor * config.gradient_accumulation_steps * config.device_iterations;
}

}  // namespace ipupod::compiler
