// The fixture the Hugging Face config tests share: a config.json written to a
// fresh temporary folder, loaded, and its one-line error message returned.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cmake/build_paths.h"
#include "models/model_config.h"

namespace ssdtrain::models::testing {

// models/tests/hf/<model>: a genuine config.json's folder.
inline std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

// The config at `path`, which must load (a failure is reported, and an empty
// config returned).
inline ModelConfig LoadOk(const std::string& path) {
  const Result<ModelConfig> c = LoadModelConfig(path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

class HfFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ssdtrain-hf-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes {fields} as the folder's config.json.
  void Write(const std::string& fields) const { std::ofstream(File()) << "{" << fields << "}"; }
  // The message of the file {fields}, which must be refused with one line.
  std::string Message(const std::string& fields) const {
    Write(fields);
    const Status s = LoadModelConfig(File()).status();
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    return s.message();
  }
  std::string File() const { return (dir_ / "config.json").string(); }
  std::filesystem::path dir_;
};

}  // namespace ssdtrain::models::testing
