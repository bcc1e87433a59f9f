#include "lattice/core/status.h"

#include <cstring>

namespace lattice {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerLost: return "peer-lost";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kAuthFailed: return "auth-failed";
    case ErrorCode::kInvalidArgument: return "invalid-argument";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kAccessDenied: return "access-denied";
    case ErrorCode::kResourceExhausted: return "resource-exhausted";
    case ErrorCode::kIoError: return "io-error";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kNotFound: return "not-found";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Status::Status(ErrorCode code, std::string message, int peer) {
  if (code != ErrorCode::kOk) rep_ = std::make_shared<const Rep>(Rep{code, peer, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(lattice::to_string(rep_->code));
  if (rep_->peer != kNoPeer) s += " (peer " + std::to_string(rep_->peer) + ")";
  if (!rep_->message.empty()) s += ": " + rep_->message;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(rep_->code, std::string(context) + ": " + rep_->message, rep_->peer);
}

Status ErrnoError(std::string_view what, int errno_value, int peer) {
  char buf[128];
  const char* text = strerror_r(errno_value, buf, sizeof buf);  // GNU variant
  return Status(ErrorCode::kIoError,
                std::string(what) + ": " + text + " (errno " + std::to_string(errno_value) + ")", peer);
}

}  // namespace lattice
