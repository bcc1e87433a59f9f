#include "lattice/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>


namespace lattice::train {
namespace {

constexpr char kMagic[4] = {'L', 'T', 'C', 'K'};
constexpr uint32_t kVersion = 1;

struct Fnv {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
};

Status write_fd(int fd, const void* p, size_t n, Fnv& sum, const std::string& what) {
  sum.add(p, n);
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoError("write " + what, errno);
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status write_checkpoint(const std::string& path, const Checkpoint& c) {
  if (c.m.size() != c.params.size() || c.v.size() != c.params.size()) return InvalidArgument("checkpoint: sizes differ");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create " + tmp, errno);
  Fnv sum;
  const std::string header = c.header.dump();
  const uint64_t hlen = header.size(), n = c.params.size();
  Status st = write_fd(fd, kMagic, 4, sum, tmp);
  if (st.ok()) st = write_fd(fd, &kVersion, 4, sum, tmp);
  if (st.ok()) st = write_fd(fd, &hlen, 8, sum, tmp);
  if (st.ok()) st = write_fd(fd, header.data(), header.size(), sum, tmp);
  if (st.ok()) st = write_fd(fd, &n, 8, sum, tmp);
  for (const auto* a : {&c.params, &c.m, &c.v})
    if (st.ok()) st = write_fd(fd, a->data(), a->size() * sizeof(float), sum, tmp);
  const uint64_t h = sum.h;
  if (st.ok()) st = write_fd(fd, &h, 8, sum, tmp);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("close " + tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = ErrnoError("rename " + tmp + " to " + path, errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename is durable only once the directory is.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Result<Checkpoint> read_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("checkpoint " + path + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string bytes = std::move(ss).str();
  auto bad = [&](const std::string& why) { return Corrupt("checkpoint " + path + ": " + why); };
  if (bytes.size() < 4 + 4 + 8 + 8 + 8 || std::memcmp(bytes.data(), kMagic, 4) != 0) return bad("not a lattice checkpoint");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  if (version != kVersion) return bad("version " + std::to_string(version) + ", expected " + std::to_string(kVersion));
  Fnv sum;
  sum.add(bytes.data(), bytes.size() - 8);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (stored != sum.h) return bad("checksum mismatch (truncated or damaged)");
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  if (hlen > bytes.size() - 32) return bad("header length out of range");
  Checkpoint c;
  c.header = nlohmann::json::parse(bytes.substr(16, hlen), nullptr, false);
  if (c.header.is_discarded() || !c.header.is_object()) return bad("header is not a JSON object");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data() + 16 + hlen, 8);
  const size_t body = 16 + hlen + 8;
  if (n > (bytes.size() - body - 8) / 12 || body + n * 12 + 8 != bytes.size()) return bad("array sizes do not match the file size");
  for (auto* a : {&c.params, &c.m, &c.v}) {
    a->resize(n);
    const size_t idx = static_cast<size_t>(a == &c.params ? 0 : (a == &c.m ? 1 : 2));
    std::memcpy(a->data(), bytes.data() + body + idx * n * 4, n * 4);
  }
  return c;
}

}  // namespace lattice::train
