// File: device/compiler/temporaries.h
//
// The temporary memory of the ops Poplar plans with an "available memory
// proportion" - matrix products (MatMul, Gemm), convolutions (Conv) and
// embedding lookups (Gather on a rank-2 weight) - and how that proportion
// (IPUConfig matmul_proportion, per IPU when it is a list) and
// embedding_serialization_factor change it. A model of Poplar's planner,
// not a measurement (docs/differences.md):
//  * natural temporary, one micro-batch: MatMul/Gemm - both operands
//    rearranged for the product plus its partials (bytes of A + B +
//    output); Conv - the expanded input windows (batch x output positions
//    x input channels x kernel size) plus weights and output; Gather on a
//    [rows, width] weight - the table rearranged for the lookup plus the
//    output;
//  * cap: proportion x the IPU's memory, but never less than one tile's
//    memory (a proportion of 0 still leaves the op somewhere to work);
//  * an op whose natural temporary exceeds its cap runs in
//    ceil(natural / cap) serial passes, each needing natural / passes;
//    each pass after the first costs kSerialPassSeconds (a compute set's
//    exchange and sync) on top of the op's FLOPs;
//  * the serialized embedding (FindSerializedEmbedding) always runs in at
//    least `factor` passes, one per slice of its padded vocabulary, and a
//    product tied to its table (GPT-2's LM head) is serialized over its
//    output channels by the same factor (optimum's SerializedLinear);
//  * a node's own available_memory_proportion (device/graph/ops.h;
//    poptorch.set_available_memory) replaces the config's proportion;
//  * a MatMul serialized by poptorch.serializedMatMul (serialization_mode
//    input_channels | reducing_dim | output_channels, serialization_factor
//    f) runs in f passes, each holding 1/f of the split operand and of the
//    output (input_channels: A's rows; output_channels: B's columns) or of
//    both operands with the whole output as partials (reducing_dim).
// The IPU holds the largest of its ops' temporaries (ops run one at a time).
//
// Thread safety: pure functions.
// Errors: FindSerializedEmbedding - INVALID_ARGUMENT when the factor is
// larger than the vocabulary (a slice would have no rows).
// CheckPlanningAttributes - INVALID_ARGUMENT naming the node for a
// proportion outside [0, 1], an unknown serialization mode, or a factor
// that does not divide the dimension it splits.
#ifndef IPUPOD_COMPILER_TEMPORARIES_H_
#define IPUPOD_COMPILER_TEMPORARIES_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "device/graph/graph.h"

namespace ipupod::compiler {

// One serial pass's fixed cost beyond the first (modelling constant).
inline constexpr double kSerialPassSeconds = 5e-6;

// optimum-graphcore's SerializedEmbedding of the word embedding: the
// vocabulary padded to a multiple of the factor, looked up slice by slice.
struct SerializedEmbedding {
  std::string table;  // the [vocab, hidden] initializer
  int64_t vocab = 0;
  int64_t padded_vocab = 0;
  int64_t factor = 1;
  int64_t row_bytes = 0;
  // Products that read the table (directly or transposed): a tied LM head,
  // which optimum serializes over its output channels by the same factor.
  std::set<std::string> tied_products;

  int64_t PaddingBytes() const { return (padded_vocab - vocab) * row_bytes; }
};

// The embedding lookup embedding_serialization_factor applies to: of the
// Gathers on a rank-2 initializer along axis 0 whose indices come from a
// graph input (through casts and reshapes), the one with the most rows.
// nullopt for factor 1 or a model with no such lookup.
// Bytes of `value` in `g`: an initializer's, else those of its static type
// (0 when unknown or not static). The memory plan's size of a value.
int64_t ValueBytes(const graph::Graph& g, const std::string& value);

absl::StatusOr<std::optional<SerializedEmbedding>> FindSerializedEmbedding(const graph::Graph& g,
                                                                           int64_t factor);

absl::Status CheckPlanningAttributes(const graph::Graph& g);

struct NodeTemporary {
  int64_t natural_bytes = 0;  // 0: the op has no modelled temporary
  int64_t bytes = 0;          // what one pass needs
  int64_t passes = 1;
};

// The temporary of `node` with `proportion` of the IPU's `memory_bytes`.
NodeTemporary PlanNodeTemporary(const graph::Graph& g, const graph::Node& node, double proportion,
                                int64_t memory_bytes,
                                const std::optional<SerializedEmbedding>& embedding);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_TEMPORARIES_H_
