#include "app/model_provider.h"

#include <utility>

#include "models/build_trace.h"

namespace ssdtrain::app {

models::ConfigOverrides OverridesOf(const sim::TraceShape& s) {
  models::ConfigOverrides ov;
  ov.micro_batch = s.micro_batch;
  ov.tp = s.tp;
  ov.pp = s.pp;
  ov.dp = s.dp;
  ov.zero_stage = s.zero_stage;
  if (s.dp_shard != 0) ov.dp_shard = s.dp_shard;
  if (s.ep != 1) ov.ep = s.ep;
  return ov;
}

sim::TraceProvider ModelTraceProvider(models::ModelConfig base, std::string path) {
  return [base = std::move(base),
          path = std::move(path)](const sim::TraceShape& s) -> Result<traces::Trace> {
    SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig c,
                              models::ApplyOverrides(base, OverridesOf(s), path));
    return models::BuildTrace(c, s.stage);
  };
}

}  // namespace ssdtrain::app
