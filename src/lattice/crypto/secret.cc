#include "lattice/crypto/secret.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lattice/core/check.h"
#include "lattice/crypto/sodium.h"

namespace lattice::crypto {
namespace {

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

bool all_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
}

}  // namespace

ClusterSecret ClusterSecret::generate() {
  LATTICE_CHECK(detail::ensure_sodium().ok());
  Bytes b;
  randombytes_buf(b.data(), b.size());
  ClusterSecret s(b);
  sodium_memzero(b.data(), b.size());
  return s;
}

ClusterSecret::~ClusterSecret() { sodium_memzero(bytes_.data(), bytes_.size()); }

Result<ClusterSecret> ClusterSecret::parse(std::string_view text) {
  LATTICE_RETURN_IF_ERROR(detail::ensure_sodium());
  std::string_view t = trim(text);
  if (t.empty()) return InvalidArgument("the cluster secret is empty");
  Bytes b{};
  size_t got = 0;
  if (t.size() == 2 * kSecretBytes && all_hex(t)) {
    if (sodium_hex2bin(b.data(), b.size(), t.data(), t.size(), nullptr, &got, nullptr) != 0 ||
        got != kSecretBytes)
      return InvalidArgument("the cluster secret is not valid hex");
    return ClusterSecret(b);
  }
  for (int variant : {sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
                      sodium_base64_VARIANT_URLSAFE, sodium_base64_VARIANT_URLSAFE_NO_PADDING}) {
    const char* end = nullptr;
    if (sodium_base642bin(b.data(), b.size(), t.data(), t.size(), nullptr, &got, &end, variant) == 0 &&
        got == kSecretBytes && end == t.data() + t.size())
      return ClusterSecret(b);
  }
  sodium_memzero(b.data(), b.size());
  return InvalidArgument("the cluster secret must be 32 bytes written as 64 hex digits or base64 (got " +
                         std::to_string(t.size()) + " characters); `lattice keygen` makes one");
}

std::string ClusterSecret::to_hex() const {
  std::string out(2 * kSecretBytes + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes_.data(), bytes_.size());
  out.pop_back();
  return out;
}

std::string ClusterSecret::fingerprint() const {
  LATTICE_CHECK(detail::ensure_sodium().ok());
  static constexpr char kLabel[] = "lattice secret fingerprint v1";
  uint8_t h[16];
  crypto_generichash(h, sizeof h, reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel - 1, bytes_.data(),
                     bytes_.size());
  char hex[9];
  sodium_bin2hex(hex, sizeof hex, h, 4);
  return hex;
}

bool operator==(const ClusterSecret& a, const ClusterSecret& b) {
  return sodium_memcmp(a.bytes_.data(), b.bytes_.data(), kSecretBytes) == 0;
}

Result<ClusterSecret> load_secret_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP) return AccessDenied("secret file " + path + " is a symbolic link; point at the file itself");
    if (e == ENOENT) return NotFound("secret file " + path + " does not exist (create one with `lattice keygen -o " + path + "`)");
    return ErrnoError("cannot open secret file " + path, e);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("cannot stat secret file " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument("secret file " + path + " is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return AccessDenied("secret file " + path + " has mode " + mode +
                        ": group or others can access it; run `chmod 600 " + path + "` (and consider the secret leaked: make a new one with `lattice keygen --force`)");
  }
  // A secret is 64 hex digits; anything much larger is not a secret file.
  char buf[256];
  ssize_t n = ::read(fd, buf, sizeof buf);
  int e = errno;
  ::close(fd);
  if (n < 0) return ErrnoError("cannot read secret file " + path, e);
  if (static_cast<size_t>(n) == sizeof buf) return InvalidArgument("secret file " + path + " is too large to be a cluster secret");
  auto secret = ClusterSecret::parse(std::string_view(buf, static_cast<size_t>(n)));
  sodium_memzero(buf, sizeof buf);
  if (!secret.ok()) return secret.status().with_context("secret file " + path);
  return secret;
}

Status write_secret_file(const std::string& path, const ClusterSecret& secret, bool overwrite) {
  if (overwrite) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("cannot replace " + path, errno);
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int e = errno;
    if (e == EEXIST) return InvalidArgument(path + " already exists; refusing to overwrite a cluster secret (use --force)");
    return ErrnoError("cannot create " + path, e);
  }
  // The umask can only clear bits, but make the mode exact whatever it is.
  if (::fchmod(fd, 0600) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return ErrnoError("cannot chmod " + path, e);
  }
  std::string text = secret.to_hex() + "\n";
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      sodium_memzero(text.data(), text.size());
      return ErrnoError("cannot write " + path, e);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  sodium_memzero(text.data(), text.size());
  if (::fsync(fd) != 0 || ::close(fd) != 0) return ErrnoError("cannot flush " + path, errno);
  return Status::Ok();
}

Result<ClusterSecret> load_secret(const std::string& path) {
  if (!path.empty()) return load_secret_file(path);
  if (const char* env = std::getenv(kSecretEnv); env != nullptr && *env != '\0') {
    auto s = ClusterSecret::parse(env);
    if (!s.ok()) return s.status().with_context(std::string("environment variable ") + kSecretEnv);
    return s;
  }
  if (const char* env = std::getenv(kSecretFileEnv); env != nullptr && *env != '\0') return load_secret_file(env);
  return NotFound(std::string("no cluster secret: pass --secret-file FILE, or set ") + kSecretEnv + " (the hex secret) or " +
                  kSecretFileEnv + " (its path); `lattice keygen -o FILE` makes one");
}

}  // namespace lattice::crypto
