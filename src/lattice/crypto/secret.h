// The cluster secret: 32 random bytes every member of a cluster holds. Joining a cluster
// (the handshake in handshake.h) proves knowledge of it; session keys are bound to it.
//
// Text form: 64 hex digits (what `lattice keygen` writes) or base64 of the 32 bytes
// (standard or URL-safe alphabet, padded or not). Surrounding whitespace is ignored.
//
// Sources, in the order load_secret() tries them:
//   1. an explicit file path (e.g. --secret-file);
//   2. the environment variable LATTICE_SECRET holding the text form itself;
//   3. the environment variable LATTICE_SECRET_FILE holding a path.
// A secret file must be a regular file that neither group nor others may read or write
// (mode 0600 or 0400): anything looser is refused with a message saying how to fix it.
//
// ClusterSecret wipes its bytes when destroyed. It is a plain value: thread-safe to read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lattice/core/status.h"

namespace lattice::crypto {

inline constexpr size_t kSecretBytes = 32;
inline constexpr const char* kSecretEnv = "LATTICE_SECRET";
inline constexpr const char* kSecretFileEnv = "LATTICE_SECRET_FILE";

class ClusterSecret {
 public:
  using Bytes = std::array<uint8_t, kSecretBytes>;

  // 32 bytes from the kernel's generator.
  static ClusterSecret generate();
  static ClusterSecret from_bytes(const Bytes& bytes) { return ClusterSecret(bytes); }
  // Hex (64 digits) or base64; kInvalidArgument naming what was wrong (never echoing the text).
  static Result<ClusterSecret> parse(std::string_view text);

  ClusterSecret(const ClusterSecret&) = default;
  ClusterSecret& operator=(const ClusterSecret&) = default;
  ~ClusterSecret();

  const Bytes& bytes() const { return bytes_; }
  std::string to_hex() const;
  // A short, non-secret fingerprint for logs ("a1b2c3d4"): the first 4 bytes of a keyed
  // hash, so two nodes can compare which secret they hold without revealing it.
  std::string fingerprint() const;

  // Constant-time comparison.
  friend bool operator==(const ClusterSecret& a, const ClusterSecret& b);

 private:
  explicit ClusterSecret(const Bytes& b) : bytes_(b) {}
  Bytes bytes_{};
};

// Reads a secret file, refusing one that group or others can access.
Result<ClusterSecret> load_secret_file(const std::string& path);

// Writes `secret` as hex + "\n" with mode 0600. Refuses to replace an existing file
// unless `overwrite`; a replaced file is unlinked first so the new one never inherits
// looser permissions.
Status write_secret_file(const std::string& path, const ClusterSecret& secret, bool overwrite);

// The secret from `path` if non-empty, else from LATTICE_SECRET, else LATTICE_SECRET_FILE.
// kNotFound if none is set; the message lists the three ways to provide one.
Result<ClusterSecret> load_secret(const std::string& path);

}  // namespace lattice::crypto
