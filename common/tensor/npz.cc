// .npz: a zip archive of .npy members named "<key>.npy" (numpy.savez stores
// them, numpy.savez_compressed deflates them). The reader trusts only the
// central directory: numpy writes zip64 local headers whose sizes are
// placeholders, and a streamed zip may defer sizes to a data descriptor.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor/npy.h"
#include "common/tensor/tensor_files.h"
#include <zlib.h>

namespace ipupod::tensor {
namespace {

static_assert(std::endian::native == std::endian::little, "zip fields are little-endian");

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kMax32 = 0xffffffffu;
constexpr uint16_t kMax16 = 0xffffu;
constexpr size_t kLocalBytes = 30, kCentralBytes = 46, kEndBytes = 22;
constexpr size_t kZip64EndBytes = 56, kZip64LocatorBytes = 20;
constexpr uint16_t kStored = 0, kDeflated = 8;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "malformed .npz file: ", what, "; write it with numpy.savez or numpy.savez_compressed"));
}

// Bounds-checked little-endian reads from the archive.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}
  bool Has(uint64_t offset, uint64_t n) const {
    return offset <= bytes_.size() && n <= bytes_.size() - offset;
  }
  template <typename T>
  T At(uint64_t offset) const {  // REQUIRES: Has(offset, sizeof(T))
    T v;
    std::memcpy(&v, bytes_.data() + offset, sizeof(T));
    return v;
  }
  absl::string_view Sub(uint64_t offset, uint64_t n) const { return bytes_.substr(offset, n); }
  size_t size() const { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

struct Member {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, uncompressed = 0, local_offset = 0;
};

struct Directory {
  uint64_t entries = 0, offset = 0, size = 0;
};

absl::StatusOr<uint64_t> FindEnd(const Reader& r) {
  if (r.size() < kEndBytes) return Malformed("too short to be a zip archive");
  const uint64_t lowest = r.size() >= kEndBytes + kMax16 ? r.size() - kEndBytes - kMax16 : 0;
  for (uint64_t pos = r.size() - kEndBytes + 1; pos-- > lowest;) {
    if (r.At<uint32_t>(pos) == kEndSig) return pos;
  }
  return Malformed("no end-of-central-directory record (not a zip archive, or truncated)");
}

absl::StatusOr<Directory> ReadDirectory(const Reader& r) {
  IPUPOD_ASSIGN_OR_RETURN(uint64_t end, FindEnd(r));
  Directory d{r.At<uint16_t>(end + 10), r.At<uint32_t>(end + 16), r.At<uint32_t>(end + 12)};
  const bool zip64 = d.entries == kMax16 || d.offset == kMax32 || d.size == kMax32;
  if (zip64 && end >= kZip64LocatorBytes &&
      r.At<uint32_t>(end - kZip64LocatorBytes) == kZip64LocatorSig) {
    const uint64_t at = r.At<uint64_t>(end - kZip64LocatorBytes + 8);
    if (!r.Has(at, kZip64EndBytes) || r.At<uint32_t>(at) != kZip64EndSig) {
      return Malformed("bad zip64 end-of-central-directory record");
    }
    d = Directory{r.At<uint64_t>(at + 32), r.At<uint64_t>(at + 48), r.At<uint64_t>(at + 40)};
  }
  if (!r.Has(d.offset, d.size)) return Malformed("central directory lies outside the file");
  return d;
}

// Replaces 0xffffffff fields with their values from the zip64 extra field.
absl::Status ApplyZip64(absl::string_view extra, Member& m) {
  while (extra.size() >= 4) {
    Reader x(extra);
    const uint16_t id = x.At<uint16_t>(0), n = x.At<uint16_t>(2);
    if (!x.Has(4, n)) return Malformed("truncated extra field in '" + m.name + "'");
    if (id == kZip64ExtraId) {
      uint64_t pos = 4;
      for (uint64_t* field : {&m.uncompressed, &m.compressed, &m.local_offset}) {
        if (*field != kMax32) continue;
        if (pos + 8 > 4u + n) return Malformed("short zip64 field in '" + m.name + "'");
        *field = x.At<uint64_t>(pos);
        pos += 8;
      }
      return absl::OkStatus();
    }
    extra.remove_prefix(4 + n);
  }
  return absl::OkStatus();
}

absl::StatusOr<Member> ReadCentral(const Reader& r, uint64_t& pos) {
  if (!r.Has(pos, kCentralBytes) || r.At<uint32_t>(pos) != kCentralSig) {
    return Malformed("bad central directory entry");
  }
  Member m;
  m.method = r.At<uint16_t>(pos + 10);
  m.crc = r.At<uint32_t>(pos + 16);
  m.compressed = r.At<uint32_t>(pos + 20);
  m.uncompressed = r.At<uint32_t>(pos + 24);
  const uint64_t name_n = r.At<uint16_t>(pos + 28), extra_n = r.At<uint16_t>(pos + 30);
  const uint64_t comment_n = r.At<uint16_t>(pos + 32);
  m.local_offset = r.At<uint32_t>(pos + 42);
  if (!r.Has(pos + kCentralBytes, name_n + extra_n + comment_n)) {
    return Malformed("central directory entry runs past the end of the file");
  }
  m.name = std::string(r.Sub(pos + kCentralBytes, name_n));
  IPUPOD_RETURN_IF_ERROR(ApplyZip64(r.Sub(pos + kCentralBytes + name_n, extra_n), m));
  pos += kCentralBytes + name_n + extra_n + comment_n;
  return m;
}

// Deflate spends at least 2 bits on a 258-byte match: no stream expands
// more than 1032-fold, so a larger declared size is a lie.
constexpr uint64_t kDeflateRatioMax = 1032;
constexpr uint64_t kDeflateSlack = 258;
constexpr size_t kZlibStepMax = size_t{1} << 30;  // zlib counts in 32 bits

// A raw deflate stream, inflated in caller-sized steps: nothing is
// allocated here, the caller owns every output byte.
class Inflater {
 public:
  explicit Inflater(absl::string_view in) : rest_(in) {
    ok_ = inflateInit2(&z_, -MAX_WBITS) == Z_OK;
  }
  ~Inflater() {
    if (ok_) inflateEnd(&z_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  bool ok() const { return ok_; }

  // Fills out[0, n); false if the stream ends first or is corrupt.
  bool Fill(char* out, size_t n) {
    while (n > 0) {
      const size_t produced = Step(out, std::min(n, kZlibStepMax));
      if (produced == 0) return false;
      out += produced;
      n -= produced;
    }
    return true;
  }
  // True if the stream ends here without another byte of output.
  bool AtEnd() {
    char byte;
    return Step(&byte, 1) == 0 && ended_;
  }

 private:
  // Inflates up to n bytes into out; 0 at the end, on corruption or when
  // the input runs out.
  size_t Step(char* out, size_t n) {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n && !ended_) {
      if (z_.avail_in == 0) {
        if (rest_.empty()) break;
        const size_t feed = std::min(rest_.size(), kZlibStepMax);
        z_.next_in =
            reinterpret_cast<Bytef*>(const_cast<char*>(rest_.data()));  // zlib is not const
        z_.avail_in = static_cast<uInt>(feed);
        rest_.remove_prefix(feed);
      }
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) ended_ = true;
      if (rc != Z_OK && rc != Z_STREAM_END) break;
    }
    return n - z_.avail_out;
  }

  z_stream z_{};
  absl::string_view rest_;
  bool ok_ = false;
  bool ended_ = false;
};

absl::Status InvalidNpy(const std::string& key, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat("tensor '", key, "' in .npz: ", status.message()));
}

absl::Status CheckCrc(const Member& m, uint32_t crc) {
  if (crc == m.crc) return absl::OkStatus();
  return Malformed("CRC mismatch in member '" + m.name + "' (corrupted)");
}

// Reads `head` up to `n` bytes (n within the declared size).
bool FillTo(Inflater& z, std::string& head, size_t n, const Member& m) {
  if (n > m.uncompressed || n < head.size()) return false;
  const size_t have = head.size();
  head.resize(n);
  return z.Fill(head.data() + have, n - have);
}

// A deflated member: the .npy header first, then its data inflated straight
// into the tensor, so the member costs its size once, whatever it declares.
absl::StatusOr<Tensor> InflateNpy(absl::string_view raw, const Member& m, const std::string& key) {
  const absl::Status corrupt =
      Malformed(absl::StrCat("member '", m.name, "' does not inflate to its recorded ",
                             m.uncompressed, " bytes (corrupted)"));
  Inflater z(raw);
  if (!z.ok()) return absl::InternalError("zlib inflateInit failed");
  std::string head;
  if (!FillTo(z, head, std::min<uint64_t>(8, m.uncompressed), m)) return corrupt;
  const size_t prefix = head.size() == 8 && head[6] == 1 ? 10 : 12;
  if (!FillTo(z, head, std::min<uint64_t>(prefix, m.uncompressed), m)) return corrupt;
  absl::StatusOr<size_t> header_size = NpyHeaderSize(head);
  if (!header_size.ok()) return InvalidNpy(key, header_size.status());
  if (!FillTo(z, head, *header_size, m)) return corrupt;
  absl::StatusOr<NpyLayout> layout = ParseNpyHeader(head);
  if (!layout.ok()) return InvalidNpy(key, layout.status());
  if (layout->data_offset + layout->data_bytes != m.uncompressed) {
    return InvalidNpy(key, absl::InvalidArgumentError(absl::StrCat(
                               "its header needs ", layout->data_offset + layout->data_bytes,
                               " bytes but the archive records ", m.uncompressed)));
  }
  IPUPOD_ASSIGN_OR_RETURN(Tensor t, Tensor::CreateForOverwrite(layout->dtype, layout->shape));
  char* data = static_cast<char*>(t.mutable_raw_data());
  if (!z.Fill(data, layout->data_bytes) || !z.AtEnd()) return corrupt;
  const absl::string_view bytes = t.bytes();
  IPUPOD_RETURN_IF_ERROR(
      CheckCrc(m, crc32_z(crc32_z(0, reinterpret_cast<const Bytef*>(head.data()), head.size()),
                          reinterpret_cast<const Bytef*>(bytes.data()), bytes.size())));
  if (t.dtype() == DType::kBool &&
      std::any_of(bytes.begin(), bytes.end(), [](char c) { return c != 0 && c != 1; })) {
    return InvalidNpy(key,
                      absl::InvalidArgumentError("bool tensor holds a byte other than 0 or 1"));
  }
  return t;
}

// Where the member's data starts, checked against the file and its sizes
// against what its method can produce - before anything is allocated.
absl::StatusOr<absl::string_view> RawData(const Reader& r, const Member& m) {
  if (!r.Has(m.local_offset, kLocalBytes) || r.At<uint32_t>(m.local_offset) != kLocalSig) {
    return Malformed("bad local header for '" + m.name + "'");
  }
  const uint64_t start = m.local_offset + kLocalBytes + r.At<uint16_t>(m.local_offset + 26) +
                         r.At<uint16_t>(m.local_offset + 28);
  if (!r.Has(start, m.compressed)) return Malformed("member '" + m.name + "' is truncated");
  if (m.method == kStored && m.compressed != m.uncompressed) {
    return Malformed("stored member sizes differ");
  }
  if (m.method == kDeflated && (m.compressed > (UINT64_MAX - kDeflateSlack) / kDeflateRatioMax ||
                                m.uncompressed > m.compressed * kDeflateRatioMax + kDeflateSlack)) {
    return Malformed(absl::StrCat("member '", m.name, "' declares ", m.uncompressed, " bytes from ",
                                  m.compressed,
                                  " compressed bytes, more than deflate can produce"));
  }
  if (m.method != kStored && m.method != kDeflated) {
    return Malformed(absl::StrCat("member '", m.name, "' uses compression method ", m.method,
                                  " (only stored and deflated are supported)"));
  }
  return r.Sub(start, m.compressed);
}

// `raw`: the member's bytes as RawData checked them.
absl::StatusOr<NamedTensor> ReadMember(const Member& m, absl::string_view raw) {
  if (!absl::EndsWith(m.name, ".npy")) {
    return Malformed("member '" + m.name + "' is not a .npy file");
  }
  std::string key = m.name.substr(0, m.name.size() - 4);
  if (m.method == kDeflated) {
    IPUPOD_ASSIGN_OR_RETURN(Tensor t, InflateNpy(raw, m, key));
    return NamedTensor(std::move(key), std::move(t));
  }
  IPUPOD_RETURN_IF_ERROR(
      CheckCrc(m, crc32_z(0, reinterpret_cast<const Bytef*>(raw.data()), raw.size())));
  auto tensor = ParseNpy(raw);
  if (!tensor.ok()) return InvalidNpy(key, tensor.status());
  return NamedTensor(std::move(key), *std::move(tensor));
}

// Appends little-endian integers.
template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Zip64 extra field for whichever of the three values do not fit in 32 bits.
std::string Zip64Extra(uint64_t size, uint64_t offset, bool with_offset) {
  std::string fields;
  if (size >= kMax32) {
    Put<uint64_t>(fields, size);
    Put<uint64_t>(fields, size);
  }
  if (with_offset && offset >= kMax32) Put<uint64_t>(fields, offset);
  if (fields.empty()) return "";
  std::string extra;
  Put<uint16_t>(extra, kZip64ExtraId);
  Put<uint16_t>(extra, static_cast<uint16_t>(fields.size()));
  return extra + fields;
}

uint32_t Clamp32(uint64_t v) { return v >= kMax32 ? kMax32 : static_cast<uint32_t>(v); }

// The fields local and central headers share, from "version needed" on.
void PutCommon(std::string& out, const std::string& name, uint32_t crc, uint64_t size,
               const std::string& extra) {
  Put<uint16_t>(out, extra.empty() ? 20 : 45);  // version needed: 2.0, or 4.5 for zip64
  Put<uint16_t>(out, 0);                        // flags
  Put<uint16_t>(out, kStored);
  Put<uint16_t>(out, 0);     // time 00:00:00
  Put<uint16_t>(out, 0x21);  // date 1980-01-01, as numpy's zipfile writes
  Put<uint32_t>(out, crc);
  Put<uint32_t>(out, Clamp32(size));
  Put<uint32_t>(out, Clamp32(size));
  Put<uint16_t>(out, static_cast<uint16_t>(name.size()));
  Put<uint16_t>(out, static_cast<uint16_t>(extra.size()));
}

void PutEnd(std::string& out, uint64_t entries, uint64_t cd_offset, uint64_t cd_size) {
  if (entries >= kMax16 || cd_offset >= kMax32 || cd_size >= kMax32) {
    const uint64_t at = out.size();
    Put<uint32_t>(out, kZip64EndSig);
    Put<uint64_t>(out, kZip64EndBytes - 12);
    Put<uint16_t>(out, 45);
    Put<uint16_t>(out, 45);
    Put<uint32_t>(out, 0);
    Put<uint32_t>(out, 0);
    Put<uint64_t>(out, entries);
    Put<uint64_t>(out, entries);
    Put<uint64_t>(out, cd_size);
    Put<uint64_t>(out, cd_offset);
    Put<uint32_t>(out, kZip64LocatorSig);
    Put<uint32_t>(out, 0);
    Put<uint64_t>(out, at);
    Put<uint32_t>(out, 1);
  }
  Put<uint32_t>(out, kEndSig);
  Put<uint32_t>(out, 0);  // this disk, central directory disk
  const uint16_t n16 = entries >= kMax16 ? kMax16 : static_cast<uint16_t>(entries);
  Put<uint16_t>(out, n16);
  Put<uint16_t>(out, n16);
  Put<uint32_t>(out, Clamp32(cd_size));
  Put<uint32_t>(out, Clamp32(cd_offset));
  Put<uint16_t>(out, 0);  // comment length
}

}  // namespace

absl::StatusOr<NamedTensors> ParseNpz(absl::string_view bytes, const TensorReadLimits& limits) {
  const Reader r(bytes);
  IPUPOD_ASSIGN_OR_RETURN(Directory dir, ReadDirectory(r));
  NamedTensors out;
  absl::flat_hash_set<std::string> seen;
  uint64_t declared = 0;
  uint64_t pos = dir.offset;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    IPUPOD_ASSIGN_OR_RETURN(Member m, ReadCentral(r, pos));
    IPUPOD_ASSIGN_OR_RETURN(absl::string_view raw, RawData(r, m));  // sizes vs. the file first
    declared += std::min<uint64_t>(m.uncompressed, UINT64_MAX / 2);
    if (declared > static_cast<uint64_t>(limits.bytes_max)) {
      return internal::OverReadLimit(absl::StrCat(".npz members declare ", declared, " bytes"),
                                     limits);
    }
    IPUPOD_ASSIGN_OR_RETURN(NamedTensor t, ReadMember(m, raw));
    if (!seen.insert(t.first).second) {
      return Malformed("tensor '" + t.first + "' appears twice");
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string SerializeNpz(const NamedTensors& tensors) {
  std::string out, central;
  for (const auto& [key, tensor] : tensors) {
    const std::string name = key + ".npy";
    const std::string npy = SerializeNpy(tensor);
    const uint32_t crc = crc32_z(0, reinterpret_cast<const Bytef*>(npy.data()), npy.size());
    const uint64_t offset = out.size();
    const std::string local_extra = Zip64Extra(npy.size(), offset, false);
    Put<uint32_t>(out, kLocalSig);
    PutCommon(out, name, crc, npy.size(), local_extra);
    out += name + local_extra + npy;

    const std::string extra = Zip64Extra(npy.size(), offset, true);
    Put<uint32_t>(central, kCentralSig);
    Put<uint16_t>(central, 45);  // made by: zip 4.5, MS-DOS attributes
    PutCommon(central, name, crc, npy.size(), extra);
    Put<uint16_t>(central, 0);  // comment length
    Put<uint16_t>(central, 0);  // disk
    Put<uint16_t>(central, 0);  // internal attributes
    Put<uint32_t>(central, 0);  // external attributes
    Put<uint32_t>(central, Clamp32(offset));
    central += name + extra;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  PutEnd(out, tensors.size(), cd_offset, central.size());
  return out;
}

}  // namespace ipupod::tensor
