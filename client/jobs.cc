// Client's JobService calls: blobs, jobs, events and results.
//
// Uploads and downloads move files in kFileChunkBytes (1 MiB) pieces and
// never hold more than one: a data set or a trained model of many GB costs
// the client a megabyte. A download goes to "<dest>.part" and is renamed
// only once its size and SHA-256 match the job record, so `dest` is either
// absent, the previous file, or complete and verified, never half-written;
// and a .part left by a dropped connection is where the next attempt starts.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/files.h"
#include "client/unary_call.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ipupod::client {
namespace {

// A local file error, with the code chosen by what the user should do.
absl::Status LocalFileError(absl::string_view verb, absl::string_view path, int error) {
  const std::string message =
      absl::StrCat("cannot ", verb, " '", path, "': ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(message, "; create the directory first"));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(
          absl::StrCat(message, "; fix its permissions or choose another directory"));
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(absl::StrCat(message, "; free some space"));
    default:
      return absl::InternalError(message);
  }
}

// The same status (code and payloads) with `note` after its message.
absl::Status WithNote(const absl::Status& status, absl::string_view note) {
  absl::Status noted(status.code(), absl::StrCat(status.message(), note));
  status.ForEachPayload([&noted](absl::string_view url, const absl::Cord& payload) {
    noted.SetPayload(url, payload);
  });
  return noted;
}

// Closes a file descriptor on every path out.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status WriteAll(int fd, absl::string_view bytes, absl::string_view path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return LocalFileError("write", path, errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Opens "<dest>.part" for appending and returns how much a previous attempt
// left in it; a .part longer than the file is stale (another version of the
// result) and starts again from 0.
absl::StatusOr<uint64_t> OpenPart(const std::string& part, uint64_t total_bytes, int& fd) {
  fd = open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return LocalFileError("create", part, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) return LocalFileError("look at", part, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot download into '", part, "': it is not a regular file; remove it"));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > total_bytes) {
    if (ftruncate(fd, 0) != 0) return LocalFileError("truncate", part, errno);
    size = 0;
  }
  if (lseek(fd, static_cast<off_t>(size), SEEK_SET) < 0) return LocalFileError("seek", part, errno);
  return size;
}

// The finished .part has the record's size and hash; a wrong hash removes it
// (resuming from corrupt bytes would never succeed).
absl::Status VerifyPart(const std::string& part, absl::string_view id, const v1::ResultFile& file) {
  struct stat st {};
  if (stat(part.c_str(), &st) != 0) return LocalFileError("look at", part, errno);
  if (static_cast<uint64_t>(st.st_size) != file.size_bytes()) {
    return absl::UnavailableError(absl::StrCat(
        "ipupodd ended result ", file.name(), " of job ", id, " at byte ", st.st_size, " of ",
        file.size_bytes(), "; the bytes so far are kept in '", part, "': fetch again to resume"));
  }
  std::string sha256 = DigestHex(Sha256Of(""));
  if (file.size_bytes() > 0) {
    IPUPOD_ASSIGN_OR_RETURN(FileDigest digest, Sha256OfFile(part, "downloaded result"));
    sha256 = digest.sha256;
  }
  if (sha256 != file.sha256()) {
    unlink(part.c_str());
    return absl::DataLossError(
        absl::StrCat("result ", file.name(), " of job ", id, " arrived corrupted: its SHA-256 is ",
                     sha256, " but the job record says ", file.sha256(),
                     "; the download was removed: fetch again to download it afresh"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- unary calls

template <typename Response, typename Method>
absl::StatusOr<Response> Client::CallOnJob(absl::string_view name, absl::string_view id,
                                           Method method) {
  v1::JobRequest request;
  request.set_id(std::string(id));
  return Call<Response>(name, [&](grpc::ClientContext* c, Response* r) {
    return (jobs_.get()->*method)(c, request, r);
  });
}

absl::StatusOr<v1::BlobRef> Client::StatBlob(absl::string_view sha256) {
  v1::StatBlobRequest request;
  request.set_sha256(std::string(sha256));
  return Call<v1::BlobRef>("StatBlob", [&](grpc::ClientContext* c, v1::BlobRef* r) {
    return jobs_->StatBlob(c, request, r);
  });
}

absl::StatusOr<std::vector<v1::Job>> Client::SubmitJob(const v1::SubmitJobRequest& request) {
  IPUPOD_ASSIGN_OR_RETURN(v1::SubmitJobResponse response,
                          Call<v1::SubmitJobResponse>(
                              "SubmitJob", [&](grpc::ClientContext* c, v1::SubmitJobResponse* r) {
                                return jobs_->SubmitJob(c, request, r);
                              }));
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::ListJobsResponse> Client::ListJobs(const v1::ListJobsRequest& request) {
  return Call<v1::ListJobsResponse>("ListJobs",
                                    [&](grpc::ClientContext* c, v1::ListJobsResponse* r) {
                                      return jobs_->ListJobs(c, request, r);
                                    });
}

absl::StatusOr<v1::Job> Client::GetJob(absl::string_view id) {
  return CallOnJob<v1::Job>("GetJob", id, &v1::JobService::Stub::GetJob);
}

absl::StatusOr<v1::Job> Client::CancelJob(absl::string_view id) {
  return CallOnJob<v1::Job>("CancelJob", id, &v1::JobService::Stub::CancelJob);
}

absl::StatusOr<v1::Job> Client::HoldJob(absl::string_view id) {
  return CallOnJob<v1::Job>("HoldJob", id, &v1::JobService::Stub::HoldJob);
}

absl::StatusOr<v1::Job> Client::ReleaseJob(absl::string_view id) {
  return CallOnJob<v1::Job>("ReleaseJob", id, &v1::JobService::Stub::ReleaseJob);
}

absl::StatusOr<v1::DeleteJobResponse> Client::DeleteJob(absl::string_view id) {
  return CallOnJob<v1::DeleteJobResponse>("DeleteJob", id, &v1::JobService::Stub::DeleteJob);
}

// ---------------------------------------------------------------- blobs

absl::StatusOr<v1::BlobRef> Client::PutBlobFile(absl::string_view path, absl::string_view what) {
  IPUPOD_ASSIGN_OR_RETURN(FileDigest digest, Sha256OfFile(path, what));
  absl::StatusOr<v1::BlobRef> stored = StatBlob(digest.sha256);
  if (stored.ok()) {
    stored->set_already_stored(true);
    return stored;
  }
  if (!absl::IsNotFound(stored.status())) return stored.status();
  return PutBlob(path, what, digest.sha256, digest.size_bytes);
}

absl::StatusOr<v1::BlobRef> Client::PutBlob(absl::string_view path, absl::string_view what,
                                            absl::string_view sha256, uint64_t size_bytes) {
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  v1::BlobRef ref;
  std::unique_ptr<grpc::ClientWriter<v1::BlobChunk>> stream = jobs_->PutBlob(&context, &ref);
  uint64_t sent = 0;
  bool open = true;
  // Exactly the hashed size is sent: bytes appended since are not part of
  // the blob, and other changes fail the server's hash check.
  absl::Status read =
      ForEachFileChunk(path, what, 0, kFileChunkBytes, [&](absl::string_view chunk) {
        v1::BlobChunk message;
        if (sent == 0) {
          message.set_sha256(std::string(sha256));
          message.set_total_bytes(size_bytes);
        }
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(chunk.size(), size_bytes - sent));
        message.set_data(chunk.data(), take);
        sent += take;
        open = stream->Write(message);
        return open && sent < size_bytes;
      });
  if (read.ok() && open && sent < size_bytes) {
    read = absl::DataLossError(absl::StrCat(
        what, " '", path, "' changed while it was uploaded (", sent, " bytes left of the ",
        size_bytes, " hashed); nothing was stored: upload it again once it stays unchanged"));
  }
  if (!read.ok()) {
    context.TryCancel();
    (void)stream->Finish();
    return read;
  }
  stream->WritesDone();
  IPUPOD_RETURN_IF_ERROR(StreamStatus(stream->Finish(), context, "PutBlob"));
  return ref;
}

// ---------------------------------------------------------------- events

absl::Status Client::WatchJob(absl::string_view id, uint64_t from_event, bool follow,
                              const std::function<void(const v1::JobEvent&)>& on_event,
                              absl::Duration timeout) {
  v1::WatchJobRequest request;
  request.set_id(std::string(id));
  request.set_from_event(from_event);
  request.set_follow(follow);
  const bool bounded = timeout != absl::InfiniteDuration();
  grpc::ClientContext context;
  // Following a job lasts as long as the job: no deadline unless asked.
  PrepareContext(context, bounded  ? timeout
                          : follow ? absl::InfiniteDuration()
                                   : options_.stream_timeout);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> stream = jobs_->WatchJob(&context, request);
  v1::JobEvent event;
  while (stream->Read(&event)) on_event(event);
  const grpc::Status status = stream->Finish();
  if (bounded && status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      status.error_message() == "Deadline Exceeded") {
    return absl::DeadlineExceededError(
        absl::StrCat("watching job ", id, ": still open after ", absl::FormatDuration(timeout)));
  }
  return StreamStatus(status, context, "WatchJob");
}

// ---------------------------------------------------------------- results

absl::StatusOr<FetchedResult> Client::FetchResult(absl::string_view id, const v1::ResultFile& file,
                                                  absl::string_view dest,
                                                  const FetchProgress& on_progress) {
  const std::string part = absl::StrCat(dest, ".part");
  FetchedResult result{std::string(dest), file.size_bytes(), 0};
  {
    int raw_fd = -1;
    absl::StatusOr<uint64_t> offset = OpenPart(part, file.size_bytes(), raw_fd);
    ScopedFd fd(raw_fd);
    if (!offset.ok()) return offset.status();
    result.resumed_from = *offset;
    if (*offset < file.size_bytes()) {
      IPUPOD_RETURN_IF_ERROR(DownloadResult(id, file, fd.get(), part, *offset, on_progress));
    }
    if (fsync(fd.get()) != 0) return LocalFileError("sync", part, errno);
  }
  IPUPOD_RETURN_IF_ERROR(VerifyPart(part, id, file));
  if (std::rename(part.c_str(), result.path.c_str()) != 0) {
    return LocalFileError(absl::StrCat("rename '", part, "' to"), result.path, errno);
  }
  return result;
}

absl::Status Client::DownloadResult(absl::string_view id, const v1::ResultFile& file, int fd,
                                    absl::string_view part, uint64_t offset,
                                    const FetchProgress& on_progress) {
  v1::FetchResultRequest request;
  request.set_id(std::string(id));
  request.set_name(file.name());
  request.set_offset(offset);
  grpc::ClientContext context;
  PrepareContext(context, options_.stream_timeout);
  std::unique_ptr<grpc::ClientReader<v1::ResultChunk>> stream =
      jobs_->FetchResult(&context, request);
  absl::Status written;
  uint64_t position = offset;
  v1::ResultChunk chunk;
  while (written.ok() && stream->Read(&chunk)) {
    if (chunk.offset() != position || chunk.data().size() > file.size_bytes() - position) {
      written = absl::InternalError(absl::StrCat(
          "ipupodd sent bytes ", chunk.offset(), "..", chunk.offset() + chunk.data().size(),
          " of result ", file.name(), " (", file.size_bytes(), " bytes) where byte ", position,
          " was due; please report this as an ipupodd bug"));
      break;
    }
    written = WriteAll(fd, chunk.data(), part);
    position += chunk.data().size();
    if (written.ok() && on_progress) on_progress(position, file.size_bytes());
  }
  if (!written.ok()) {
    context.TryCancel();
    while (stream->Read(&chunk)) {
    }
    (void)stream->Finish();
    return written;
  }
  absl::Status status = StreamStatus(stream->Finish(), context, "FetchResult");
  if (status.ok() || position == 0) return status;
  return WithNote(status, absl::StrCat("; the ", position, " bytes received are kept in '", part,
                                       "': fetch again to resume"));
}

}  // namespace ipupod::client
