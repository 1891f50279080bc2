// FP8 training as Transformer Engine's recipes store it, decided once: the
// recipes, and the bytes of an FP8 tensor with its scaling factors. The trace
// builder (models/detail/fp8.h) makes its tensors with these bytes, the
// validator checks them, the simulator prices the GEMMs that read them at the
// GPU's FP8 rate (sim/op_cost.h). ../shared/TODAYS_LAYOUTS.md, section 3, has
// the recipes and where each figure comes from.
//
// An FP8 tensor (DType::kFp8, one byte per element) is stored with its
// scaling factors after its data, so its bytes are its elements plus
// Fp8ScaleBytes. The scales run along the tensor's last dimension: a
// column-wise copy (what a weight gradient GEMM reads on Hopper) is stored
// transposed, its last dimension the tokens. Viewing the tensor as [rows,
// cols] (cols its last dimension, rows the product of the others):
//   delayed, current:  one fp32 scale per tensor (4 bytes);
//   blockwise:         one fp32 scale per 1 × 128 block, rows · ⌈cols/128⌉ · 4
//                      (activations and gradients), or per 128 × 128 block,
//                      ⌈rows/128⌉ · ⌈cols/128⌉ · 4 (weights: 2-D blocks);
//   mxfp8:             one E8M0 byte per 1 × 32 block, rows · ⌈cols/32⌉.
// Transformer Engine pads its scale tensors to a kernel's tile multiple; that
// padding (at most a few KiB per tensor) is not counted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ssdtrain::traces {

enum class Fp8Recipe {
  kOff,        // no FP8: 16-bit GEMMs
  kDelayed,    // per-tensor scale from an amax history (TE DelayedScaling)
  kCurrent,    // per-tensor scale from the tensor's own amax (Float8CurrentScaling)
  kBlockwise,  // fp32 scales per 1x128 / 128x128 block (Float8BlockScaling, DeepSeek-V3's)
  kMxfp8,      // E8M0 scales per 1x32 block (MXFP8BlockScaling): Blackwell only
};

// "", "off" -> kOff; "delayed", "current", "blockwise", "mxfp8"; nullopt otherwise.
std::optional<Fp8Recipe> ParseFp8Recipe(std::string_view s);
// "" for kOff (how headers, configs and plans write "no FP8"), else the name.
std::string_view ToString(Fp8Recipe r);
// A recipe as configs, headers and plans store it: its name, "" for off (or
// "off"); `s` itself when it names no recipe, for the caller's check to refuse.
std::string Fp8Name(std::string_view s);
// The names a user may give, for messages: "delayed, current, blockwise or mxfp8".
inline constexpr std::string_view kFp8RecipeNames = "delayed, current, blockwise or mxfp8";

// What an FP8 tensor's scales cover (see the file comment).
enum class Fp8Blocks {
  kVector,  // activations and gradients: 1-D blocks along the last dimension
  kWeight,  // weights: 2-D 128 x 128 blocks under blockwise, else as kVector
};

// The scaling factors' bytes of an FP8 tensor of `shape` under `recipe`; 0
// for kOff.
int64_t Fp8ScaleBytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, Fp8Blocks blocks);
// Its whole storage: one byte per element plus Fp8ScaleBytes.
int64_t Fp8Bytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, Fp8Blocks blocks);
// A tensor all-gathered from k shards carries each shard's scales: under the
// block recipes that is Fp8Bytes of the whole (the rows' scales, gathered),
// under delayed and current one fp32 scale per shard, elements + 4·k bytes.
// Whether `bytes` is such a per-tensor-scaled gathered tensor's, 1 < k ≤ rows.
bool IsGatheredFp8Bytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, int64_t bytes);

}  // namespace ssdtrain::traces
