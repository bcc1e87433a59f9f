#pragma once
// ThreadSanitizer and a segment mapped twice in one process.
//
// A provider whose ends share a memfd segment maps it once per end: the owner with its own
// mmap, the peer through /proc/<pid>/fd/<fd>. When both ends live in one process (the tests'
// pairs, coll's ranks as threads) the same page then has two addresses, and ThreadSanitizer,
// which tracks memory by address, sees a release store through one and the acquire load
// through the other as two unrelated atomics. It misses the happens-before the ring counters
// carry and reports what the consumer writes after the acquire (a receive buffer, an RMA
// target) as a race with what the producer's side did before the release.
//
// Under ThreadSanitizer every such edge is also announced on one key per segment, the same
// for both mappings (found by the memfd's inode); in other builds these are no-ops and
// compile to nothing. A key is shared by all the counters of a segment, so the edges it adds
// are a superset of the real ones (it can hide a race between two fields of one segment; it
// cannot report one that is not there).
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#define LATTICE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LATTICE_TSAN 1
#endif
#endif

#if defined(LATTICE_TSAN)
#include <sys/stat.h>

#include <memory>
#include <mutex>
#include <unordered_map>

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace lattice::fabric::tsan {

// The key of the segment behind `fd` (either mapping's descriptor): nullptr outside
// ThreadSanitizer builds or when fstat fails (then the calls below do nothing).
inline const void* segment_key(int fd) {
#if defined(LATTICE_TSAN)
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0) return nullptr;
  // Keys live as long as the process: one byte per segment ever made. The mutex is taken
  // only here, when a segment is made or mapped, not on the edges themselves.
  static std::mutex mu;
  static std::unordered_map<uint64_t, std::unique_ptr<char>> keys;
  std::lock_guard lock(mu);
  auto& k = keys[static_cast<uint64_t>(st.st_ino)];
  if (!k) k = std::make_unique<char>();
  return k.get();
#else
  (void)fd;
  return nullptr;
#endif
}

// Before a release store into the segment.
inline void release(const void* key) {
#if defined(LATTICE_TSAN)
  if (key != nullptr) __tsan_release(const_cast<void*>(key));
#else
  (void)key;
#endif
}
// After an acquire load from the segment that the caller acts on.
inline void acquire(const void* key) {
#if defined(LATTICE_TSAN)
  if (key != nullptr) __tsan_acquire(const_cast<void*>(key));
#else
  (void)key;
#endif
}

}  // namespace lattice::fabric::tsan
