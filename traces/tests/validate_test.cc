// Each class of bad input gets one message naming the source and JSON path.
#include "traces/validate.h"

#include <gtest/gtest.h>

#include "traces/io.h"
#include "traces/tests/small_trace.h"

namespace ssdtrain::traces {
namespace {

using nlohmann::json;

// Parses a mutated JSON form of the small trace; returns the error message ("" if it parsed).
template <typename Mutate>
std::string ErrorAfter(Mutate mutate) {
  json j = ToJson(testing::SmallTrace());
  mutate(j);
  Result<Trace> r = TraceFromJson(j, "t.json");
  return r.ok() ? "" : r.status().message();
}

TEST(Validate, UnknownVersion) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["version"] = 99; }),
            "t.json: version: unsupported version 99; this build reads version 1");
}

TEST(Validate, WrongFormatName) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["format"] = "chakra"; }),
            "t.json: format: expected \"ssdtrain-trace\", got \"chakra\"");
}

TEST(Validate, MissingField) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][2].erase("flops"); }),
            "t.json: ops[2].flops: missing required field");
}

TEST(Validate, MistypedField) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["tensors"][3]["bytes"] = "128"; }),
            "t.json: tensors[3].bytes: expected an integer, got string");
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][1]["inputs"][0] = 1.5; }),
            "t.json: ops[1].inputs[0]: expected an integer, got number");
}

TEST(Validate, UnknownEnumValue) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][0]["phase"] = "sideways"; }),
            "t.json: ops[0].phase: unknown value \"sideways\"; expected one of forward, backward, "
            "optimizer");
}

TEST(Validate, UnknownFieldIsRejected) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["tensors"][0]["byts"] = 3; }),
            "t.json: tensors[0].byts: unknown field");
}

TEST(Validate, NegativeSizes) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["tensors"][2]["bytes"] = -5; }),
            "t.json: tensors[2].bytes: negative size -5");
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][0]["flops"] = -1; }),
            "t.json: ops[0].flops: negative value -1");
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][0]["gemm"]["k"] = 0; }),
            "t.json: ops[0].gemm.k: expected a positive size, got 0");
}

TEST(Validate, DanglingTensorId) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][4]["inputs"][1] = 99; }),
            "t.json: ops[4].inputs[1]: tensor 99 does not exist");
}

TEST(Validate, DanglingOpId) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["tensors"][2]["producer"] = 42; }),
            "t.json: tensors[2].producer: op 42 does not exist");
  EXPECT_EQ(ErrorAfter([](json& j) { j["edges"][0]["to"] = 7; }),
            "t.json: edges[0].to: op 7 does not exist");
}

TEST(Validate, ProducerAndOutputsMustAgree) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][1]["outputs"] = json::array(); }),
            "t.json: tensors[3].producer: op 1 does not list tensor 3 among its outputs");
}

TEST(Validate, IdsAreRowIndices) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["ops"][3]["id"] = 9; }),
            "t.json: ops[3].id: expected 3 (ids are row indices), got 9");
}

TEST(Validate, DependencyCycle) {
  // An order edge from the loss back to the first op closes a cycle 0 -> 1 -> 2 -> 0.
  const std::string msg = ErrorAfter([](json& j) {
    j["edges"].push_back({{"from", 2}, {"to", 0}, {"kind", "order"}});
  });
  EXPECT_NE(msg.find("dependency cycle"), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("t.json: ops[", 0), 0u) << msg;
}

TEST(Validate, BackwardOpBeforeItsForwardProducer) {
  // Move the forward gelu (op 1) after the backward ops by swapping its position
  // with op 4: the backward op now consumes a tensor produced later.
  Trace t = testing::SmallTrace();
  // Tensor 2 ("a") is consumed by op 4 (backward). Make op 3 (backward) read tensor 3 ("b"),
  // which op 1 produces; then reorder so the backward reader precedes the producer.
  // Built directly: backward op 0 reads a tensor produced by forward op 1.
  Trace bad;
  bad.header = t.header;
  bad.tensors = {t.tensors[0], t.tensors[1]};
  bad.tensors[0].consumers = {1};
  bad.tensors[1].consumers = {};
  Tensor y = t.tensors[2];
  y.id = 2;
  y.producer = 1;
  y.consumers = {0};
  bad.tensors.push_back(y);
  Op bwd = t.ops[4];
  bwd.id = 0;
  bwd.inputs = {2};
  bwd.outputs = {};
  Op fwd = t.ops[1];
  fwd.id = 1;
  fwd.inputs = {0};
  fwd.outputs = {2};
  bad.ops = {bwd, fwd};
  Status s = Validate(bad, "t.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.message(),
      "t.json: ops[0].inputs[0]: tensor 2 is produced by op 1 (forward), which comes after this "
      "backward op; ops must be listed after their producers");
}

TEST(Validate, AliasMustNameAnEarlierTensor) {
  EXPECT_EQ(
      ErrorAfter([](json& j) { j["tensors"][5]["alias_of"] = 6; }),
      "t.json: tensors[5].alias_of: tensor 6 is not an earlier tensor (a view must name the tensor "
      "whose storage it shares, listed before it)");
}

TEST(Validate, BytesMustMatchShape) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["tensors"][2]["bytes"] = 100; }),
            "t.json: tensors[2].bytes: 100 does not match shape and dtype (64 elements of fp16)");
}

TEST(Validate, HeaderUnits) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["header"]["units"]["time"] = "us"; }),
            "t.json: header.units.time: unsupported unit \"us\"; expected \"ns\"");
}

}  // namespace
}  // namespace ssdtrain::traces
