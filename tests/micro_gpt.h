// The two-block fp32 GPT the end-to-end tests run: small enough to calibrate,
// plan and replay on the CPU backend in seconds.
#pragma once

#include <nlohmann/json.hpp>

namespace ssdtrain::testing {

inline nlohmann::json MicroGptConfig() {
  return nlohmann::json{{"name", "micro-gpt"},
                        {"family", "gpt"},
                        {"hidden", 64},
                        {"heads", 2},
                        {"layers", 2},
                        {"vocab", 256},
                        {"seq_len", 64},
                        {"micro_batch", 2},
                        {"tp", 1},
                        {"pp", 1},
                        {"attention", "standard"},
                        {"dtype", "fp32"}};
}

}  // namespace ssdtrain::testing
