// Malformed and unsupported Hugging Face config.json files, family by family:
// each refused with one line naming the file and the field (the real files are
// read in hf_config_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "models/hf_config.h"
#include "models/model_config.h"
#include "models/tests/hf_test_files.h"

namespace ssdtrain::models {
namespace {

// Malformed and unsupported files: one line naming the file and the field.
class HfConfigErrors : public testing::HfFileTest {
 protected:
  std::string Llama(const std::string& extra) {
    return Message(
        R"("model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "vocab_size": 32000, "max_position_embeddings": 4096)" +
        extra);
  }
  // A T5-small-shaped file with `extra` fields appended.
  std::string T5(const std::string& extra) {
    return Message(R"("model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8,
           "d_kv": 64, "d_ff": 2048, "vocab_size": 32128)" +
                   extra);
  }
  // A Qwen3-8B-shaped file with `extra` fields appended.
  std::string Qwen3(const std::string& extra) {
    return Message(
        R"("model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960)" +
        extra);
  }
  // A Phi-2-shaped file with `extra` fields appended.
  std::string Phi(const std::string& extra) {
    return Message(
        R"("model_type": "phi", "hidden_size": 2560, "num_hidden_layers": 32,
           "num_attention_heads": 32, "intermediate_size": 10240, "vocab_size": 51200,
           "max_position_embeddings": 2048, "resid_pdrop": 0.1)" +
        extra);
  }
};

TEST_F(HfConfigErrors, WrongTypeNamesTheField) {
  EXPECT_EQ(Llama(R"(, "hidden_size": "4096")"),
            File() + ": hidden_size: expected an integer, got string");
}

TEST_F(HfConfigErrors, MissingKeyNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "llama", "hidden_size": 4096)"),
            File() + ": num_hidden_layers: missing required field");
}

TEST_F(HfConfigErrors, HeadsNotDividingHiddenNameTheHeads) {
  EXPECT_EQ(Llama(R"(, "num_attention_heads": 30, "num_key_value_heads": 30)"),
            File() +
                ": num_attention_heads: 30 does not divide hidden_size 4096 (and no "
                "head_dim is given)");
}

TEST_F(HfConfigErrors, KvHeadsNotDividingHeadsNameTheKvHeads) {
  EXPECT_EQ(Llama(R"(, "num_key_value_heads": 3)"),
            File() + ": num_key_value_heads: 3 does not divide num_attention_heads 32");
}

TEST_F(HfConfigErrors, UnknownModelTypeNamesTheSupportedOnes) {
  EXPECT_EQ(Message(R"("model_type": "rwkv", "architectures": ["RwkvForCausalLM"])"),
            File() +
                ": model_type: \"rwkv\" is not supported (supported: bert, falcon, gemma, gemma2, "
                "gpt2, gpt_neox, gptj, llama, mistral, opt, phi, phi3, qwen2, qwen3, roberta, t5, "
                "RefinedWebModel, RefinedWeb; mixture of experts: mixtral, qwen2_moe, "
                "qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, gpt_oss)");
}

TEST_F(HfConfigErrors, ArchitecturesWithoutModelTypeNameTheModelType) {
  EXPECT_EQ(Message(R"("architectures": ["LlamaForCausalLM"])"),
            File() + ": model_type: missing required field");
}

// A window shorter than the positions is read (sliding_window_test.cc); a bad one is
// refused naming the field.
TEST_F(HfConfigErrors, ABadSlidingWindowNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": -1)"),
            File() + ": sliding_window: expected a positive integer or null, got -1");
}

TEST_F(HfConfigErrors, TiedLlamaEmbeddingsMustBeABoolean) {
  EXPECT_EQ(Llama(R"(, "tie_word_embeddings": 1)"),
            File() + ": tie_word_embeddings: expected true or false, got integer");
}

TEST_F(HfConfigErrors, AnotherActivationIsNotModelled) {
  EXPECT_EQ(Llama(R"(, "hidden_act": "gelu")"),
            File() +
                ": hidden_act: \"gelu\" for llama is not modelled (supported: silu, the "
                "SwiGLU MLP of three matrices)");
}

TEST_F(HfConfigErrors, AttentionBiasIsNotModelled) {
  EXPECT_EQ(Llama(R"(, "attention_bias": true)"),
            File() + ": attention_bias: true (q/k/v/o biases) is not modelled (supported: false)");
}

TEST_F(HfConfigErrors, ZeroSizeNamesTheField) {
  EXPECT_EQ(Llama(R"(, "num_hidden_layers": 0)"),
            File() + ": num_hidden_layers: must be >= 1, got 0");
}

TEST_F(HfConfigErrors, UnknownTorchDtypeIsNotModelled) {
  EXPECT_EQ(Llama(R"(, "torch_dtype": "int8")"),
            File() +
                ": torch_dtype: \"int8\" is not modelled (supported: bfloat16, float16, "
                "float32)");
}

TEST_F(HfConfigErrors, T5MissingDkvNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8,
           "d_ff": 2048, "vocab_size": 32128)"),
            File() + ": d_kv: missing required field");
}

TEST_F(HfConfigErrors, T5WrongTypeNamesTheField) {
  EXPECT_EQ(T5(R"(, "num_decoder_layers": "6")"),
            File() + ": num_decoder_layers: expected an integer or null, got string");
}

TEST_F(HfConfigErrors, T5OtherFeedForwardIsNotModelled) {
  EXPECT_EQ(T5(R"(, "feed_forward_proj": "gated-silu")"),
            File() +
                ": feed_forward_proj: \"gated-silu\" is not modelled (supported: relu (two "
                "matrices) or gated-gelu (GeGLU, three matrices))");
}

TEST_F(HfConfigErrors, T5GatedFlagContradictingTheFeedForwardNamesIt) {
  EXPECT_EQ(T5(R"(, "feed_forward_proj": "relu", "is_gated_act": true)"),
            File() + ": is_gated_act: true contradicts feed_forward_proj \"relu\"");
}

TEST_F(HfConfigErrors, T5OtherDenseActivationIsNotModelled) {
  EXPECT_EQ(T5(R"(, "feed_forward_proj": "relu", "dense_act_fn": "gelu")"),
            File() +
                ": dense_act_fn: \"gelu\" with feed_forward_proj \"relu\" is not modelled "
                "(supported: relu)");
}

TEST_F(HfConfigErrors, T5WrongTypeForTiedEmbeddingsNamesTheField) {
  EXPECT_EQ(T5(R"(, "tie_word_embeddings": "no")"),
            File() + ": tie_word_embeddings: expected true or false, got string");
}

TEST_F(HfConfigErrors, T5OtherBucketCountIsNotModelled) {
  EXPECT_EQ(T5(R"(, "relative_attention_num_buckets": 64)"),
            File() +
                ": relative_attention_num_buckets: 64 relative-position buckets are not "
                "modelled (supported: 32)");
}

TEST_F(HfConfigErrors, Qwen3AttentionBiasIsNotModelled) {
  EXPECT_EQ(Qwen3(R"(, "attention_bias": true)"),
            File() + ": attention_bias: true (q/k/v/o biases) is not modelled (supported: false)");
}

TEST_F(HfConfigErrors, Qwen3HeadDimWrongTypeNamesTheField) {
  EXPECT_EQ(Qwen3(R"(, "head_dim": 128.5)"),
            File() + ": head_dim: expected an integer or null, got number");
}

TEST_F(HfConfigErrors, Qwen3BadMaxWindowLayersNamesTheField) {
  EXPECT_EQ(
      Qwen3(R"(, "use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 0)"),
      File() + ": max_window_layers: expected a positive integer or null, got 0");
}

TEST_F(HfConfigErrors, Qwen3KvHeadsNotDividingHeadsNameTheKvHeads) {
  EXPECT_EQ(Qwen3(R"(, "num_key_value_heads": 5)"),
            File() + ": num_key_value_heads: 5 does not divide num_attention_heads 32");
}

TEST_F(HfConfigErrors, PhiMissingKeyNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "phi", "hidden_size": 2560, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 51200, "max_position_embeddings": 2048)"),
            File() + ": intermediate_size: missing required field");
}

TEST_F(HfConfigErrors, PhiRotaryFactorWrongTypeNamesTheField) {
  EXPECT_EQ(Phi(R"(, "partial_rotary_factor": "0.4")"),
            File() + ": partial_rotary_factor: expected a number, got string");
}

TEST_F(HfConfigErrors, PhiRotaryFactorOutOfRangeNamesTheField) {
  EXPECT_EQ(Phi(R"(, "partial_rotary_factor": 1.5)"),
            File() + ": partial_rotary_factor: expected a fraction in (0, 1], got 1.5");
}

TEST_F(HfConfigErrors, PhiGroupedQueryAttentionIsNotModelled) {
  EXPECT_EQ(Phi(R"(, "num_key_value_heads": 8)"),
            File() +
                ": num_key_value_heads: 8 (grouped-query attention) for phi is not modelled "
                "(supported: null or num_attention_heads 32)");
}

TEST_F(HfConfigErrors, PhiQkLayerNormIsNotModelled) {
  EXPECT_EQ(
      Phi(R"(, "qk_layernorm": true)"),
      File() + ": qk_layernorm: true (LayerNorm of q and k) is not modelled (supported: false)");
}

TEST_F(HfConfigErrors, PhiAttentionDropoutIsNotModelled) {
  EXPECT_EQ(Phi(R"(, "attention_dropout": 0.1)"),
            File() +
                ": attention_dropout: 0.1 (dropout on attention probabilities) is not "
                "modelled (supported: 0.0)");
}

TEST_F(HfConfigErrors, PhiWithoutResidualDropoutIsNotModelled) {
  EXPECT_EQ(Phi(R"(, "resid_pdrop": 0.0)"),
            File() +
                ": resid_pdrop: 0 (no dropout on the branch outputs) for phi is not "
                "modelled (supported: a rate above 0, Phi-2's layout)");
}

TEST_F(HfConfigErrors, PhiTiedEmbeddingsAreNotModelled) {
  EXPECT_EQ(Phi(R"(, "tie_word_embeddings": true)"),
            File() +
                ": tie_word_embeddings: true (an output layer tied to the embeddings) is not "
                "modelled (supported: false)");
}

TEST_F(HfConfigErrors, RobertaPadTokenWrongTypeNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265,
           "max_position_embeddings": 514, "pad_token_id": "1")"),
            File() + ": pad_token_id: expected an integer, got string");
}

TEST_F(HfConfigErrors, RobertaPadTokenLeavingNoPositionsNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265,
           "max_position_embeddings": 514, "pad_token_id": 513)"),
            File() +
                ": pad_token_id: 513 leaves no positions of max_position_embeddings 514 "
                "(RoBERTa's positions start at pad + 1)");
}

TEST_F(HfConfigErrors, RobertaMissingKeyNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "vocab_size": 50265, "max_position_embeddings": 514)"),
            File() + ": intermediate_size: missing required field");
}

TEST_F(HfConfigErrors, RobertaRelativePositionsAreNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "roberta", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50265,
           "max_position_embeddings": 514, "position_embedding_type": "relative_key")"),
            File() +
                ": position_embedding_type: \"relative_key\" is not modelled (supported: "
                "absolute)");
}

TEST_F(HfConfigErrors, OptPostLayerNormIsNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 24,
           "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272,
           "max_position_embeddings": 2048, "do_layer_norm_before": false)"),
            File() +
                ": do_layer_norm_before: false (post-LayerNorm blocks, OPT-350m) is not modelled "
                "(supported: true)");
}

TEST_F(HfConfigErrors, OptProjectedEmbeddingsAreNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "opt", "hidden_size": 1024, "num_hidden_layers": 24,
           "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272,
           "max_position_embeddings": 2048, "word_embed_proj_dim": 512)"),
            File() +
                ": word_embed_proj_dim: 512 (embeddings projected in and out of hidden_size "
                "1024) is not modelled (supported: hidden_size)");
}

TEST_F(HfConfigErrors, OptMissingFfnDimNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "opt", "hidden_size": 2048, "num_hidden_layers": 24,
           "num_attention_heads": 32, "vocab_size": 50272, "max_position_embeddings": 2048)"),
            File() + ": ffn_dim: missing required field");
}

TEST_F(HfConfigErrors, OptWrongTypeNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "opt", "hidden_size": 2048, "num_hidden_layers": 24,
           "num_attention_heads": 32, "ffn_dim": 8192, "vocab_size": 50272,
           "max_position_embeddings": 2048, "dropout": "0.1")"),
            File() + ": dropout: expected a number, got string");
}

TEST_F(HfConfigErrors, OptLayerDropIsNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "opt", "hidden_size": 2048, "num_hidden_layers": 24,
           "num_attention_heads": 32, "ffn_dim": 8192, "vocab_size": 50272,
           "max_position_embeddings": 2048, "layerdrop": 0.1)"),
            File() + ": layerdrop: 0.1 (dropout on whole layers) is not modelled (supported: 0.0)");
}

TEST_F(HfConfigErrors, GptjDropoutIsNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16,
           "vocab_size": 50400, "n_positions": 2048, "resid_pdrop": 0.1)"),
            File() +
                ": resid_pdrop: 0.1 (dropout on the branch outputs) is not modelled (supported: "
                "0.0)");
}

TEST_F(HfConfigErrors, GptjRotaryWiderThanTheHeadNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16,
           "vocab_size": 50400, "n_positions": 2048, "rotary_dim": 512)"),
            File() + ": rotary_dim: 512 exceeds the head width 256");
}

TEST_F(HfConfigErrors, GptjHeadsNotDividingWidthNameTheHeads) {
  EXPECT_EQ(Message(R"("model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 15,
           "vocab_size": 50400, "n_positions": 2048)"),
            File() + ": n_head: 15 does not divide n_embd 4096 (and no head_dim is given)");
}

TEST_F(HfConfigErrors, GptjMissingKeyNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "gptj", "n_embd": 4096, "n_head": 16,
           "vocab_size": 50400, "n_positions": 2048)"),
            File() + ": n_layer: missing required field");
}

}  // namespace
}  // namespace ssdtrain::models
