// End to end: the status page of a real ipupodd, loaded by Debian's headless
// Chromium (tests/integration/browser.h) in two states of the pod, checked by
// what the browser rendered (the DOM's data-* attributes the page sets) and
// kept as screenshots under the build directory
// (tests/integration/status_page_screenshots/); /status.json for scripts; and
// the identity rules in token mode (401 without a token, each viewer's
// visibility) through libcurl.
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/integration/browser.h"
#include "tests/integration/harness.h"
#include "tests/support/http_client.h"
#include <signal.h>

namespace ipupod::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

// Enough virtual time for the page's first fetch and render.
constexpr milliseconds kPageBudget{5000};

nlohmann::json StatusJson(const std::string& url, const test_support::HttpOptions& options = {}) {
  test_support::HttpResult got = test_support::HttpGet(url + "/status.json", options);
  if (got.status != 200) return nlohmann::json();
  return nlohmann::json::parse(got.body, nullptr, /*allow_exceptions=*/false);
}

std::string ScreenshotPath(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::current_path() / "status_page_screenshots";
  std::filesystem::create_directories(dir);
  return (dir / (name + ".png")).string();
}

class StatusPageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Browser::Available())
        << Browser::kChromium << " is not installed: deploy/install-deps.sh installs chromium";
  }
  // `ipupod --json attach ARGS` held open; waits for its grant.
  Process Hold(const std::string& user, std::vector<std::string> args) {
    args.insert(args.begin(), {"--json", "attach"});
    Process p = StartCli(server_.address(), user, args);
    EXPECT_TRUE(p.ReadStdoutJson(seconds(15))) << p.stderr_text();
    return p;
  }
  // The page as Chromium rendered it, and its screenshot as `name`.png.
  std::string Render(const std::string& name) {
    std::string error;
    std::optional<std::string> dom =
        browser_.DumpDom(server_.metrics_url() + "/", kPageBudget, &error);
    EXPECT_TRUE(dom) << error;
    const std::string png = ScreenshotPath(name);
    EXPECT_TRUE(
        browser_.Screenshot(server_.metrics_url() + "/", png, 1280, 1400, kPageBudget, &error))
        << error;
    EXPECT_GT(std::filesystem::exists(png) ? std::filesystem::file_size(png) : 0, 10000u) << png;
    std::cout << "screenshot: " << png << "\n";
    return dom.value_or("");
  }

  ServerUnderTest server_{{"--pod", "POD4"}};
  Browser browser_;
};

TEST_F(StatusPageTest, ABrowserShowsTheSessionsThenAFaultAndTheQueue) {
  // State 1: alice holds both IPUs of her partition; the other two are idle.
  ASSERT_EQ(
      RunCli(server_.address(), "alice", {"partition", "create", "exp", "--size", "2"}).exit_code,
      0);
  Process alice = Hold("alice", {"--ipus", "2", "--partition", "exp"});
  std::string dom = Render("1-alice-attached");
  EXPECT_THAT(dom, HasSubstr("data-loaded=\"true\"")) << "the page's script ran and rendered";
  EXPECT_EQ(CountOccurrences(dom, "data-ipu="), 4) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-state=\"attached\""), 2) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-state=\"idle\""), 2) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-owner=\"alice\""), 2) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-partition=\"exp\""), 2) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-row=\"sessions\""), 1) << dom;
  EXPECT_THAT(dom, HasSubstr("data-table=\"queue\"")) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-row=\"queue\""), 0) << "nobody waits yet";
  EXPECT_THAT(dom, HasSubstr("nobody is waiting"));
  EXPECT_THAT(dom, Not(HasSubstr("http://"))) << "no asset from outside the server";

  // State 2: IPU 3 fails (an admin injects it), bob waits for all 4 IPUs.
  ASSERT_EQ(RunCli(server_.address(), "admin",
                   {"fault", "inject", "--ipu", "3", "--kind", "unrecoverable"})
                .exit_code,
            0);
  Process bob = StartCli(server_.address(), "bob", {"attach", "--wait", "--ipus", "4"});
  ASSERT_TRUE(Eventually(
      [&] {
        nlohmann::json s = StatusJson(server_.metrics_url());
        return s.is_object() && s["queue"]["total"] == 1;
      },
      seconds(15)))
      << StatusJson(server_.metrics_url()).dump();
  dom = Render("2-fault-and-queue");
  EXPECT_EQ(CountOccurrences(dom, "data-state=\"failed\""), 1) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-state=\"attached\""), 2) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-state=\"idle\""), 1) << dom;
  EXPECT_EQ(CountOccurrences(dom, "data-row=\"queue\""), 1) << dom;
  EXPECT_THAT(dom, HasSubstr("<td>bob</td>")) << "the queued request's user";
  EXPECT_EQ(CountOccurrences(dom, "data-row=\"events\""), 1) << dom;
  EXPECT_THAT(dom, HasSubstr("fault: unrecoverable"));
  EXPECT_THAT(dom, HasSubstr("<td>IPU 3</td>"));
  EXPECT_THAT(dom, HasSubstr("<td>admin</td>")) << "who injected it";
  bob.Signal(SIGINT);
  alice.Signal(SIGINT);
  bob.Wait(seconds(10));
  alice.Wait(seconds(10));
}

constexpr const char* kTokens = R"({"pod": "POD4", "tokens": [
    {"token": "alice-secret", "user": "alice"},
    {"token": "bob-secret", "user": "bob"},
    {"token": "root-secret", "user": "root", "role": "admin"}]})";

// Token mode: the page and its JSON need a token (Bearer, or Basic's
// password as a browser sends it); what each viewer sees is what the API
// would show them.
TEST(StatusPageTokenTest, TheStatusPageFollowsTheApisIdentityRules) {
  ServerUnderTest server({}, kTokens);
  const std::string url = server.metrics_url();
  for (const char* path : {"/", "/status.json"}) {
    test_support::HttpResult none = test_support::HttpGet(url + path);
    EXPECT_EQ(none.status, 401) << path;
    EXPECT_TRUE(none.HasHeader("WWW-Authenticate: Basic")) << none.headers;
    EXPECT_EQ(test_support::HttpGet(url + path, test_support::WithBearer("wrong")).status, 401);
  }
  test_support::HttpResult page =
      test_support::HttpGet(url + "/", test_support::WithBasic("anyone", "bob-secret"));
  EXPECT_EQ(page.status, 200);
  EXPECT_TRUE(page.HasHeader("Content-Type: text/html")) << page.headers;
  EXPECT_EQ(test_support::HttpGet(url + "/", test_support::WithMethod("POST")).status, 401)
      << "read-only, and nothing before the token";

  // alice holds a session with a client label; bob sees the session, not the label.
  Process alice = StartCli(server.address(), "alice",
                           {"--token", "alice-secret", "--json", "attach", "--ipus", "1"});
  ASSERT_TRUE(alice.ReadStdoutJson(seconds(15))) << alice.stderr_text();
  nlohmann::json as_bob = StatusJson(url, test_support::WithBearer("bob-secret"));
  ASSERT_TRUE(as_bob.is_object());
  EXPECT_EQ(as_bob["server"]["viewer"]["user"], "bob");
  EXPECT_EQ(as_bob["server"]["viewer"]["admin"], false);
  EXPECT_EQ(as_bob["server"]["mode"], "token");
  ASSERT_EQ(as_bob["sessions"]["total"], 1) << as_bob.dump();
  EXPECT_EQ(as_bob["sessions"]["rows"][0]["user"], "alice");
  EXPECT_EQ(as_bob["sessions"]["rows"][0]["client"], "") << "another user's client label";
  EXPECT_EQ(as_bob["usage"]["everyone"], false);
  nlohmann::json as_alice = StatusJson(url, test_support::WithBearer("alice-secret"));
  EXPECT_NE(as_alice["sessions"]["rows"][0]["client"], "") << "her own client label";
  nlohmann::json as_root = StatusJson(url, test_support::WithBearer("root-secret"));
  EXPECT_EQ(as_root["server"]["viewer"]["admin"], true);
  EXPECT_EQ(as_root["usage"]["everyone"], true);
  EXPECT_NE(as_root["sessions"]["rows"][0]["client"], "");
  alice.Signal(SIGINT);
  alice.Wait(seconds(10));
}

}  // namespace
}  // namespace ipupod::testing
