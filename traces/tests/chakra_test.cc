// The Chakra ET reader against its writer (traces/chakra.h): the round trip
// keeps every field, and malformed or foreign files are refused naming the
// file, the message, the node and the attribute.
#include "traces/chakra.h"

#include <gtest/gtest.h>

#include <string>

#include "traces/detail/protobuf_wire.h"
#include "traces/io.h"
#include "traces/storage_plan.h"
#include "traces/tests/small_trace.h"

namespace ssdtrain::traces {
namespace {

using detail::ProtoWriter;

std::string Delimited(const std::string& message) {
  std::string out;
  ProtoWriter::AppendVarint(&out, message.size());
  return out + message;
}

TEST(Chakra, ATraceReadsBackFieldForField) {
  Trace t = testing::SmallTrace();
  t.ops[1].measured_ns = 12345;
  t.header.fp8 = "delayed";
  t.ops[0].gemm->fp8 = true;
  t.edges.push_back(Edge{1, 3, EdgeKind::kSync});
  t.tensors[2].micro_batch = 3;
  const std::string bytes = ToChakra(t);
  const Result<Trace> back = TraceFromChakra(bytes, "small.et");
  ASSERT_TRUE(back.ok()) << back.status().message();
  // Edges come back grouped by the op they lead into, in order of their source.
  EXPECT_EQ(ToJson(*back), ToJson(t));
  EXPECT_EQ(Fingerprint(*back), Fingerprint(t));
}

TEST(Chakra, APlansTransferNodesAreSkippedOnTheWayBack) {
  const Trace t = testing::SmallTrace();
  Plan plan;
  Placement p;
  p.tensor = 2;
  p.action = TensorAction::kOffloadSsd;
  p.file = "a.bin";
  plan.placements.push_back(p);
  const Result<StoragePlan> resolved = ResolvePlan(t, plan, "plan");
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  ChakraOptions o;
  o.plan = &*resolved;
  const ChakraCounts c = CountChakra(t, o);
  EXPECT_EQ(c.op_nodes, 5);
  EXPECT_EQ(c.mem_nodes, 2);
  const Result<Trace> back = TraceFromChakra(ToChakra(t, o), "plan.et");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(ToJson(*back), ToJson(t));
}

TEST(Chakra, ATruncatedFileNamesTheMessageAndItsByte) {
  const std::string bytes = ToChakra(testing::SmallTrace());
  const Result<Trace> r = TraceFromChakra(bytes.substr(0, bytes.size() - 3), "cut.et");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cut.et: message 5 at byte"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("runs past the end of the file"), std::string::npos);
  EXPECT_EQ(TraceFromChakra("", "empty.et").status().message(),
            "empty.et: empty: no Chakra metadata");
}

TEST(Chakra, AFileFromAnotherToolIsRefusedSayingWhatIsMissing) {
  ProtoWriter meta;
  meta.Bytes(1, "0.0.4");
  ProtoWriter node;
  node.UInt64(1, 0);
  node.Bytes(2, "aten::mm");
  node.UInt64(3, 4);
  const Result<Trace> r =
      TraceFromChakra(Delimited(meta.bytes()) + Delimited(node.bytes()), "pytorch.et");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pytorch.et: the metadata has no ssdtrain.header"),
            std::string::npos)
      << r.status().message();
}

// The file ToChakra writes, with one node's message replaced.
std::string WithNode(const Trace& t, int index, const std::string& node) {
  const std::string bytes = ToChakra(t);
  std::string out;
  size_t at = 0;
  for (int m = 0; at < bytes.size(); ++m) {
    const size_t start = at;
    uint64_t n = 0;
    EXPECT_TRUE(detail::ReadVarint(bytes, &at, &n));
    at += n;
    out += m == index + 1 ? Delimited(node) : bytes.substr(start, at - start);
  }
  return out;
}

TEST(Chakra, ANodeWithoutAnAttributeNamesTheNodeAndTheAttribute) {
  ProtoWriter node;
  node.UInt64(1, 2);
  node.Bytes(2, "loss");
  node.UInt64(3, 4);
  const Result<Trace> r = TraceFromChakra(WithNode(testing::SmallTrace(), 2, node.bytes()), "n.et");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node 2 (\"loss\"): attribute ssdtrain.kind: missing"),
            std::string::npos)
      << r.status().message();
}

TEST(Chakra, ANodeOfATypeSsdtrainDoesNotWriteIsRefused) {
  ProtoWriter node;
  node.UInt64(1, 2);
  node.Bytes(2, "checkpoint");
  node.UInt64(3, 10);  // CHECKPOINT_NODE
  const Result<Trace> r = TraceFromChakra(WithNode(testing::SmallTrace(), 2, node.bytes()), "n.et");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node 2 (\"checkpoint\"): type 10 is not a node ssdtrain "
                                      "writes"),
            std::string::npos)
      << r.status().message();
}

TEST(Chakra, BytesThatAreNotProtobufAreRefusedNotRead) {
  // A length that fits, around a field of wire type 7 (none).
  const Result<Trace> r = TraceFromChakra(Delimited(std::string("\x0f\x01", 2)), "junk.et");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("junk.et: the metadata (message 0): field 1 at byte 0: "
                                      "wire type 7"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace ssdtrain::traces
