// Fuzz harness: the GGUF reader (header, metadata, tensor table) on an in-memory image
// (GgufFile::parse, the same code open() runs on a mapping), then what a loader reads from an
// accepted file: the architecture's hyper-parameters, the tokenizer (vocabulary, merges,
// scores) and a two-node placement plan. Any of them may refuse the input with an error; none
// may crash, leak, hit undefined behaviour or read outside the image.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/parallel/plan.h"
#include "lattice/engine/tokenizer/from_gguf.h"

using namespace lattice::engine;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  OpenOptions options;
  options.allow_unsupported_types = (size % 2) == 1;  // both policies, chosen by a bit of the input
  auto file = GgufFile::parse(image, "<fuzz>", options);
  if (!file.ok()) return 0;
  const GgufFile& f = **file;
  // Every tensor the reader accepted lies inside the image.
  for (const TensorInfo& t : f.tensors()) {
    const auto* begin = reinterpret_cast<const std::byte*>(data);
    if (t.data < begin || t.n_bytes > size || t.data + t.n_bytes > begin + size) std::abort();
    if (t.n_elems == 0 || t.ne[0] == 0) std::abort();
    (void)t.shape_string();
    (void)t.row_bytes();
  }
  for (const auto& e : f.metadata().entries()) (void)e.value.to_display();
  (void)f.total_tensor_bytes();
  auto arch_name = f.metadata().get_string("general.architecture");
  if (arch_name.ok()) {
    if (const ArchInfo* arch = find_arch(*arch_name)) (void)read_hparams(f.metadata(), *arch);
  }
  (void)tokenizer_from_gguf(f);
  std::vector<parallel::NodeSpec> nodes{{"a", uint64_t{1} << 30}, {"b", uint64_t{1} << 30}};
  (void)parallel::plan_placement(f, nodes, parallel::ParallelMode::kAuto, 256);
  return 0;
}
