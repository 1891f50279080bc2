// Small configs and a build-and-validate helper shared by the models tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "models/build_trace.h"
#include "traces/validate.h"

namespace ssdtrain::models::testing {

inline ModelConfig Gpt(int64_t b, int64_t s, int64_t h, int64_t a, int64_t t, bool sp = false,
                       const std::string& attention = "standard") {
  ModelConfig c;
  c.name = "gpt-test";
  c.family = "gpt";
  c.hidden = h;
  c.heads = a;
  c.layers = 3;
  c.vocab = 1000;
  c.seq_len = s;
  c.micro_batch = b;
  c.tp = t;
  c.sequence_parallel = sp;
  c.attention = attention;
  return c;
}

inline ModelConfig Llama(int64_t kv_heads, const std::string& attention = "flash") {
  ModelConfig c;
  c.name = "llama-test";
  c.family = "llama";
  c.hidden = 512;
  c.heads = 8;
  c.kv_heads = kv_heads;
  c.layers = 2;
  c.ffn_hidden = 1408;
  c.vocab = 1000;
  c.seq_len = 256;
  c.micro_batch = 2;
  c.attention = attention;
  c.dtype = "bf16";
  return c;
}

inline ModelConfig T5(int64_t layers, int64_t encoder_layers, int64_t pp = 1) {
  ModelConfig c;
  c.name = "t5-test";
  c.family = "t5";
  c.hidden = 256;
  c.heads = 4;
  c.head_dim = 64;
  c.layers = layers;
  c.encoder_layers = encoder_layers;
  c.vocab = 1000;
  c.seq_len = 128;
  c.micro_batch = 2;
  c.pp = pp;
  return c;
}

// Builds stage `stage` and checks it against traces::Validate.
inline traces::Trace MustBuild(const ModelConfig& c, int64_t stage = 0) {
  Result<traces::Trace> r = BuildTrace(c, stage);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  const Status v = traces::Validate(*r, c.name + " stage " + std::to_string(stage));
  EXPECT_TRUE(v.ok()) << v.ToString();
  return std::move(r).value();
}

}  // namespace ssdtrain::models::testing
