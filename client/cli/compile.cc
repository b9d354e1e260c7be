// `ipupod compile`: ONNX model + ipu_config.json -> .ipx executable, offline
// (no server). The compiler does the work (compiler/compile.h); this file
// reads the inputs, maps failures to exit codes and prints the result.
//
// Exit codes: 3 a file does not exist (the message names it), 9 a bad
// --ipu-config / --set / --module-map value, 12 the model does not compile
// with this config (placement, run shape, out of IPU memory), 1 I/O errors.
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/exit_codes.h"
#include "client/files.h"
#include "compiler/compile.h"
#include "compiler/executable.h"
#include "compiler/ipu_config.h"
#include "compiler/placement.h"
#include "compiler/report.h"

namespace ipupod::cli {
namespace {

struct CompileArgs {
  std::string model;
  std::string ipu_config;
  std::vector<std::string> sets;
  std::string module_map;
  std::string output;
  bool report = false;
};

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// The config file (if any) with every --set applied; warnings go to stderr.
absl::StatusOr<compiler::IpuConfig> LoadConfig(Context& ctx, const CompileArgs& args) {
  compiler::IpuConfig config;
  if (!args.ipu_config.empty()) {
    absl::StatusOr<std::string> text = client::ReadWholeFile(args.ipu_config, "--ipu-config file");
    if (!text.ok()) return text.status();
    absl::StatusOr<compiler::ParsedIpuConfig> parsed = compiler::ParseIpuConfigJson(*text);
    if (!parsed.ok()) return WithContext(parsed.status(), absl::StrCat("in ", args.ipu_config));
    for (const std::string& warning : parsed->warnings) {
      ctx.Note({{"warning", absl::StrCat(args.ipu_config, ": ", warning)}},
               absl::StrCat("warning: ", args.ipu_config, ": ", warning, "\n"));
    }
    config = std::move(parsed->config);
  }
  for (const std::string& update : args.sets) {
    absl::Status updated = compiler::UpdateFromString(config, update);
    if (!updated.ok()) return WithContext(updated, absl::StrCat("--set '", update, "'"));
  }
  return config;
}

absl::StatusOr<compiler::CompileOptions> LoadCompileOptions(const CompileArgs& args) {
  compiler::CompileOptions options;
  if (args.module_map.empty()) return options;
  absl::StatusOr<std::string> text = client::ReadWholeFile(args.module_map, "--module-map file");
  if (!text.ok()) return text.status();
  absl::StatusOr<compiler::ModuleMap> map = compiler::ParseModuleMapJson(*text);
  if (!map.ok()) return WithContext(map.status(), absl::StrCat("in ", args.module_map));
  options.module_map = *std::move(map);
  return options;
}

Json SpecsJson(const compiler::Executable& e, const std::vector<compiler::TensorSpec>& specs,
               bool inputs) {
  Json list = Json::array();
  for (const compiler::TensorSpec& spec : specs) {
    list.push_back({{"name", spec.name},
                    {"dtype", std::string(graph::DTypeName(spec.dtype))},
                    {"shape", inputs ? compiler::HostInputShape(e, spec)
                                     : compiler::HostOutputShape(e, spec)}});
  }
  return list;
}

std::string SpecsText(const compiler::Executable& e,
                      const std::vector<compiler::TensorSpec>& specs, bool inputs) {
  std::vector<std::string> parts;
  for (const compiler::TensorSpec& spec : specs) {
    graph::Shape shape =
        inputs ? compiler::HostInputShape(e, spec) : compiler::HostOutputShape(e, spec);
    parts.push_back(absl::StrCat(spec.name, " ", graph::DTypeName(spec.dtype), "[",
                                 absl::StrJoin(shape, ","), "]"));
  }
  return absl::StrJoin(parts, ", ");
}

int64_t SamplesPerStep(const compiler::Executable& e) {
  return e.micro_batch_size * e.device_iterations * e.replication_factor;
}

Json CompiledJson(const CompileArgs& args, const compiler::CachedCompile& compiled,
                  uint64_t size_bytes, const compiler::Report* report) {
  const compiler::Executable& e = compiled.executable;
  Json doc = {{"model", args.model},
              {"output", args.output},
              {"sha256", e.content_hash},
              {"size_bytes", size_bytes},
              {"cache_hit", compiled.cache_hit},
              {"cache_path", compiled.path},
              {"ipus",
               {{"per_replica", e.ipus.ipus_per_replica},
                {"needed", e.ipus.needed},
                {"reserved", e.ipus.reserved}}},
              {"execution", std::string(compiler::ExecutionStrategyName(e.strategy))},
              {"stages", e.placement.num_stages()},
              {"micro_batch_size", e.micro_batch_size},
              {"device_iterations", e.device_iterations},
              {"replication_factor", e.replication_factor},
              {"samples_per_step", SamplesPerStep(e)},
              {"output_mode", compiler::OutputModeName(e.output_mode)},
              {"inputs", SpecsJson(e, e.inputs, true)},
              {"outputs", SpecsJson(e, e.outputs, false)},
              {"warnings", e.warnings}};
  if (report != nullptr) doc["report"] = Json::parse(report->Json());
  return doc;
}

std::string CompiledText(const CompileArgs& args, const compiler::CachedCompile& compiled,
                         uint64_t size_bytes, const compiler::Report* report) {
  const compiler::Executable& e = compiled.executable;
  std::string text = absl::StrCat(
      "compiled ", args.model, " -> ", args.output, " (", FormatBytes(size_bytes), ", sha256 ",
      e.content_hash.substr(0, 16), compiled.cache_hit ? ", from the executable cache" : "", ")\n",
      "ipus: ", e.ipus.needed, " (", e.ipus.ipus_per_replica, " per replica x ",
      e.replication_factor, e.replication_factor == 1 ? " replica" : " replicas", ")",
      e.ipus.idle() > 0 ? absl::StrCat("; reserves ", e.ipus.reserved, " (auto-round)") : "",
      ", ", compiler::ExecutionStrategyName(e.strategy), " over ", e.placement.num_stages(),
      e.placement.num_stages() == 1 ? " stage\n" : " stages\n", "step: ", SamplesPerStep(e),
      " samples (micro-batch ", e.micro_batch_size, " x ", e.device_iterations,
      " device iterations x ", e.replication_factor, " replication); output mode ",
      compiler::OutputModeName(e.output_mode), "\n", "inputs per step: ",
      SpecsText(e, e.inputs, true), "\n", "outputs per step: ", SpecsText(e, e.outputs, false),
      "\n");
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

int RunCompile(Context& ctx, CompileArgs args) {
  if (args.output.empty()) {
    args.output = client::ReplaceExtension(args.model, compiler::kExecutableExtension);
  }
  if (args.output == args.model) {
    return ctx.UsageError(absl::StrCat("the output '", args.output,
                                       "' would overwrite the model; pass -o FILE.ipx"));
  }
  absl::StatusOr<std::string> model = client::ReadWholeFile(args.model, "model");
  if (!model.ok()) return ctx.Fail(model.status());
  absl::StatusOr<compiler::IpuConfig> config = LoadConfig(ctx, args);
  if (!config.ok()) return ctx.Fail(config.status());
  absl::StatusOr<compiler::CompileOptions> options = LoadCompileOptions(args);
  if (!options.ok()) return ctx.Fail(options.status());
  compiler::Report report;
  absl::StatusOr<compiler::CachedCompile> compiled =
      compiler::CompileCached(*model, *config, *options, &report);
  if (!compiled.ok()) return FailCompile(ctx, compiled.status(), report);
  for (const std::string& warning : compiled->executable.warnings) {
    ctx.Note({{"warning", warning}}, absl::StrCat("warning: ", warning, "\n"));
  }
  absl::Status written = compiler::WriteExecutableFile(args.output, compiled->executable);
  if (!written.ok()) return ctx.Fail(WithContext(written, absl::StrCat("writing ", args.output)));
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(args.output, ec);
  const compiler::Report* shown = args.report ? &report : nullptr;
  return ctx.Print(CompiledJson(args, *compiled, ec ? 0 : size, shown),
                   CompiledText(args, *compiled, ec ? 0 : size, shown));
}

}  // namespace

void AddCompileCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* compile =
      app.add_subcommand("compile", "Compile an ONNX model into an .ipx executable (offline)");
  compile->add_option("MODEL", args->model, "The ONNX model (as torch.onnx.export writes it)")
      ->type_name("MODEL.onnx")
      ->required();
  compile->add_option("--ipu-config", args->ipu_config,
                      "optimum-graphcore ipu_config.json (default: every key at its default)")
      ->type_name("FILE");
  compile->add_option("--set", args->sets,
                      "Override config keys, as IPUConfig.update_from_string (repeatable)")
      ->type_name("\"k=v,k2=[1 2]\"")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  compile->add_option("--module-map", args->module_map,
                      "JSON {\"module.path\": ipu, ...} placing modules on IPUs")
      ->type_name("FILE");
  compile->add_option("-o,--output", args->output, "The executable to write (default MODEL.ipx)")
      ->type_name("FILE.ipx");
  compile->add_flag("--report", args->report,
                    "Print the memory and time report per IPU (JSON under \"report\" with --json)");
  compile->footer(
      "Compiles on this machine; no server is needed. Placement: --module-map if given,\n"
      "else the model's PopART __ipu_number/__pipeline_stage attributes, else layers_per_ipu.\n"
      "With executable_cache_dir set in the config, an unchanged model and config are\n"
      "read from the cache instead of compiled again.\n"
      "An out-of-memory failure prints the report table (stderr) with the error.\n"
      "\n"
      "Exit codes: 0 ok, 3 a file does not exist (named in the message), 9 a bad\n"
      "--ipu-config/--set/--module-map value, 12 the model does not compile with this config\n"
      "(placement, run shape, out of IPU memory), 1 an I/O error.\n"
      "\n"
      "Examples:\n"
      "  ipupod compile gpt2.onnx --ipu-config ipu_config.json -o gpt2.ipx --report\n"
      "  ipupod compile mlp.onnx --set \"inference_device_iterations=4,layers_per_ipu=[2 2]\"\n"
      "  ipupod compile bert.onnx --module-map map.json --report --json | jq .report.ipus");
  OnSelected(compile, selection, "compile",
             [args](Context& ctx) { return RunCompile(ctx, *args); });
}

}  // namespace ipupod::cli
