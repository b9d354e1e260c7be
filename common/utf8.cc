#include "common/utf8.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace ipupod {
namespace {

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr absl::string_view kCutMark = "...";

// The length of the well-formed UTF-8 sequence starting at text[i]
// (RFC 3629's table), or 0 when none starts there.
size_t SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&text](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t length = 0;
  uint8_t low = 0x80;
  uint8_t high = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) low = 0xA0;   // no overlong forms
    if (b0 == 0xED) high = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) low = 0x90;   // no overlong forms
    if (b0 == 0xF4) high = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// Calls `emit(piece)` for each character of `text` (invalid bytes as U+FFFD).
template <typename Emit>
void ForEachCharacter(absl::string_view text, Emit&& emit) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t length = SequenceLength(text, i);
    if (length == 0) {
      emit(kReplacement);
      i += 1;
    } else {
      emit(text.substr(i, length));
      i += length;
    }
  }
}

// A character a terminal acts on rather than shows: C0 controls, DEL, and
// the C1 controls U+0080-U+009F (0xC2 0x80-0x9F; U+009B is a one-character
// CSI). `piece` is one well-formed character.
bool IsControl(absl::string_view piece) {
  const auto b0 = static_cast<uint8_t>(piece[0]);
  if (piece.size() == 1) return b0 < 0x20 || b0 == 0x7F;
  return piece.size() == 2 && b0 == 0xC2 && static_cast<uint8_t>(piece[1]) <= 0x9F;
}

// \n, \r and \t as JSON and C write them; false for any other character.
bool AppendShortEscape(std::string& out, char c) {
  switch (c) {
    case '\n':
      out.append("\\n");
      return true;
    case '\r':
      out.append("\\r");
      return true;
    case '\t':
      out.append("\\t");
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string ValidUtf8(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  ForEachCharacter(text,
                   [&out](absl::string_view piece) { out.append(piece.data(), piece.size()); });
  return out;
}

std::string CutUtf8(absl::string_view text, size_t max_bytes) {
  std::string valid = ValidUtf8(text);
  if (valid.size() <= max_bytes) return valid;
  size_t keep = max_bytes - kCutMark.size();
  // Back to a character boundary: never end inside a sequence.
  while (keep > 0 && (static_cast<uint8_t>(valid[keep]) & 0xC0) == 0x80) --keep;
  valid.resize(keep);
  valid.append(kCutMark.data(), kCutMark.size());
  return valid;
}

std::string EscapeControls(absl::string_view text, absl::string_view keep) {
  std::string out;
  out.reserve(text.size());
  ForEachCharacter(text, [&out, keep](absl::string_view piece) {
    if (!IsControl(piece) || (piece.size() == 1 && keep.find(piece[0]) != keep.npos)) {
      out.append(piece.data(), piece.size());
      return;
    }
    if (AppendShortEscape(out, piece[0])) return;
    if (piece.size() == 1) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(piece[0])));
    } else {  // U+0080-U+009F is 0xC2 0x80-0x9F
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned>(static_cast<uint8_t>(piece[1])));
    }
  });
  return out;
}

void AppendJsonString(std::string& out, absl::string_view text) {
  out.push_back('"');
  ForEachCharacter(text, [&out](absl::string_view piece) {
    if (piece.size() > 1) {
      out.append(piece.data(), piece.size());
      return;
    }
    const char c = piece[0];
    switch (c) {
      case '"':
        out.append("\\\"");
        return;
      case '\\':
        out.append("\\\\");
        return;
      default:
        break;
    }
    if (AppendShortEscape(out, c)) return;
    if (static_cast<uint8_t>(c) < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned>(static_cast<uint8_t>(c)));
    } else {
      out.push_back(c);
    }
  });
  out.push_back('"');
}

}  // namespace ipupod
