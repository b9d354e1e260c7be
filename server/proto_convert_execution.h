// File: server/proto_convert_execution.h
//
// ExecutionService's conversions, beside server/proto_convert.h (which
// stays free of the compiler and runtime): executables, tensor specs, run
// shapes, loaded programs, optimizer state and run statistics ->
// ipupod.v1 messages. Pure functions of their arguments; no errors.
#ifndef IPUPOD_SERVER_PROTO_CONVERT_EXECUTION_H_
#define IPUPOD_SERVER_PROTO_CONVERT_EXECUTION_H_

#include <cstdint>

#include "device/compiler/executable.h"
#include "device/runtime/program.h"
#include "ipupod/v1/execution.pb.h"
#include "scheduler/scheduler.h"
#include "server/execution/loaded_programs.h"

namespace ipupod::server {

void ToProto(const compiler::Executable& exe, int64_t size_bytes, bool cache_hit,
             v1::ExecutableRef* out);
void ToProto(const compiler::TensorSpec& spec, v1::TensorSpec* out);
void ToProto(const runtime::Program& program, v1::RunShape* out);
void ToProto(const runtime::OptimizerState& state, v1::OptimizerInfo* out);
// A training program's loss, trainable weights, buffers and optimizer.
void ToProto(const runtime::Program& program, v1::TrainingInfo* out);
// What `session` has loaded; `pod` supplies its IPUs' memory figures.
// REQUIRES: state.program is not null.
void ToProto(const scheduler::SessionView& session, const execution::LoadedState& state,
             const scheduler::PodView& pod, v1::LoadedProgram* out);
// One step's statistics; `run_index` counts runs since the load.
void ToProto(const runtime::StepResult& step, uint64_t run_index, v1::RunStats* out);

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_PROTO_CONVERT_EXECUTION_H_
