// `ipupod run`: run an .ipx executable on IPUs of the pod, step by step.
//
// Everything that can be checked locally is checked before the server is
// involved (files exist, the inputs fit the executable and split into whole
// steps), so a mistake never waits in the queue. Then: a session (the one
// in $IPUPOD_SESSION, as under `ipupod attach -- ipupod run ...`, or one
// attached here with the attach code path: --wait queue display, Ctrl-C),
// UploadExecutable (skipped when the server has it), Load, WriteWeights,
// one Run per step, the outputs concatenated along dim 0 into an .npz,
// ReadWeights for --save-weights, and the release of a session attached
// here.
//
// Signals: a SignalWatcher is made before the channel (see attach.cc). On
// an own session an interrupt cancels the attach stream, which ends the
// session on the server and with it a running step; between steps the loop
// checks for an interrupt either way. Exit code 130, no outputs written.
#include <unistd.h>

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/cli/attach.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/cli/run_steps.h"
#include "client/cli/signal_watcher.h"
#include "client/files.h"
#include "common/status_macros.h"
#include "compiler/executable.h"
#include "compiler/report.h"
#include "runtime/tensor_files.h"

namespace ipupod::cli {
namespace {

struct RunArgs {
  std::string executable;
  std::string inputs;
  std::string outputs;
  std::string weights;
  std::string save_weights;
  AttachArgs attach;
};

// What the command reads from disk before it contacts the server.
struct RunFiles {
  std::string ipx_bytes;
  compiler::Executable executable;
  StepPlan plan;
  std::optional<runtime::NamedTensors> weights;
  bool weights_from_onnx = false;
};

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::StatusOr<RunFiles> ReadRunFiles(const RunArgs& args) {
  RunFiles files;
  IPUPOD_ASSIGN_OR_RETURN(files.ipx_bytes, client::ReadWholeFile(args.executable, "executable"));
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutable(files.ipx_bytes);
  if (!e.ok()) return WithContext(e.status(), args.executable);
  files.executable = *std::move(e);
  absl::StatusOr<runtime::NamedTensors> inputs = runtime::ReadTensorFile(args.inputs);
  if (!inputs.ok()) return WithContext(inputs.status(), absl::StrCat("--inputs ", args.inputs));
  IPUPOD_ASSIGN_OR_RETURN(files.plan,
                          PlanSteps(files.executable, *std::move(inputs), args.inputs));
  if (!args.weights.empty()) {
    absl::StatusOr<runtime::TensorFileFormat> format = runtime::TensorFileFormatOf(args.weights);
    if (!format.ok()) return WithContext(format.status(), "--weights");
    absl::StatusOr<runtime::NamedTensors> weights = runtime::ReadTensorFile(args.weights);
    if (!weights.ok()) return WithContext(weights.status(), absl::StrCat("--weights ", args.weights));
    files.weights = *std::move(weights);
    files.weights_from_onnx = *format == runtime::TensorFileFormat::kOnnx;
  }
  return files;
}

// Output file names are checked up front so a long run cannot end in a
// refused write.
absl::Status CheckOutputNames(const RunArgs& args) {
  for (const std::string* path : {&args.outputs, &args.save_weights}) {
    if (path->empty()) continue;
    absl::StatusOr<runtime::TensorFileFormat> format = runtime::TensorFileFormatOf(*path);
    if (!format.ok()) return format.status();
    if (*format == runtime::TensorFileFormat::kOnnx) {
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

  void Step(int64_t step, const v1::RunStats& stats, double wall_s) {
    totals_.samples += static_cast<int64_t>(stats.samples());
    totals_.wall_s += wall_s;
    totals_.simulated_s += stats.simulated_seconds();
    totals_.compute_s += stats.simulated_compute_seconds();
    totals_.ramp_s += stats.simulated_pipeline_ramp_seconds();
    totals_.link_s += stats.simulated_ipu_link_seconds();
    totals_.host_s += stats.simulated_host_seconds();
    totals_.flops += stats.flops();
    if (ctx_.json()) {
      Json line = {{"step", step + 1},       {"steps", steps_},
                   {"samples", stats.samples()}, {"wall_seconds", wall_s},
                   {"server_wall_seconds", stats.wall_seconds()}};
      line.update(SimulatedJson(stats.simulated_seconds(), stats.simulated_compute_seconds(),
                                stats.simulated_pipeline_ramp_seconds(),
                                stats.simulated_ipu_link_seconds(),
                                stats.simulated_host_seconds()));
      line["flops"] = stats.flops();
      ctx_.out() << JsonLine(line);
      ctx_.out().flush();
    } else if (bar_) {
      ctx_.err() << "\r" << BarText(step + 1) << std::flush;
    }
  }
  // Ends the bar's line (before any other output on stderr).
  void Finish() {
    if (bar_ && !finished_) ctx_.err() << "\n" << std::flush;
    finished_ = true;
  }
  const Totals& totals() const { return totals_; }

 private:
  std::string BarText(int64_t done) const {
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(steps_, 1));
    return absl::StrFormat("[%s%s] step %d/%d  %.0f samples/s  simulated %s  wall %s  ",
                           std::string(filled, '#'), std::string(kWidth - filled, '.'), done,
                           steps_, totals_.wall_s > 0 ? totals_.samples / totals_.wall_s : 0.0,
                           compiler::FormatSeconds(totals_.simulated_s), compiler::FormatSeconds(totals_.wall_s));
  }

  Context& ctx_;
  const int64_t steps_;
  const bool bar_;
  bool finished_ = false;
  Totals totals_;
};

// ---------------------------------------------------------------- the run

struct RunSession {
  std::string id;
  std::string ipus;  // "0-3", for messages
};

std::string TensorsText(const runtime::NamedTensors& tensors) {
  std::vector<std::string> parts;
  for (const auto& [name, t] : tensors) {
    parts.push_back(absl::StrCat(name, " ", graph::DTypeName(t.dtype()), "[",
                                 absl::StrJoin(t.shape(), ","), "]"));
  }
  return absl::StrJoin(parts, ", ");
}

Json SummaryJson(const RunArgs& args, const RunSession& s, const StepPlan& plan,
                 const Totals& t, const runtime::NamedTensors& outputs) {
  Json out_list = Json::array();
  for (const auto& [name, tensor] : outputs) {
    out_list.push_back({{"name", name},
                        {"dtype", std::string(graph::DTypeName(tensor.dtype()))},
                        {"shape", tensor.shape()}});
  }
  Json summary = {{"session", s.id},
                  {"steps", plan.steps},
                  {"samples", t.samples},
                  {"samples_per_step", plan.samples_per_step},
                  {"wall_seconds", t.wall_s},
                  {"samples_per_second", t.wall_s > 0 ? t.samples / t.wall_s : 0.0},
                  {"flops", t.flops},
                  {"outputs_file", args.outputs},
                  {"outputs", out_list}};
  summary.update(SimulatedJson(t.simulated_s, t.compute_s, t.ramp_s, t.link_s, t.host_s));
  if (!args.save_weights.empty()) summary["saved_weights"] = args.save_weights;
  return {{"summary", summary}};
}

std::string SummaryText(const RunArgs& args, const RunSession& s, const StepPlan& plan,
                        const Totals& t, const runtime::NamedTensors& outputs) {
  std::string text = absl::StrFormat(
      "ran %d steps x %d samples = %d samples on session %s (IPUs %s)\n"
      "wall %s (%.0f samples/s); simulated device time %s: compute %s, pipeline ramp %s, "
      "IPU-Link %s, host %s\n",
      plan.steps, plan.samples_per_step, t.samples, s.id, s.ipus, compiler::FormatSeconds(t.wall_s),
      t.wall_s > 0 ? t.samples / t.wall_s : 0.0, compiler::FormatSeconds(t.simulated_s),
      compiler::FormatSeconds(t.compute_s), compiler::FormatSeconds(t.ramp_s), compiler::FormatSeconds(t.link_s),
      compiler::FormatSeconds(t.host_s));
  absl::StrAppend(&text, "wrote ", args.outputs, ": ", TensorsText(outputs), "\n");
  if (!args.save_weights.empty()) absl::StrAppend(&text, "saved weights to ", args.save_weights, "\n");
  return text;
}

// Weights from an .onnx file are all its initializers; only those the
// loaded program can take are weights (the rest are constants).
runtime::NamedTensors WeightsToWrite(const RunFiles& files, const v1::LoadedProgram& loaded) {
  if (!files.weights_from_onnx) return *files.weights;
  runtime::NamedTensors kept;
  for (const auto& [name, tensor] : *files.weights) {
    for (const v1::TensorSpec& spec : loaded.weights()) {
      if (spec.name() == name) kept.emplace_back(name, tensor);
    }
  }
  return kept;
}

absl::Status Prepare(Context& ctx, client::Client& client, const RunSession& s,
                     const RunFiles& files) {
  IPUPOD_ASSIGN_OR_RETURN(v1::ExecutableRef ref, client.UploadExecutable(files.ipx_bytes));
  ctx.Note({{"executable", {{"sha256", ref.sha256()}, {"cache_hit", ref.cache_hit()}}}},
           absl::StrCat(ref.cache_hit() ? "executable already on the server: " : "uploaded ",
                        ref.sha256().substr(0, 16), "\n"));
  IPUPOD_ASSIGN_OR_RETURN(v1::LoadedProgram loaded, client.Load(s.id, ref.sha256()));
  if (!files.weights) return absl::OkStatus();
  IPUPOD_ASSIGN_OR_RETURN(v1::WriteWeightsResponse written,
                          client.WriteWeights(s.id, WeightsToWrite(files, loaded)));
  ctx.Note({{"weights_written", written.written_size()}},
           absl::StrCat("wrote ", written.written_size(), " weights\n"));
  return absl::OkStatus();
}

absl::StatusOr<runtime::NamedTensors> RunSteps(client::Client& client, const RunSession& s,
                                               const StepPlan& plan, Progress& progress,
                                               SignalWatcher& signals) {
  OutputAccumulator outputs;
  for (int64_t step = 0; step < plan.steps; ++step) {
    if (signals.Interrupted()) break;
    IPUPOD_ASSIGN_OR_RETURN(runtime::NamedTensors inputs, StepInputs(plan, step));
    const absl::Time start = absl::Now();
    absl::StatusOr<client::RunResult> result = client.Run(s.id, inputs);
    if (signals.Interrupted()) break;
    if (!result.ok()) {
      return WithContext(result.status(), absl::StrCat("step ", step + 1, " of ", plan.steps));
    }
    progress.Step(step, result->stats, absl::ToDoubleSeconds(absl::Now() - start));
    IPUPOD_RETURN_IF_ERROR(outputs.Append(result->outputs));
  }
  if (signals.Interrupted()) {
    return absl::CancelledError("interrupted; no outputs were written");
  }
  return outputs.Finish();
}

int Execute(Context& ctx, client::Client& client, const RunSession& s, const RunArgs& args,
            const RunFiles& files, SignalWatcher& signals) {
  const HintContext hint{.session = s.id};
  if (absl::Status ready = Prepare(ctx, client, s, files); !ready.ok()) {
    return ctx.Fail(ready, hint);
  }
  Progress progress(ctx, files.plan.steps);
  absl::StatusOr<runtime::NamedTensors> outputs =
      RunSteps(client, s, files.plan, progress, signals);
  progress.Finish();
  if (!outputs.ok()) return ctx.Fail(outputs.status(), hint);
  if (absl::Status w = runtime::WriteTensorFile(args.outputs, *outputs); !w.ok()) {
    return ctx.Fail(WithContext(w, absl::StrCat("writing ", args.outputs)), hint);
  }
  if (!args.save_weights.empty()) {
    absl::StatusOr<runtime::NamedTensors> weights = client.ReadWeights(s.id);
    if (!weights.ok()) return ctx.Fail(weights.status(), hint);
    if (absl::Status w = runtime::WriteTensorFile(args.save_weights, *weights); !w.ok()) {
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
  absl::StatusOr<v1::AttachRequest> request = BuildAttachRequest(
      args.attach, ClientLabel(HostName(), getpid(), {"ipupod", "run", args.executable}));
  if (!request.ok()) return ctx.UsageError(request.status().message());
  std::unique_ptr<client::AttachCall> call = client.StartAttach(*request);
  absl::StatusOr<v1::SessionInfo> grant = AwaitGrant(ctx, *call, signals);
  if (signals.Interrupted()) {
    (void)call->Release();
    return ctx.Fail(absl::CancelledError("interrupted while waiting for IPUs; left the queue"));
  }
  if (!grant.ok()) {
    return ctx.Fail(grant.status(), {.partition = args.attach.partition,
                                     .attach_without_wait = !request->wait()});
  }
  ctx.Note({{"attached", SessionJson(*grant)}}, GrantText(*grant));
  signals.SetInterruptHandler([raw = call.get()](int, bool) { raw->Cancel(); });
  const int code = Execute(ctx, client, {grant->session(), CompactIpus(grant->ipus())}, args,
                           files, signals);
  signals.SetInterruptHandler(nullptr);
  absl::Status released = call->Release();
  if (!released.ok() && code == kExitOk) return ctx.FailLate(released);
  return code;
}

int RunRun(Context& ctx, const RunArgs& args) {
  if (absl::Status names = CheckOutputNames(args); !names.ok()) {
    return ctx.UsageError(names.message());
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
  return Execute(ctx, **client,
                 {*session, ctx.env()("IPUPOD_IPUS").value_or(std::string("?"))}, args,
                 *files, signals);
}

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
  run->add_option("--outputs", args->outputs, "Where to write the outputs (.npz or .safetensors)")
      ->type_name("FILE.npz")
      ->required();
  run->add_option("--weights", args->weights, "Weights to load first, by initializer name")
      ->type_name("FILE(.npz|.safetensors|.onnx)");
  run->add_option("--save-weights", args->save_weights, "Read the weights back into FILE")
      ->type_name("FILE.npz");
  run->add_option("--ipus", args->attach.ipus,
                  "IPUs to attach (default: what the executable reserves)")
      ->type_name("N");
  run->add_option("--partition", args->attach.partition, "Attach inside this partition you own")
      ->type_name("NAME");
  run->add_flag("--wait", args->attach.wait, "Queue until the IPUs are free");
  run->add_option("--wait-timeout", args->attach.wait_timeout,
                  "Give up waiting after S seconds (implies --wait)")
      ->type_name("S");
  run->footer(
      "Runs on the session in $IPUPOD_SESSION when set (under `ipupod attach -- ...`), else\n"
      "attaches for the run and releases the IPUs after it. The executable is uploaded only\n"
      "if the server does not hold it yet. The inputs are split into steps of\n"
      "micro-batch x device_iterations x replication samples (dim 0; `ipupod compile` prints\n"
      "it); the outputs of every step are concatenated along dim 0, keyed by ONNX output name.\n"
      "On a terminal a progress bar shows on stderr. With --json, stdout holds one JSON line\n"
      "per step {step, samples, wall_seconds, simulated_seconds, ...} and a final\n"
      "{\"summary\": ...} line (or an {\"error\": ...} line).\n"
      "\n"
      "Exit codes: as every command (3 missing file, 5 no IPUs free, 9 bad inputs, 11 session\n"
      "ended, 20-24 device errors: the message names the recovery action), 130 on Ctrl-C.\n"
      "\n"
      "Examples:\n"
      "  ipupod run gpt2.ipx --inputs batch.npz --outputs logits.npz --wait\n"
      "  ipupod run mlp.ipx --inputs x.npz --outputs y.npz --weights finetuned.safetensors\n"
      "  ipupod attach --ipus 4 -- ipupod run mlp.ipx --inputs x.npz --outputs y.npz --json");
  OnSelected(run, selection, "run", [args](Context& ctx) { return RunRun(ctx, *args); });
}

}  // namespace ipupod::cli
