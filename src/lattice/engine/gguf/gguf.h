// GGUF files: typed metadata, a memory-mapped reader and a streaming writer.
//
// Format facts (GGUF v2/v3, little-endian): "GGUF" magic, u32 version, u64 tensor count,
// u64 metadata count, the key/value pairs, the tensor infos (name, n_dims, ne[n_dims],
// type, offset), padding to general.alignment (default 32), then the tensor data. Tensor
// offsets are relative to the start of the data section and aligned. ne[0] is the
// contiguous dimension: a row-major [n_out, n_in] weight is stored with ne = {n_in, n_out}.
// v2 and v3 share the layout (v3 only allows big-endian files, which we do not read).
//
// Split sets ("name-00001-of-00004.gguf", as gguf-split writes them): every file is a
// complete GGUF holding some tensors; the first holds all metadata plus split.no (u16),
// split.count (u16) and split.tensors.count (i32); the others hold only the split keys.
//
// Reader: GgufFile::open() maps every file of the set read-only (MAP_PRIVATE, PROT_READ);
// weights are never copied, pages come in on first touch. Every count, length, offset,
// size, type and dimension is checked against the file before use; a bad file gives a
// kCorrupt error naming the key or tensor and the reason, an unsupported tensor type
// kUnavailable. A file must not be truncated by someone else while it is mapped (that
// would raise SIGBUS on access, which no reader of a mapping can prevent).
//
// Thread safety: a GgufFile is immutable after open(); all const methods may be called
// concurrently. Metadata and GgufWriter are plain values (no internal locking).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/quant/types.h"

namespace lattice::engine {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr size_t kGgufMaxDims = 4;
inline constexpr size_t kGgufMaxTensorName = 63;  // ggml keeps names in char[64]

// Value type ids, as numbered by the format.
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view to_string(ValueType t);

// One metadata value: a scalar, a string, or a flat array of one of those (GGUF allows
// nested arrays in principle; ggml rejects them and so do we).
class Value {
 public:
  using Storage =
      std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string, uint64_t,
                   int64_t, double, std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>,
                   std::vector<int16_t>, std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>,
                   std::vector<bool>, std::vector<std::string>, std::vector<uint64_t>, std::vector<int64_t>,
                   std::vector<double>>;

  Value() : v_(uint8_t{0}) {}
  template <class T>
    requires std::is_constructible_v<Storage, T&&>
  Value(T&& v) : v_(std::forward<T>(v)) {}  // NOLINT: implicit by design
  Value(const char* s) : v_(std::string(s)) {}  // NOLINT

  // kArray for arrays; then elem_type() says of what.
  ValueType type() const;
  ValueType elem_type() const;  // for arrays; type() otherwise
  bool is_array() const { return v_.index() >= 12; }
  size_t array_size() const;  // 0 for scalars

  template <class T>
  const T* get_if() const { return std::get_if<T>(&v_); }
  const Storage& storage() const { return v_; }

  // Integer value of any integer type, if it has one (bool is not an integer here).
  std::optional<int64_t> as_int() const;
  std::optional<uint64_t> as_uint() const;
  // A short human-readable rendering ("32", "\"llama\"", "[string x 32000]").
  std::string to_display() const;

  friend bool operator==(const Value& a, const Value& b) { return a.v_ == b.v_; }

 private:
  Storage v_;
};

// Ordered key/value metadata with typed getters. Getters name the key in their error:
// kNotFound when it is missing, kCorrupt when it has the wrong type or an out-of-range value.
class Metadata {
 public:
  struct Entry {
    std::string key;
    Value value;
  };

  // Adds or replaces (keeping the original position).
  void set(std::string key, Value value);
  bool erase(std::string_view key);
  const Value* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

  // Integer getters accept any stored integer type whose value fits.
  Result<uint8_t> get_u8(std::string_view key) const;
  Result<uint16_t> get_u16(std::string_view key) const;
  Result<uint32_t> get_u32(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<int32_t> get_i32(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  // Float getters accept f32 or f64.
  Result<float> get_f32(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  // The fallback when the key is missing; still an error when it is present but mistyped.
  Result<uint32_t> get_u32_or(std::string_view key, uint32_t fallback) const;
  Result<float> get_f32_or(std::string_view key, float fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;

  // Arrays: a pointer into this Metadata (valid while it lives), exact element type.
  template <class T>
  Result<const std::vector<T>*> get_array(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return missing(key);
    if (auto* a = v->get_if<std::vector<T>>()) return a;
    return mistyped(key, *v, "an array of the expected element type");
  }

 private:
  static Status missing(std::string_view key);
  static Status mistyped(std::string_view key, const Value& v, std::string_view wanted);
  template <class T>
  Result<T> get_int(std::string_view key) const;

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
};

// One tensor of an opened file: where its bytes are and what they mean.
struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  uint32_t n_dims = 0;
  std::array<uint64_t, kGgufMaxDims> ne{1, 1, 1, 1};  // ne[0] is contiguous; unused dims are 1
  uint64_t n_elems = 0;
  uint64_t n_bytes = 0;
  uint32_t file_index = 0;   // which file of the split set (0 for a single file)
  uint64_t file_offset = 0;  // absolute byte offset of the data in that file
  const std::byte* data = nullptr;  // into the read-only mapping; valid while the GgufFile lives

  std::span<const std::byte> bytes() const { return {data, static_cast<size_t>(n_bytes)}; }
  uint64_t n_rows() const { return n_elems / ne[0]; }
  uint64_t row_bytes() const { return n_bytes / n_rows(); }
  std::string shape_string() const;  // "[2048, 32000]"
};

struct OpenOptions {
  // Accept tensor types the format knows but the engine has no kernels for (Q8_1, Q8_K):
  // for inspection tools. Default: such a file is refused with kUnavailable naming the tensor.
  bool allow_unsupported_types = false;
  // Read every page in at open (MAP_POPULATE): for benchmarks that must not time page faults.
  bool populate = false;
};

namespace detail {
struct MappedFile;
}

enum class Access { kNormal, kSequential, kRandom, kWillNeed, kDontNeed };

class GgufFile {
 public:
  // Opens one file, or the first file of a split set (then every file of the set).
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path, const OpenOptions& options = {});
  // Parses a GGUF image held in memory, which must outlive the result (tests, fuzzing).
  // `name` is used in error messages. One image only: split keys are kept but not followed.
  static Result<std::unique_ptr<GgufFile>> parse(std::span<const std::byte> bytes, std::string name = "<memory>",
                                                 const OpenOptions& options = {});

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // The first file's metadata (the split keys of later files are checked, not merged).
  const Metadata& metadata() const { return metadata_; }
  // In file order (first file's tensors first).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  Result<const TensorInfo*> tensor(std::string_view name) const;  // kNotFound naming it
  // Tensors whose names start with `prefix` ("blk.3."), in file order: what a node holding
  // some layers advises, prefetches and touches.
  std::vector<const TensorInfo*> tensors_with_prefix(std::string_view prefix) const;

  size_t n_files() const { return files_.size(); }
  const std::string& path(size_t file_index) const;
  uint64_t file_size(size_t file_index) const;
  uint64_t total_tensor_bytes() const;

  // Paging hints for a tensor's pages (madvise); a node that holds only some layers touches
  // and prefetches only those. kDontNeed drops the pages from this process (they come back
  // from the page cache or the file on the next touch). Never blocks on I/O except kWillNeed,
  // which may start readahead.
  Status advise(const TensorInfo& t, Access access) const;
  Status prefetch(std::span<const TensorInfo* const> tensors) const;
  // Bytes of the tensor's pages resident in memory now (mincore), for tools and tests.
  Result<uint64_t> resident_bytes(const TensorInfo& t) const;

 private:
  GgufFile();

  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
  std::vector<std::unique_ptr<detail::MappedFile>> files_;
};

// "model-00001-of-00004.gguf" for prefix "model", split 0 of 4.
std::string split_path(std::string_view prefix, uint32_t split_index, uint32_t split_count);

// ---------------------------------------------------------------------------------------
// Writer: metadata held in memory, tensor data streamed to the file one tensor at a time.

struct TensorSpec {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<uint64_t> ne;      // ne[0] contiguous
  std::vector<std::byte> data;   // optional: bytes owned by the writer (else the fill callback)
  uint64_t n_bytes = 0;          // computed by add_tensor
};

struct WriteOptions {
  uint32_t version = 3;            // 2 or 3 (same layout)
  uint32_t max_tensors_per_file = 0;  // > 0: write a split set
  uint64_t max_bytes_per_file = 0;    // > 0: split when a file's tensor data would exceed this
  // Leave the tensor data as a hole (seek past it, then set the file's size): a sparse file
  // with the real header and tensor table that takes no disk for the data, which reads as
  // zeros. No fill function is called. write() only (not write_to_memory).
  bool sparse_data = false;
};

class GgufWriter {
 public:
  // Produces tensor `index`'s bytes into `out` (exactly its n_bytes). Called once per tensor,
  // in order, from the writing thread.
  using FillFn = std::function<Status(size_t index, const TensorSpec& spec, std::span<std::byte> out)>;

  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }

  // Validates the name (unique, 1..63 bytes), dims (1..4, each >= 1, product fits),
  // ne[0] a whole number of blocks. Data, when given, must have exactly the tensor's size.
  Status add_tensor(std::string name, TensorType type, std::vector<uint64_t> ne, std::vector<std::byte> data = {});
  const std::vector<TensorSpec>& tensors() const { return tensors_; }

  // Writes `path` (or, when splitting, prefix-0000i-of-0000n.gguf with the prefix being
  // `path` minus ".gguf"); each file appears under its name only once complete. Returns the
  // paths written. `fill` may be empty when every tensor carries its data.
  Result<std::vector<std::string>> write(const std::string& path, const FillFn& fill = {},
                                         const WriteOptions& options = {}) const;
  // The whole single file in memory (tests).
  Result<std::vector<std::byte>> write_to_memory(const FillFn& fill = {}, const WriteOptions& options = {}) const;

 private:
  Metadata metadata_;
  std::vector<TensorSpec> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
};

}  // namespace lattice::engine
