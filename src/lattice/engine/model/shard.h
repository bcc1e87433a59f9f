// Which part of a model one rank owns: a contiguous range of layers (a pipeline stage) and,
// inside it, a tensor-parallel slice (KV heads with their query heads, FFN columns, vocabulary
// rows). One node is rank 0 of a world of 1 over every layer: the whole model, the same code.
//
// Plain data; computed from the hyper-parameters and the weight types' block sizes, so every
// rank computes the same layout from the same file without talking.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/hparams.h"

namespace lattice::engine {

struct Range {
  uint32_t begin = 0, end = 0;
  uint32_t size() const { return end - begin; }
};

// Splits n_units into world contiguous ranges proportional to `weights` (empty: equal),
// largest remainders first, earlier ranks winning ties. Ranges may be empty.
std::vector<Range> split_units(uint32_t n_units, int world, std::span<const double> weights = {});

// Expert parallelism: which rank owns each expert of a mixture-of-experts layer (the whole
// expert, all its columns). Ranks get a count of experts proportional to `weights` (their
// memory shares; empty: equal; split_units' rounding), then experts go, heaviest expected
// `load` first (empty: every expert the same; ties: the lowest id), to the rank whose owned
// load relative to its share is lowest (ties: the lowest rank) among those with room. With
// equal loads and shares this interleaves (expert e on rank e % world). The result is
// owner[e] for e < n_expert, the same on every rank for the same arguments.
std::vector<int> place_experts(uint32_t n_expert, int world, std::span<const double> weights = {},
                               std::span<const double> load = {});

// The tensor-parallel layout of one model over `world` ranks, per rank.
//
// Multi-head latent attention (hp.kv_lora_rank > 0) is split by query heads: a rank owns the
// heads `heads` (their attn_q_b / attn_q rows, attn_k_b / attn_v_b matrices and attn_output
// columns), while the small latent projections (attn_q_a, attn_kv_a_mqa and their norms) are
// on every rank, so every rank keeps the whole latent cache its heads read (as DeepSeek's own
// reference and vLLM split it: the cache is one latent a token, shared by all heads, so
// splitting it would need every rank's heads to read every rank's part). For MLA kv_heads
// holds the same ranges as heads. Head ranges start on attn_output blocks (whole groups of
// heads when a head's value columns are fewer than a block).
struct ShardLayout {
  std::vector<Range> kv_heads;  // in KV heads (each with its group of query heads); MLA: = heads
  std::vector<Range> heads;     // in query heads
  std::vector<Range> ff;        // in ffn_width() columns (multiples of ff_granularity): FFN or each expert's
  std::vector<Range> ff_dense;  // mixture of experts: the leading dense blocks' n_ff columns (else = ff)
  std::vector<Range> ff_shared; // shared experts: columns of their n_ff_exp * n_expert_shared (else empty)
  std::vector<Range> vocab;     // in tokens
  uint32_t ff_granularity = 1;
  uint32_t head_granularity = 1;  // MLA: heads per unit of the split
};

// kInvalidArgument for world < 1, kUnavailable when the weight types' block sizes cannot be
// split on head / FFN boundaries (ff_block_elems: the largest block of any FFN down matrix,
// wo_block_elems: of attn_output).
Result<ShardLayout> make_shard_layout(const Hparams& hp, uint32_t ff_block_elems, uint32_t wo_block_elems, int world,
                                      std::span<const double> weights = {});

// What a rank binds. The defaults are one node: rank 0 of 1, every layer.
struct Shard {
  int rank = 0;
  int world = 1;                // tensor-parallel ranks the layers below are split over
  std::vector<double> weights;  // relative share per rank (empty: equal)
  // Layers [layer_begin, layer_end) (layer_end 0: to the last). The output norm and matrix
  // are bound only by the shard holding the last layer; the embedding by every shard (the
  // first stage uses it, a later stage that takes over after a loss may need it).
  uint32_t layer_begin = 0, layer_end = 0;
  // Expert parallel (mixture-of-experts files): each expert of a layer is bound whole by the
  // rank that owns it and by no other (the others' bytes are not touched). expert_owner holds
  // a rank per expert (every layer alike) or per layer and expert ([layer * n_expert + e]);
  // empty: place_experts(n_expert, world, weights). Attention, dense FFNs (shared experts
  // included) and the vocabulary stay tensor-parallel by `weights`.
  bool expert_parallel = false;
  std::vector<int> expert_owner{};
  // Expert parallel: the share of the other ranks' experts each rank also holds as replicas
  // (0: none, 1: every expert on every rank; at most 64 ranks with replicas). Each step then
  // gives every chosen expert to its least busy holder (Forward), which evens out the rows per
  // rank that a static placement leaves uneven. Replicas are taken from the next ranks first.
  double expert_spare = 0;
};

}  // namespace lattice::engine
