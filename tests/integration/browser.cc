#include "tests/integration/browser.h"

#include "absl/strings/str_cat.h"
#include <unistd.h>

namespace ipupod::testing {
namespace {

// Chromium itself, not the page, may take this long to start and stop.
constexpr std::chrono::seconds kChromiumLimit{120};

std::vector<std::string> BaseArgs(const std::string& profile) {
  return {Browser::kChromium,
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-dev-shm-usage",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          "--hide-scrollbars",
          absl::StrCat("--user-data-dir=", profile)};
}

}  // namespace

bool Browser::Available() { return ::access(kChromium, X_OK) == 0; }

std::optional<std::string> Browser::Run(std::vector<std::string> args, std::string* error) {
  std::vector<std::string> argv = BaseArgs(absl::StrCat(profiles_.path(), "/", ++calls_));
  argv.insert(argv.end(), args.begin(), args.end());
  Process chromium = Process::Start(argv);
  std::optional<int> code = chromium.Wait(kChromiumLimit);
  if (!code || *code != 0) {
    *error = absl::StrCat("chromium ", code ? absl::StrCat("exited ", *code) : "timed out",
                          "; its stderr:\n", chromium.stderr_text());
    return std::nullopt;
  }
  return chromium.stdout_text();
}

std::optional<std::string> Browser::DumpDom(const std::string& url,
                                            std::chrono::milliseconds budget, std::string* error) {
  return Run({absl::StrCat("--virtual-time-budget=", budget.count()), "--dump-dom", url}, error);
}

bool Browser::Screenshot(const std::string& url, const std::string& png_path, int width, int height,
                         std::chrono::milliseconds budget, std::string* error) {
  return Run({absl::StrCat("--virtual-time-budget=", budget.count()),
              absl::StrCat("--window-size=", width, ",", height),
              absl::StrCat("--screenshot=", png_path), url},
             error)
      .has_value();
}

int CountOccurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

}  // namespace ipupod::testing
