// Chakra ET's field numbers and enum values (traces/schema/chakra_et.proto,
// after Chakra's et_def.proto), shared by the writer (traces/chakra.cc) and
// the reader (traces/chakra_read.cc).
#pragma once

#include <cstdint>

#include "traces/collective_kind.h"

namespace ssdtrain::traces::chakra_et {

// Chakra's NodeType and CollectiveCommType values (et_def.proto).
enum NodeType : uint64_t {
  kMemLoadNode = 2,
  kMemStoreNode = 3,
  kCompNode = 4,
  kCommSendNode = 5,
  kCommRecvNode = 6,
  kCommCollNode = 7,
};
inline uint64_t CommType(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 0;  // ALL_REDUCE
    case CollectiveKind::kAllGather:
      return 2;  // ALL_GATHER
    case CollectiveKind::kAllToAll:
      return 6;  // ALL_TO_ALL
    case CollectiveKind::kReduceScatter:
      return 7;  // REDUCE_SCATTER
    case CollectiveKind::kSendRecv:
      break;
  }
  return 0;
}

// Node's fields (et_def.proto, message Node).
inline constexpr int kNodeId = 1, kNodeName = 2, kNodeType = 3, kNodeCtrlDeps = 4,
                     kNodeDataDeps = 5, kNodeStart = 6, kNodeDuration = 7, kNodeInputs = 8,
                     kNodeOutputs = 9, kNodeAttr = 10;
// IOInfo's, GlobalMetadata's and AttributeProto's.
inline constexpr int kIoValues = 1, kIoShapes = 2, kIoTypes = 3;
inline constexpr int kMetaVersion = 1, kMetaAttr = 2;
inline constexpr int kAttrName = 1, kAttrInt64 = 9, kAttrInt64List = 10, kAttrUint64 = 13,
                     kAttrBool = 27, kAttrBoolList = 28, kAttrString = 29, kAttrStringList = 30;

}  // namespace ssdtrain::traces::chakra_et
