// `ipupod submit`: give the server a batch job and return at once.
//
// Order: every check this side can make (BuildSubmitRequest, the files
// exist, the executable is an .ipx), then the uploads (each file once; the
// server's blob store is content-addressed, so a file it holds already -
// the same data set for the tenth job of the day - costs a hash, not a
// transfer), then SubmitJob. A mistake is reported before anything is
// uploaded; the server checks the rest at submit, so a job that can never
// run is refused now, not after hours in the queue.
#include "client/cli/submit.h"

#include <cmath>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/cli/args.h"
#include "client/cli/commands.h"
#include "client/cli/job_output.h"
#include "client/files.h"
#include "client/ipx_header.h"
#include "common/format.h"
#include "common/status_macros.h"
#include "common/tensor/tensor_files.h"

namespace ipupod::cli {
namespace {

// Counts (epochs, weight updates, runs) far beyond any job, short of overflow.
constexpr int64_t kCountMax = int64_t{1} << 40;

absl::Status CheckTrainingFlags(const SubmitArgs& args) {
  if (!args.train) {
    std::vector<std::string> given;
    for (const auto& [flag, value] :
         {std::pair<const char*, const std::string*>{"--epochs", &args.epochs},
          {"--steps", &args.steps},
          {"--lr", &args.lr},
          {"--checkpoint-every", &args.checkpoint_every},
          {"--sweep", &args.sweep}}) {
      if (!value->empty()) given.push_back(flag);
    }
    if (!given.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(absl::StrJoin(given, ", "),
                                                     given.size() == 1 ? " is" : " are",
                                                     " for training jobs: add --train"));
    }
    return absl::OkStatus();
  }
  if (args.epochs.empty() == args.steps.empty()) {
    return absl::InvalidArgumentError(
        "--train needs how long to train: exactly one of --epochs E (passes over --inputs) or "
        "--steps K (weight updates, a multiple of the executable's device_iterations)");
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ParseLearningRate(absl::string_view text) {
  double value = 0;
  if (text != absl::StripAsciiWhitespace(text) || !absl::SimpleAtod(text, &value) ||
      !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr: '", text, "' is not a learning rate; use a number of 0 or more, e.g. 0.01"));
  }
  return value;
}

absl::Status FillTraining(const SubmitArgs& args, v1::SubmitJobRequest& request) {
  IPUPOD_RETURN_IF_ERROR(CheckTrainingFlags(args));
  v1::JobSpec& spec = *request.mutable_spec();
  spec.set_train(args.train);
  if (!args.train) return absl::OkStatus();
  if (!args.epochs.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(int64_t epochs, ParseInteger(args.epochs, "--epochs", 1, kCountMax));
    spec.set_epochs(epochs);
  } else {
    IPUPOD_ASSIGN_OR_RETURN(int64_t steps, ParseInteger(args.steps, "--steps", 1, kCountMax));
    spec.set_steps(steps);
  }
  if (!args.checkpoint_every.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(
        int64_t every, ParseInteger(args.checkpoint_every, "--checkpoint-every", 1, kCountMax));
    spec.set_checkpoint_every(every);
  }
  if (!args.lr.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(double lr, ParseLearningRate(args.lr));
    (*spec.mutable_optimizer())["lr"] = lr;
  }
  if (!args.sweep.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(SweepArg sweep, ParseSweep(args.sweep));
    if (spec.optimizer().count(sweep.variable) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sweep sets ", sweep.variable, " for each job, and --lr sets it too: drop --lr"));
    }
    request.set_sweep(std::string(absl::StripAsciiWhitespace(args.sweep)));
  }
  return absl::OkStatus();
}

absl::Status FillOutputs(const SubmitArgs& args, v1::JobSpec& spec) {
  if (args.outputs.empty()) return absl::OkStatus();
  std::set<std::string> seen;
  for (absl::string_view name : absl::StrSplit(args.outputs, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--outputs: an empty name in '", args.outputs,
          "'; give the ONNX output names to keep, separated by commas (`ipupod inspect` lists "
          "them)"));
    }
    if (!seen.insert(std::string(name)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--outputs: '", name, "' is given twice; name each output once"));
    }
    spec.add_outputs(std::string(name));
  }
  return absl::OkStatus();
}

// The executable's file name, as the job's name when --name is not given
// (the server sees only the blob's hash): made to fit the name's rules.
std::string DefaultJobName(absl::string_view executable) {
  const size_t slash = executable.rfind('/');
  std::string name(slash == absl::string_view::npos ? executable : executable.substr(slash + 1));
  if (name.size() > kJobNameCharsMax) name.resize(kJobNameCharsMax);
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name;
}

absl::Status FillName(const SubmitArgs& args, v1::JobSpec& spec) {
  if (args.name.empty()) {
    spec.set_name(DefaultJobName(args.executable));
    return absl::OkStatus();
  }
  if (args.name.size() > kJobNameCharsMax) {
    return absl::InvalidArgumentError(absl::StrCat("--name: ", args.name.size(),
                                                   " characters is over the limit of ",
                                                   kJobNameCharsMax, "; use a shorter name"));
  }
  for (char c : args.name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          "--name: control characters (newlines, tabs, ...) are not allowed in a job name");
    }
  }
  spec.set_name(args.name);
  return absl::OkStatus();
}

absl::Status FillScheduling(const SubmitArgs& args, v1::JobSpec& spec) {
  if (!args.ipus.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(uint32_t ipus, ParseIpuCount(args.ipus, "--ipus"));
    spec.set_num_ipus(ipus);
  }
  spec.set_partition(args.partition);
  spec.set_auto_round(args.auto_round);
  if (!args.time_limit.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(absl::Duration limit,
                            ParseDuration(args.time_limit, "--time-limit", kTimeLimitMax));
    spec.set_time_limit_seconds(static_cast<uint64_t>(absl::ToInt64Seconds(limit)));
  }
  if (!args.after.empty()) {
    IPUPOD_RETURN_IF_ERROR(CheckJobId(args.after, "--after"));
    spec.set_after(args.after);
  }
  spec.set_account(args.account);  // the server checks them, as for attach
  spec.set_qos(args.qos);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> BlobFormatOf(absl::string_view path, TensorFileRole role) {
  const bool weights = role == TensorFileRole::kWeights;
  const absl::string_view flag = weights ? "--weights" : "--inputs";
  const absl::string_view accepted =
      weights ? ".npz, .safetensors or .onnx (its initializers)" : ".npz or .safetensors (as run)";
  absl::StatusOr<tensor::TensorFileFormat> format = tensor::TensorFileFormatOf(path);
  std::string name;
  if (format.ok()) {
    name = *format == tensor::TensorFileFormat::kNpz           ? "npz"
           : *format == tensor::TensorFileFormat::kSafetensors ? "safetensors"
                                                               : "onnx";
  }
  if (name.empty() || (name == "onnx" && !weights)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot tell the format of '", path,
                                                   "' from its name; use ", accepted));
  }
  return name;
}

absl::StatusOr<v1::SubmitJobRequest> BuildSubmitRequest(const SubmitArgs& args) {
  v1::SubmitJobRequest request;
  v1::JobSpec& spec = *request.mutable_spec();
  IPUPOD_RETURN_IF_ERROR(FillTraining(args, request));
  IPUPOD_RETURN_IF_ERROR(FillOutputs(args, spec));
  IPUPOD_RETURN_IF_ERROR(FillName(args, spec));
  IPUPOD_RETURN_IF_ERROR(FillScheduling(args, spec));
  IPUPOD_ASSIGN_OR_RETURN(std::string inputs_format,
                          BlobFormatOf(args.inputs, TensorFileRole::kInputs));
  spec.mutable_inputs()->set_format(inputs_format);
  if (!args.weights.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(std::string weights_format,
                            BlobFormatOf(args.weights, TensorFileRole::kWeights));
    spec.mutable_weights()->set_format(weights_format);
  }
  return request;
}

namespace {

// The files exist and the executable is an .ipx this CLI can read: found
// before anything is uploaded. Reads only the executable's header.
absl::Status CheckFiles(const SubmitArgs& args) {
  IPUPOD_RETURN_IF_ERROR(client::CheckReadableFile(args.inputs, "--inputs file"));
  if (!args.weights.empty()) {
    IPUPOD_RETURN_IF_ERROR(client::CheckReadableFile(args.weights, "--weights file"));
  }
  std::string header;
  IPUPOD_RETURN_IF_ERROR(client::ForEachFileChunk(args.executable, "executable", 0,
                                                  client::kIpxHeaderBytes,
                                                  [&header](absl::string_view chunk) {
                                                    header = std::string(chunk);
                                                    return false;
                                                  }));
  absl::StatusOr<std::string> hash = client::IpxContentHash(header);
  if (!hash.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(args.executable, ": ", hash.status().message(),
                                                   " (compile it with `ipupod compile`)"));
  }
  return absl::OkStatus();
}

// Uploads one file unless the server holds it; says which on stderr.
absl::StatusOr<std::string> Upload(Context& ctx, client::Client& client, absl::string_view role,
                                   const std::string& path) {
  IPUPOD_ASSIGN_OR_RETURN(v1::BlobRef ref, client.PutBlobFile(path, role));
  ctx.Note({{"blob",
             {{"file", role},
              {"path", path},
              {"sha256", ref.sha256()},
              {"size_bytes", ref.size_bytes()},
              {"already_stored", ref.already_stored()}}}},
           ref.already_stored() ? absl::StrCat(role, " ", path, " already on the server (sha256 ",
                                               ref.sha256().substr(0, 16), ")\n")
                                : absl::StrCat("uploaded ", role, " ", path, " (",
                                               FormatBytesTrimmed(ref.size_bytes()), ", sha256 ",
                                               ref.sha256().substr(0, 16), ")\n"));
  return ref.sha256();
}

absl::Status UploadAll(Context& ctx, client::Client& client, const SubmitArgs& args,
                       v1::JobSpec& spec) {
  IPUPOD_ASSIGN_OR_RETURN(std::string executable,
                          Upload(ctx, client, "executable", args.executable));
  spec.set_executable_sha256(executable);
  IPUPOD_ASSIGN_OR_RETURN(std::string inputs, Upload(ctx, client, "inputs", args.inputs));
  spec.mutable_inputs()->set_sha256(inputs);
  if (!args.weights.empty()) {
    IPUPOD_ASSIGN_OR_RETURN(std::string weights, Upload(ctx, client, "weights", args.weights));
    spec.mutable_weights()->set_sha256(weights);
  }
  return absl::OkStatus();
}

int RunSubmit(Context& ctx, const SubmitArgs& args) {
  absl::StatusOr<v1::SubmitJobRequest> request = BuildSubmitRequest(args);
  if (!request.ok()) return ctx.UsageError(request.status().message());
  if (absl::Status files = CheckFiles(args); !files.ok()) return ctx.Fail(files);
  auto client = ctx.Connect();
  if (!client.ok()) return ctx.Fail(client.status());
  if (absl::Status uploaded = UploadAll(ctx, **client, args, *request->mutable_spec());
      !uploaded.ok()) {
    return ctx.Fail(uploaded, {.partition = args.partition});
  }
  absl::StatusOr<std::vector<v1::Job>> jobs = (*client)->SubmitJob(*request);
  if (!jobs.ok()) return ctx.Fail(jobs.status(), {.partition = args.partition});
  return ctx.Print(JobsJson(*jobs), SubmittedText(*jobs));
}

constexpr char kSubmitFooter[] =
    "Uploads MODEL.ipx, --inputs and --weights into the server's blob store (each only\n"
    "if the server does not hold those bytes yet: \"already on the server\"), submits the job\n"
    "and prints its id (--json: the job records, {\"jobs\": [...]}). It returns at once: the\n"
    "server queues the job with interactive attaches, runs it, recovers it from faults and\n"
    "restarts, and keeps its results until `ipupod job fetch` and `ipupod job delete`.\n"
    "\n"
    "Inference runs every step of --inputs (an .npz or .safetensors) and keeps the\n"
    "outputs named by --outputs (all by default). --train trains as `ipupod run --train`\n"
    "does for --epochs E or --steps K; --lr sets the learning rate, --checkpoint-every N\n"
    "takes a host copy every N runs (where the job resumes after a restart). --sweep\n"
    "\"lr=0.1,0.01\" makes one job per value (ids J.0, J.1, ...). --after J starts the job\n"
    "only once job J has COMPLETED, and cancels it if J fails or is cancelled.\n"
    "--time-limit DURATION (90s, 30m, 2h, 1d, 1h30m; at most 30d) ends the job TIMEOUT when\n"
    "it runs longer. --ipus N (default: what the executable reserves), --partition P and\n"
    "--auto-round choose the IPUs as for `ipupod attach`. --account A and --qos Q charge\n"
    "and order the job as an attach (default: your default account, QoS normal); a\n"
    "scavenger job may be preempted: it is requeued and resumes from its last checkpoint.\n"
    "\n"
    "Bad flags exit 2 before anything is uploaded; a job the server can never run (the\n"
    "executable does not load on this pod, the inputs do not match it) is refused at\n"
    "submit (exit 9); an account or QoS you may not use exits 4; a full blob store, or\n"
    "more pending jobs than a max_jobs_pending limit allows, exits 5 naming the limit.\n"
    "\n";

constexpr char kSubmitExamples[] =
    "\n"
    "Examples:\n"
    "  ipupod submit gpt2.ipx --inputs batch.npz --outputs logits --name gpt2-eval\n"
    "  ipupod submit mlp_train.ipx --inputs data.npz --train --epochs 3 --lr 0.05 \\\n"
    "      --checkpoint-every 10 --time-limit 2h\n"
    "  ipupod submit mlp_train.ipx --inputs data.npz --train --steps 800 \\\n"
    "      --sweep \"lr=0.1,0.01,0.001\"\n"
    "  ipupod submit mlp.ipx --inputs x.npz --weights trained.npz --after 17.2\n"
    "  ipupod submit mlp_train.ipx --inputs data.npz --train --epochs 1 --account vision \\\n"
    "      --qos scavenger --checkpoint-every 5\n"
    "  ipupod --json submit mlp.ipx --inputs x.npz | jq -r '.jobs[].id'";

void AddTrainingOptions(CLI::App* submit, SubmitArgs& args) {
  submit->add_flag("--train", args.train, "A training job (a `compile --train` executable)");
  submit->add_option("--epochs", args.epochs, "Train for E passes over --inputs")->type_name("E");
  submit->add_option("--steps", args.steps, "Train for K weight updates")->type_name("K");
  submit->add_option("--lr", args.lr, "The learning rate (optimizer variable lr)")->type_name("X");
  submit
      ->add_option("--checkpoint-every", args.checkpoint_every,
                   "A host copy of the training state every N runs (default: every run)")
      ->type_name("N");
  submit->add_option("--sweep", args.sweep, "One job per value of an optimizer variable")
      ->type_name("\"NAME=V1,V2,...\"");
}

}  // namespace

void AddSubmitCommand(CLI::App& app, Selection& selection) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* submit = app.add_subcommand("submit", "Submit a batch job; the server runs it");
  submit->add_option("EXECUTABLE", args->executable, "The executable (ipupod compile writes it)")
      ->type_name("MODEL.ipx")
      ->required();
  submit->add_option("--inputs", args->inputs, "Inputs by ONNX input name, samples along dim 0")
      ->type_name("FILE.npz")
      ->required();
  submit->add_option("--weights", args->weights, "Weights to load first, by initializer name")
      ->type_name("FILE(.npz|.safetensors|.onnx)");
  submit->add_option("--outputs", args->outputs, "Outputs to keep (default: all)")
      ->type_name("NAME,NAME");
  AddTrainingOptions(submit, *args);
  submit->add_option("--ipus", args->ipus, "IPUs (default: what the executable reserves)")
      ->type_name("N");
  submit->add_option("--partition", args->partition, "Run inside this partition you own")
      ->type_name("NAME");
  submit->add_flag("--auto-round", args->auto_round, "Round --ipus up to a power of two");
  submit
      ->add_option("--name", args->name,
                   "A name for `ipupod jobs` (default: MODEL.ipx's file name)")
      ->type_name("NAME");
  submit->add_option("--time-limit", args->time_limit, "End the job TIMEOUT after this long")
      ->type_name("DURATION");
  submit->add_option("--after", args->after, "Start only once this job has COMPLETED")
      ->type_name("JOB_ID");
  submit->add_option("--account", args->account, "Charge this account (default: your default)")
      ->type_name("ACCOUNT");
  submit->add_option("--qos", args->qos, "Quality of service: normal (default), high, scavenger")
      ->type_name("QOS");
  submit->footer(absl::StrCat(kSubmitFooter, kJobStatesHelp, kSubmitExamples));
  OnSelected(submit, selection, "submit", [args](Context& ctx) { return RunSubmit(ctx, *args); });
}

}  // namespace ipupod::cli
