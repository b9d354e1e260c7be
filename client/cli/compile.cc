// `ipupod compile`: ONNX model + ipu_config.json -> .ipx executable, and
// `ipupod inspect`: what an .ipx takes and makes; both offline (no server), except `compile
// --remote`, which has the server compile (CompileService) and writes what it sends back. The
// compiler does the work (device/compiler/compile.h, the request read by
// device/compiler/compile_request.h, as the server reads it); this file reads the inputs, maps
// failures to exit codes and prints the result.
//
// Exit codes: 2 a bad command line (also --loss/--optimizer/--opt/--opt-group/--freeze/
// --buffer without --train, a --buffer that is not NAME=VALUE, an unknown optimizer or attribute,
// an --opt-group that is not WEIGHT,...:NAME=VALUE,... or sets a flag unlike the optimizer's),
// 3 a file does not exist (the message names it), 9 a bad --ipu-config / --set / --module-map
// value, 12 the model does not compile with this config (placement, run
// shape, out of IPU memory, loss or frozen weight not in the model, an op
// without a backward rule), 1 I/O errors; with --remote also the server's codes (8 unreachable,
// 5 a bound such as the model's size or compiles at once, 6 its time limit, 4 no permission).
#include "device/compiler/compile.h"

#include <filesystem>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/client.h"
#include "client/files.h"
#include "common/driver/session_executable.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "device/compiler/compile_request.h"
#include "device/compiler/executable.h"
#include "device/compiler/ipu_config.h"
#include "device/compiler/placement.h"
#include "device/compiler/report.h"
#include "device/compiler/training_spec.h"
#include "device/runtime/program.h"
#include "device/runtime/run_steps.h"
#include "device/training/optimizer.h"

namespace ipupod::cli {
namespace {

struct CompileArgs {
  std::string model;
  std::string ipu_config;
  std::vector<std::string> sets;
  std::string module_map;
  std::string output;
  bool report = false;
  bool remote = false;
  bool train = false;
  std::string loss;
  std::string optimizer;
  std::vector<std::string> opts;        // "k=v,..." each
  std::vector<std::string> opt_groups;  // "w1,w2:k=v,..." each: param group i
  std::vector<std::string> freeze;
  std::vector<std::string> buffers;  // "NAME=VALUE" each
};

using driver::WithContext;

// What the compile request names besides the model: the config and
// module-map files' text, the overrides and the training flags (checked by
// TrainingOptions first).
absl::StatusOr<compiler::CompileInputs> ReadCompileInputs(
    const CompileArgs& args, const compiler::CompileOptions& training) {
  compiler::CompileInputs inputs;
  if (!args.ipu_config.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(inputs.ipu_config_json,
                            client::ReadWholeFile(args.ipu_config, "--ipu-config file"));
  }
  inputs.sets = args.sets;
  if (!args.module_map.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(inputs.module_map_json,
                            client::ReadWholeFile(args.module_map, "--module-map file"));
  }
  inputs.train = !training.for_inference;
  inputs.training = training.training;
  return inputs;
}

// The inputs as Compile takes them, warnings (ignored config keys) on
// stderr.
absl::StatusOr<compiler::PreparedCompile> Prepare(Context& ctx, const CompileArgs& args,
                                                  const compiler::CompileInputs& inputs) {
  IPUPOD_ASSIGN_OR_RETURN(compiler::PreparedCompile prepared,
                          compiler::PrepareCompile(inputs, args.ipu_config, args.module_map));
  for (const std::string& warning : prepared.warnings) {
    ctx.Note({{"warning", warning}}, absl::StrCat("warning: ", warning, "\n"));
  }
  return prepared;
}

// --opt and --opt-group into `t`, checked against the optimizer (its
// names, ranges, and what groups must share).
absl::Status OptimizerOptions(const CompileArgs& args, compiler::TrainingOptions& t) {
  for (const std::string& opt : args.opts) {
    absl::Status parsed = ParseOptimizerAttributes(opt, t.optimizer_attrs);
    if (!parsed.ok()) return parsed;
  }
  std::vector<training::ParamGroupOptions> groups;
  for (const std::string& text : args.opt_groups) {
    compiler::ParamGroup& group = t.param_groups.emplace_back();
    IPUPOD_RETURN_IF_ERROR(ParseParamGroup(text, group.weights, group.variables));
    groups.push_back({group.weights, group.variables});
  }
  absl::StatusOr<training::OptimizerKind> kind =
      training::ParseOptimizerKind(t.optimizer.empty() ? "sgd" : t.optimizer);
  if (!kind.ok()) return WithContext(kind.status(), "--optimizer");
  absl::Status valid = training::OptimizerSpec::Create(*kind, t.optimizer_attrs, groups).status();
  return valid.ok() ? valid : WithContext(valid, groups.empty() ? "--opt" : "--opt/--opt-group");
}

// The training flags: a usage error without --train, or for an optimizer or
// attribute device/training/optimizer.h does not know (checked here, before the
// model is read, so a typo is exit 2 and not a failed compile).
absl::Status TrainingOptions(const CompileArgs& args, compiler::CompileOptions& options) {
  if (!args.train) {
    if (!args.loss.empty() || !args.optimizer.empty() || !args.opts.empty() ||
        !args.opt_groups.empty() || !args.freeze.empty()) {
      return absl::InvalidArgumentError(
          "--loss, --optimizer, --opt, --opt-group and --freeze need --train (they describe "
          "training)");
    }
  } else {
    options.for_inference = false;
  }
  compiler::TrainingOptions& t = options.training;
  t.loss = args.loss;
  t.optimizer = args.optimizer;
  t.frozen = args.freeze;
  for (const std::string& b : args.buffers) {
    const size_t eq = b.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == b.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--buffer '", b, "': expected NAME=VALUE (the initializer and the value replacing it)"));
    }
    if (!t.buffers.emplace(b.substr(0, eq), b.substr(eq + 1)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--buffer '", b.substr(0, eq), "' is given twice"));
    }
  }
  return OptimizerOptions(args, t);
}

Json SpecsJson(const compiler::Executable& e, const std::vector<compiler::TensorSpec>& specs,
               bool inputs) {
  Json list = Json::array();
  for (const compiler::TensorSpec& spec : specs) {
    list.push_back({{"name", spec.name},
                    {"dtype", std::string(tensor::DTypeName(spec.dtype))},
                    {"shape", inputs ? compiler::HostInputShape(e, spec)
                                     : compiler::HostOutputShape(e, spec)}});
  }
  return list;
}

// "x float32[8,3]" per tensor, with its host shape.
std::vector<std::string> SpecLines(const compiler::Executable& e,
                                   const std::vector<compiler::TensorSpec>& specs, bool inputs) {
  std::vector<std::string> parts;
  for (const compiler::TensorSpec& spec : specs) {
    tensor::Shape shape =
        inputs ? compiler::HostInputShape(e, spec) : compiler::HostOutputShape(e, spec);
    parts.push_back(absl::StrCat(spec.name, " ", tensor::DTypeName(spec.dtype), "[",
                                 absl::StrJoin(shape, ","), "]"));
  }
  return parts;
}

std::string SpecsText(const compiler::Executable& e, const std::vector<compiler::TensorSpec>& specs,
                      bool inputs) {
  return absl::StrJoin(SpecLines(e, specs, inputs), ", ");
}

// Micro-batch x device iterations x replicas (x accumulation for training).
int64_t SamplesPerStep(const compiler::Executable& e) {
  return e.micro_batch_size * e.batch_size_factor;
}

bool IsTraining(const compiler::Executable& e) {
  return e.mode == compiler::ExecutableMode::kTraining;
}

std::string AttributesText(const std::map<std::string, double>& attrs) {
  if (attrs.empty()) return "none";
  return absl::StrJoin(attrs, " ", [](std::string* out, const auto& kv) {
    absl::StrAppend(out, kv.first, "=", kv.second);
  });
}

// "training: loss 'loss', 2 trainable weights, 2 buffers, sgd (variables lr=0.01;
// constants ...)", then a line per param group ("  group/0: fc.bias, ln.weight:
// weight_decay=0").
std::string TrainingText(const compiler::TrainingSpec& t) {
  std::string buffers;
  if (!t.buffers.empty()) {
    absl::StrAppend(&buffers, t.buffers.size(), t.buffers.size() == 1 ? " buffer, " : " buffers, ");
  }
  std::string text =
      absl::StrCat("training: loss '", t.loss, "', ", t.weights.size(),
                   t.weights.size() == 1 ? " trainable weight" : " trainable weights", ", ",
                   buffers, t.optimizer, " (variables ", AttributesText(t.variables),
                   "; constants ", AttributesText(t.constants), ")\n");
  for (size_t i = 0; i < t.param_groups.size(); ++i) {
    const compiler::ParamGroup& g = t.param_groups[i];
    absl::StrAppend(&text, "  group/", i, ": ",
                    g.weights.empty() ? "no weights" : absl::StrJoin(g.weights, ", "), ": ",
                    AttributesText(g.variables), "\n");
  }
  return text;
}

Json CompiledJson(const CompileArgs& args, const compiler::CachedCompile& compiled,
                  uint64_t size_bytes, const compiler::Report* report) {
  Json doc = {{"model", args.model},
              {"output", args.output},
              {"size_bytes", size_bytes},
              {"cache_hit", compiled.cache_hit},
              {"cache_path", compiled.path}};
  doc["compiled_on"] = args.remote ? "server" : "this machine";
  doc.update(Json::parse(compiler::ExecutableSummaryJson(compiled.executable)));
  if (report != nullptr) doc["report"] = Json::parse(report->Json());
  return doc;
}

std::string CompiledText(const CompileArgs& args, const compiler::CachedCompile& compiled,
                         uint64_t size_bytes, const compiler::Report* report) {
  const compiler::Executable& e = compiled.executable;
  std::string text = absl::StrCat(
      "compiled ", args.model, args.remote ? " on the server" : "", " -> ", args.output, " (",
      FormatBytesTrimmed(size_bytes), ", sha256 ", e.content_hash.substr(0, 16),
      compiled.cache_hit ? ", from the executable cache" : "", ")\n", "ipus: ", e.ipus.needed, " (",
      e.ipus.ipus_per_replica, " per replica x ", e.replication_factor,
      e.replication_factor == 1 ? " replica" : " replicas", ")",
      e.ipus.idle() > 0 ? absl::StrCat("; reserves ", e.ipus.reserved, " (auto-round)") : "", ", ",
      compiler::ExecutionStrategyName(e.strategy), " over ", e.placement.num_stages(),
      e.placement.num_stages() == 1 ? " stage\n" : " stages\n", "step: ", SamplesPerStep(e),
      " samples (micro-batch ", e.micro_batch_size, " x ",
      IsTraining(e) ? absl::StrCat(e.training.gradient_accumulation_steps, " accumulated x ") : "",
      e.device_iterations, " device iterations x ", e.replication_factor,
      " replication); output mode ", compiler::OutputModeName(e.output_mode), "\n",
      "inputs per step: ", SpecsText(e, e.inputs, true), "\n",
      "outputs per step: ", SpecsText(e, e.outputs, false), "\n");
  if (IsTraining(e)) absl::StrAppend(&text, TrainingText(e.training));
  if (report != nullptr) absl::StrAppend(&text, "\n", report->Table());
  return text;
}

// The compile failed: INVALID_ARGUMENT and UNIMPLEMENTED mean the model does
// not compile with this config (exit 12); the rest keep their own codes.
int FailCompile(Context& ctx, const absl::Status& status, const compiler::Report& report) {
  const bool planned = !report.ipus.empty();
  const bool out_of_memory = planned && absl::StrContains(status.message(), "out of memory");
  const absl::Status shown = WithContext(status, "compile failed");
  const int code = (status.code() == absl::StatusCode::kInvalidArgument ||
                    status.code() == absl::StatusCode::kUnimplemented)
                       ? kExitCompileError
                       : ExitCodeForStatus(status);
  if (ctx.json()) {
    Json doc = ErrorJson(shown);
    if (out_of_memory) doc["error"]["report"] = Json::parse(report.Json());
    ctx.out() << JsonLine(doc);
    ctx.out().flush();
    return code;
  }
  if (out_of_memory) ctx.err() << report.Table() << "\n";
  ctx.Fail(shown);
  return code;
}

// The compile worked: warnings, then what was written.
int PrintCompiled(Context& ctx, const CompileArgs& args, const compiler::CachedCompile& compiled,
                  const compiler::Report& report) {
  for (const std::string& warning : compiled.executable.warnings) {
    ctx.Note({{"warning", warning}}, absl::StrCat("warning: ", warning, "\n"));
  }
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(args.output, ec);
  const compiler::Report* shown = args.report ? &report : nullptr;
  return ctx.Print(CompiledJson(args, compiled, ec ? 0 : size, shown),
                   CompiledText(args, compiled, ec ? 0 : size, shown));
}

int CompileHere(Context& ctx, const CompileArgs& args, const compiler::CompileInputs& inputs) {
  absl::StatusOr<std::string> model = client::ReadWholeFile(args.model, "model");
  if (!model.ok()) return ctx.Fail(model.status());
  absl::StatusOr<compiler::PreparedCompile> prepared = Prepare(ctx, args, inputs);
  if (!prepared.ok()) return ctx.Fail(prepared.status());
  compiler::Report report;
  absl::StatusOr<compiler::CachedCompile> compiled =
      compiler::CompileCached(*model, prepared->config, prepared->options, &report);
  if (!compiled.ok()) return FailCompile(ctx, compiled.status(), report);
  absl::Status written = compiler::WriteExecutableFile(args.output, compiled->executable);
  if (!written.ok()) return ctx.Fail(WithContext(written, absl::StrCat("writing ", args.output)));
  return PrintCompiled(ctx, args, *compiled, report);
}

v1::CompileRequest RemoteRequest(const CompileArgs& args, const compiler::CompileInputs& inputs,
                                 absl::string_view model_sha256) {
  v1::CompileRequest request;
  request.set_model_sha256(std::string(model_sha256));
  request.set_ipu_config_json(inputs.ipu_config_json);
  for (const std::string& set : inputs.sets) request.add_set(set);
  request.set_module_map_json(inputs.module_map_json);
  request.set_train(inputs.train);
  request.set_loss(inputs.training.loss);
  request.set_optimizer(inputs.training.optimizer);
  request.mutable_optimizer_attrs()->insert(inputs.training.optimizer_attrs.begin(),
                                            inputs.training.optimizer_attrs.end());
  for (const compiler::ParamGroup& g : inputs.training.param_groups) {
    v1::ParamGroup* group = request.add_param_groups();
    for (const std::string& w : g.weights) group->add_weights(w);
    group->mutable_attrs()->insert(g.variables.begin(), g.variables.end());
  }
  for (const std::string& frozen : inputs.training.frozen) request.add_frozen(frozen);
  request.mutable_buffers()->insert(inputs.training.buffers.begin(), inputs.training.buffers.end());
  request.set_report(true);
  return request;
}

// --remote: the model goes to the server as a blob (once), the server
// compiles it, and the executable comes back to args.output.
int CompileOnServer(Context& ctx, const CompileArgs& args, const compiler::CompileInputs& inputs) {
  absl::Status readable = client::CheckReadableFile(args.model, "model");
  if (!readable.ok()) return ctx.Fail(readable);
  absl::StatusOr<compiler::PreparedCompile> prepared = Prepare(ctx, args, inputs);
  if (!prepared.ok()) return ctx.Fail(prepared.status());  // a bad config is exit 9 here too
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  absl::StatusOr<v1::BlobRef> model = (*client)->PutBlobFile(args.model, "model");
  if (!model.ok()) return ctx.Fail(model.status());
  std::string failure_report;
  absl::StatusOr<v1::CompileResult> result = (*client)->Compile(
      RemoteRequest(args, inputs, model->sha256()), args.output, &failure_report);
  compiler::Report report;
  if (!result.ok()) {
    if (!failure_report.empty()) report = compiler::ReportFromJson(failure_report).value_or(report);
    return FailCompile(ctx, result.status(), report);
  }
  absl::StatusOr<std::string> bytes = client::ReadWholeFile(args.output, "executable");
  if (!bytes.ok()) return ctx.Fail(bytes.status());
  absl::StatusOr<compiler::Executable> executable = compiler::ReadExecutable(*bytes);
  if (!executable.ok()) return ctx.Fail(WithContext(executable.status(), args.output));
  report = compiler::ReportFromJson(result->report_json()).value_or(report);
  compiler::CachedCompile compiled{*std::move(executable), result->executable().cache_hit(), ""};
  compiled.executable.warnings.assign(result->warnings().begin(), result->warnings().end());
  return PrintCompiled(ctx, args, compiled, report);
}

int RunCompile(Context& ctx, CompileArgs args) {
  if (args.output.empty()) {
    args.output = client::ReplaceExtension(args.model, compiler::kExecutableExtension);
  }
  if (args.output == args.model) {
    return ctx.UsageError(
        absl::StrCat("the output '", args.output, "' would overwrite the model; pass -o FILE.ipx"));
  }
  compiler::CompileOptions training;
  absl::Status flags = TrainingOptions(args, training);
  if (!flags.ok()) return ctx.UsageError(flags.message());
  absl::Status readable = client::CheckReadableFile(args.model, "model");
  if (!readable.ok()) return ctx.Fail(readable);
  absl::StatusOr<compiler::CompileInputs> inputs = ReadCompileInputs(args, training);
  if (!inputs.ok()) return ctx.Fail(inputs.status());
  return args.remote ? CompileOnServer(ctx, args, *inputs) : CompileHere(ctx, args, *inputs);
}

void AddTrainingFlags(CLI::App& compile, CompileArgs& args) {
  compile.add_flag("--train", args.train,
                   "Compile a training executable (forward, backward and optimizer)");
  compile
      .add_option("--loss", args.loss,
                  "The scalar float output to train on (default: the model's only one)")
      ->type_name("NAME");
  compile
      .add_option("--optimizer", args.optimizer,
                  "sgd|adam|adamw|rmsprop|lamb (default sgd, lr 0.01)")
      ->type_name("NAME");
  compile
      .add_option("--opt", args.opts,
                  "Optimizer attributes: numbers, or true/false for nesterov, amsgrad, centered, "
                  "bias_correction (repeatable)")
      ->type_name("\"lr=0.001,momentum=0.9\"")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  compile
      .add_option("--opt-group", args.opt_groups,
                  "A param group: these weights take these attributes instead of the "
                  "optimizer's (repeatable; the i-th is group i, from 0, whose variables "
                  "SetOptimizer names group/<i>/<attr>)")
      ->type_name("\"fc.bias,ln.weight:weight_decay=0\"")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  compile.add_option("--freeze", args.freeze, "Initializers not to train (repeatable)")
      ->type_name("NAME,...")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  compile
      .add_option("--buffer", args.buffers,
                  "A buffer the model updates in place: initializer NAME takes VALUE (a value "
                  "the model computes) after every micro-batch (repeatable; BatchNorm running "
                  "statistics need none)")
      ->type_name("NAME=VALUE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// ---------------------------------------------------------------- inspect

struct InspectArgs {
  std::string executable;
};

// The weights a session takes for this executable (WriteWeights names),
// exactly as the server's Program computes them, and the names tied to them.
struct Weights {
  std::vector<compiler::TensorSpec> specs;
  std::map<std::string, std::string> aliases;  // PyTorch name -> weight
};

absl::StatusOr<Weights> WeightSpecs(const compiler::Executable& e) {
  IPUPOD_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::Program> program,
      runtime::Program::Create(std::make_shared<const compiler::Executable>(e)));
  return Weights{program->weight_specs(), program->weight_aliases()};
}

Json WeightsJson(const Weights& weights) {
  Json list = Json::array();
  for (const compiler::TensorSpec& w : weights.specs) {
    list.push_back(
        {{"name", w.name}, {"dtype", std::string(tensor::DTypeName(w.dtype))}, {"shape", w.shape}});
  }
  for (const auto& [alias, weight] : weights.aliases) {
    list.push_back({{"name", alias}, {"tied_to", weight}});
  }
  return list;
}

Json InspectJson(const InspectArgs& args, const compiler::Executable& e, const Weights& weights) {
  Json doc = {{"file", args.executable},
              {"format_version", compiler::kExecutableFormatVersion},
              {"producer", e.producer},
              {"sha256", e.content_hash},
              {"mode", std::string(compiler::ExecutableModeName(e.mode))},
              {"execution", std::string(compiler::ExecutionStrategyName(e.strategy))},
              {"ipus",
               {{"per_replica", e.ipus.ipus_per_replica},
                {"needed", e.ipus.needed},
                {"reserved", e.ipus.reserved}}},
              {"placement",
               {{"method", std::string(compiler::PlacementMethodName(e.placement.method))},
                {"stages", e.placement.num_stages()},
                {"stage_ipus", e.placement.stage_ipu}}},
              {"micro_batch_size", e.micro_batch_size},
              {"device_iterations", e.device_iterations},
              {"replication_factor", e.replication_factor},
              {"samples_per_step", SamplesPerStep(e)},
              {"output_mode", compiler::OutputModeName(e.output_mode)},
              {"inputs", SpecsJson(e, e.inputs, true)},
              {"outputs", SpecsJson(e, e.outputs, false)},
              {"weights", WeightsJson(weights)},
              {"ipu_config", Json::parse(compiler::IpuConfigToJson(e.config))},
              {"warnings", e.warnings}};
  if (IsTraining(e)) {
    doc["gradient_accumulation_steps"] = e.training.gradient_accumulation_steps;
    doc["training"] = Json::parse(compiler::TrainingSpecJson(e.training));
  }
  if (e.placement.phased()) doc["placement"]["stage_phases"] = e.placement.stage_phase;
  return doc;
}

std::string LinesText(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) absl::StrAppend(&text, "  ", line, "\n");
  return text;
}

std::string InspectText(const InspectArgs& args, const compiler::Executable& e,
                        const Weights& weights) {
  std::vector<std::string> weight_lines;
  for (const compiler::TensorSpec& w : weights.specs) {
    weight_lines.push_back(absl::StrCat(w.name, " ", tensor::DTypeName(w.dtype), "[",
                                        absl::StrJoin(w.shape, ","), "]"));
  }
  for (const auto& [alias, weight] : weights.aliases) {
    weight_lines.push_back(absl::StrCat(alias, " = ", weight, " (tied: one tensor)"));
  }
  std::string text = absl::StrCat(
      args.executable, ": ", compiler::ExecutableModeName(e.mode), " executable, format ",
      compiler::kExecutableFormatVersion, ", by ", e.producer, ", sha256 ", e.content_hash, "\n",
      "ipus: ", e.ipus.needed, " (", e.ipus.ipus_per_replica, " per replica x ",
      e.replication_factor, e.replication_factor == 1 ? " replica" : " replicas", "), reserves ",
      e.ipus.reserved, "; ", compiler::ExecutionStrategyName(e.strategy), ", stages on IPUs [",
      absl::StrJoin(e.placement.stage_ipu, ","), "]",
      e.placement.phased()
          ? absl::StrCat(" in phases [", absl::StrJoin(e.placement.stage_phase, ","), "]")
          : "",
      " (", compiler::PlacementMethodName(e.placement.method), ")\n", "step: ", SamplesPerStep(e),
      " samples (", runtime::StepSizeText(e), "); output mode ",
      compiler::OutputModeName(e.output_mode), "\n", "inputs per step:\n",
      LinesText(SpecLines(e, e.inputs, true)), "outputs per step:\n",
      LinesText(SpecLines(e, e.outputs, false)), "weights (", weights.specs.size(), "):\n",
      LinesText(weight_lines));
  if (IsTraining(e)) absl::StrAppend(&text, TrainingText(e.training));
  absl::StrAppend(&text, "ipu_config: ", compiler::IpuConfigToJson(e.config), "\n");
  for (const std::string& w : e.warnings) absl::StrAppend(&text, "warning: ", w, "\n");
  return text;
}

int RunInspect(Context& ctx, const InspectArgs& args) {
  absl::StatusOr<std::string> bytes = client::ReadWholeFile(args.executable, "executable");
  if (!bytes.ok()) return ctx.Fail(bytes.status());
  absl::StatusOr<compiler::Executable> e = compiler::ReadExecutable(*bytes);
  if (!e.ok()) return ctx.Fail(WithContext(e.status(), args.executable));
  absl::StatusOr<Weights> weights = WeightSpecs(*e);
  if (!weights.ok()) return ctx.Fail(WithContext(weights.status(), args.executable));
  return ctx.Print(InspectJson(args, *e, *weights), InspectText(args, *e, *weights));
}

// The compile command's help after its options: what it does, the exit
// codes and examples.
const char* CompileFooter() {
  return "Compiles on this machine; no server is needed. With --remote the server compiles\n"
         "(the model is uploaded once, by its SHA-256; the config and module map are read here)\n"
         "and the executable stays in its cache for you (`ipupod run` finds it there) as well\n"
         "as being written to -o. Placement: --module-map if given,\n"
         "else the model's PopART __ipu_number/__pipeline_stage attributes, else layers_per_ipu.\n"
         "With executable_cache_dir set in the config, an unchanged model and config are\n"
         "read from the cache instead of compiled again.\n"
         "An out-of-memory failure prints the report table (stderr) with the error.\n"
         "--train compiles for training with the config's training keys (replication_factor,\n"
         "device_iterations, gradient_accumulation_steps, layers_per_ipu, output_mode,\n"
         "optimizer_state_offchip, recompute_checkpoint_every_layer); the model must output its\n"
         "loss (`return out, loss`). --opt attributes are variables (changeable between runs),\n"
         "the others constants; lr is always a variable. Param groups (torch's param_groups):\n"
         "--opt-group \"W1,W2:NAME=VALUE,...\" gives weights W1 and W2 attributes of their own,\n"
         "each a variable of the group (the i-th --opt-group is group i, from 0, and a run sets\n"
         "its lr as group/<i>/lr); what a group does not set follows the optimizer's value.\n"
         "nesterov, amsgrad, centered, bias_correction, loss_scaling and the accum types must\n"
         "be the same for every group. --report adds gradients and optimizer\n"
         "state per IPU. Buffers: a BatchNormalization exported in training mode\n"
         "(torch.onnx.export(..., training=torch.onnx.TrainingMode.TRAINING)) updates its running\n"
         "statistics on every micro-batch; --buffer names any other state the model updates.\n"
         "float16: a model whose weights, inputs and outputs are FLOAT16 runs in float16 (export "
         "in\n"
         "float32 and convert the graph; docs/differences.md has the numerics). "
         "enable_half_partials\n"
         "(default true) sums its products in float16. To train it, scale the loss: --opt\n"
         "loss_scaling=1024, or --set auto_loss_scaling=true to let the scale move by itself.\n"
         "\n"
         "Exit codes: 0 ok, 2 a bad command line (training flags without --train, an unknown\n"
         "optimizer or attribute, a malformed --opt-group or one giving a flag another value),\n"
         "3 a file does not exist (named in the message), 9 a bad --ipu-config/--set/--module-map\n"
         "value, 12 the model does not compile with this config (placement, run shape, out of\n"
         "IPU memory, no such loss or weight, also in a group, an op without a backward rule),\n"
         "1 an I/O error. With --remote also the server's: 8 it cannot be\n"
         "reached, 5 a bound (the model's size, compiles at once, its memory), 6 its compile\n"
         "time limit, 4 no permission.\n"
         "\n"
         "Examples:\n"
         "  ipupod compile gpt2.onnx --ipu-config ipu_config.json -o gpt2.ipx --report\n"
         "  ipupod compile mlp.onnx --set \"inference_device_iterations=4,layers_per_ipu=[2 2]\"\n"
         "  ipupod --server pod.example.org:50051 compile mlp.onnx --remote --train\n"
         "  ipupod compile bert.onnx --module-map map.json --report --json | jq .report.ipus\n"
         "  ipupod compile mlp.onnx --train --optimizer adam --opt lr=0.001 --freeze fc1.w \\\n"
         "      --set gradient_accumulation_steps=4 --report\n"
         "  ipupod compile bert.onnx --train --optimizer adamw --opt lr=5e-5,weight_decay=0.01 \\\n"
         "      --opt-group \"fc.bias,ln.weight,ln.bias:weight_decay=0\"  # optimum's grouping";
}

}  // namespace

void AddCompileCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* compile = app.add_subcommand(
      "compile", "Compile an ONNX model into an .ipx executable (here, or --remote on the server)");
  compile->add_option("MODEL", args->model, "The ONNX model (as torch.onnx.export writes it)")
      ->type_name("MODEL.onnx")
      ->required();
  compile
      ->add_option("--ipu-config", args->ipu_config,
                   "optimum-graphcore ipu_config.json (default: every key at its default)")
      ->type_name("FILE");
  compile
      ->add_option("--set", args->sets,
                   "Override config keys, as IPUConfig.update_from_string (repeatable)")
      ->type_name("\"k=v,k2=[1 2]\"")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  compile
      ->add_option("--module-map", args->module_map,
                   "JSON {\"module.path\": ipu, ...} placing modules on IPUs")
      ->type_name("FILE");
  compile->add_option("-o,--output", args->output, "The executable to write (default MODEL.ipx)")
      ->type_name("FILE.ipx");
  compile->add_flag("--remote", args->remote,
                    "Compile on the server (ipupodd) instead of this machine; the executable "
                    "stays in the server's cache and is written to -o too");
  compile->add_flag("--report", args->report,
                    "Print the memory and time report per IPU (JSON under \"report\" with --json)");
  AddTrainingFlags(*compile, *args);
  compile->footer(CompileFooter());
  OnSelected(compile, selection, "compile",
             [args](Context& ctx) { return RunCompile(ctx, *args); });
}

void AddInspectCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* inspect =
      app.add_subcommand("inspect", "Show what an .ipx executable takes and makes (offline)");
  inspect->add_option("EXECUTABLE", args->executable, "The executable (ipupod compile writes it)")
      ->type_name("MODEL.ipx")
      ->required();
  inspect->footer(
      "Reads the file on this machine; no server is needed. Shows the format version and\n"
      "producer, the IPUs and placement (the IPU of each pipeline stage), the step size and\n"
      "how it is made, the inputs and outputs of one step with their host shapes (what\n"
      "--inputs and --outputs of `ipupod run` hold, dim 0 being samples), the weights a\n"
      "session takes (names, dtypes, shapes: what --weights may hold), the training spec\n"
      "(loss, trainable weights, buffers, optimizer) and the ipu_config it was compiled with.\n"
      "\n"
      "Exit codes: 0 ok, 3 the file does not exist, 9 it is not an ipupod executable (or\n"
      "another format version: recompile), 1 an I/O error.\n"
      "\n"
      "Examples:\n"
      "  ipupod inspect mlp.ipx\n"
      "  ipupod inspect mlp.ipx --json | jq '.inputs[] | {name, shape}'");
  OnSelected(inspect, selection, "inspect",
             [args](Context& ctx) { return RunInspect(ctx, *args); });
}

}  // namespace ipupod::cli
