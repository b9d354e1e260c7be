// The `ipupod` command line in-process: usage errors (exit 2, never sent to
// a server), help, JSON error documents and the unreachable-server path.
#include "client/cli/app.h"

#include <new>
#include <sstream>
#include <stdexcept>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/cli/context.h"
#include "client/cli/exit_codes.h"

namespace ipupod::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

struct Result {
  int code;
  std::string out;
  std::string err;
};

Result Ipupod(std::vector<std::string> args) {
  args.insert(args.begin(), "ipupod");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  EnvLookup no_env = [](absl::string_view) -> std::optional<std::string> { return std::nullopt; };
  int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, no_env);
  return {code, out.str(), err.str()};
}

TEST(AppTest, BadNumbersAreUsageErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"partition", "create", "p", "--size", "-4"},
           {"partition", "create", "p", "--size", "99999999999999"},
           {"partition", "create", "p", "--size", "four"},
           {"attach", "--ipus", "-1"},
           {"attach", "--ipus=-1"},
           {"attach", "--ipus", "2", "--wait-timeout", "-3"},
           {"ipu", "reset", "x"},
           {"ipu", "repair", "-1"},
           {"fault", "inject", "--ipu", "-1", "--kind", "ipu-reset"},
           {"fault", "inject", "--ipu", "1", "--kind", "bogus"},
           {"--timeout", "0", "info"},
           {"--timeout", "abc", "info"},
       }) {
    Result r = Ipupod(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args.back();
    EXPECT_THAT(r.err, HasSubstr("error: ")) << args.back();
    EXPECT_THAT(r.err, HasSubstr("--help` for usage")) << args.back();
    EXPECT_THAT(r.out, IsEmpty());
  }
}

TEST(AppTest, ParseErrorsExitTwoNotCli11Codes) {
  EXPECT_EQ(Ipupod({}).code, 2);
  EXPECT_EQ(Ipupod({"partition"}).code, 2);
  EXPECT_EQ(Ipupod({"bogus"}).code, 2);
  EXPECT_THAT(Ipupod({"bogus"}).err, HasSubstr("unknown command 'bogus'"));
  EXPECT_EQ(Ipupod({"info", "--bogus"}).code, 2);
  EXPECT_EQ(Ipupod({"attach"}).code, 2) << "--ipus is required";
  EXPECT_EQ(Ipupod({"partition", "create", "p"}).code, 2) << "--size is required";
  EXPECT_EQ(Ipupod({"--server"}).code, 2);
}

TEST(AppTest, CommandsGoAfterDoubleDashAndOnlyForAttach) {
  Result missing = Ipupod({"attach", "--ipus", "2", "python", "x.py"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("put it after --"));
  EXPECT_EQ(Ipupod({"attach", "--ipus", "2", "--"}).code, 2);
  Result info = Ipupod({"info", "--", "ls"});
  EXPECT_EQ(info.code, 2);
  EXPECT_THAT(info.err, HasSubstr("only `ipupod attach`"));
}

TEST(AppTest, JsonUsageErrorIsOneDocumentOnStdout) {
  Result r = Ipupod({"--json", "partition", "create", "p", "--size", "-4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, IsEmpty());
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_THAT(doc["error"]["message"].get<std::string>(), HasSubstr("--size"));
  // --json after the command counts too.
  Result after = Ipupod({"partition", "create", "p", "--size", "x", "--json"});
  EXPECT_EQ(nlohmann::json::parse(after.out)["error"]["usage"], true);
}

TEST(AppTest, HelpExitsZeroWithAnExample) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"info", "--help"},
                                             {"partition", "--help"},
                                             {"partition", "create", "--help"},
                                             {"attach", "--help"},
                                             {"queue", "--help"},
                                             {"session", "show", "--help"},
                                             {"fault", "inject", "--help"},
                                             {"compile", "--help"}}) {
    Result r = Ipupod(args);
    EXPECT_EQ(r.code, 0) << args[0];
    EXPECT_THAT(r.out, HasSubstr("xample")) << args[0];
  }
  EXPECT_THAT(Ipupod({"--version"}).out, HasSubstr("ipupod "));
}

TEST(AppTest, PartitionCreateHelpDescribesBestFit) {
  Result r = Ipupod({"partition", "create", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("best fit"));
  EXPECT_THAT(r.out, Not(HasSubstr("first free")));
}

TEST(AppTest, CompileTrainingFlagsAreCheckedBeforeTheModelIsRead) {
  // The model does not exist: these fail as usage errors (2), not 3.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"compile", "absent.onnx", "--loss", "loss"},
           {"compile", "absent.onnx", "--optimizer", "adam"},
           {"compile", "absent.onnx", "--opt", "lr=0.1"},
           {"compile", "absent.onnx", "--freeze", "fc1.w"},
           {"compile", "absent.onnx", "--train", "--optimizer", "adagrad"},
           {"compile", "absent.onnx", "--train", "--opt", "lr"},
           {"compile", "absent.onnx", "--train", "--opt", "lr=fast"},
           {"compile", "absent.onnx", "--train", "--opt", "beta1=0.9"},
           {"compile", "absent.onnx", "--train", "--opt", "lr=-1"},
       }) {
    Result r = Ipupod(args);
    EXPECT_EQ(r.code, 2) << args[2] << " " << args.back() << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("error: ")) << args.back();
  }
  EXPECT_THAT(Ipupod({"compile", "absent.onnx", "--loss", "loss"}).err, HasSubstr("need --train"));
  EXPECT_THAT(Ipupod({"compile", "absent.onnx", "--train", "--optimizer", "adagrad"}).err,
              HasSubstr("--optimizer"));
  EXPECT_THAT(Ipupod({"compile", "absent.onnx", "--train", "--opt", "beta1=0.9"}).err,
              HasSubstr("beta1"));
  // Well-formed training flags get as far as reading the model.
  EXPECT_EQ(Ipupod({"compile", "absent.onnx", "--train", "--optimizer", "adam", "--opt",
                    "lr=0.001,amsgrad=true", "--freeze", "a,b"})
                .code,
            3);
  Result help = Ipupod({"compile", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, AllOf(HasSubstr("--train"), HasSubstr("--optimizer"),
                              HasSubstr("ipupod compile mlp.onnx --train")));
}

TEST(AppTest, CompileOptGroupIsCheckedBeforeTheModelIsRead) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"compile", "absent.onnx", "--opt-group", "b:lr=0.1"},
           {"compile", "absent.onnx", "--train", "--opt-group", "b"},
           {"compile", "absent.onnx", "--train", "--opt-group", ":lr=0.1"},
           {"compile", "absent.onnx", "--train", "--opt-group", "b:"},
           {"compile", "absent.onnx", "--train", "--opt-group", "b:beta1=0.5"},
           {"compile", "absent.onnx", "--train", "--opt", "momentum=0.9", "--opt-group",
            "b:nesterov=true"},
       }) {
    Result r = Ipupod(args);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("error: ")) << args.back();
  }
  EXPECT_THAT(Ipupod({"compile", "absent.onnx", "--train", "--opt-group", "b"}).err,
              HasSubstr("WEIGHT,...:NAME=VALUE"));
  EXPECT_THAT(Ipupod({"compile", "absent.onnx", "--train", "--opt", "momentum=0.9", "--opt-group",
                      "b:nesterov=true"})
                  .err,
              HasSubstr("same for every param group"));
  EXPECT_EQ(Ipupod({"compile", "absent.onnx", "--train", "--optimizer", "adamw", "--opt-group",
                    "fc.bias,ln.weight:weight_decay=0", "--opt-group", "fc.weight:lr=0.1"})
                .code,
            3);
  Result help = Ipupod({"compile", "--help"});
  EXPECT_THAT(help.out, AllOf(HasSubstr("--opt-group"), HasSubstr("group/<i>/lr"),
                              HasSubstr("fc.bias,ln.weight,ln.bias:weight_decay=0")));
}

TEST(AppTest, UnreachableServerIsUnavailableWithTheAddress) {
  Result human = Ipupod({"--server", "127.0.0.1:1", "info"});
  EXPECT_EQ(human.code, 8);
  EXPECT_THAT(human.err, HasSubstr("cannot reach ipupodd at 127.0.0.1:1"));
  Result json = Ipupod({"info", "--json", "--server", "127.0.0.1:1"});
  EXPECT_EQ(json.code, 8);
  nlohmann::json doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["error"]["code"], "UNAVAILABLE");
  EXPECT_THAT(json.err, IsEmpty());
}

TEST(AppTest, UnusableTokenIsRefusedBeforeSending) {
  Result r = Ipupod({"--server", "127.0.0.1:1", "--token", std::string(10000, 'x'), "info"});
  EXPECT_EQ(r.code, 4);
  EXPECT_THAT(r.err, HasSubstr("not a valid ipupod token"));
}

// A token for another machine without TLS is refused before anything is
// sent (a usage error), but only by commands that connect: an offline one
// run where $IPUPOD_SERVER and $IPUPOD_TOKEN name a remote pod still works.
TEST(AppTest, AClearTextTokenIsRefusedOnlyByCommandsThatConnect) {
  Result info = Ipupod({"--server", "10.0.0.5:50051", "--token", "secret", "info"});
  EXPECT_EQ(info.code, 2);
  EXPECT_THAT(info.err, HasSubstr("refusing to send the token to 10.0.0.5:50051 in clear text"));
  Result inspect = Ipupod(
      {"--server", "10.0.0.5:50051", "--token", "secret", "inspect", "/nonexistent/model.ipx"});
  EXPECT_EQ(inspect.code, 3) << inspect.err;  // the file's error, not the token's
  EXPECT_THAT(inspect.err, Not(HasSubstr("clear text")));
}

// The server refuses names over 64 characters; the CLI sent 256 before
// finding out (exit 8 here, with no server). Now it refuses them itself,
// with the server's message, before connecting.
TEST(AppTest, UserNamesTheServerWouldRefuseAreRefusedBeforeSending) {
  Result r = Ipupod({"--server", "127.0.0.1:1", "--user", std::string(65, 'u'), "info"});
  EXPECT_EQ(r.code, 9) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is not valid: use 1-64 characters from A-Z a-z 0-9 . _ - @"));
  Result json = Ipupod({"--json", "--server", "127.0.0.1:1", "--user", "a b", "info"});
  EXPECT_EQ(json.code, 9);
  EXPECT_THAT(nlohmann::json::parse(json.out)["error"]["message"].get<std::string>(),
              HasSubstr("user name \"a b\" is not valid"));
}

// Whatever escapes a command is the documented internal error (exit 1) with
// the JSON error document, never std::terminate's exit 134.
TEST(AppTest, AnExceptionInACommandIsAnInternalErrorNotAnAbort) {
  EnvLookup no_env = [](absl::string_view) -> std::optional<std::string> { return std::nullopt; };
  for (const Runner& throwing : std::vector<Runner>{
           [](Context&) -> int { throw std::bad_alloc(); },
           [](Context&) -> int { throw std::runtime_error("boom"); },
           [](Context&) -> int { throw 42; },
       }) {
    std::ostringstream out, err;
    Context ctx(out, err, no_env);
    ctx.flags().json = true;
    EXPECT_EQ(RunGuarded(ctx, throwing), kExitOther);
    nlohmann::json doc = nlohmann::json::parse(out.str());
    EXPECT_EQ(doc["error"]["code"], "INTERNAL") << out.str();
  }
  std::ostringstream out, err;
  Context ctx(out, err, no_env);
  EXPECT_EQ(RunGuarded(ctx, [](Context&) -> int { throw std::bad_alloc(); }), kExitOther);
  EXPECT_THAT(err.str(), HasSubstr("out of memory"));
}

}  // namespace
}  // namespace ipupod::cli
