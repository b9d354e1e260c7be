// File: common/json_reader.h
//
// Strict reading of JSON documents written by people (server config,
// ipu_config.json) or by ipupod itself (executable metadata), in one style:
//   * every value is type-checked before it is read (no silent float ->
//     integer conversion), and an error names the document, the key path
//     and what was expected and given:
//       config key 'reset_ms.ipu': expected an integer from 0 to 60000, got a string "1s"
//   * an ObjectReader remembers which keys its caller asked for, so the
//     keys nobody asked for are reported with did-you-mean suggestions; the
//     caller chooses the policy (server config: error; IPUConfig: warning,
//     as optimum-graphcore files carry keys ipupod does not model).
//   * nlohmann-json exceptions stop here: everything returns absl::Status.
//
// Thread safety: a JsonPath is a value; an ObjectReader is used by one
// thread at a time and must not outlive the JSON value it reads.
// Errors: INVALID_ARGUMENT, always.
#ifndef IPUPOD_COMMON_JSON_READER_H_
#define IPUPOD_COMMON_JSON_READER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ipupod::json {

using Json = nlohmann::json;

// "null", "a boolean true", "an integer 3", "a number 2.5", "a string \"x\"",
// "an array [1,2]", "an object {...}"; the text is cut after 60 characters.
std::string Describe(const Json& value);

// Parses `text`; INVALID_ARGUMENT "<document> is not valid JSON: ..." on a
// syntax error. `comments` allows // and /* */ comments.
absl::StatusOr<Json> Parse(absl::string_view text, absl::string_view document,
                           bool comments = false);

// Where a value sits: the document's name ("config", "ipu config") and the
// key path inside it ("reset_ms.ipu", "tokens[0].user"; "" for the root).
class JsonPath {
 public:
  JsonPath(absl::string_view document, std::string path = "")
      : document_(document), path_(std::move(path)) {}

  JsonPath Key(absl::string_view key) const;
  JsonPath Index(size_t i) const;
  const std::string& path() const { return path_; }
  absl::string_view document() const { return document_; }

  // "config key 'reset_ms.ipu'" ("config" for the root).
  std::string Name() const;
  // "<Name()>: expected <expected>, got <Describe(got)>".
  absl::Status TypeError(absl::string_view expected, const Json& got) const;
  // "<Name()>: <message>".
  absl::Status Error(absl::string_view message) const;

 private:
  absl::string_view document_;  // a literal or caller-owned, outlives the path
  std::string path_;
};

// Typed reads of one value. Integers must be JSON integers within
// [min, max]; numbers may be integers or floats.
absl::StatusOr<int64_t> ReadInt(const Json& v, const JsonPath& at,
                                int64_t min = std::numeric_limits<int64_t>::min(),
                                int64_t max = std::numeric_limits<int64_t>::max());
absl::StatusOr<uint64_t> ReadUint(const Json& v, const JsonPath& at);
absl::StatusOr<double> ReadNumber(const Json& v, const JsonPath& at);
absl::StatusOr<bool> ReadBool(const Json& v, const JsonPath& at);
absl::StatusOr<std::string> ReadString(const Json& v, const JsonPath& at);
absl::StatusOr<std::vector<int64_t>> ReadIntList(const Json& v, const JsonPath& at);
absl::StatusOr<std::vector<std::string>> ReadStringList(const Json& v, const JsonPath& at);
absl::StatusOr<std::map<std::string, std::string>> ReadStringMap(const Json& v, const JsonPath& at);
// An array of at most max_size entries.
absl::Status ExpectArray(const Json& v, const JsonPath& at,
                         size_t max_size = std::numeric_limits<size_t>::max());

struct UnknownKey {
  std::string path;                // "reset_ms.ipus"
  std::vector<std::string> close;  // known keys of the same object, nearest first
  std::string Hint() const;        // " (did you mean 'ipu'?)" or ""
};

// The keys of one JSON object, read by name.
class ObjectReader {
 public:
  // INVALID_ARGUMENT "<at.Name()>: expected an object, got ..." unless `object` is one.
  static absl::StatusOr<ObjectReader> Open(const Json& object, JsonPath at);

  const JsonPath& at() const { return at_; }
  JsonPath PathOf(absl::string_view key) const { return at_.Key(key); }

  // The value of `key`, or nullptr if absent. Either way `key` is known.
  const Json* Find(absl::string_view key);
  // The value of `key`; INVALID_ARGUMENT "<document> key '<path>' not found".
  absl::StatusOr<const Json*> Get(absl::string_view key);

  // Required typed values (absent: "not found").
  absl::StatusOr<int64_t> Int(absl::string_view key);
  absl::StatusOr<std::string> String(absl::string_view key);
  absl::StatusOr<std::vector<int64_t>> IntList(absl::string_view key);
  absl::StatusOr<std::vector<std::string>> StringList(absl::string_view key);
  absl::StatusOr<ObjectReader> Object(absl::string_view key);

  // Calls read(value, path) if `key` is present; OK if absent.
  template <typename Read>
  absl::Status IfPresent(absl::string_view key, Read&& read) {
    const Json* value = Find(key);
    if (value == nullptr) return absl::OkStatus();
    return read(*value, PathOf(key));
  }

  // The object's keys that no Find/Get asked for, in key order, each
  // with close matches among the keys asked for.
  std::vector<UnknownKey> UnknownKeys() const;
  // The error policy: INVALID_ARGUMENT for the first unknown key,
  // "unknown <document> key 'p' (did you mean 'q'?); valid keys here: a, b".
  absl::Status RejectUnknownKeys() const;

 private:
  ObjectReader(const Json& object, JsonPath at) : object_(&object), at_(std::move(at)) {}

  const Json* object_;
  JsonPath at_;
  std::vector<std::string> known_;  // in the order asked
};

}  // namespace ipupod::json

#endif  // IPUPOD_COMMON_JSON_READER_H_
