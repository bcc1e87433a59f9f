// GGUF writer: the header is built in memory, tensor data streamed one tensor at a time.
// Layout follows what ggml's loader demands: tensors in table order, each at the running
// offset padded to the alignment, and the data section padded at its end too.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {

namespace {

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

class Sink {
 public:
  virtual ~Sink() = default;
  virtual Status write(const void* p, size_t n) = 0;
  // Moves past n bytes without writing them (a hole in a file).
  virtual Status skip(uint64_t n) = 0;
};

class MemorySink : public Sink {
 public:
  explicit MemorySink(std::vector<std::byte>& out) : out_(out) {}
  Status write(const void* p, size_t n) override {
    const auto* b = static_cast<const std::byte*>(p);
    out_.insert(out_.end(), b, b + n);
    return Status::Ok();
  }
  Status skip(uint64_t) override { return InvalidArgument("sparse data: files only"); }

 private:
  std::vector<std::byte>& out_;
};

class FileSink : public Sink {
 public:
  FileSink(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status write(const void* p, size_t n) override {
    const auto* b = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, b, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write " + path_, errno);
      }
      b += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status skip(uint64_t n) override {
    if (::lseek(fd_, static_cast<off_t>(n), SEEK_CUR) < 0) return ErrnoError("seek " + path_, errno);
    return Status::Ok();
  }
  // The file's size is where the last write or skip ended (a trailing hole needs this).
  Status finish() {
    const off_t end = ::lseek(fd_, 0, SEEK_CUR);
    if (end < 0 || ::ftruncate(fd_, end) != 0) return ErrnoError("truncate " + path_, errno);
    return Status::Ok();
  }

 private:
  int fd_;
  std::string path_;
};

class HeaderBuilder {
 public:
  template <class T>
  void put(T x) {
    const auto* p = reinterpret_cast<const std::byte*>(&x);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    buf_.insert(buf_.end(), p, p + s.size());
  }
  void put_value(const Value& v) {
    put<uint32_t>(static_cast<uint32_t>(v.type()));
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            put_string(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else if constexpr (std::is_arithmetic_v<T>) {
            put<T>(x);
          } else {
            put<uint32_t>(static_cast<uint32_t>(v.elem_type()));
            put<uint64_t>(x.size());
            for (const auto& e : x) {
              using E = std::decay_t<decltype(e)>;
              if constexpr (std::is_same_v<E, std::string>) {
                put_string(e);
              } else if constexpr (std::is_arithmetic_v<E>) {
                put<E>(e);
              } else {  // std::vector<bool>'s proxy reference
                put<uint8_t>(static_cast<bool>(e) ? 1 : 0);
              }
            }
          }
        },
        v.storage());
  }
  void pad_to(uint64_t a) { buf_.resize(align_up(buf_.size(), a), std::byte{0}); }
  std::vector<std::byte>& bytes() { return buf_; }

 private:
  std::vector<std::byte> buf_;
};

struct FilePlan {
  std::vector<size_t> tensors;  // indices into the writer's table
  Metadata metadata;
};

Status write_one(Sink& sink, const FilePlan& plan, const std::vector<TensorSpec>& specs, uint32_t version,
                 uint32_t alignment, const GgufWriter::FillFn& fill, std::vector<std::byte>& scratch, bool sparse) {
  HeaderBuilder h;
  h.put<uint32_t>(kGgufMagic);
  h.put<uint32_t>(version);
  h.put<uint64_t>(plan.tensors.size());
  h.put<uint64_t>(plan.metadata.size());
  for (const auto& e : plan.metadata.entries()) {
    h.put_string(e.key);
    h.put_value(e.value);
  }
  uint64_t offset = 0;
  for (size_t i : plan.tensors) {
    const TensorSpec& t = specs[i];
    h.put_string(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) h.put<uint64_t>(d);
    h.put<uint32_t>(static_cast<uint32_t>(t.type));
    h.put<uint64_t>(offset);
    offset += align_up(t.n_bytes, alignment);
  }
  h.pad_to(alignment);
  LATTICE_RETURN_IF_ERROR(sink.write(h.bytes().data(), h.bytes().size()));

  static const std::byte kZeros[256] = {};
  for (size_t i : plan.tensors) {
    const TensorSpec& t = specs[i];
    if (sparse) {
      LATTICE_RETURN_IF_ERROR(sink.skip(align_up(t.n_bytes, alignment)));
      continue;
    }
    if (!t.data.empty()) {
      LATTICE_RETURN_IF_ERROR(sink.write(t.data.data(), t.data.size()));
    } else {
      if (!fill) return InvalidArgument("tensor '" + t.name + "': no data and no fill function");
      scratch.resize(static_cast<size_t>(t.n_bytes));
      LATTICE_RETURN_IF_ERROR(fill(i, t, std::span<std::byte>(scratch.data(), scratch.size())));
      LATTICE_RETURN_IF_ERROR(sink.write(scratch.data(), scratch.size()));
    }
    const uint64_t pad = align_up(t.n_bytes, alignment) - t.n_bytes;
    LATTICE_RETURN_IF_ERROR(sink.write(kZeros, static_cast<size_t>(pad)));
  }
  return Status::Ok();
}

Result<uint32_t> writer_alignment(const Metadata& md) {
  const Value* v = md.find("general.alignment");
  if (!v) return kGgufDefaultAlignment;
  const uint32_t* a = v->get_if<uint32_t>();
  if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > 65536)
    return InvalidArgument("key 'general.alignment': must be a u32 power of two up to 65536");
  return *a;
}

}  // namespace

Status GgufWriter::add_tensor(std::string name, TensorType type, std::vector<uint64_t> ne, std::vector<std::byte> data) {
  const std::string tn = "tensor '" + name + "'";
  if (name.empty() || name.size() > kGgufMaxTensorName)
    return InvalidArgument(tn + ": name must be 1 to " + std::to_string(kGgufMaxTensorName) + " bytes");
  if (by_name_.count(name)) return InvalidArgument(tn + ": duplicate name");
  if (ne.empty() || ne.size() > kGgufMaxDims) return InvalidArgument(tn + ": needs 1 to 4 dimensions");
  auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits) return InvalidArgument(tn + ": unknown type");
  uint64_t n = 1;
  for (uint64_t d : ne) {
    if (d == 0) return InvalidArgument(tn + ": zero dimension");
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n)
      return InvalidArgument(tn + ": element count overflows");
    n *= d;
  }
  if (ne[0] % traits->block_elems != 0)
    return InvalidArgument(tn + ": ne[0] = " + std::to_string(ne[0]) + " is not a multiple of the " +
                           std::string(traits->name) + " block size " + std::to_string(traits->block_elems));
  const uint64_t n_bytes = n / traits->block_elems * traits->block_bytes;
  if (!data.empty() && data.size() != n_bytes)
    return InvalidArgument(tn + ": data holds " + std::to_string(data.size()) + " bytes, expected " +
                           std::to_string(n_bytes));
  by_name_.emplace(name, tensors_.size());
  tensors_.push_back(TensorSpec{std::move(name), type, std::move(ne), std::move(data), n_bytes});
  return Status::Ok();
}

namespace {

Result<std::vector<FilePlan>> plan_files(const Metadata& md, const std::vector<TensorSpec>& specs,
                                         const WriteOptions& o, uint32_t alignment) {
  std::vector<FilePlan> files;
  const bool split = o.max_tensors_per_file > 0 || o.max_bytes_per_file > 0;
  files.emplace_back();
  uint64_t bytes_in_file = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t sz = align_up(specs[i].n_bytes, alignment);
    FilePlan& cur = files.back();
    const bool full = (o.max_tensors_per_file > 0 && cur.tensors.size() >= o.max_tensors_per_file) ||
                      (o.max_bytes_per_file > 0 && !cur.tensors.empty() && bytes_in_file + sz > o.max_bytes_per_file);
    if (split && full) {
      files.emplace_back();
      bytes_in_file = 0;
    }
    files.back().tensors.push_back(i);
    bytes_in_file += sz;
  }
  if (files.size() > 65535) return InvalidArgument("too many split files (" + std::to_string(files.size()) + ")");
  for (size_t f = 0; f < files.size(); ++f) {
    Metadata m;
    if (f == 0) {
      for (const auto& e : md.entries())
        if (!e.key.starts_with("split.")) m.set(e.key, e.value);
    } else if (alignment != kGgufDefaultAlignment) {
      m.set("general.alignment", alignment);
    }
    if (split) {
      m.set("split.no", static_cast<uint16_t>(f));
      m.set("split.count", static_cast<uint16_t>(files.size()));
      m.set("split.tensors.count", static_cast<int32_t>(specs.size()));
    }
    files[f].metadata = std::move(m);
  }
  return files;
}

}  // namespace

Result<std::vector<std::string>> GgufWriter::write(const std::string& path, const FillFn& fill,
                                                   const WriteOptions& options) const {
  if (options.version != 2 && options.version != 3) return InvalidArgument("GGUF version must be 2 or 3");
  LATTICE_ASSIGN_OR_RETURN(uint32_t alignment, writer_alignment(metadata_));
  LATTICE_ASSIGN_OR_RETURN(std::vector<FilePlan> plans, plan_files(metadata_, tensors_, options, alignment));
  const bool split = options.max_tensors_per_file > 0 || options.max_bytes_per_file > 0;
  std::string prefix = path;
  if (prefix.size() > 5 && prefix.ends_with(".gguf")) prefix.resize(prefix.size() - 5);

  std::vector<std::string> written;
  std::vector<std::byte> scratch;
  for (size_t f = 0; f < plans.size(); ++f) {
    const std::string out =
        split ? split_path(prefix, static_cast<uint32_t>(f), static_cast<uint32_t>(plans.size())) : path;
    const std::string tmp = out + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("create " + tmp, errno);
    FileSink sink(fd, tmp);
    Status st = write_one(sink, plans[f], tensors_, options.version, alignment, fill, scratch, options.sparse_data);
    if (st.ok() && options.sparse_data) st = sink.finish();
    if (::close(fd) != 0 && st.ok()) st = ErrnoError("close " + tmp, errno);
    if (st.ok() && ::rename(tmp.c_str(), out.c_str()) != 0) st = ErrnoError("rename " + tmp, errno);
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
    written.push_back(out);
  }
  return written;
}

Result<std::vector<std::byte>> GgufWriter::write_to_memory(const FillFn& fill, const WriteOptions& options) const {
  if (options.version != 2 && options.version != 3) return InvalidArgument("GGUF version must be 2 or 3");
  if (options.max_tensors_per_file || options.max_bytes_per_file)
    return InvalidArgument("write_to_memory writes one file; split sets need write()");
  LATTICE_ASSIGN_OR_RETURN(uint32_t alignment, writer_alignment(metadata_));
  LATTICE_ASSIGN_OR_RETURN(std::vector<FilePlan> plans, plan_files(metadata_, tensors_, options, alignment));
  std::vector<std::byte> out, scratch;
  MemorySink sink(out);
  if (options.sparse_data) return InvalidArgument("sparse data: files only");
  LATTICE_RETURN_IF_ERROR(write_one(sink, plans[0], tensors_, options.version, alignment, fill, scratch, false));
  return out;
}

}  // namespace lattice::engine
