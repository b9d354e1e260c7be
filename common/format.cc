#include "common/format.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ipupod {
namespace {

// "12.5" -> "12.5", "900.0" -> "900", "1.50" -> "1.5".
std::string TrimZeros(std::string text) {
  if (text.find('.') == std::string::npos) return text;
  while (!text.empty() && text.back() == '0') text.pop_back();
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

}  // namespace

std::string FormatClockDuration(double seconds) {
  if (!(seconds > 0)) seconds = 0;  // also NaN
  if (seconds < 10) return absl::StrCat(TrimZeros(absl::StrFormat("%.1f", seconds)), "s");
  int64_t whole = static_cast<int64_t>(seconds);
  if (whole < 60) return absl::StrCat(whole, "s");
  if (whole < 3600) return absl::StrFormat("%dm%02ds", whole / 60, whole % 60);
  return absl::StrFormat("%dh%02dm", whole / 3600, (whole % 3600) / 60);
}

std::string FormatSiDuration(double seconds) {
  if (seconds < 1e-3) return absl::StrFormat("%.1f us", seconds * 1e6);
  if (seconds < 1.0) return absl::StrFormat("%.2f ms", seconds * 1e3);
  return absl::StrFormat("%.2f s", seconds);
}

std::string FormatBytesTrimmed(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 999.5 && unit < 6) {
    value /= 1000;
    ++unit;
  }
  std::string number = value >= 99.95   ? absl::StrFormat("%.0f", value)
                       : value >= 9.995 ? absl::StrFormat("%.1f", value)
                                        : absl::StrFormat("%.2f", value);
  return absl::StrCat(TrimZeros(number), " ", kUnits[unit]);
}

std::string FormatBytesFixed(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  if (bytes < 1000 * 1000) return absl::StrFormat("%.1f kB", b / 1e3);
  if (bytes < 1000 * 1000 * 1000) return absl::StrFormat("%.1f MB", b / 1e6);
  return absl::StrFormat("%.2f GB", b / 1e9);
}

std::string ElideMiddle(absl::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  const std::string middle = absl::StrCat("...(", text.size(), " characters)...");
  const size_t keep = max_chars > middle.size() ? max_chars - middle.size() : 0;
  const size_t head = (keep + 1) / 2;
  return absl::StrCat(text.substr(0, head), middle, text.substr(text.size() - (keep - head)));
}

std::string EchoName(absl::string_view name) { return ElideMiddle(name, kEchoedNameCharsMax); }

}  // namespace ipupod
