// File: tests/device/compiler/test_models.h
//
// Test helper: small ONNX models shaped like torch.onnx.export output (node
// names "/h.0/mlp/fc/MatMul", so module paths "h.0.mlp.fc"), built with
// tests/device/graph/onnx_builder.h, plus hand-made graph::Graph values for
// placement tests that need no shapes. The *WithLoss models also output a
// scalar float "loss", so they compile for training.
#ifndef IPUPOD_TESTS_COMPILER_TEST_MODELS_H_
#define IPUPOD_TESTS_COMPILER_TEST_MODELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/graph/graph.h"
#include "tests/device/graph/onnx_builder.h"

namespace ipupod::compiler::testing {

using graph::testing::kFloat;
using graph::testing::kInt64;
using graph::testing::OnnxBuilder;

struct GptSpec {
  int layers = 4;
  int64_t d = 8;
  int64_t vocab = 16;
  int64_t batch = 2;
  int64_t seq = 4;
  std::string container = "h";  // layers are /<container>.N/...
  bool with_loss = false;       // also output loss = ReduceMean(logits)
};

inline std::vector<float> Zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n)); }

// ids[batch, seq] -> wte Gather -> layers of (attn MatMul, residual Add, mlp
// fc MatMul, Relu, proj MatMul, residual Add) -> ln_f Mul -> lm_head MatMul
// -> logits[batch, seq, vocab]. Node pointers let tests annotate nodes.
class GptBuilder {
 public:
  explicit GptBuilder(const GptSpec& spec = {}) : spec_(spec), b_(14) { Build(); }

  OnnxBuilder& builder() { return b_; }
  std::string Bytes() const { return b_.Bytes(); }
  // Every node in order with its name, for annotation.
  onnx::NodeProto& NodeNamed(const std::string& name) {
    for (auto& n : *b_.model().mutable_graph()->mutable_node()) {
      if (n.name() == name) return n;
    }
    return *b_.model().mutable_graph()->mutable_node(0);
  }

 private:
  void Build() {
    const int64_t d = spec_.d;
    b_.Input("ids", kInt64, {spec_.batch, spec_.seq});
    b_.Output("logits", kFloat, {spec_.batch, spec_.seq, spec_.vocab});
    b_.Floats("wte.weight", {spec_.vocab, d}, Zeros(spec_.vocab * d));
    b_.Node("Gather", {"wte.weight", "ids"}, {"x0"}, "/wte/Gather");
    std::string x = "x0";
    for (int l = 0; l < spec_.layers; ++l) x = Layer(l, x);
    b_.Floats("ln_f.scale", {d}, Zeros(d));
    b_.Node("Mul", {x, "ln_f.scale"}, {"xf"}, "/ln_f/Mul");
    b_.Floats("lm_head.weight", {d, spec_.vocab}, Zeros(d * spec_.vocab));
    b_.Node("MatMul", {"xf", "lm_head.weight"}, {"logits"}, "/lm_head/MatMul");
    if (spec_.with_loss) {
      OnnxBuilder::AttrInt(b_.Node("ReduceMean", {"logits"}, {"loss"}, "/loss/ReduceMean"),
                           "keepdims", 0);
      b_.Output("loss", kFloat, {});
    }
  }

  std::string Layer(int l, const std::string& x) {
    const std::string p = absl::StrCat(spec_.container, ".", l);
    const std::string s = absl::StrCat("/", p);
    const int64_t d = spec_.d;
    b_.Floats(p + ".attn.w", {d, d}, Zeros(d * d));
    b_.Floats(p + ".fc.w", {d, 4 * d}, Zeros(4 * d * d));
    b_.Floats(p + ".proj.w", {4 * d, d}, Zeros(4 * d * d));
    b_.Node("MatMul", {x, p + ".attn.w"}, {p + ".a"}, s + "/attn/MatMul");
    b_.Node("Add", {x, p + ".a"}, {p + ".r"}, s + "/Add");
    b_.Node("MatMul", {p + ".r", p + ".fc.w"}, {p + ".m"}, s + "/mlp/fc/MatMul");
    b_.Node("Relu", {p + ".m"}, {p + ".g"}, s + "/mlp/act/Relu");
    b_.Node("MatMul", {p + ".g", p + ".proj.w"}, {p + ".o"}, s + "/mlp/proj/MatMul");
    b_.Node("Add", {p + ".r", p + ".o"}, {p + ".y"}, s + "/Add_1");
    return p + ".y";
  }

  GptSpec spec_;
  OnnxBuilder b_;
};

// fc1 -> Relu -> fc2: no repeated layers.
inline std::string MlpBytes(int64_t batch = 4) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {batch, 8});
  b.Output("y", kFloat, {batch, 4});
  b.Floats("fc1.w", {8, 16}, Zeros(8 * 16));
  b.Floats("fc2.w", {16, 4}, Zeros(16 * 4));
  b.Node("MatMul", {"x", "fc1.w"}, {"h"}, "/fc1/MatMul");
  b.Node("Relu", {"h"}, {"hr"}, "/act/Relu");
  b.Node("MatMul", {"hr", "fc2.w"}, {"y"}, "/fc2/MatMul");
  return b.Bytes();
}

// MlpBytes plus a target t and loss = ReduceMean((y - t)^2): outputs y and
// loss. `middle` is the op between the layers (Relu; "Exp" has no backward
// rule).
inline std::string MlpWithLossBytes(int64_t batch = 4, const std::string& middle = "Relu") {
  OnnxBuilder b(14);
  b.Input("x", kFloat, {batch, 8});
  b.Input("t", kFloat, {batch, 4});
  b.Output("y", kFloat, {batch, 4});
  b.Output("loss", kFloat, {});
  b.Floats("fc1.w", {8, 16}, Zeros(8 * 16));
  b.Floats("fc2.w", {16, 4}, Zeros(16 * 4));
  b.Node("MatMul", {"x", "fc1.w"}, {"h"}, "/fc1/MatMul");
  b.Node(middle, {"h"}, {"hr"}, "/act/" + middle);
  b.Node("MatMul", {"hr", "fc2.w"}, {"y"}, "/fc2/MatMul");
  b.Node("Sub", {"y", "t"}, {"d"}, "/loss/Sub");
  b.Node("Mul", {"d", "d"}, {"sq"}, "/loss/Mul");
  OnnxBuilder::AttrInt(b.Node("ReduceMean", {"sq"}, {"loss"}, "/loss/ReduceMean"), "keepdims", 0);
  return b.Bytes();
}

// x[dims] -> Relu -> Relu: activations only, any size without allocating.
inline std::string HugeActivationBytes(const std::vector<int64_t>& dims) {
  OnnxBuilder b(14);
  b.Input("x", kFloat, dims);
  b.Output("z", kFloat, dims);
  b.Node("Relu", {"x"}, {"y"}, "/blocks.0/Relu");
  b.Node("Relu", {"y"}, {"z"}, "/blocks.1/Relu");
  return b.Bytes();
}

// A shape-free graph whose nodes form a chain through `module_paths`.
inline graph::Graph ChainGraph(const std::vector<std::string>& module_paths) {
  graph::Graph g;
  std::string prev = "in";
  g.inputs.push_back({"in", {tensor::DType::kFloat32, {1}}});
  for (size_t i = 0; i < module_paths.size(); ++i) {
    graph::Node n;
    n.name = absl::StrCat("n", i);
    n.op_type = "Relu";
    n.module_path = module_paths[i];
    n.inputs = {prev};
    prev = absl::StrCat("v", i);
    n.outputs = {prev};
    g.nodes.push_back(n);
  }
  g.outputs.push_back({prev, {tensor::DType::kFloat32, {1}}});
  return g;
}

}  // namespace ipupod::compiler::testing

#endif  // IPUPOD_TESTS_COMPILER_TEST_MODELS_H_
