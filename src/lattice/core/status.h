// Status and Result<T>: how every fallible call in lattice reports failure.
//
// A Status is a code, a message and (optionally) the peer rank the failure concerns.
// Result<T> holds either a T or a non-ok Status. Both are cheap to move; an ok Status
// allocates nothing. Neither type is thread-safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lattice {

enum class ErrorCode : uint8_t {
  kOk = 0,
  kTimeout,            // a deadline passed
  kPeerLost,           // the peer died, went silent, or closed the link
  kCorrupt,            // malformed bytes: a bad frame, a bad file, a failed checksum
  kAuthFailed,         // authentication or decryption failed
  kInvalidArgument,    // the caller (or the user's input) asked for something invalid
  kUnavailable,        // compiled out, missing at run time, or not supported by this provider
  kTruncated,          // a message longer than the buffer posted for it
  kAccessDenied,       // a remote access outside a region's bounds, key or rights
  kResourceExhausted,  // queue full, out of memory, out of regions
  kIoError,            // an operating-system call failed
  kCancelled,          // the operation was flushed by a close or an earlier error
  kNotFound,
  kInternal,           // a bug in lattice
};

std::string_view to_string(ErrorCode code);

class [[nodiscard]] Status {
 public:
  static constexpr int kNoPeer = -1;

  Status() = default;
  Status(ErrorCode code, std::string message, int peer = kNoPeer);

  static Status Ok() { return {}; }

  bool ok() const { return rep_ == nullptr; }
  ErrorCode code() const { return rep_ ? rep_->code : ErrorCode::kOk; }
  const std::string& message() const;
  int peer() const { return rep_ ? rep_->peer : kNoPeer; }

  // "peer-lost (peer 3): heartbeat silent for 1000 ms"
  std::string to_string() const;

  // Returns a copy with "context: " prepended to the message.
  Status with_context(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message() && a.peer() == b.peer();
  }

 private:
  struct Rep {
    ErrorCode code;
    int peer;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // shared: copying a sticky error is cheap
};

// Convenience constructors, one per code.
inline Status Timeout(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kTimeout, std::move(m), peer}; }
inline Status PeerLost(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kPeerLost, std::move(m), peer}; }
inline Status Corrupt(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kCorrupt, std::move(m), peer}; }
inline Status AuthFailed(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kAuthFailed, std::move(m), peer}; }
inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status Truncated(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kTruncated, std::move(m), peer}; }
inline Status AccessDenied(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kAccessDenied, std::move(m), peer}; }
inline Status ResourceExhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }
inline Status IoError(std::string m, int peer = Status::kNoPeer) { return {ErrorCode::kIoError, std::move(m), peer}; }
inline Status Cancelled(std::string m) { return {ErrorCode::kCancelled, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

// IoError carrying strerror(errno_value): "what: Connection refused (errno 111)".
Status ErrnoError(std::string_view what, int errno_value, int peer = Status::kNoPeer);

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::kInternal, "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace lattice

#define LATTICE_CONCAT_INNER(a, b) a##b
#define LATTICE_CONCAT(a, b) LATTICE_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not ok.
#define LATTICE_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::lattice::Status lattice_status_ = (expr);       \
    if (!lattice_status_.ok()) return lattice_status_; \
  } while (0)

// LATTICE_ASSIGN_OR_RETURN(auto x, make_x()); returns the error if make_x() failed.
#define LATTICE_ASSIGN_OR_RETURN(lhs, expr) \
  LATTICE_ASSIGN_OR_RETURN_IMPL(LATTICE_CONCAT(lattice_result_, __LINE__), lhs, expr)
#define LATTICE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
