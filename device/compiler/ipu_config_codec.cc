#include "device/compiler/ipu_config_codec.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "common/text_match.h"

namespace ipupod::compiler::internal {
namespace {

json::JsonPath KeyPath(absl::string_view key) { return json::JsonPath("ipu config").Key(key); }

// "[1 2, 3]" -> {"1", "2", "3"}; nullopt unless bracketed.
std::optional<std::vector<std::string>> ListItems(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumePrefix(&text, "[") || !absl::ConsumeSuffix(&text, "]")) return std::nullopt;
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(" ,\t"), absl::SkipEmpty())) {
    items.emplace_back(item);
  }
  return items;
}

template <typename T>
absl::StatusOr<Json> ListFromText(absl::string_view key, absl::string_view expected,
                                  absl::string_view text) {
  auto items = ListItems(text);
  if (!items.has_value()) return TextError(key, expected, text);
  Json list = Json::array();
  for (const std::string& item : *items) {
    auto element = Codec<T>::FromText(key, item);
    if (!element.ok()) return TextError(key, expected, text);
    list.push_back(*std::move(element));
  }
  return list;
}

}  // namespace

absl::Status TypeError(absl::string_view key, absl::string_view expected, const Json& got) {
  return KeyPath(key).TypeError(expected, got);
}

absl::Status TextError(absl::string_view key, absl::string_view expected, absl::string_view got) {
  return KeyPath(key).Error(absl::StrCat("expected ", expected, ", got '", got, "'"));
}

absl::StatusOr<int64_t> Codec<int64_t>::Decode(absl::string_view key, const Json& v) {
  return json::ReadInt(v, KeyPath(key));
}

absl::StatusOr<Json> Codec<int64_t>::FromText(absl::string_view key, absl::string_view text) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) return TextError(key, kExpected, text);
  return Json(value);
}

absl::StatusOr<double> Codec<double>::Decode(absl::string_view key, const Json& v) {
  return json::ReadNumber(v, KeyPath(key));
}

absl::StatusOr<Json> Codec<double>::FromText(absl::string_view key, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value)) return TextError(key, kExpected, text);
  return Json(value);
}

absl::StatusOr<bool> Codec<bool>::Decode(absl::string_view key, const Json& v) {
  return json::ReadBool(v, KeyPath(key));
}

absl::StatusOr<Json> Codec<bool>::FromText(absl::string_view key, absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "1" || lower == "y" || lower == "yes") return Json(true);
  if (lower == "false" || lower == "0" || lower == "n" || lower == "no") return Json(false);
  return TextError(key, kExpected, text);
}

absl::StatusOr<std::string> Codec<std::string>::Decode(absl::string_view key, const Json& v) {
  return json::ReadString(v, KeyPath(key));
}

absl::StatusOr<Json> Codec<std::string>::FromText(absl::string_view, absl::string_view text) {
  return Json(std::string(text));
}

absl::StatusOr<std::vector<int64_t>> Codec<std::vector<int64_t>>::Decode(absl::string_view key,
                                                                         const Json& v) {
  return json::ReadIntList(v, KeyPath(key));
}

absl::StatusOr<Json> Codec<std::vector<int64_t>>::FromText(absl::string_view key,
                                                           absl::string_view text) {
  return ListFromText<int64_t>(key, kExpected, text);
}

absl::StatusOr<PerIpuFloat> Codec<PerIpuFloat>::Decode(absl::string_view key, const Json& v) {
  PerIpuFloat out;
  if (v.is_number()) {
    out.values = {v.get<double>()};
    return out;
  }
  if (!v.is_array()) return TypeError(key, kExpected, v);
  out.is_list = true;
  out.values.clear();
  for (const Json& element : v) {
    if (!element.is_number()) return TypeError(key, kExpected, v);
    out.values.push_back(element.get<double>());
  }
  return out;
}

Json Codec<PerIpuFloat>::Encode(const PerIpuFloat& v) {
  if (!v.is_list && v.values.size() == 1) return v.values[0];
  return v.values;
}

absl::StatusOr<Json> Codec<PerIpuFloat>::FromText(absl::string_view key, absl::string_view text) {
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "[")) {
    return ListFromText<double>(key, kExpected, text);
  }
  auto value = Codec<double>::FromText(key, text);
  if (!value.ok()) return TextError(key, kExpected, text);
  return value;
}

const std::vector<Field>& Fields() {
  static const auto* const kFields = new std::vector<Field>{
      {"replication_factor", &IpuConfig::replication_factor},
      {"inference_replication_factor", &IpuConfig::inference_replication_factor},
      {"gradient_accumulation_steps", &IpuConfig::gradient_accumulation_steps},
      {"device_iterations", &IpuConfig::device_iterations},
      {"inference_device_iterations", &IpuConfig::inference_device_iterations},
      {"layers_per_ipu", &IpuConfig::layers_per_ipu},
      {"inference_layers_per_ipu", &IpuConfig::inference_layers_per_ipu},
      {"ipus_per_replica", &IpuConfig::ipus_per_replica},
      {"inference_ipus_per_replica", &IpuConfig::inference_ipus_per_replica},
      {"auto_round_num_ipus", &IpuConfig::auto_round_num_ipus},
      {"sharded_execution_for_inference", &IpuConfig::sharded_execution_for_inference},
      {"execution_strategy", &IpuConfig::execution_strategy},
      {"tensors_liveness", &IpuConfig::tensors_liveness},
      {"optimizer_state_offchip", &IpuConfig::optimizer_state_offchip},
      {"replicated_tensor_sharding", &IpuConfig::replicated_tensor_sharding},
      {"matmul_proportion", &IpuConfig::matmul_proportion},
      {"inference_matmul_proportion", &IpuConfig::inference_matmul_proportion},
      {"enable_half_partials", &IpuConfig::enable_half_partials},
      {"embedding_serialization_factor", &IpuConfig::embedding_serialization_factor},
      {"recompute_checkpoint_every_layer", &IpuConfig::recompute_checkpoint_every_layer},
      {"output_mode", &IpuConfig::output_mode},
      {"inference_output_mode", &IpuConfig::inference_output_mode},
      {"seed", &IpuConfig::seed},
      {"auto_loss_scaling", &IpuConfig::auto_loss_scaling},
      {"executable_cache_dir", &IpuConfig::executable_cache_dir},
      {"synthetic_data", &IpuConfig::synthetic_data},
      {"broadcast_buffers", &IpuConfig::broadcast_buffers},
  };
  return *kFields;
}

const Field* FindField(absl::string_view key) {
  for (const Field& field : Fields()) {
    if (field.key == key) return &field;
  }
  return nullptr;
}

bool IsForeignOptimumKey(absl::string_view key) {
  static constexpr absl::string_view kForeign[] = {
      "optimum_version",
      "transformers_version",
      "profile_dir",
      "use_popdist",
      "enable_half_first_order_momentum",
      "execute_encoder_on_cpu_for_generation",
      "explicit_ir_inference",
      "parallelize_kwargs",
      "inference_parallelize_kwargs",
      "inference_embedding_serialization_factor",
      "serialized_embedding_splits_per_ipu",
      "inference_serialized_embedding_splits_per_ipu",
      "projection_serialization_factor",
      "inference_projection_serialization_factor",
      "serialized_projection_splits_per_ipu",
      "inference_serialized_projection_splits_per_ipu",
  };
  return std::find(std::begin(kForeign), std::end(kForeign), key) != std::end(kForeign);
}

std::vector<std::string> CloseKeys(absl::string_view key) {
  std::vector<std::string> keys;
  for (const Field& field : Fields()) keys.emplace_back(field.key);
  return CloseMatches(key, keys);
}

absl::Status SetField(IpuConfig& config, const Field& field, const Json& value) {
  return std::visit(
      [&](auto member) -> absl::Status {
        using T = std::remove_cvref_t<decltype(config.*member)>;
        IPUPOD_ASSIGN_OR_RETURN(T decoded, Codec<T>::Decode(field.key, value));
        config.*member = std::move(decoded);
        return absl::OkStatus();
      },
      field.member);
}

Json GetField(const IpuConfig& config, const Field& field) {
  return std::visit(
      [&](auto member) -> Json {
        using T = std::remove_cvref_t<decltype(config.*member)>;
        return Codec<T>::Encode(config.*member);
      },
      field.member);
}

absl::StatusOr<Json> FieldFromText(const Field& field, absl::string_view text) {
  return std::visit(
      [&](auto member) -> absl::StatusOr<Json> {
        using T = std::remove_cvref_t<decltype(std::declval<IpuConfig&>().*member)>;
        return Codec<T>::FromText(field.key, text);
      },
      field.member);
}

}  // namespace ipupod::compiler::internal
