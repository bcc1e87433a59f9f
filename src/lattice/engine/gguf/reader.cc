// GGUF reader: parses and validates every field against the file before use, then serves
// tensors as pointers into a read-only mapping. Nothing here trusts a count or an offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {

namespace {

constexpr uint64_t kMaxKeyBytes = 65535;
// No real file has metadata arrays near this (the largest vocabularies hold ~256k tokens and
// ~500k merges); a count above it is corruption, refused before any allocation.
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 27;
// Smallest possible encodings, used to bound counts by the bytes left before allocating.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;               // key length, 1-byte key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, one dim, type, offset

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
  if (s.size() > 80) out += "...";
  return out + "'";
}

// Bounds-checked little-endian reads over the file image.
class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> b) : b_(b) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }

  template <class T>
  bool read(T& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&out, b_.data() + pos_, sizeof(T));  // the host is little-endian (x86-64, arm64)
    pos_ += sizeof(T);
    return true;
  }
  void skip(uint64_t n) { pos_ += std::min(n, remaining()); }
  bool read_bytes(uint64_t n, std::string& out) {
    if (remaining() < n) return false;
    out.assign(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(n));
    pos_ += n;
    return true;
  }

 private:
  std::span<const std::byte> b_;
  uint64_t pos_ = 0;
};

struct Parsed {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  Metadata metadata;
  std::vector<TensorInfo> tensors;  // file_offset absolute, data pointer set
};

class Parser {
 public:
  Parser(std::span<const std::byte> bytes, std::string_view name, const OpenOptions& options)
      : bytes_(bytes), c_(bytes), name_(name), options_(options) {}

  Result<Parsed> run() {
    LATTICE_RETURN_IF_ERROR(header());
    for (uint64_t i = 0; i < n_kv_; ++i) LATTICE_RETURN_IF_ERROR(kv(i));
    LATTICE_RETURN_IF_ERROR(alignment());
    for (uint64_t i = 0; i < n_tensors_; ++i) LATTICE_RETURN_IF_ERROR(tensor_info(i));
    LATTICE_RETURN_IF_ERROR(layout());
    return std::move(out_);
  }

 private:
  Status err(std::string what) const { return Corrupt(name_ + ": " + what); }
  Status past_end(std::string_view what) const {
    return err(std::string(what) + " runs past the end of the file (offset " + std::to_string(c_.pos()) +
               ", file size " + std::to_string(bytes_.size()) + ")");
  }

  Status header() {
    uint32_t magic = 0;
    if (!c_.read(magic)) return err("file too short for the GGUF magic (" + std::to_string(bytes_.size()) + " bytes)");
    if (magic != kGgufMagic) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", magic);
      return err(std::string("bad magic ") + buf + ", not a GGUF file");
    }
    if (!c_.read(out_.version)) return past_end("the version");
    if (out_.version != 2 && out_.version != 3) {
      std::string why = out_.version == 1 ? " (GGUF v1 files are obsolete)"
                        : (out_.version & 0xffff) == 0 ? " (a big-endian file?)"
                                                       : "";
      return Unavailable(name_ + ": unsupported GGUF version " + std::to_string(out_.version) + why +
                         "; versions 2 and 3 are supported");
    }
    if (!c_.read(n_tensors_)) return past_end("the tensor count");
    if (!c_.read(n_kv_)) return past_end("the metadata count");
    if (n_kv_ > c_.remaining() / kMinKvBytes)
      return err("metadata count " + std::to_string(n_kv_) + " is impossible for a file of " +
                 std::to_string(bytes_.size()) + " bytes");
    if (n_tensors_ > c_.remaining() / kMinTensorInfoBytes)
      return err("tensor count " + std::to_string(n_tensors_) + " is impossible for a file of " +
                 std::to_string(bytes_.size()) + " bytes");
    return Status::Ok();
  }

  Status string(std::string& out, std::string_view what, uint64_t max_len = UINT64_MAX) {
    uint64_t len = 0;
    if (!c_.read(len)) return past_end(std::string(what) + " length");
    if (len > max_len) return err(std::string(what) + " length " + std::to_string(len) + " exceeds " + std::to_string(max_len));
    if (len > c_.remaining())
      return past_end(std::string(what) + " of length " + std::to_string(len));
    c_.read_bytes(len, out);
    return Status::Ok();
  }

  template <class T>
  Status scalar(T& out, const std::string& key) {
    if (!c_.read(out)) return past_end("key " + quoted(key) + ": value");
    return Status::Ok();
  }

  static uint64_t min_bytes(ValueType t) {
    switch (t) {
      case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
      case ValueType::kU16: case ValueType::kI16: return 2;
      case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
      case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: case ValueType::kString: return 8;
      case ValueType::kArray: return 12;
    }
    return 1;
  }
  static bool known(uint32_t t) { return t <= 12; }

  template <class T>
  Status array_of(uint64_t n, const std::string& key, Value& out) {
    if constexpr (std::is_same_v<T, std::string>) {
      // Walk the lengths first so that the allocation below is backed by real bytes.
      Cursor probe = c_;
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = 0;
        if (!probe.read(len) || len > probe.remaining()) {
          c_ = probe;
          return past_end("key " + quoted(key) + ": element " + std::to_string(i) + ": string");
        }
        probe.skip(len);
      }
    }
    std::vector<T> v;
    v.resize(static_cast<size_t>(n));  // n was bounded by the bytes left
    for (uint64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, std::string>) {
        LATTICE_RETURN_IF_ERROR(string(v[i], "key " + quoted(key) + ": element " + std::to_string(i) + ": string"));
      } else if constexpr (std::is_same_v<T, bool>) {
        uint8_t b = 0;
        if (!c_.read(b)) return past_end("key " + quoted(key) + ": array");
        v[i] = b != 0;
      } else {
        T x{};
        if (!c_.read(x)) return past_end("key " + quoted(key) + ": array");
        v[i] = x;
      }
    }
    out = Value(std::move(v));
    return Status::Ok();
  }

  Status value(uint32_t type, const std::string& key, Value& out) {
    switch (static_cast<ValueType>(type)) {
#define LATTICE_GGUF_SCALAR(kind, T) \
  case ValueType::kind: {            \
    T x{};                           \
    LATTICE_RETURN_IF_ERROR(scalar(x, key)); \
    out = Value(x);                  \
    return Status::Ok();             \
  }
      LATTICE_GGUF_SCALAR(kU8, uint8_t)
      LATTICE_GGUF_SCALAR(kI8, int8_t)
      LATTICE_GGUF_SCALAR(kU16, uint16_t)
      LATTICE_GGUF_SCALAR(kI16, int16_t)
      LATTICE_GGUF_SCALAR(kU32, uint32_t)
      LATTICE_GGUF_SCALAR(kI32, int32_t)
      LATTICE_GGUF_SCALAR(kF32, float)
      LATTICE_GGUF_SCALAR(kU64, uint64_t)
      LATTICE_GGUF_SCALAR(kI64, int64_t)
      LATTICE_GGUF_SCALAR(kF64, double)
#undef LATTICE_GGUF_SCALAR
      case ValueType::kBool: {
        uint8_t b = 0;
        LATTICE_RETURN_IF_ERROR(scalar(b, key));
        out = Value(b != 0);
        return Status::Ok();
      }
      case ValueType::kString: {
        std::string s;
        LATTICE_RETURN_IF_ERROR(string(s, "key " + quoted(key) + ": string"));
        out = Value(std::move(s));
        return Status::Ok();
      }
      case ValueType::kArray: {
        uint32_t elem = 0;
        uint64_t n = 0;
        if (!c_.read(elem)) return past_end("key " + quoted(key) + ": array element type");
        if (!known(elem)) return err("key " + quoted(key) + ": unknown array element type id " + std::to_string(elem));
        if (static_cast<ValueType>(elem) == ValueType::kArray)
          return Unavailable(name_ + ": key " + quoted(key) + ": nested arrays are not supported");
        if (!c_.read(n)) return past_end("key " + quoted(key) + ": array length");
        if (n > kMaxArrayElems)
          return err("key " + quoted(key) + ": array of " + std::to_string(n) + " elements exceeds the limit of " +
                     std::to_string(kMaxArrayElems));
        if (n > c_.remaining() / min_bytes(static_cast<ValueType>(elem)))
          return err("key " + quoted(key) + ": array of " + std::to_string(n) + " " +
                     std::string(to_string(static_cast<ValueType>(elem))) + " elements runs past the end of the file");
        switch (static_cast<ValueType>(elem)) {
          case ValueType::kU8: return array_of<uint8_t>(n, key, out);
          case ValueType::kI8: return array_of<int8_t>(n, key, out);
          case ValueType::kU16: return array_of<uint16_t>(n, key, out);
          case ValueType::kI16: return array_of<int16_t>(n, key, out);
          case ValueType::kU32: return array_of<uint32_t>(n, key, out);
          case ValueType::kI32: return array_of<int32_t>(n, key, out);
          case ValueType::kF32: return array_of<float>(n, key, out);
          case ValueType::kBool: return array_of<bool>(n, key, out);
          case ValueType::kString: return array_of<std::string>(n, key, out);
          case ValueType::kU64: return array_of<uint64_t>(n, key, out);
          case ValueType::kI64: return array_of<int64_t>(n, key, out);
          case ValueType::kF64: return array_of<double>(n, key, out);
          case ValueType::kArray: break;
        }
        return Status::Ok();
      }
    }
    return err("key " + quoted(key) + ": unknown value type id " + std::to_string(type));
  }

  Status kv(uint64_t i) {
    std::string key;
    LATTICE_RETURN_IF_ERROR(string(key, "metadata entry " + std::to_string(i) + ": key", kMaxKeyBytes));
    if (key.empty()) return err("metadata entry " + std::to_string(i) + ": empty key");
    uint32_t type = 0;
    if (!c_.read(type)) return past_end("key " + quoted(key) + ": value type");
    Value v;
    LATTICE_RETURN_IF_ERROR(value(type, key, v));
    if (out_.metadata.contains(key)) return err("key " + quoted(key) + ": duplicate key");
    out_.metadata.set(std::move(key), std::move(v));
    return Status::Ok();
  }

  Status alignment() {
    const Value* v = out_.metadata.find("general.alignment");
    if (!v) return Status::Ok();
    const uint32_t* a = v->get_if<uint32_t>();
    if (!a) return err("key 'general.alignment': has type " + std::string(to_string(v->type())) + ", expected u32");
    if (*a == 0 || (*a & (*a - 1)) != 0)
      return err("key 'general.alignment': " + std::to_string(*a) + " is not a power of two");
    out_.alignment = *a;
    return Status::Ok();
  }

  Status tensor_info(uint64_t i) {
    TensorInfo t;
    LATTICE_RETURN_IF_ERROR(string(t.name, "tensor " + std::to_string(i) + ": name"));
    if (t.name.empty()) return err("tensor " + std::to_string(i) + ": empty name");
    const std::string tn = "tensor " + quoted(t.name);
    if (t.name.size() > kGgufMaxTensorName)
      return err(tn + ": name longer than " + std::to_string(kGgufMaxTensorName) + " bytes");
    if (!c_.read(t.n_dims)) return past_end(tn + ": n_dims");
    if (t.n_dims == 0 || t.n_dims > kGgufMaxDims)
      return err(tn + ": " + std::to_string(t.n_dims) + " dimensions (1 to " + std::to_string(kGgufMaxDims) + " allowed)");
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      if (!c_.read(t.ne[d])) return past_end(tn + ": dimensions");
      if (t.ne[d] == 0) return err(tn + ": dimension " + std::to_string(d) + " is zero");
      if (t.ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n_elems)
        return err(tn + ": element count overflows (dimension " + std::to_string(d) + " = " + std::to_string(t.ne[d]) + ")");
      n_elems *= t.ne[d];
    }
    t.n_elems = n_elems;
    uint32_t type = 0;
    if (!c_.read(type)) return past_end(tn + ": type");
    auto traits = type_traits(type);
    if (!traits) return err(tn + ": unknown tensor type id " + std::to_string(type));
    if (!traits->supported && !options_.allow_unsupported_types)
      return Unavailable(name_ + ": " + tn + ": tensor type " + std::string(traits->name) + " is not supported");
    t.type = static_cast<TensorType>(type);
    if (t.ne[0] % traits->block_elems != 0)
      return err(tn + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                 std::string(traits->name) + " block size " + std::to_string(traits->block_elems));
    const uint64_t blocks = n_elems / traits->block_elems;
    if (blocks > std::numeric_limits<uint64_t>::max() / traits->block_bytes)
      return err(tn + ": byte size overflows");
    t.n_bytes = blocks * traits->block_bytes;
    uint64_t offset = 0;
    if (!c_.read(offset)) return past_end(tn + ": offset");
    t.file_offset = offset;  // relative for now; layout() makes it absolute
    out_.tensors.push_back(std::move(t));
    return Status::Ok();
  }

  Status layout() {
    const uint64_t a = out_.alignment;
    const uint64_t data_start = (c_.pos() + a - 1) / a * a;
    const uint64_t size = bytes_.size();
    const uint64_t data_size = data_start <= size ? size - data_start : 0;
    std::unordered_map<std::string_view, size_t> names;
    for (size_t i = 0; i < out_.tensors.size(); ++i) {
      TensorInfo& t = out_.tensors[i];
      const std::string tn = "tensor " + quoted(t.name);
      if (!names.emplace(t.name, i).second) return err(tn + ": duplicate tensor name");
      const uint64_t rel = t.file_offset;
      if (rel % a != 0)
        return err(tn + ": offset " + std::to_string(rel) + " is not a multiple of the alignment " + std::to_string(a));
      if (rel > data_size || t.n_bytes > data_size - rel)
        return err(tn + ": data at offset " + std::to_string(rel) + " of " + std::to_string(t.n_bytes) +
                   " bytes runs past the end of the file (data section holds " + std::to_string(data_size) + " bytes)");
      t.file_offset = data_start + rel;
      t.data = bytes_.data() + t.file_offset;
    }
    std::vector<size_t> order(out_.tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return out_.tensors[x].file_offset < out_.tensors[y].file_offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = out_.tensors[order[k - 1]];
      const TensorInfo& cur = out_.tensors[order[k]];
      if (prev.file_offset + prev.n_bytes > cur.file_offset)
        return err("tensor " + quoted(cur.name) + ": data overlaps tensor " + quoted(prev.name));
    }
    return Status::Ok();
  }

  std::span<const std::byte> bytes_;
  Cursor c_;
  std::string name_;
  OpenOptions options_;
  uint64_t n_tensors_ = 0, n_kv_ = 0;
  Parsed out_;
};

}  // namespace

struct detail::MappedFile {
  std::string path;
  const std::byte* addr = nullptr;
  uint64_t size = 0;
  bool owned = false;  // a mapping we made (else memory the caller holds)

  ~MappedFile() {
    if (owned && addr) ::munmap(const_cast<std::byte*>(addr), size);
  }
};

GgufFile::GgufFile() = default;
GgufFile::~GgufFile() = default;

namespace {
Result<std::unique_ptr<detail::MappedFile>> map_file(const std::string& path, bool populate);
}  // namespace

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> GgufFile::tensor(std::string_view name) const {
  if (const TensorInfo* t = find_tensor(name)) return t;
  return NotFound("tensor '" + std::string(name) + "': missing from " + files_.front()->path);
}

std::vector<const TensorInfo*> GgufFile::tensors_with_prefix(std::string_view prefix) const {
  std::vector<const TensorInfo*> out;
  for (const auto& t : tensors_)
    if (std::string_view(t.name).starts_with(prefix)) out.push_back(&t);
  return out;
}

const std::string& GgufFile::path(size_t file_index) const { return files_.at(file_index)->path; }
uint64_t GgufFile::file_size(size_t file_index) const { return files_.at(file_index)->size; }

uint64_t GgufFile::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.n_bytes;
  return n;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(std::span<const std::byte> bytes, std::string name,
                                                  const OpenOptions& options) {
  Parser p(bytes, name, options);
  LATTICE_ASSIGN_OR_RETURN(Parsed parsed, p.run());
  std::unique_ptr<GgufFile> f(new GgufFile());
  auto mf = std::make_unique<detail::MappedFile>();
  mf->path = std::move(name);
  mf->addr = bytes.data();
  mf->size = bytes.size();
  f->files_.push_back(std::move(mf));
  f->version_ = parsed.version;
  f->alignment_ = parsed.alignment;
  f->metadata_ = std::move(parsed.metadata);
  f->tensors_ = std::move(parsed.tensors);
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->by_name_.emplace(f->tensors_[i].name, i);
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, const OpenOptions& options) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  auto add_file = [&](const std::string& p) -> Result<Parsed> {
    LATTICE_ASSIGN_OR_RETURN(auto mf, map_file(p, options.populate));
    Parser parser({mf->addr, static_cast<size_t>(mf->size)}, p, options);
    LATTICE_ASSIGN_OR_RETURN(Parsed parsed, parser.run());
    for (auto& t : parsed.tensors) t.file_index = static_cast<uint32_t>(f->files_.size());
    f->files_.push_back(std::move(mf));
    return parsed;
  };
  LATTICE_ASSIGN_OR_RETURN(Parsed first, add_file(path));
  f->version_ = first.version;
  f->alignment_ = first.alignment;
  f->metadata_ = std::move(first.metadata);
  f->tensors_ = std::move(first.tensors);

  const Metadata& md = f->metadata_;
  if (md.contains("split.count")) {
    auto count_r = md.get_u16("split.count");
    if (!count_r.ok()) return count_r.status().with_context(path);
    const uint32_t count = *count_r;
    auto no_r = md.contains("split.no") ? md.get_u16("split.no") : Result<uint16_t>(uint16_t{0});
    if (!no_r.ok()) return no_r.status().with_context(path);
    if (count == 0) return Corrupt(path + ": key 'split.count': zero");
    if (*no_r != 0)
      return InvalidArgument(path + ": is file " + std::to_string(*no_r + 1) + " of a " + std::to_string(count) +
                             "-file split set; open the first file");
    if (count > 1) {
      const std::string suffix = split_path("", 0, count);
      if (path.size() <= suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
        return InvalidArgument(path + ": is the first of " + std::to_string(count) +
                               " split files but its name does not end in '" + suffix + "'");
      const std::string prefix = path.substr(0, path.size() - suffix.size());
      for (uint32_t i = 1; i < count; ++i) {
        const std::string p = split_path(prefix, i, count);
        LATTICE_ASSIGN_OR_RETURN(Parsed part, add_file(p));
        auto pno = part.metadata.get_u16("split.no");
        if (!pno.ok()) return pno.status().with_context(p);
        if (*pno != i)
          return Corrupt(p + ": key 'split.no': " + std::to_string(*pno) + ", expected " + std::to_string(i));
        auto pcount = part.metadata.get_u16("split.count");
        if (!pcount.ok()) return pcount.status().with_context(p);
        if (*pcount != count)
          return Corrupt(p + ": key 'split.count': " + std::to_string(*pcount) + ", expected " + std::to_string(count));
        for (auto& t : part.tensors) f->tensors_.push_back(std::move(t));
      }
    }
    if (md.contains("split.tensors.count")) {
      auto n = md.get_u64("split.tensors.count");
      if (!n.ok()) return n.status().with_context(path);
      if (*n != f->tensors_.size())
        return Corrupt(path + ": key 'split.tensors.count': " + std::to_string(*n) + " but the set holds " +
                       std::to_string(f->tensors_.size()) + " tensors");
    }
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) {
    if (!f->by_name_.emplace(f->tensors_[i].name, i).second)
      return Corrupt(f->path(f->tensors_[i].file_index) + ": tensor '" + f->tensors_[i].name +
                     "': duplicate tensor name (also in " + f->path(f->tensors_[f->by_name_[f->tensors_[i].name]].file_index) + ")");
  }
  return f;
}

namespace {
long page_size() {
  static const long n = ::sysconf(_SC_PAGESIZE);
  return n;
}
// The page-aligned range covering a tensor's bytes.
std::pair<std::byte*, size_t> page_range(const TensorInfo& t) {
  const uintptr_t ps = static_cast<uintptr_t>(page_size());
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) & ~(ps - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.data) + t.n_bytes;
  return {reinterpret_cast<std::byte*>(begin), static_cast<size_t>(end - begin)};
}
}  // namespace

Status GgufFile::advise(const TensorInfo& t, Access access) const {
  if (t.file_index >= files_.size() || !files_[t.file_index]->owned || t.n_bytes == 0) return Status::Ok();
  int advice = MADV_NORMAL;
  switch (access) {
    case Access::kNormal: advice = MADV_NORMAL; break;
    case Access::kSequential: advice = MADV_SEQUENTIAL; break;
    case Access::kRandom: advice = MADV_RANDOM; break;
    case Access::kWillNeed: advice = MADV_WILLNEED; break;
    case Access::kDontNeed: advice = MADV_DONTNEED; break;
  }
  auto [p, n] = page_range(t);
  if (::madvise(p, n, advice) != 0) return ErrnoError("madvise tensor '" + t.name + "'", errno);
  return Status::Ok();
}

Status GgufFile::prefetch(std::span<const TensorInfo* const> tensors) const {
  for (const TensorInfo* t : tensors) LATTICE_RETURN_IF_ERROR(advise(*t, Access::kWillNeed));
  return Status::Ok();
}

Result<uint64_t> GgufFile::resident_bytes(const TensorInfo& t) const {
  if (t.n_bytes == 0) return uint64_t{0};
  if (t.file_index >= files_.size() || !files_[t.file_index]->owned) return t.n_bytes;  // plain memory
  auto [p, n] = page_range(t);
  const size_t ps = static_cast<size_t>(page_size());
  std::vector<unsigned char> vec((n + ps - 1) / ps);
  if (::mincore(p, n, vec.data()) != 0) return ErrnoError("mincore tensor '" + t.name + "'", errno);
  uint64_t pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return std::min<uint64_t>(pages * ps, t.n_bytes);
}

namespace {

Result<std::unique_ptr<detail::MappedFile>> map_file(const std::string& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return NotFound(path + ": no such file");
    return ErrnoError("open " + path, e);
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("stat " + path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  auto mf = std::make_unique<detail::MappedFile>();
  mf->path = path;
  mf->size = static_cast<uint64_t>(st.st_size);
  if (mf->size == 0) {
    ::close(fd);
    return Corrupt(path + ": empty file");
  }
  void* p = ::mmap(nullptr, mf->size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  int e = errno;
  ::close(fd);  // the mapping keeps the file open
  if (p == MAP_FAILED) return ErrnoError("mmap " + path, e);
  mf->addr = static_cast<const std::byte*>(p);
  mf->owned = true;
  return mf;
}

}  // namespace

}  // namespace lattice::engine
