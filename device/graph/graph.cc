#include "device/graph/graph.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "device/kernels/shape_util.h"

namespace ipupod::graph {
namespace {

// "0", "3.1": dot-separated non-empty runs of digits.
bool IsNumericPath(absl::string_view s) {
  if (s.empty()) return false;
  for (absl::string_view atom : absl::StrSplit(s, '.')) {
    if (atom.empty()) return false;
    for (char c : atom) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
  }
  return true;
}

}  // namespace

std::string TypeString(const TensorType& type) {
  return absl::StrCat(DTypeName(type.dtype), kernels::ShapeString(type.shape));
}

const AttributeValue* Node::FindAttribute(absl::string_view attr) const {
  auto it = attributes.find(std::string(attr));
  return it == attributes.end() ? nullptr : &it->second;
}

const TensorType* Graph::FindType(absl::string_view value) const {
  auto it = value_types.find(std::string(value));
  return it == value_types.end() ? nullptr : &it->second;
}

const Tensor* Graph::FindInitializer(absl::string_view value) const {
  auto it = initializers.find(std::string(value));
  return it == initializers.end() ? nullptr : &it->second;
}

int64_t Graph::InitializerBytes() const {
  int64_t total = 0;
  for (const auto& [name, t] : initializers) total += static_cast<int64_t>(t.byte_size());
  return total;
}

std::string ModulePathFromNodeName(absl::string_view node_name) {
  if (!absl::StartsWith(node_name, "/")) return "";
  std::vector<absl::string_view> scopes = absl::StrSplit(node_name.substr(1), '/');
  scopes.pop_back();  // the op's own name
  std::string path;
  std::string parent;  // the parent scope's own component
  for (absl::string_view scope : scopes) {
    if (scope.empty() || absl::StartsWith(scope, "__ipupod_")) continue;  // not a module
    const bool numbered_child = !parent.empty() && absl::StartsWith(scope, parent) &&
                                scope.size() > parent.size() + 1 && scope[parent.size()] == '.' &&
                                IsNumericPath(scope.substr(parent.size() + 1));
    if (numbered_child) {
      absl::StrAppend(&path, scope.substr(parent.size()));
    } else {
      path = path.empty() ? std::string(scope) : absl::StrCat(path, ".", scope);
    }
    parent = std::string(scope);
  }
  return path;
}

}  // namespace ipupod::graph
