// File: tests/device/graph/onnx_builder.h
//
// Test helper: builds small onnx.ModelProto graphs in C++ (no Python needed)
// for importer and interpreter tests.
#ifndef IPUPOD_TESTS_GRAPH_ONNX_BUILDER_H_
#define IPUPOD_TESTS_GRAPH_ONNX_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace ipupod::graph::testing {

inline constexpr int kFloat = onnx::TensorProto::FLOAT;
inline constexpr int kInt64 = onnx::TensorProto::INT64;
inline constexpr int kBool = onnx::TensorProto::BOOL;
inline constexpr int kFloat16 = onnx::TensorProto::FLOAT16;

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int64_t opset) {
    model_.set_ir_version(8);
    model_.set_producer_name("ipupod-test");
    auto* o = model_.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
  }

  // dims: -1 becomes the symbolic dim "batch".
  OnnxBuilder& Input(const std::string& name, int elem_type, const std::vector<int64_t>& dims) {
    SetValueInfo(model_.mutable_graph()->add_input(), name, elem_type, dims);
    return *this;
  }
  OnnxBuilder& Output(const std::string& name, int elem_type,
                      const std::vector<int64_t>& dims = {}) {
    SetValueInfo(model_.mutable_graph()->add_output(), name, elem_type, dims);
    return *this;
  }
  OnnxBuilder& Floats(const std::string& name, const std::vector<int64_t>& dims,
                      const std::vector<float>& values) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    FillFloats(*t, name, dims, values);
    return *this;
  }
  OnnxBuilder& Ints(const std::string& name, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& values) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    FillInts(*t, name, dims, values);
    return *this;
  }

  onnx::NodeProto& Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? "/" + op + "_" + std::to_string(model_.graph().node_size()) : name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  onnx::ModelProto& model() { return model_; }
  std::string Bytes() const { return model_.SerializeAsString(); }

  static void AttrInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void AttrFloat(onnx::NodeProto& n, const std::string& name, float v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void AttrString(onnx::NodeProto& n, const std::string& name, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void AttrInts(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void AttrIntTensor(onnx::NodeProto& n, const std::string& name,
                            const std::vector<int64_t>& dims, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::TENSOR);
    FillInts(*a->mutable_t(), "", dims, v);
  }
  static void AttrFloatTensor(onnx::NodeProto& n, const std::string& name,
                              const std::vector<int64_t>& dims, const std::vector<float>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::TENSOR);
    FillFloats(*a->mutable_t(), "", dims, v);
  }

 private:
  static void SetValueInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                           const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d < 0) {
        dim->set_dim_param("batch");
      } else {
        dim->set_dim_value(d);
      }
    }
  }
  static void FillFloats(onnx::TensorProto& t, const std::string& name,
                         const std::vector<int64_t>& dims, const std::vector<float>& values) {
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t.add_dims(d);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  }
  static void FillInts(onnx::TensorProto& t, const std::string& name,
                       const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
    t.set_name(name);
    t.set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t.add_dims(d);
    for (int64_t v : values) t.add_int64_data(v);  // typed field, not raw_data
  }

  onnx::ModelProto model_;
};

// A hostile model: ConstantOfShape([n, n]) -> ReduceSum -> Add(x[4]) -> y[4]; a few bytes of
// ONNX for n x n floats (3.6 GB at n = 30000) if anything materialises them.
inline std::string ConstantOfShapeBomb(int64_t n) {
  OnnxBuilder b(13);
  b.Input("x", kFloat, {4}).Output("y", kFloat);
  b.Ints("shape", {2}, {n, n});
  auto& cos = b.Node("ConstantOfShape", {"shape"}, {"big"});
  OnnxBuilder::AttrFloatTensor(cos, "value", {1}, {1.0f});
  auto& sum = b.Node("ReduceSum", {"big"}, {"s"});
  OnnxBuilder::AttrInt(sum, "keepdims", 0);
  b.Node("Add", {"x", "s"}, {"y"});
  return b.Bytes();
}

}  // namespace ipupod::graph::testing

#endif  // IPUPOD_TESTS_GRAPH_ONNX_BUILDER_H_
