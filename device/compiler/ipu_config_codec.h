// File: device/compiler/ipu_config_codec.h
//
// Internal to ipupod_compiler: how each IpuConfig field type is read from
// JSON, written to JSON and read from update_from_string text, and the
// table of keys. Kept apart from ipu_config.cc so that the key table, the
// only list of keys, reads as one block.
//
// Thread safety: the key table is built once (thread-safe static), then
// read-only.
// Errors: INVALID_ARGUMENT "ipu config key 'k': expected <what>, got <what>".
#ifndef IPUPOD_COMPILER_IPU_CONFIG_CODEC_H_
#define IPUPOD_COMPILER_IPU_CONFIG_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/json_reader.h"
#include "device/compiler/ipu_config.h"

namespace ipupod::compiler::internal {

using Json = json::Json;

absl::Status TypeError(absl::string_view key, absl::string_view expected, const Json& got);
absl::Status TextError(absl::string_view key, absl::string_view expected, absl::string_view got);

// Codec<T>: Decode (JSON -> T, type-checked), Encode (T -> JSON) and
// FromText (update_from_string text -> JSON, then Decode).
template <typename T>
struct Codec;

template <>
struct Codec<int64_t> {
  static constexpr absl::string_view kExpected = "an integer";
  static absl::StatusOr<int64_t> Decode(absl::string_view key, const Json& v);
  static Json Encode(int64_t v) { return v; }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

template <>
struct Codec<double> {
  static constexpr absl::string_view kExpected = "a number";
  static absl::StatusOr<double> Decode(absl::string_view key, const Json& v);
  static Json Encode(double v) { return v; }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

template <>
struct Codec<bool> {
  static constexpr absl::string_view kExpected = "true or false";
  static absl::StatusOr<bool> Decode(absl::string_view key, const Json& v);
  static Json Encode(bool v) { return v; }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

template <>
struct Codec<std::string> {
  static constexpr absl::string_view kExpected = "a string";
  static absl::StatusOr<std::string> Decode(absl::string_view key, const Json& v);
  static Json Encode(const std::string& v) { return v; }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

template <>
struct Codec<std::vector<int64_t>> {
  static constexpr absl::string_view kExpected = "a list of integers";
  static absl::StatusOr<std::vector<int64_t>> Decode(absl::string_view key, const Json& v);
  static Json Encode(const std::vector<int64_t>& v) { return v; }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

template <>
struct Codec<PerIpuFloat> {
  static constexpr absl::string_view kExpected = "a number or a list of numbers";
  static absl::StatusOr<PerIpuFloat> Decode(absl::string_view key, const Json& v);
  static Json Encode(const PerIpuFloat& v);
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text);
};

// An optional key: JSON null (text "none"/"null") unsets it.
template <typename T>
struct Codec<std::optional<T>> {
  static absl::StatusOr<std::optional<T>> Decode(absl::string_view key, const Json& v) {
    if (v.is_null()) return std::optional<T>();
    auto inner = Codec<T>::Decode(key, v);
    if (!inner.ok()) return TypeError(key, ExpectedOrNull(), v);
    return std::optional<T>(*std::move(inner));
  }
  static Json Encode(const std::optional<T>& v) {
    return v.has_value() ? Codec<T>::Encode(*v) : Json(nullptr);
  }
  static absl::StatusOr<Json> FromText(absl::string_view key, absl::string_view text) {
    if (text == "none" || text == "None" || text == "null") return Json(nullptr);
    return Codec<T>::FromText(key, text);
  }
  static std::string ExpectedOrNull() { return std::string(Codec<T>::kExpected) + " or null"; }
};

using Member =
    std::variant<int64_t IpuConfig::*, bool IpuConfig::*, std::string IpuConfig::*,
                 std::vector<int64_t> IpuConfig::*, PerIpuFloat IpuConfig::*,
                 std::optional<int64_t> IpuConfig::*,
                 std::optional<std::vector<int64_t>> IpuConfig::*,
                 std::optional<PerIpuFloat> IpuConfig::*, std::optional<std::string> IpuConfig::*>;

struct Field {
  absl::string_view key;
  Member member;
};

// Every IpuConfig key, in documentation order.
const std::vector<Field>& Fields();
const Field* FindField(absl::string_view key);

// optimum-graphcore keys that published ipu_config.json files carry but
// ipupod does not model (metadata, training-only or PyTorch-side options).
bool IsForeignOptimumKey(absl::string_view key);

// Up to three keys close to `key` (common/text_match.h's CloseMatches).
std::vector<std::string> CloseKeys(absl::string_view key);

absl::Status SetField(IpuConfig& config, const Field& field, const Json& value);
Json GetField(const IpuConfig& config, const Field& field);
absl::StatusOr<Json> FieldFromText(const Field& field, absl::string_view text);

}  // namespace ipupod::compiler::internal

#endif  // IPUPOD_COMPILER_IPU_CONFIG_CODEC_H_
