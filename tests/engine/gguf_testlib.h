// A GGUF byte builder for tests, written field by field from the format description and
// independent of src/lattice/engine/gguf: it is the oracle for the writer's bytes and the
// way the corrupt-file tests place a wrong value exactly where they want it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lattice::engine::testing {

class GgufBytes {
 public:
  template <class T>
  GgufBytes& put(T x) {
    const auto* p = reinterpret_cast<const std::byte*>(&x);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  GgufBytes& u8(uint8_t x) { return put(x); }
  GgufBytes& u32(uint32_t x) { return put(x); }
  GgufBytes& u64(uint64_t x) { return put(x); }
  GgufBytes& str(std::string_view s) {
    u64(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    b.insert(b.end(), p, p + s.size());
    return *this;
  }
  GgufBytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  // Key/value helpers: key, type id, value.
  GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  GgufBytes& tensor_info(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(std::byte{0});
    return *this;
  }
  GgufBytes& fill(size_t n, uint8_t v) {
    b.insert(b.end(), n, std::byte{v});
    return *this;
  }

  std::vector<std::byte> b;
};

// A valid small file: general.name (string) and a test.values array of three u32, then two
// F32 tensors "a" [8] and "b" [4, 2] (data filled with 0x11 and 0x22), alignment 32.
std::vector<std::byte> small_valid_file();

// Writes bytes to a file (fails the test on error).
void write_file(const std::string& path, const std::vector<std::byte>& bytes);
// A fresh empty directory under the test's temp dir.
std::string make_temp_dir(std::string_view tag);

}  // namespace lattice::engine::testing
