#include "device/runtime/onnx_model.h"

#include <climits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/tensor/shape.h"
#include "onnx/onnx_pb.h"

namespace ipupod::runtime {

absl::StatusOr<std::string> ReplaceOnnxInitializers(absl::string_view model_bytes,
                                                    const tensor::NamedTensors& tensors) {
  onnx::ModelProto model;
  if (model_bytes.size() > static_cast<size_t>(INT_MAX) ||
      !model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size()))) {
    return absl::InvalidArgumentError("the executable's model is not an ONNX ModelProto");
  }
  std::map<std::string, onnx::TensorProto*> by_name;
  for (onnx::TensorProto& p : *model.mutable_graph()->mutable_initializer()) {
    by_name[p.name()] = &p;
  }
  for (const auto& [name, t] : tensors) {
    auto it = by_name.find(name);
    const int want = t.dtype() == tensor::DType::kFloat16 ? onnx::TensorProto::FLOAT16
                                                          : onnx::TensorProto::FLOAT;
    if (it == by_name.end() || it->second->data_type() != want || !tensor::IsFloat(t.dtype()) ||
        tensor::Shape(it->second->dims().begin(), it->second->dims().end()) != t.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a float initializer of the model with shape ",
                       tensor::ShapeString(t.shape())));
    }
    onnx::TensorProto& p = *it->second;
    p.clear_float_data();
    p.clear_int32_data();  // where FLOAT16 keeps typed values
    p.clear_external_data();
    p.set_data_location(onnx::TensorProto::DEFAULT);
    p.set_raw_data(std::string(t.bytes()));
  }
  return model.SerializeAsString();
}

}  // namespace ipupod::runtime
