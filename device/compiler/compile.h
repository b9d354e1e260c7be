// File: device/compiler/compile.h
//
// Compile: ONNX model bytes (what torch.onnx.export writes) + IpuConfig ->
// Executable. The steps, each in its own unit:
//   1. resolve the config for the mode (ipu_config.h: ResolveMode);
//   2. read and strip PopART placement attributes (onnx_annotations.h);
//   3. import: static shapes, folding, FLOPs per node (device/graph/);
//   4. place every node on a stage and IPU (placement.h): the module map
//      if one is given, else the model's __ipu_number/__pipeline_stage
//      attributes if it has any, else layers_per_ipu - or the method
//      CompileOptions names;
//   5. run-shape rules (checks.h): power-of-two IPUs or auto-round, pod
//      size, pipeline depth vs device iterations, output mode;
//   6. memory and time per IPU, and the out-of-memory check (memory_plan.h);
//   7. the executable (executable.h), with the report as JSON.
// Training (for_inference false) resolves the training keys of the config,
// imports with weights kept unfolded, adds the TrainingSpec
// (device/compiler/training_spec.h) and plans gradients and optimizer state too.
//
// Executable caching (PopTorch's enableExecutableCaching, optimum's
// executable_cache_dir): CompileCached looks for
// <executable_cache_dir>/<ExecutableCacheKey>.ipx and compiles and stores
// it on a miss. The key is the SHA-256 of the model bytes, every option
// that changes the result (the config minus executable_cache_dir, the
// compile options), the executable format and the ipupod version. Nothing
// is ever evicted (as in PopTorch).
//
// Thread safety: pure functions (CompileCached also reads and writes files;
// concurrent writers of one key are safe - each renames a complete file).
// Errors: INVALID_ARGUMENT from every step (named in each header), with
// what to change; RESOURCE_EXHAUSTED if the
// host runs out of memory while importing; CANCELLED when
// CompileOptions::cancelled said so.
#ifndef IPUPOD_COMPILER_COMPILE_H_
#define IPUPOD_COMPILER_COMPILE_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "device/compiler/checks.h"
#include "device/compiler/executable.h"
#include "device/compiler/ipu_config.h"
#include "device/compiler/placement.h"
#include "device/compiler/report.h"
#include "device/compiler/training_spec.h"
#include "device/graph/custom_ops.h"

namespace ipupod::compiler {

struct CompileOptions {
  bool for_inference = true;
  TrainingOptions training;  // for_inference false only
  std::optional<ModuleMap> module_map;
  std::optional<PlacementMethod> placement;  // nullopt: chosen as described above
  // PopTorch's default is pipelined. For inference, the config's
  // sharded_execution_for_inference (optimum-graphcore's key) selects sharded.
  ExecutionStrategy strategy = ExecutionStrategy::kPipelined;
  // Polled while constant folding runs (device/graph/shape_inference.h); true stops
  // the compile with CANCELLED (a server's compile whose client went away or
  // whose time limit passed). Not part of the cache key. Empty: never.
  std::function<bool()> cancelled;
  // Resolves the model's custom ops (device/graph/custom_ops.h; ipupodd's, device/customop/): their
  // shape functions run during the compile. Null: a model with custom ops is refused (a
  // compile on the user's machine). Not part of the cache key. Must outlive the call.
  const graph::CustomOpResolver* custom_ops = nullptr;
};

// `report` (optional) is filled whenever planning ran - also when the
// compile then fails because an IPU is out of memory, so a caller can show
// the table with the error.
absl::StatusOr<Executable> Compile(absl::string_view onnx_bytes, const IpuConfig& config,
                                   const CompileOptions& options, Report* report = nullptr);

// Hex SHA-256 naming the executable these inputs compile to.
std::string ExecutableCacheKey(absl::string_view onnx_bytes, const IpuConfig& config,
                               const CompileOptions& options);

struct CachedCompile {
  Executable executable;
  bool cache_hit = false;
  std::string path;  // the cache file; empty when caching is off
};

// Compile through config.executable_cache_dir ("" or "disabled": no cache).
// A cache file that fails to read is recompiled and replaced; a failure to
// write the cache only adds a warning to the executable. On a hit `report`
// is rebuilt from the stored JSON.
absl::StatusOr<CachedCompile> CompileCached(absl::string_view onnx_bytes, const IpuConfig& config,
                                            const CompileOptions& options,
                                            Report* report = nullptr);

}  // namespace ipupod::compiler

#endif  // IPUPOD_COMPILER_COMPILE_H_
