// File: tests/integration/browser.h
//
// Debian's headless Chromium (/usr/bin/chromium) driving a page the way a
// person's browser would: it loads the URL, runs the page's scripts (its
// fetches included) for a budget of virtual time, and gives back the DOM
// as rendered, or a PNG screenshot. Used by the status page's tests
// (tests/integration/status_page_test.cc).
//
// Chromium runs with the flags a closed machine needs (no sandbox as root,
// no GPU, no background networking, sync, component updates or first-run
// work: those try hosts this machine cannot reach) and a fresh profile
// directory per call, so no call sees another's cookies or cache.
//
// Thread safety: a Browser is used by one thread.
#ifndef IPUPOD_TESTS_INTEGRATION_BROWSER_H_
#define IPUPOD_TESTS_INTEGRATION_BROWSER_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace ipupod::testing {

class Browser {
 public:
  static constexpr const char* kChromium = "/usr/bin/chromium";
  // Whether Debian's chromium is installed (tests skip, saying so, if not).
  static bool Available();

  // The DOM after the page's scripts ran for `budget` of virtual time;
  // nullopt (with Chromium's stderr in *error) if Chromium failed.
  std::optional<std::string> DumpDom(const std::string& url, std::chrono::milliseconds budget,
                                     std::string* error);
  // Writes a `width` x `height` PNG of the page to `png_path`.
  bool Screenshot(const std::string& url, const std::string& png_path, int width, int height,
                  std::chrono::milliseconds budget, std::string* error);

 private:
  std::optional<std::string> Run(std::vector<std::string> args, std::string* error);
  TempDir profiles_;
  int calls_ = 0;
};

// How many times `needle` occurs in `text`.
int CountOccurrences(const std::string& text, const std::string& needle);

}  // namespace ipupod::testing

#endif  // IPUPOD_TESTS_INTEGRATION_BROWSER_H_
