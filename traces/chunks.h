// An interleaved stage's model chunks (traces/whole_step.h: Megatron-LM's
// interleaved 1F1B): which chunk each op of a stage's trace belongs to, and the
// stage's trace with a send and a recv at each chunk boundary, as the replay
// runs it. Decided here, once; the simulator's chunk times (sim/chunk_times.h)
// and the replay (through traces::UnrollStep) both use it.
//
// The rules:
// - Chunk c of v holds the stage's blocks local c·L/v .. (c + 1)·L/v − 1 (L =
//   header.stage_layers, local = Op::layer − header.first_layer); an op
//   outside the blocks (kNoLayer: the embedding, the stage's own recv and send,
//   the head and the loss) takes the chunk of the last block op before it in
//   its phase, or before any, the phase's first chunk (forward 0, backward
//   v − 1). The optimizer's ops are in no chunk (-1).
// - Boundaries: chunk c − 1's forward hands chunk c exactly one tensor (the
//   residual stream x, which chunk c's backward may save too), and chunk c's
//   backward hands chunk c − 1 exactly one (its gradient). Each ends the
//   giving chunk's pass with a send of it and starts the taking chunk's pass
//   with a recv of a copy of its own (the copy: the original's name +
//   ".chunk<c>", its bytes, shape, kind and saved-for-backward flag), which
//   every op of the taking chunk reads in its place: chunk c of stage s is
//   virtual stage c·p + s, so chunk c − 1's output goes to stage s + 1 (from
//   the last stage, the wrap: to stage 0's chunk c), never to this stage.
//   Any other tensor crossing chunks is refused (it would need a transfer the
//   schedule does not make).
// - The chunked trace keeps the original's tensor ids (the copies are
//   appended, forward boundaries first, by chunk) and the original's ops in
//   their order, the send and recv of a boundary between the two chunks' ops.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// Each op's chunk of `v` (the rules above; -1: the optimizer's). Empty when the
// trace does not say its blocks: v < 1, or header.stage_layers not a positive
// multiple of v.
std::vector<int64_t> ChunkOfOps(const Trace& trace, int64_t v);

struct ChunkedTrace {
  Trace trace;
  std::vector<int64_t> chunk;     // by op of `trace`: its chunk (-1: the optimizer's)
  std::vector<OpId> original_op;  // by op of `trace`: the op it is, kNoOp for a boundary's
  std::vector<OpId> op_of;        // by op of the original: its id in `trace`
  // By tensor of the original: the copy its taking chunk reads (the boundary
  // tensors only), else the tensor itself.
  std::vector<TensorId> received_as;
};

// The stage's trace in `v` chunks with its boundaries' sends and recvs (the
// rules above); with v = 1 the trace itself. Errors say which chunks a refused
// tensor crosses.
Result<ChunkedTrace> SplitIntoChunks(const Trace& trace, int64_t v);

}  // namespace ssdtrain::traces
