#include "server/proto_convert_execution.h"

#include <string>

namespace ipupod::server {

void ToProto(const compiler::Executable& exe, int64_t size_bytes, bool cache_hit,
             v1::ExecutableRef* out) {
  out->set_sha256(exe.content_hash);
  out->set_size_bytes(static_cast<uint64_t>(size_bytes));
  out->set_cache_hit(cache_hit);
  out->set_mode(std::string(compiler::ExecutableModeName(exe.mode)));
  out->set_ipus_needed(static_cast<uint32_t>(exe.ipus.needed));
  out->set_ipus_reserved(static_cast<uint32_t>(exe.ipus.reserved));
}

void ToProto(const compiler::TensorSpec& spec, v1::TensorSpec* out) {
  out->set_name(spec.name);
  out->set_dtype(std::string(tensor::DTypeName(spec.dtype)));
  for (int64_t d : spec.shape) out->add_shape(d);
}

void ToProto(const runtime::Program& program, v1::RunShape* out) {
  const compiler::Executable& exe = program.executable();
  out->set_micro_batch_size(static_cast<uint64_t>(exe.micro_batch_size));
  out->set_device_iterations(static_cast<uint64_t>(exe.device_iterations));
  out->set_replication_factor(static_cast<uint64_t>(exe.replication_factor));
  out->set_samples_per_step(static_cast<uint64_t>(program.samples_per_step()));
  out->set_output_mode(compiler::OutputModeName(exe.output_mode));
  out->set_pipeline_stages(static_cast<uint32_t>(exe.placement.num_stages()));
}

void ToProto(const runtime::OptimizerState& state, v1::OptimizerInfo* out) {
  out->set_name(state.optimizer);
  for (const auto& [name, value] : state.variables) (*out->mutable_variables())[name] = value;
  for (const auto& [name, value] : state.constants) (*out->mutable_constants())[name] = value;
  out->set_step(static_cast<uint64_t>(state.step));
}

void ToProto(const runtime::Program& program, v1::TrainingInfo* out) {
  const compiler::TrainingSpec& spec = program.executable().training;
  out->set_loss(spec.loss);
  out->set_gradient_accumulation_steps(static_cast<uint64_t>(spec.gradient_accumulation_steps));
  for (const std::string& name : spec.weights) out->add_trainable(name);
  for (const auto& [buffer, update] : spec.buffers) (*out->mutable_buffers())[buffer] = update;
  absl::StatusOr<runtime::OptimizerState> optimizer = program.GetOptimizer();
  if (optimizer.ok()) ToProto(*optimizer, out->mutable_optimizer());
}

void ToProto(const scheduler::SessionView& session, const execution::LoadedState& state,
             const scheduler::PodView& pod, v1::LoadedProgram* out) {
  const runtime::Program& program = *state.program;
  if (program.is_training()) ToProto(program, out->mutable_training());
  out->set_session(session.id);
  ToProto(program.executable(), state.executable_size_bytes, false, out->mutable_executable());
  ToProto(program, out->mutable_run_shape());
  for (const auto& spec : program.host_inputs()) ToProto(spec, out->add_inputs());
  for (const auto& spec : program.host_outputs()) ToProto(spec, out->add_outputs());
  for (const auto& spec : program.weight_specs()) ToProto(spec, out->add_weights());
  for (int ipu : session.ipus) {
    v1::IpuMemory* memory = out->add_memory();
    memory->set_ipu(static_cast<uint32_t>(ipu));
    memory->set_used_bytes(pod.ipus[ipu].memory_used_bytes);
    memory->set_total_bytes(pod.ipus[ipu].memory_total_bytes);
  }
  out->set_simulated_load_seconds(state.simulated_load_seconds);
  out->set_runs(state.runs);
}

void ToProto(const runtime::StepResult& step, uint64_t run_index, v1::RunStats* out) {
  out->set_samples(static_cast<uint64_t>(step.samples));
  out->set_wall_seconds(step.wall_s);
  out->set_simulated_seconds(step.simulated.total_s());
  out->set_simulated_compute_seconds(step.simulated.compute_s);
  out->set_simulated_pipeline_ramp_seconds(step.simulated.pipeline_ramp_s);
  out->set_simulated_ipu_link_seconds(step.simulated.ipu_link_s);
  out->set_simulated_host_seconds(step.simulated.host_s);
  out->set_flops(static_cast<uint64_t>(step.flops));
  out->set_run_index(run_index);
  for (float loss : step.losses) out->add_losses(loss);
  for (float scale : step.loss_scales) out->add_loss_scales(scale);
  out->set_skipped_updates(static_cast<uint64_t>(step.skipped_updates));
  out->set_step(static_cast<uint64_t>(step.step));
  for (const std::string& line : step.log) out->add_log(line);
}

}  // namespace ipupod::server
