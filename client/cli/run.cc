// `ipupod run`: run an .ipx executable on IPUs of the pod, step by step.
//
// Everything that can be checked locally is checked before the server is
// involved (files exist, the inputs fit the executable and split into whole
// steps), so a mistake never waits in the queue. Then: a session (the one
// in $IPUPOD_SESSION, as under `ipupod attach -- ipupod run ...`, or one
// attached here with the attach code path: --wait queue display, Ctrl-C),
// UploadExecutable (skipped when the server has it), Load, WriteWeights,
// the steps, the outputs concatenated along dim 0 into an .npz, ReadWeights
// for --save-weights, and the release of a session attached here. The steps
// are the drivers' (common/driver/inference_driver.h; --train:
// common/driver/training_driver.h, with host copies, checkpoints and --recover)
// over client::RemoteSessionExecutable; this file wires the arguments to
// them and prints what their callbacks report.
//
// Signals: a SignalWatcher is made before the channel (see attach.cc). On
// an own session an interrupt cancels the attach stream, which ends the
// session on the server and with it a running step; between steps the loop
// checks for an interrupt either way. Exit code 130, no outputs written.
#include <memory>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/attach.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/cli/signal_watcher.h"
#include "client/files.h"
#include "client/session_executable.h"
#include "common/driver/inference_driver.h"
#include "common/driver/training_driver.h"
#include "common/errors.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/tensor/tensor_files.h"
#include "device/compiler/executable.h"
#include "device/compiler/report.h"
#include "device/runtime/onnx_model.h"
#include "device/runtime/run_steps.h"
#include <unistd.h>

namespace ipupod::cli {
namespace {

using driver::StepPlan;

struct TrainArgs {
  bool train = false;
  int64_t epochs = 0;
  int64_t steps = 0;  // weight updates
  std::optional<double> lr;
  std::string save_model;
  std::string checkpoint;
  std::string resume;
  int64_t checkpoint_every = 0;  // runs; 0: only at the end
  bool recover = false;
};

struct RunArgs {
  std::string executable;
  std::string inputs;
  std::string outputs;
  std::string weights;
  std::string save_weights;
  AttachArgs attach;
  TrainArgs training;
};

// What the command reads from disk before it contacts the server.
struct RunFiles {
  std::string ipx_bytes;
  compiler::Executable executable;
  StepPlan plan;
  std::optional<tensor::NamedTensors> weights;
  bool weights_from_onnx = false;
  std::optional<tensor::NamedTensors> resume;  // --resume checkpoint
  int64_t runs = 0;                            // Run calls (training: from --epochs/--steps)
  int64_t first_data_step = 0;                 // --resume: where its data position was
};

using driver::WithContext;

// The executable's mode must match --train; the run count comes from
// --epochs (passes over the inputs file) or --steps (weight updates).
absl::Status ReadTrainingFiles(const RunArgs& args, RunFiles& files) {
  const compiler::Executable& e = files.executable;
  const TrainArgs& t = args.training;
  IPUPOD_ASSIGN_OR_RETURN(files.runs, driver::TrainingRuns(t.epochs, t.steps, files.plan.steps,
                                                           e.device_iterations, "--"));
  if (!t.resume.empty()) {
    absl::StatusOr<tensor::NamedTensors> resume = tensor::ReadTensorFile(t.resume);
    if (!resume.ok()) return WithContext(resume.status(), absl::StrCat("--resume ", t.resume));
    files.resume = *std::move(resume);
    files.first_data_step =
        driver::ResumedDataStep(*files.resume, e.device_iterations, files.plan.steps);
  }
  return absl::OkStatus();
}

absl::Status CheckMode(const RunArgs& args, const compiler::Executable& e) {
  const bool training = e.mode == compiler::ExecutableMode::kTraining;
  if (args.training.train && !training) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.executable,
                     " was compiled for inference; compile it with `ipupod compile --train` "
                     "to train"));
  }
  if (!args.training.train && training) {
    return absl::InvalidArgumentError(absl::StrCat(
        args.executable, " is a training executable; pass --train with --epochs or --steps"));
  }
  return absl::OkStatus();
}

absl::StatusOr<RunFiles> ReadRunFiles(const RunArgs& args) {
  RunFiles files;
  IPUPOD_ASSIGN_OR_RETURN(files.ipx_bytes, client::ReadWholeFile(args.executable, "executable"));
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutable(files.ipx_bytes);
  if (!e.ok()) return WithContext(e.status(), args.executable);
  files.executable = *std::move(e);
  IPUPOD_RETURN_IF_ERROR(CheckMode(args, files.executable));
  absl::StatusOr<tensor::NamedTensors> inputs = tensor::ReadTensorFile(args.inputs);
  if (!inputs.ok()) return WithContext(inputs.status(), absl::StrCat("--inputs ", args.inputs));
  IPUPOD_ASSIGN_OR_RETURN(files.plan,
                          runtime::PlanSteps(files.executable, *std::move(inputs), args.inputs));
  if (!args.weights.empty()) {
    absl::StatusOr<tensor::TensorFileFormat> format = tensor::TensorFileFormatOf(args.weights);
    if (!format.ok()) return WithContext(format.status(), "--weights");
    absl::StatusOr<tensor::NamedTensors> weights = tensor::ReadTensorFile(args.weights);
    if (!weights.ok())
      return WithContext(weights.status(), absl::StrCat("--weights ", args.weights));
    files.weights = *std::move(weights);
    files.weights_from_onnx = *format == tensor::TensorFileFormat::kOnnx;
  }
  files.runs = files.plan.steps;
  if (args.training.train) IPUPOD_RETURN_IF_ERROR(ReadTrainingFiles(args, files));
  return files;
}

// Output file names are checked up front so a long run cannot end in a
// refused write.
absl::Status CheckOutputNames(const RunArgs& args) {
  const TrainArgs& t = args.training;
  if (!t.train &&
      (t.epochs > 0 || t.steps > 0 || t.lr || !t.save_model.empty() || !t.checkpoint.empty() ||
       !t.resume.empty() || t.checkpoint_every > 0 || t.recover)) {
    return absl::InvalidArgumentError(
        "--epochs, --steps, --lr, --save-model, --checkpoint, --checkpoint-every, --resume and "
        "--recover are for training: add --train");
  }
  if (t.train && (t.epochs > 0) == (t.steps > 0)) {
    return absl::InvalidArgumentError(
        "--train needs how long to train: --epochs E (passes over --inputs) or --steps K "
        "(weight updates)");
  }
  if (!t.train && args.outputs.empty()) {
    return absl::InvalidArgumentError("--outputs FILE.npz is required (where to write results)");
  }
  if (!t.save_model.empty() && !absl::EndsWith(t.save_model, ".onnx")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--save-model '", t.save_model, "' must end in .onnx"));
  }
  for (const std::string* path : {&args.outputs, &args.save_weights, &t.checkpoint}) {
    if (path->empty()) continue;
    absl::StatusOr<tensor::TensorFileFormat> format = tensor::TensorFileFormatOf(*path);
    if (!format.ok()) return format.status();
    if (*format == tensor::TensorFileFormat::kOnnx) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot write tensors to '", *path, "': use .npz or .safetensors"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- progress

struct Totals {
  int64_t samples = 0;
  double wall_s = 0;
  double simulated_s = 0;
  double compute_s = 0;
  double ramp_s = 0;
  double link_s = 0;
  double host_s = 0;
  uint64_t flops = 0;
};

Json SimulatedJson(double total, double compute, double ramp, double link, double host) {
  return {{"simulated_seconds", total},
          {"simulated_compute_seconds", compute},
          {"simulated_pipeline_ramp_seconds", ramp},
          {"simulated_ipu_link_seconds", link},
          {"simulated_host_seconds", host}};
}

class Progress {
 public:
  Progress(Context& ctx, int64_t steps)
      : ctx_(ctx), steps_(steps), bar_(!ctx.json() && isatty(STDERR_FILENO) == 1) {}

  void Step(int64_t step, const driver::StepStats& stats, double wall_s) {
    Add(stats, wall_s);
    if (ctx_.json()) {
      Json line = {{"step", step + 1},
                   {"steps", steps_},
                   {"samples", stats.samples},
                   {"wall_seconds", wall_s},
                   {"server_wall_seconds", stats.wall_seconds}};
      line.update(SimulatedJson(stats.simulated_seconds, stats.simulated_compute_seconds,
                                stats.simulated_pipeline_ramp_seconds,
                                stats.simulated_ipu_link_seconds, stats.simulated_host_seconds));
      line["flops"] = stats.flops;
      if (!stats.losses.empty()) {
        line["losses"] = stats.losses;
        line["weight_updates"] = stats.weight_updates;
        line["loss_scales"] = stats.loss_scales;
        line["skipped_updates"] = stats.skipped_updates;
      }
      if (!stats.log.empty()) line["log"] = stats.log;
      ctx_.out() << JsonLine(line);
      ctx_.out().flush();
      return;
    }
    // The model's ipu_print_tensor lines, each on its own line of stderr.
    for (const std::string& text : stats.log) {
      ctx_.err() << (bar_ ? "\r" : "") << "print: " << text << "\n";
    }
    if (bar_) ctx_.err() << "\r" << BarText(step + 1) << std::flush;
  }
  // Ends the bar's line (before any other output on stderr).
  void Finish() {
    if (bar_ && !finished_) ctx_.err() << "\n" << std::flush;
    finished_ = true;
  }
  const Totals& totals() const { return totals_; }
  std::optional<float> first_loss() const { return first_loss_; }
  std::optional<float> last_loss() const { return last_loss_; }

 private:
  void Add(const driver::StepStats& stats, double wall_s) {
    totals_.samples += stats.samples;
    totals_.wall_s += wall_s;
    totals_.simulated_s += stats.simulated_seconds;
    totals_.compute_s += stats.simulated_compute_seconds;
    totals_.ramp_s += stats.simulated_pipeline_ramp_seconds;
    totals_.link_s += stats.simulated_ipu_link_seconds;
    totals_.host_s += stats.simulated_host_seconds;
    totals_.flops += stats.flops;
    if (!stats.losses.empty()) {
      last_loss_ = stats.losses.back();
      if (!first_loss_) first_loss_ = stats.losses.front();
    }
  }
  std::string BarText(int64_t done) const {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(steps_, 1));
    const std::string loss = last_loss_ ? absl::StrFormat("loss %.4g  ", *last_loss_) : "";
    return absl::StrFormat("[%s%s] step %d/%d  %s%.0f samples/s  simulated %s  wall %s  ",
                           std::string(filled, '#'), std::string(kWidth - filled, '.'), done,
                           steps_, loss,
                           totals_.wall_s > 0 ? totals_.samples / totals_.wall_s : 0.0,
                           FormatSiDuration(totals_.simulated_s), FormatSiDuration(totals_.wall_s));
  }

  Context& ctx_;
  const int64_t steps_;
  const bool bar_;
  bool finished_ = false;
  Totals totals_;
  std::optional<float> first_loss_;
  std::optional<float> last_loss_;
};

// ---------------------------------------------------------------- the run

struct RunSession {
  std::string id;
  std::string ipus;  // "0-3", for messages
};

std::string TensorsText(const tensor::NamedTensors& tensors) {
  std::vector<std::string> parts;
  for (const auto& [name, t] : tensors) {
    parts.push_back(absl::StrCat(name, " ", tensor::DTypeName(t.dtype()), "[",
                                 absl::StrJoin(t.shape(), ","), "]"));
  }
  return absl::StrJoin(parts, ", ");
}

Json SummaryJson(const RunArgs& args, const RunSession& s, const StepPlan& plan, const Totals& t,
                 const tensor::NamedTensors& outputs) {
  Json out_list = Json::array();
  for (const auto& [name, tensor] : outputs) {
    out_list.push_back({{"name", name},
                        {"dtype", std::string(tensor::DTypeName(tensor.dtype()))},
                        {"shape", tensor.shape()}});
  }
  Json summary = {
      {"session", s.id},          {"steps", plan.steps},
      {"samples", t.samples},     {"samples_per_step", plan.samples_per_step},
      {"wall_seconds", t.wall_s}, {"samples_per_second", t.wall_s > 0 ? t.samples / t.wall_s : 0.0},
      {"flops", t.flops},         {"outputs_file", args.outputs},
      {"outputs", out_list}};
  summary.update(SimulatedJson(t.simulated_s, t.compute_s, t.ramp_s, t.link_s, t.host_s));
  if (!args.save_weights.empty()) summary["saved_weights"] = args.save_weights;
  return {{"summary", summary}};
}

std::string SummaryText(const RunArgs& args, const RunSession& s, const StepPlan& plan,
                        const Totals& t, const tensor::NamedTensors& outputs) {
  std::string text = absl::StrFormat(
      "ran %d steps x %d samples = %d samples on session %s (IPUs %s)\n"
      "wall %s (%.0f samples/s); simulated device time %s: compute %s, pipeline ramp %s, "
      "IPU-Link %s, host %s\n",
      plan.steps, plan.samples_per_step, t.samples, s.id, s.ipus, FormatSiDuration(t.wall_s),
      t.wall_s > 0 ? t.samples / t.wall_s : 0.0, FormatSiDuration(t.simulated_s),
      FormatSiDuration(t.compute_s), FormatSiDuration(t.ramp_s), FormatSiDuration(t.link_s),
      FormatSiDuration(t.host_s));
  absl::StrAppend(&text, "wrote ", args.outputs, ": ", TensorsText(outputs), "\n");
  if (!args.save_weights.empty())
    absl::StrAppend(&text, "saved weights to ", args.save_weights, "\n");
  return text;
}

// Weights from an .onnx file are all its initializers; only those the
// loaded program can take are weights (the rest are constants).
tensor::NamedTensors WeightsToWrite(const RunFiles& files, const v1::LoadedProgram& loaded) {
  if (!files.weights_from_onnx) return *files.weights;
  tensor::NamedTensors kept;
  for (const auto& [name, tensor] : *files.weights) {
    for (const v1::TensorSpec& spec : loaded.weights()) {
      if (spec.name() == name) kept.emplace_back(name, tensor);
    }
  }
  return kept;
}

// Uploads (unless cached), loads and writes --weights; returns the
// executable's hash.
absl::StatusOr<std::string> Prepare(Context& ctx, client::Client& client, const RunSession& s,
                                    const RunFiles& files) {
  IPUPOD_ASSIGN_OR_RETURN(v1::ExecutableRef ref, client.UploadExecutable(files.ipx_bytes));
  ctx.Note({{"executable", {{"sha256", ref.sha256()}, {"cache_hit", ref.cache_hit()}}}},
           absl::StrCat(ref.cache_hit() ? "executable already on the server: " : "uploaded ",
                        ref.sha256().substr(0, 16), "\n"));
  IPUPOD_ASSIGN_OR_RETURN(v1::LoadedProgram loaded, client.Load(s.id, ref.sha256()));
  if (!files.weights) return ref.sha256();
  IPUPOD_ASSIGN_OR_RETURN(v1::WriteWeightsResponse written,
                          client.WriteWeights(s.id, WeightsToWrite(files, loaded)));
  ctx.Note({{"weights_written", written.written_size()}},
           absl::StrCat("wrote ", written.written_size(), " weights\n"));
  return ref.sha256();
}

// ---------------------------------------------------------------- training

absl::Status SetUpTraining(Context& ctx, driver::SessionExecutable& executable, const RunArgs& args,
                           const RunFiles& files) {
  if (files.resume) {
    IPUPOD_RETURN_IF_ERROR(WithContext(executable.WriteWeights(*files.resume),
                                       absl::StrCat("--resume ", args.training.resume)));
    ctx.Note({{"resumed", args.training.resume}},
             absl::StrCat("resumed from ", args.training.resume, "\n"));
  }
  if (args.training.lr) {
    IPUPOD_ASSIGN_OR_RETURN(std::string optimizer,
                            executable.SetOptimizer({{"lr", *args.training.lr}}));
    ctx.Note({{"optimizer", {{"name", optimizer}, {"lr", *args.training.lr}}}},
             absl::StrCat(optimizer, " lr set to ", *args.training.lr, "\n"));
  }
  return absl::OkStatus();
}

// Host copies are taken every --checkpoint-every runs; --recover alone
// takes one after every run.
driver::TrainingJob TrainingJobOf(const RunArgs& args, const RunFiles& files) {
  const TrainArgs& t = args.training;
  return {.runs = files.runs,
          .first_data_step = files.first_data_step,
          .host_copy_every = t.checkpoint_every > 0 ? t.checkpoint_every : (t.recover ? 1 : 0),
          .recover = t.recover,
          .keep_outputs = !args.outputs.empty()};
}

void NoteRecovery(Context& ctx, const driver::Recovery& r) {
  const bool full = r.action == RecoveryAction::kFullReset;
  ctx.Note({{"recovering",
             {{"run", r.run + 1},
              {"error", r.fault.message()},
              {"recovery_action", std::string(RecoveryActionName(r.action))},
              {"resume_after_run", r.resume_after_run}}}},
           absl::StrCat("\nrun ", r.run + 1, " failed: ", r.fault.message(), "\n",
                        full ? "waiting for an admin to run `ipupod pod reset`"
                             : "resetting the session's IPUs",
                        " and going on from the host copy after run ", r.resume_after_run, "\n"));
}

driver::TrainingCallbacks TrainingCallbacksOf(Context& ctx, const RunArgs& args, Progress& progress,
                                              SignalWatcher& signals) {
  return {.on_run =
              [&progress](const driver::RunProgress& p) {
                progress.Step(p.run, *p.stats, p.wall_seconds);
              },
          .on_host_copy = [&args](const driver::HostCopy& copy) -> absl::Status {
            const std::string& path = args.training.checkpoint;
            if (path.empty()) return absl::OkStatus();
            return WithContext(tensor::WriteTensorFile(path, copy.checkpoint),
                               absl::StrCat("writing ", path));
          },
          .on_recovery = [&ctx](const driver::Recovery& r) { NoteRecovery(ctx, r); },
          .stop_requested = [&signals] { return signals.Interrupted(); }};
}

// A CANCELLED run: the user's Ctrl-C says "interrupted"; otherwise the server
// cancelled the call, as gRPC does with calls that arrive while it shuts
// down, and the user should retry rather than think they interrupted it.
absl::Status Cancelled(const absl::Status& error, const SignalWatcher& signals) {
  if (signals.Interrupted()) return absl::CancelledError("interrupted; no outputs were written");
  return absl::UnavailableError(
      absl::StrCat("ipupodd cancelled the call (", error.message(),
                   "); it may be shutting down: no outputs were written; retry when the server "
                   "is back"));
}

// Names the --checkpoint file that holds the last host copy, if any.
absl::Status Failed(absl::Status error, const RunArgs& args, const driver::TrainingDriver& trainer,
                    const SignalWatcher& signals) {
  if (absl::IsCancelled(error)) error = Cancelled(error, signals);
  const std::optional<driver::HostCopy>& copy = trainer.last_copy();
  if (!copy || args.training.checkpoint.empty()) return error;
  return WithContext(error, absl::StrCat("the state after run ", copy->runs_done, " is in ",
                                         args.training.checkpoint, " (--resume ",
                                         args.training.checkpoint, " goes on from there)"));
}

// --outputs, --save-weights, --save-model and the final --checkpoint.
absl::Status SaveTrainingResults(driver::SessionExecutable& executable, const RunArgs& args,
                                 const RunFiles& files,
                                 const std::vector<tensor::NamedTensors>& outputs) {
  if (!args.outputs.empty() && !outputs.empty()) {
    driver::OutputAccumulator all;
    for (const tensor::NamedTensors& o : outputs) IPUPOD_RETURN_IF_ERROR(all.Append(o));
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors joined, all.Finish());
    IPUPOD_RETURN_IF_ERROR(WithContext(tensor::WriteTensorFile(args.outputs, joined),
                                       absl::StrCat("writing ", args.outputs)));
  }
  if (!args.save_weights.empty() || !args.training.save_model.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors weights, executable.ReadWeights());
    if (!args.save_weights.empty()) {
      IPUPOD_RETURN_IF_ERROR(WithContext(tensor::WriteTensorFile(args.save_weights, weights),
                                         absl::StrCat("writing ", args.save_weights)));
    }
    if (!args.training.save_model.empty()) {
      IPUPOD_ASSIGN_OR_RETURN(std::string model, runtime::ReplaceOnnxInitializers(
                                                     files.executable.model_bytes, weights));
      IPUPOD_RETURN_IF_ERROR(
          WithContext(tensor::WriteFileAtomically(args.training.save_model, model),
                      absl::StrCat("writing ", args.training.save_model)));
    }
  }
  if (!args.training.checkpoint.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(tensor::NamedTensors checkpoint, executable.ReadCheckpoint());
    IPUPOD_RETURN_IF_ERROR(
        WithContext(tensor::WriteTensorFile(args.training.checkpoint, checkpoint),
                    absl::StrCat("writing ", args.training.checkpoint)));
  }
  return absl::OkStatus();
}

Json TrainingSummaryJson(const RunArgs& args, const RunSession& s, const RunFiles& files,
                         const Progress& progress, int recoveries) {
  const Totals& t = progress.totals();
  Json summary = {{"session", s.id},
                  {"runs", files.runs},
                  {"weight_updates", files.runs * files.executable.device_iterations},
                  {"samples", t.samples},
                  {"samples_per_step", files.plan.samples_per_step},
                  {"wall_seconds", t.wall_s},
                  {"samples_per_second", t.wall_s > 0 ? t.samples / t.wall_s : 0.0},
                  {"flops", t.flops},
                  {"recoveries", recoveries}};
  if (progress.first_loss()) summary["first_loss"] = *progress.first_loss();
  if (progress.last_loss()) summary["final_loss"] = *progress.last_loss();
  summary.update(SimulatedJson(t.simulated_s, t.compute_s, t.ramp_s, t.link_s, t.host_s));
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string*>{"outputs_file", &args.outputs},
        {"saved_weights", &args.save_weights},
        {"saved_model", &args.training.save_model},
        {"checkpoint", &args.training.checkpoint}}) {
    if (!path->empty()) summary[key] = *path;
  }
  return {{"summary", summary}};
}

std::string TrainingSummaryText(const RunArgs& args, const RunSession& s, const RunFiles& files,
                                const Progress& progress) {
  const Totals& t = progress.totals();
  std::string text = absl::StrFormat(
      "trained %d weight updates (%d runs x device_iterations %d, %d samples each) on session "
      "%s (IPUs %s)\n",
      files.runs * files.executable.device_iterations, files.runs,
      files.executable.device_iterations, files.plan.samples_per_step, s.id, s.ipus);
  if (progress.first_loss() && progress.last_loss()) {
    absl::StrAppend(&text, absl::StrFormat("loss %.6g -> %.6g\n", *progress.first_loss(),
                                           *progress.last_loss()));
  }
  absl::StrAppend(
      &text, absl::StrFormat("wall %s (%.0f samples/s); simulated device time %s\n",
                             FormatSiDuration(t.wall_s), t.wall_s > 0 ? t.samples / t.wall_s : 0.0,
                             FormatSiDuration(t.simulated_s)));
  for (const auto& [what, path] :
       {std::pair<const char*, const std::string*>{"outputs", &args.outputs},
        {"weights", &args.save_weights},
        {"trained model", &args.training.save_model},
        {"checkpoint", &args.training.checkpoint}}) {
    if (!path->empty()) absl::StrAppend(&text, "wrote ", what, " to ", *path, "\n");
  }
  return text;
}

int ExecuteTraining(Context& ctx, driver::SessionExecutable& executable, const RunSession& s,
                    const RunArgs& args, const RunFiles& files, SignalWatcher& signals) {
  const HintContext hint{.session = s.id};
  if (absl::Status ready = SetUpTraining(ctx, executable, args, files); !ready.ok()) {
    return ctx.Fail(ready, hint);
  }
  Progress progress(ctx, files.runs);
  driver::TrainingDriver trainer(executable, files.plan, TrainingJobOf(args, files),
                                 TrainingCallbacksOf(ctx, args, progress, signals));
  absl::Status trained = trainer.Run();
  progress.Finish();
  if (!trained.ok()) return ctx.Fail(Failed(trained, args, trainer, signals), hint);
  if (absl::Status saved = SaveTrainingResults(executable, args, files, trainer.outputs());
      !saved.ok()) {
    return ctx.Fail(saved, hint);
  }
  return ctx.Print(TrainingSummaryJson(args, s, files, progress, trainer.recoveries()),
                   TrainingSummaryText(args, s, files, progress));
}

absl::StatusOr<tensor::NamedTensors> RunInference(driver::SessionExecutable& executable,
                                                  const StepPlan& plan, Progress& progress,
                                                  SignalWatcher& signals) {
  absl::StatusOr<tensor::NamedTensors> outputs =
      driver::RunInference(executable, plan,
                           {.on_step =
                                [&progress](const driver::RunProgress& p) {
                                  progress.Step(p.run, *p.stats, p.wall_seconds);
                                },
                            .stop_requested = [&signals] { return signals.Interrupted(); }});
  progress.Finish();
  if (absl::IsCancelled(outputs.status())) return Cancelled(outputs.status(), signals);
  return outputs;
}

int Execute(Context& ctx, client::Client& client, const RunSession& s, const RunArgs& args,
            const RunFiles& files, SignalWatcher& signals) {
  const HintContext hint{.session = s.id};
  absl::StatusOr<std::string> sha256 = Prepare(ctx, client, s, files);
  if (!sha256.ok()) return ctx.Fail(sha256.status(), hint);
  client::RemoteSessionExecutable executable(client, s.id, *sha256);
  if (args.training.train) return ExecuteTraining(ctx, executable, s, args, files, signals);
  Progress progress(ctx, files.plan.steps);
  absl::StatusOr<tensor::NamedTensors> outputs =
      RunInference(executable, files.plan, progress, signals);
  if (!outputs.ok()) return ctx.Fail(outputs.status(), hint);
  if (absl::Status w = tensor::WriteTensorFile(args.outputs, *outputs); !w.ok()) {
    return ctx.Fail(WithContext(w, absl::StrCat("writing ", args.outputs)), hint);
  }
  if (!args.save_weights.empty()) {
    absl::StatusOr<tensor::NamedTensors> weights = executable.ReadWeights();
    if (!weights.ok()) return ctx.Fail(weights.status(), hint);
    if (absl::Status w = tensor::WriteTensorFile(args.save_weights, *weights); !w.ok()) {
      return ctx.Fail(WithContext(w, absl::StrCat("writing ", args.save_weights)), hint);
    }
  }
  return ctx.Print(SummaryJson(args, s, files.plan, progress.totals(), *outputs),
                   SummaryText(args, s, files.plan, progress.totals(), *outputs));
}

// Attaches for the run; the IPU count defaults to what the executable
// reserves.
int RunAttached(Context& ctx, client::Client& client, RunArgs args, const RunFiles& files,
                SignalWatcher& signals) {
  if (args.attach.ipus.empty()) args.attach.ipus = absl::StrCat(files.executable.ipus.reserved);
  absl::StatusOr<v1::AttachRequest> request =
      BuildAttachRequest(args.attach, ClientLabel(HostName(), getpid(), {"ipupod-run"}));
  if (!request.ok()) return ctx.UsageError(request.status().message());
  std::unique_ptr<client::AttachCall> call = client.StartAttach(*request);
  absl::StatusOr<v1::SessionInfo> grant = AwaitGrant(ctx, *call, signals);
  if (signals.Interrupted()) {
    (void)call->Release();
    return ctx.Fail(absl::CancelledError("interrupted while waiting for IPUs; left the queue"));
  }
  if (!grant.ok()) {
    return ctx.Fail(grant.status(),
                    {.partition = args.attach.partition, .attach_without_wait = !request->wait()});
  }
  ctx.Note({{"attached", SessionJson(*grant)}}, GrantText(*grant));
  signals.SetInterruptHandler([raw = call.get()](int, bool) { raw->Cancel(); });
  const int code =
      Execute(ctx, client, {grant->session(), CompactIpus(grant->ipus())}, args, files, signals);
  signals.SetInterruptHandler(nullptr);
  absl::Status released = call->Release();
  if (!released.ok() && code == kExitOk) return ctx.FailLate(released);
  return code;
}

// Every file the run will write can be written: found now, not after the
// run (nothing is left behind by the check).
absl::Status CheckOutputsWritable(const RunArgs& args) {
  const TrainArgs& t = args.training;
  for (const auto& [what, path] :
       {std::pair<const char*, const std::string*>{"--outputs", &args.outputs},
        {"--save-weights", &args.save_weights},
        {"--checkpoint", &t.checkpoint},
        {"--save-model", &t.save_model}}) {
    if (!path->empty()) IPUPOD_RETURN_IF_ERROR(client::CheckWritablePath(*path, what));
  }
  return absl::OkStatus();
}

int RunRun(Context& ctx, const RunArgs& args) {
  if (absl::Status names = CheckOutputNames(args); !names.ok()) {
    return ctx.UsageError(names.message());
  }
  if (absl::Status writable = CheckOutputsWritable(args); !writable.ok()) {
    return ctx.Fail(writable);
  }
  absl::StatusOr<RunFiles> files = ReadRunFiles(args);
  if (!files.ok()) return ctx.Fail(files.status());
  SignalWatcher signals;  // before the channel creates gRPC's threads
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  std::optional<std::string> session = ctx.env()("IPUPOD_SESSION");
  if (!session || session->empty()) return RunAttached(ctx, **client, args, *files, signals);
  if (!args.attach.ipus.empty() || !args.attach.partition.empty()) {
    ctx.Note(nullptr, absl::StrCat("note: using session ", *session,
                                   " from IPUPOD_SESSION; --ipus/--partition are ignored\n"));
  }
  return Execute(ctx, **client, {*session, ctx.env()("IPUPOD_IPUS").value_or(std::string("?"))},
                 args, *files, signals);
}

// The training flags of `run`.
void AddTrainingOptions(CLI::App* run, TrainArgs& t) {
  run->add_flag("--train", t.train, "Train: each run makes device_iterations weight updates");
  run->add_option("--epochs", t.epochs, "Train for E passes over --inputs")
      ->type_name("E")
      ->check(CLI::PositiveNumber);
  run->add_option("--steps", t.steps,
                  "Train for K weight updates (a multiple of device_iterations)")
      ->type_name("K")
      ->check(CLI::PositiveNumber);
  run->add_option("--lr", t.lr,
                  "Set the learning rate before training (lr is always a variable; the "
                  "optimizer-wide one: --opt-group groups that set lr keep theirs)")
      ->type_name("X")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--save-model", t.save_model,
                  "Write the ONNX model with the trained weights (PopART's modelToHost)")
      ->type_name("FILE.onnx");
  run->add_option("--checkpoint", t.checkpoint,
                  "Write weights + optimizer state + step to FILE (at the end and at every "
                  "host copy)")
      ->type_name("FILE.npz");
  run->add_option("--checkpoint-every", t.checkpoint_every,
                  "Take a host copy of the training state every N runs")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  run->add_option("--resume", t.resume, "Start from a --checkpoint file (exactly where it was)")
      ->type_name("FILE.npz");
  run->add_flag("--recover", t.recover,
                "On a recoverable device fault: reset, reload the last host copy, go on");
}

constexpr char kRunFooter[] =
    "Runs on the session in $IPUPOD_SESSION when set (under `ipupod attach -- ...`), else\n"
    "attaches for the run and releases the IPUs after it. The executable is uploaded only\n"
    "if the server does not hold it yet. The inputs are split into steps of\n"
    "micro-batch x device_iterations x replication samples (dim 0; `ipupod compile` prints\n"
    "it); the outputs of every step are concatenated along dim 0, keyed by ONNX output name.\n"
    "On a terminal a progress bar shows on stderr. With --json, stdout holds one JSON line\n"
    "per step {step, samples, wall_seconds, simulated_seconds, ...} and a final\n"
    "{\"summary\": ...} line (or an {\"error\": ...} line).\n"
    "\n"
    "Training (an executable from `ipupod compile --train`): --inputs holds the whole data\n"
    "set; each run takes micro-batch x gradient_accumulation_steps x replication x\n"
    "device_iterations samples in order and makes device_iterations weight updates, each\n"
    "averaging its micro-batches' gradients. The loss of every update is shown (JSON lines:\n"
    "\"losses\", with each update's \"loss_scales\" and the \"skipped_updates\" that\n"
    "auto_loss_scaling skipped on overflow). --checkpoint/--resume carry weights, optimizer state "
    "and step across\n"
    "sessions, resets and server restarts; a resumed run goes on in the data where the\n"
    "checkpoint was taken, for --steps/--epochs more. With --recover a recoverable fault\n"
    "(IPU, link, partition or full reset) resets the session's IPUs (a full reset: waits up\n"
    "to 10 minutes for an admin's `ipupod pod reset`), reloads the last host copy and repeats\n"
    "the runs since it (at most 3 times).\n"
    "\n"
    "Exit codes: as every command (3 missing file, 5 no IPUs free, 9 bad inputs, 11 session\n"
    "ended, 20-24 device errors: the message names the recovery action), 130 on Ctrl-C.\n"
    "\n"
    "Examples:\n"
    "  ipupod run gpt2.ipx --inputs batch.npz --outputs logits.npz --wait\n"
    "  ipupod run mlp.ipx --inputs x.npz --outputs y.npz --weights finetuned.safetensors\n"
    "  ipupod attach --ipus 4 -- ipupod run mlp.ipx --inputs x.npz --outputs y.npz --json\n"
    "  ipupod run mlp_train.ipx --train --inputs data.npz --epochs 3 --lr 0.05 \\\n"
    "      --save-model trained.onnx --checkpoint ckpt.npz\n"
    "  ipupod run mlp_train.ipx --train --inputs data.npz --steps 800 --resume ckpt.npz "
    "--recover";

}  // namespace

void AddRunCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand("run", "Run an .ipx executable on IPUs of the pod");
  run->add_option("EXECUTABLE", args->executable, "The executable (ipupod compile writes it)")
      ->type_name("MODEL.ipx")
      ->required();
  run->add_option("--inputs", args->inputs, "Inputs by ONNX input name, samples along dim 0")
      ->type_name("FILE.npz")
      ->required();
  run->add_option("--outputs", args->outputs,
                  "Where to write the outputs (.npz or .safetensors); optional with --train")
      ->type_name("FILE.npz");
  run->add_option("--weights", args->weights, "Weights to load first, by initializer name")
      ->type_name("FILE(.npz|.safetensors|.onnx)");
  run->add_option("--save-weights", args->save_weights, "Read the weights back into FILE")
      ->type_name("FILE.npz");
  AddTrainingOptions(run, args->training);
  run->add_option("--ipus", args->attach.ipus,
                  "IPUs to attach (default: what the executable reserves)")
      ->type_name("N");
  run->add_option("--partition", args->attach.partition, "Attach inside this partition you own")
      ->type_name("NAME");
  run->add_flag("--wait", args->attach.wait, "Queue until the IPUs are free");
  run->add_option("--wait-timeout", args->attach.wait_timeout,
                  "Give up waiting after S seconds (implies --wait)")
      ->type_name("S");
  AddAssociationOptions(run, args->attach);
  run->footer(kRunFooter);
  OnSelected(run, selection, "run", [args](Context& ctx) { return RunRun(ctx, *args); });
}

}  // namespace ipupod::cli
