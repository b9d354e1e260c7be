#include "common/json_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "common/text_match.h"

namespace ipupod::json {
namespace {

constexpr size_t kDescribeMax = 60;  // how much of a bad value an error quotes

absl::string_view TypeWithArticle(const Json& v) {
  switch (v.type()) {
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a value";
  }
}

bool FitsInt64(const Json& v) {
  return !v.is_number_unsigned() ||
         v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

}  // namespace

std::string Describe(const Json& value) {
  if (value.is_null()) return "null";
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (text.size() > kDescribeMax) text = text.substr(0, kDescribeMax) + "...";
  return absl::StrCat(TypeWithArticle(value), " ", text);
}

absl::StatusOr<Json> Parse(absl::string_view text, absl::string_view document, bool comments) {
  try {
    return Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/comments);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(document, " is not valid JSON: ", e.what()));
  }
}

JsonPath JsonPath::Key(absl::string_view key) const {
  return JsonPath(document_, path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key));
}

JsonPath JsonPath::Index(size_t i) const {
  return JsonPath(document_, absl::StrCat(path_, "[", i, "]"));
}

std::string JsonPath::Name() const {
  if (path_.empty()) return std::string(document_);
  return absl::StrCat(document_, " key '", path_, "'");
}

absl::Status JsonPath::TypeError(absl::string_view expected, const Json& got) const {
  return Error(absl::StrCat("expected ", expected, ", got ", Describe(got)));
}

absl::Status JsonPath::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(Name(), ": ", message));
}

absl::StatusOr<int64_t> ReadInt(const Json& v, const JsonPath& at, int64_t min, int64_t max) {
  const bool bounded =
      min != std::numeric_limits<int64_t>::min() || max != std::numeric_limits<int64_t>::max();
  const std::string expected =
      bounded ? absl::StrCat("an integer from ", min, " to ", max) : "an integer";
  if (!v.is_number_integer() || !FitsInt64(v)) return at.TypeError(expected, v);
  const int64_t n = v.get<int64_t>();
  if (n < min || n > max) return at.TypeError(expected, v);
  return n;
}

absl::StatusOr<uint64_t> ReadUint(const Json& v, const JsonPath& at) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return at.TypeError("a non-negative integer", v);
  }
  return v.get<uint64_t>();
}

absl::StatusOr<double> ReadNumber(const Json& v, const JsonPath& at) {
  if (!v.is_number()) return at.TypeError("a number", v);
  return v.get<double>();
}

absl::StatusOr<bool> ReadBool(const Json& v, const JsonPath& at) {
  if (!v.is_boolean()) return at.TypeError("true or false", v);
  return v.get<bool>();
}

absl::StatusOr<std::string> ReadString(const Json& v, const JsonPath& at) {
  if (!v.is_string()) return at.TypeError("a string", v);
  return v.get<std::string>();
}

absl::StatusOr<std::vector<int64_t>> ReadIntList(const Json& v, const JsonPath& at) {
  std::vector<int64_t> out;
  bool ok = v.is_array();
  for (size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number_integer() && FitsInt64(v[i]);
    if (ok) out.push_back(v[i].get<int64_t>());
  }
  if (!ok) return at.TypeError("a list of integers", v);
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadStringList(const Json& v, const JsonPath& at) {
  std::vector<std::string> out;
  bool ok = v.is_array();
  for (size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_string();
    if (ok) out.push_back(v[i].get<std::string>());
  }
  if (!ok) return at.TypeError("a list of strings", v);
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ReadStringMap(const Json& v,
                                                                 const JsonPath& at) {
  std::map<std::string, std::string> out;
  bool ok = v.is_object();
  if (ok) {
    for (const auto& [key, value] : v.items()) {
      ok = ok && value.is_string();
      if (ok) out[key] = value.get<std::string>();
    }
  }
  if (!ok) return at.TypeError("an object of strings", v);
  return out;
}

absl::Status ExpectArray(const Json& v, const JsonPath& at, size_t max_size) {
  if (v.is_array() && v.size() <= max_size) return absl::OkStatus();
  if (max_size == std::numeric_limits<size_t>::max()) return at.TypeError("an array", v);
  return at.TypeError(absl::StrCat("an array of at most ", max_size, " entries"), v);
}

std::string UnknownKey::Hint() const {
  return close.empty() ? "" : absl::StrCat(" (", DidYouMean(close), ")");
}

absl::StatusOr<ObjectReader> ObjectReader::Open(const Json& object, JsonPath at) {
  if (!object.is_object()) return at.TypeError("an object", object);
  return ObjectReader(object, std::move(at));
}

const Json* ObjectReader::Find(absl::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  const auto it = object_->find(std::string(key));
  return it == object_->end() ? nullptr : &*it;
}

absl::StatusOr<const Json*> ObjectReader::Get(absl::string_view key) {
  const Json* value = Find(key);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(PathOf(key).Name(), " not found"));
  }
  return value;
}

absl::StatusOr<int64_t> ObjectReader::Int(absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, Get(key));
  return ReadInt(*value, PathOf(key));
}

absl::StatusOr<std::string> ObjectReader::String(absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, Get(key));
  return ReadString(*value, PathOf(key));
}

absl::StatusOr<std::vector<int64_t>> ObjectReader::IntList(absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, Get(key));
  return ReadIntList(*value, PathOf(key));
}

absl::StatusOr<std::vector<std::string>> ObjectReader::StringList(absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, Get(key));
  return ReadStringList(*value, PathOf(key));
}

absl::StatusOr<ObjectReader> ObjectReader::Object(absl::string_view key) {
  IPUPOD_ASSIGN_OR_RETURN(const Json* value, Get(key));
  return Open(*value, PathOf(key));
}

std::vector<UnknownKey> ObjectReader::UnknownKeys() const {
  std::vector<UnknownKey> unknown;
  for (const auto& [key, value] : object_->items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    unknown.push_back({PathOf(key).path(), CloseMatches(key, known_)});
  }
  return unknown;
}

absl::Status ObjectReader::RejectUnknownKeys() const {
  const std::vector<UnknownKey> unknown = UnknownKeys();
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", at_.document(), " key '", unknown[0].path, "'", unknown[0].Hint(),
                   "; valid keys here: ", absl::StrJoin(known_, ", ")));
}

}  // namespace ipupod::json
