#include "common/tensor/npy.h"

#include <fstream>
#include <new>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ipupod::tensor {
namespace {

constexpr absl::string_view kMagic = "\x93NUMPY";

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid .npy file: ", what));
}

// A cursor over the header dict text.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  void SkipSpace() {
    while (!text_.empty() && text_[0] == ' ') text_.remove_prefix(1);
  }
  bool Consume(absl::string_view token) {
    SkipSpace();
    if (!absl::StartsWith(text_, token)) return false;
    text_.remove_prefix(token.size());
    return true;
  }
  std::optional<std::string> QuotedString() {
    SkipSpace();
    if (text_.empty() || (text_[0] != '\'' && text_[0] != '"')) return std::nullopt;
    const char quote = text_[0];
    const size_t end = text_.find(quote, 1);
    if (end == absl::string_view::npos) return std::nullopt;
    std::string s(text_.substr(1, end - 1));
    text_.remove_prefix(end + 1);
    return s;
  }
  std::optional<int64_t> Integer() {
    SkipSpace();
    size_t n = 0;
    while (n < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[n]))) ++n;
    int64_t v = 0;
    if (n == 0 || n > 18 || !absl::SimpleAtoi(text_.substr(0, n), &v)) return std::nullopt;
    text_.remove_prefix(n);
    return v;
  }
  bool AtEnd() {
    SkipSpace();
    return text_.empty();
  }

 private:
  absl::string_view text_;
};

struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<Shape> shape;
};

absl::StatusOr<Shape> ParseShape(HeaderParser& p) {
  if (!p.Consume("(")) return Bad("shape is not a tuple");
  Shape shape;
  while (!p.Consume(")")) {
    std::optional<int64_t> d = p.Integer();
    if (!d.has_value()) return Bad("shape holds something other than non-negative integers");
    shape.push_back(*d);
    if (!p.Consume(",")) {
      if (!p.Consume(")")) return Bad("shape tuple is malformed");
      break;
    }
  }
  return shape;
}

absl::Status ParseEntry(HeaderParser& p, Header& h) {
  std::optional<std::string> key = p.QuotedString();
  if (!key.has_value() || !p.Consume(":")) return Bad("header dict is malformed");
  if (*key == "descr" && !h.descr) {
    h.descr = p.QuotedString();
    if (!h.descr) return Bad("descr is not a string");
  } else if (*key == "fortran_order" && !h.fortran_order) {
    if (p.Consume("False")) {
      h.fortran_order = false;
    } else if (p.Consume("True")) {
      h.fortran_order = true;
    } else {
      return Bad("fortran_order is not True or False");
    }
  } else if (*key == "shape" && !h.shape) {
    IPUPOD_ASSIGN_OR_RETURN(h.shape, ParseShape(p));
  } else {
    return Bad(absl::StrCat("header key '", *key, "' is unknown or repeated"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> ParseHeader(absl::string_view text) {
  if (text.empty() || text.back() != '\n') return Bad("header does not end in a newline");
  text.remove_suffix(1);
  HeaderParser p(text);
  Header h;
  if (!p.Consume("{")) return Bad("header is not a dict");
  while (!p.Consume("}")) {
    IPUPOD_RETURN_IF_ERROR(ParseEntry(p, h));
    if (!p.Consume(",")) {
      if (!p.Consume("}")) return Bad("header dict is malformed");
      break;
    }
  }
  if (!p.AtEnd()) return Bad("text after the header dict");
  if (!h.descr || !h.fortran_order || !h.shape)
    return Bad("header lacks descr, fortran_order or shape");
  return h;
}

absl::StatusOr<DType> DTypeFromDescr(absl::string_view descr) {
  if (descr == "<f4") return DType::kFloat32;
  if (descr == "<f2") return DType::kFloat16;
  if (descr == "<i8") return DType::kInt64;
  if (descr == "<i4") return DType::kInt32;
  if (descr == "|b1") return DType::kBool;
  return Bad(absl::StrCat("dtype '", descr,
                          "' is not supported; use float32 (<f4), float16 (<f2), int64 (<i8), "
                          "int32 (<i4) or bool (|b1)"));
}

absl::string_view DescrOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kInt64:
      return "<i8";
    case DType::kInt32:
      return "<i4";
    case DType::kBool:
      return "|b1";
    case DType::kFloat16:
      return "<f2";
  }
  return "";
}

uint32_t ReadLittleEndian(absl::string_view bytes) {
  uint32_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  return v;
}

// Numpy writes headers of a few hundred bytes (max_header_size defaults to
// 10000 on read); anything far larger is not a shape tuple.
constexpr size_t kHeaderBytesMax = size_t{1} << 20;

std::string ShapeTuple(const Shape& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

}  // namespace

absl::StatusOr<size_t> NpyHeaderSize(absl::string_view prefix) {
  if (prefix.size() < 8 || prefix.substr(0, 6) != kMagic) return Bad("missing \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(prefix[6]);
  if (major < 1 || major > 3 || prefix[7] != 0) {
    return Bad(absl::StrCat("format version ", major, ".", static_cast<int>(prefix[7]),
                            " is not 1.0, 2.0 or 3.0"));
  }
  const size_t len_size = major == 1 ? 2 : 4;
  if (prefix.size() < 8 + len_size) return Bad("truncated header length");
  const size_t header_len = ReadLittleEndian(prefix.substr(8, len_size));
  if (header_len > kHeaderBytesMax) {
    return Bad(absl::StrCat("header length ", header_len, " exceeds ", kHeaderBytesMax,
                            " bytes (numpy writes a few hundred)"));
  }
  return 8 + len_size + header_len;
}

absl::StatusOr<NpyLayout> ParseNpyHeader(absl::string_view bytes) {
  IPUPOD_ASSIGN_OR_RETURN(size_t header_size, NpyHeaderSize(bytes));
  if (bytes.size() < header_size) return Bad("truncated header");
  const size_t start = bytes[6] == 1 ? 10 : 12;
  IPUPOD_ASSIGN_OR_RETURN(Header h, ParseHeader(bytes.substr(start, header_size - start)));
  if (*h.fortran_order) return Bad("Fortran-order arrays are not supported; save a C-order array");
  IPUPOD_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(*h.descr));
  auto n = CheckedNumElements(dtype, *h.shape);
  if (!n.ok()) return Bad(n.status().message());
  NpyLayout layout{dtype, *std::move(h.shape), header_size,
                   static_cast<size_t>(*n) * DTypeSize(dtype)};
  return layout;
}

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes) {
  IPUPOD_ASSIGN_OR_RETURN(NpyLayout layout, ParseNpyHeader(bytes));
  const absl::string_view data = bytes.substr(layout.data_offset);
  if (data.size() != layout.data_bytes) {
    return Bad(absl::StrCat("data holds ", data.size(), " bytes; shape ", ShapeTuple(layout.shape),
                            " of ", DescrOf(layout.dtype), " needs ", layout.data_bytes));
  }
  auto t = Tensor::FromBytes(layout.dtype, std::move(layout.shape), data);
  if (!t.ok()) return Bad(t.status().message());
  return t;
}

std::string SerializeNpy(const Tensor& tensor) {
  std::string dict =
      absl::StrCat("{'descr': '", DescrOf(tensor.dtype()),
                   "', 'fortran_order': False, 'shape': ", ShapeTuple(tensor.shape()), ", }");
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t padded = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(padded - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  const uint32_t len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < (v2 ? 4u : 2u); ++i)
    out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += dict;
  absl::StrAppend(&out, tensor.bytes());
  return out;
}

absl::StatusOr<Tensor> ReadNpyFile(absl::string_view path) {
  try {
    std::ifstream file(std::string(path), std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot open .npy file '", path, "'"));
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (file.bad()) return absl::InternalError(absl::StrCat("error reading '", path, "'"));
    return ParseNpy(bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory reading '", path, "'"));
  }
}

absl::Status WriteNpyFile(absl::string_view path, const Tensor& tensor) {
  std::ofstream file(std::string(path), std::ios::binary | std::ios::trunc);
  if (!file) return absl::InternalError(absl::StrCat("cannot create '", path, "'"));
  const std::string bytes = SerializeNpy(tensor);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("error writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace ipupod::tensor
