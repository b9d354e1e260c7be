#include "server/batch/job_runner.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/driver/inference_driver.h"
#include "common/driver/training_driver.h"
#include "common/status_macros.h"
#include "device/compiler/executable.h"
#include "device/runtime/onnx_model.h"
#include "device/runtime/run_steps.h"

namespace ipupod::batch {
namespace {

namespace fs = std::filesystem;
using driver::WithContext;

absl::StatusOr<std::string> ReadBlob(const fs::path& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::DataLossError(absl::StrCat("the ", what, " blob ", path.filename().string(),
                                            " is missing from the server's blob store"));
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// What every attempt needs before it touches the IPUs.
struct Prepared {
  std::shared_ptr<const compiler::Executable> executable;
  driver::StepPlan plan;
  std::optional<tensor::NamedTensors> weights;
  bool weights_from_onnx = false;
};

absl::StatusOr<Prepared> Prepare(execution::SessionExecution& execution,
                                 const JobAttempt& attempt) {
  Prepared p;
  IPUPOD_ASSIGN_OR_RETURN(const std::string ipx, ReadBlob(attempt.executable, "executable"));
  IPUPOD_ASSIGN_OR_RETURN(const runtime::CachedExecutable cached,
                          execution.cache().Put(ipx, attempt.record.user));
  p.executable = cached.executable;
  const jobs::JobSpec& spec = attempt.record.spec;
  IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors inputs,
                          ReadTensorBlob(attempt.inputs, spec.inputs.format, "inputs"));
  IPUPOD_ASSIGN_OR_RETURN(p.plan, runtime::PlanSteps(*p.executable, std::move(inputs), "inputs"));
  if (!attempt.weights.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(p.weights,
                            ReadTensorBlob(attempt.weights, spec.weights.format, "weights"));
    p.weights_from_onnx = spec.weights.format == "onnx";
  }
  return p;
}

// Weights from an .onnx file are all its initializers; only those the
// loaded program takes are weights (the rest are constants), as `run` does.
absl::Status WriteInitialWeights(InProcessSessionExecutable& ex, const Prepared& p) {
  if (!p.weights) return absl::OkStatus();
  if (!p.weights_from_onnx) return WithContext(ex.WriteWeights(*p.weights), "weights");
  IPUPOD_ASSIGN_OR_RETURN(const std::vector<std::string> names, ex.WeightNames());
  tensor::NamedTensors kept;
  for (const auto& [name, tensor] : *p.weights) {
    for (const std::string& want : names) {
      if (want == name) kept.emplace_back(name, tensor);
    }
  }
  return WithContext(ex.WriteWeights(kept), "weights");
}

// This attempt's time, for the report (earlier attempts' are in the record).
struct AttemptTotals {
  absl::Time start = absl::Now();
  double simulated_seconds = 0;
};

nlohmann::json ReportJson(const JobAttempt& attempt, const AttemptTotals& totals,
                          const std::vector<float>& losses, int recoveries) {
  const jobs::JobRecord& r = attempt.record;
  const double wall = absl::ToDoubleSeconds(absl::Now() - totals.start);
  return {{"job", r.id},
          {"runs", r.runs_total},
          {"losses", losses},
          {"recoveries", r.recoveries + recoveries},
          {"requeues", r.requeues},
          {"ipus", attempt.session_ipus},
          {"wall_seconds", r.wall_seconds + wall},
          {"simulated_seconds", r.simulated_seconds + totals.simulated_seconds},
          {"ipu_seconds", r.ipu_seconds + wall * attempt.session_ipus}};
}

absl::Status AddResult(JobFiles& files, absl::string_view name, absl::string_view bytes,
                       std::vector<jobs::ResultFile>& out) {
  IPUPOD_ASSIGN_OR_RETURN(jobs::ResultFile file, files.WriteResult(name, bytes));
  out.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status SaveTrainingResults(InProcessSessionExecutable& ex, const Prepared& p, JobFiles& files,
                                 std::vector<jobs::ResultFile>& out) {
  IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors weights, ex.ReadWeights());
  IPUPOD_RETURN_IF_ERROR(AddResult(files, "weights.npz", tensor::SerializeNpz(weights), out));
  IPUPOD_ASSIGN_OR_RETURN(const std::string model,
                          runtime::ReplaceOnnxInitializers(p.executable->model_bytes, weights));
  IPUPOD_RETURN_IF_ERROR(AddResult(files, "model.onnx", model, out));
  IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors checkpoint, ex.ReadCheckpoint());
  return AddResult(files, "checkpoint.npz", tensor::SerializeNpz(checkpoint), out);
}

driver::TrainingCallbacks TrainingCallbacksOf(const JobAttempt& attempt, JobFiles& files,
                                              const JobRunCallbacks& callbacks,
                                              std::vector<float>& losses) {
  const int64_t base = attempt.record.runs_done;
  return {
      .on_run =
          [&callbacks, &losses, base](const driver::RunProgress& p) {
            losses.insert(losses.end(), p.stats->losses.begin(), p.stats->losses.end());
            if (callbacks.on_run) callbacks.on_run(base + p.run + 1, *p.stats, p.wall_seconds);
          },
      .on_host_copy = [&files, &callbacks, base](const driver::HostCopy& copy) -> absl::Status {
        if (copy.runs_done == 0) return absl::OkStatus();  // what it resumed from
        const int64_t runs = base + copy.runs_done;
        IPUPOD_ASSIGN_OR_RETURN(const std::string name,
                                files.WriteCheckpoint(runs, copy.checkpoint));
        return callbacks.on_checkpoint ? callbacks.on_checkpoint(runs, name) : absl::OkStatus();
      },
      .on_recovery =
          [&callbacks](const driver::Recovery& r) {
            if (callbacks.on_recovery) {
              callbacks.on_recovery(absl::StrCat("run ", r.run + 1, " failed: ", r.fault.message(),
                                                 "; going on from run ", r.resume_after_run));
            }
          },
      .stop_requested = callbacks.stop};
}

absl::StatusOr<JobAttemptResult> RunTraining(InProcessSessionExecutable& ex, const Prepared& p,
                                             const JobAttempt& attempt, JobFiles& files,
                                             const JobRunCallbacks& callbacks,
                                             const AttemptTotals& totals) {
  const jobs::JobRecord& record = attempt.record;
  int64_t first_data_step = 0;
  if (!record.checkpoint.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(const tensor::NamedTensors checkpoint,
                            files.ReadCheckpoint(record.checkpoint));
    IPUPOD_RETURN_IF_ERROR(WithContext(ex.WriteWeights(checkpoint), "resuming from checkpoint"));
    first_data_step =
        driver::ResumedDataStep(checkpoint, p.executable->device_iterations, p.plan.steps);
  }
  if (!record.spec.optimizer.empty()) {
    IPUPOD_RETURN_IF_ERROR(ex.SetOptimizer(record.spec.optimizer).status());
  }
  const int64_t every = record.spec.checkpoint_every > 0 ? record.spec.checkpoint_every : 1;
  std::vector<float> losses;
  driver::TrainingDriver trainer(ex, p.plan,
                                 {.runs = record.runs_total - record.runs_done,
                                  .first_data_step = first_data_step,
                                  .host_copy_every = every,
                                  .recover = true,
                                  .max_recoveries = attempt.max_recoveries},
                                 TrainingCallbacksOf(attempt, files, callbacks, losses));
  IPUPOD_RETURN_IF_ERROR(trainer.Run());
  JobAttemptResult result;
  result.recoveries = trainer.recoveries();
  IPUPOD_RETURN_IF_ERROR(SaveTrainingResults(ex, p, files, result.results));
  IPUPOD_RETURN_IF_ERROR(AddResult(files, "report.json",
                                   ReportJson(attempt, totals, losses, result.recoveries).dump(2),
                                   result.results));
  return result;
}

// Inference has no host copy to go back to: after a recoverable fault the
// attempt resets, loads again, writes the weights and goes on after the
// last step written.
absl::StatusOr<JobAttemptResult> RunInferenceSteps(InProcessSessionExecutable& ex,
                                                   const Prepared& p, const JobAttempt& attempt,
                                                   JobFiles& files,
                                                   const JobRunCallbacks& callbacks,
                                                   const AttemptTotals& totals) {
  JobAttemptResult result;
  driver::InferenceCallbacks steps{
      .on_step =
          [&callbacks](const driver::RunProgress& r) {
            if (callbacks.on_run) callbacks.on_run(r.run + 1, *r.stats, r.wall_seconds);
          },
      .stop_requested = callbacks.stop,
      .on_outputs =
          [&files, &callbacks](int64_t step, const tensor::NamedTensors& outputs) {
            IPUPOD_RETURN_IF_ERROR(files.WriteStepOutputs(step, outputs));
            if (callbacks.on_steps_written) callbacks.on_steps_written(step + 1);
            return absl::OkStatus();
          }};
  for (;;) {
    absl::Status ran = driver::RunInference(ex, p.plan, steps, files.CountSteps()).status();
    if (ran.ok()) break;
    if (!driver::IsRecoverableFault(ran) || result.recoveries >= attempt.max_recoveries) {
      return ran;
    }
    ++result.recoveries;
    if (callbacks.on_recovery) callbacks.on_recovery(std::string(ran.message()));
    IPUPOD_RETURN_IF_ERROR(ex.Reset(ran));
    IPUPOD_RETURN_IF_ERROR(ex.Load());
    IPUPOD_RETURN_IF_ERROR(WriteInitialWeights(ex, p));
  }
  IPUPOD_ASSIGN_OR_RETURN(jobs::ResultFile outputs,
                          files.AssembleOutputs(p.plan.steps, attempt.record.spec.outputs));
  result.results.push_back(std::move(outputs));
  IPUPOD_RETURN_IF_ERROR(AddResult(files, "report.json",
                                   ReportJson(attempt, totals, {}, result.recoveries).dump(2),
                                   result.results));
  return result;
}

}  // namespace

absl::StatusOr<tensor::NamedTensors> ReadTensorBlob(const fs::path& path, absl::string_view format,
                                                    absl::string_view what) {
  IPUPOD_ASSIGN_OR_RETURN(const std::string bytes, ReadBlob(path, what));
  absl::StatusOr<tensor::NamedTensors> tensors;
  if (format == "npz") {
    tensors = tensor::ParseNpz(bytes);
  } else if (format == "safetensors") {
    tensors = tensor::ParseSafetensors(bytes);
  } else if (format == "onnx") {
    tensors = tensor::ParseOnnxInitializers(bytes);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " format '", format,
                                                   "' is unknown: use npz, safetensors or onnx"));
  }
  if (!tensors.ok()) return WithContext(tensors.status(), what);
  return tensors;
}

absl::StatusOr<int64_t> RunsOf(const jobs::JobSpec& spec, const compiler::Executable& e,
                               int64_t data_steps) {
  if (!spec.train) return data_steps;
  return driver::TrainingRuns(spec.epochs, spec.steps, data_steps, e.device_iterations, "");
}

absl::StatusOr<JobAttemptResult> RunJob(execution::SessionExecution& execution,
                                        const JobAttempt& attempt, JobFiles& files,
                                        const JobRunCallbacks& callbacks) {
  IPUPOD_ASSIGN_OR_RETURN(const Prepared p, Prepare(execution, attempt));
  InProcessSessionExecutable ex(execution, scheduler::Caller{attempt.record.user, false},
                                attempt.session, p.executable->content_hash, callbacks.stop,
                                attempt.in_process);
  IPUPOD_RETURN_IF_ERROR(ex.Load());
  IPUPOD_RETURN_IF_ERROR(WriteInitialWeights(ex, p));
  AttemptTotals totals;
  JobRunCallbacks counted = callbacks;
  counted.on_run = [&callbacks, &totals](int64_t runs, const driver::StepStats& stats,
                                         double wall) {
    totals.simulated_seconds += stats.simulated_seconds;
    if (callbacks.on_run) callbacks.on_run(runs, stats, wall);
  };
  if (attempt.record.spec.train) return RunTraining(ex, p, attempt, files, counted, totals);
  return RunInferenceSteps(ex, p, attempt, files, counted, totals);
}

}  // namespace ipupod::batch
