// Chakra execution traces (MLCommons; what ASTRA-sim and the Chakra tools
// read): a trace, or a plan's predicted step, written as a Chakra ET file.
//
// The file is Chakra's length-delimited protobuf stream (each message preceded
// by its length as a varint): one GlobalMetadata, then one Node per op and per
// SSD transfer, in the field numbers of Chakra's schema (schema/chakra_et.proto
// here, written from Chakra's published et_def.proto; no code of theirs).
//
// - Every op is a node of its own id: COMP_NODE, or COMM_COLL_NODE for a
//   collective (attrs comm_type, comm_size), COMM_SEND_NODE / COMM_RECV_NODE
//   for a pipeline send and receive (comm_size). data_deps are the producers of
//   its inputs, ctrl_deps the trace's order and sync edges into it. inputs and
//   outputs (IOInfo) hold the tensors' shapes and dtypes as PyTorch's
//   execution traces write them; attr num_ops is the op's FLOPs.
// - With a plan, each storage it offloads to the SSD gets a MEM_STORE_NODE
//   (its write, after the producer) and a MEM_LOAD_NODE (its read, which the
//   first backward consumer depends on), attr tensor_size in bytes; ids follow
//   the ops'. offload-host storages are not written: a host copy is not storage.
// - With a timeline (a simulation's), nodes carry its start and duration for
//   stage 0's first micro-batch; otherwise an op's measured_ns when it has one.
// - Every field ssdtrain needs to read the trace back is kept, as attrs named
//   "ssdtrain.*" on the nodes and on the metadata (the tensor table, column by
//   column, and the header as JSON), so the file is a complete trace.
#pragma once

#include <string>
#include <string_view>

#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// The schema version written in GlobalMetadata (Chakra's et_def.proto of 2024
// onwards carries version strings like this one).
inline constexpr const char* kChakraSchemaVersion = "0.0.4";

struct ChakraOptions {
  // Optional: the plan resolved against the trace (traces::ResolvePlan); the
  // storages it writes to the SSD become nodes.
  const StoragePlan* plan = nullptr;
  const Timeline* timeline = nullptr;  // optional: times for stage 0, micro-batch 0
};

// The file's bytes. The trace must be valid (ValidateTrace).
std::string ToChakra(const Trace& trace, const ChakraOptions& options = {});

// What ToChakra wrote, counted (tests and the CLI's summary).
struct ChakraCounts {
  int64_t nodes = 0;
  int64_t op_nodes = 0;
  int64_t mem_nodes = 0;
  int64_t data_deps = 0;
  int64_t ctrl_deps = 0;
};
ChakraCounts CountChakra(const Trace& trace, const ChakraOptions& options = {});

// A trace from a Chakra ET file that ToChakra wrote (its ssdtrain.* attrs):
// the same trace, fingerprint included; the plan's MEM nodes are skipped.
// A malformed file, or one from another tool (without the attrs a trace
// needs), is InvalidArgument naming `source`, the message and its byte, the
// node and the attribute.
Result<Trace> TraceFromChakra(std::string_view bytes, const std::string& source);
// A path ReadTrace reads as Chakra: one ending in ".et".
bool IsChakraPath(std::string_view path);

}  // namespace ssdtrain::traces
