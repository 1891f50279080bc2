// What `ssdtrain plan` says about the pipeline schedule it chose: the layout
// text for an interleaved plan and, when interleaved won, by how much against
// 1F1B at the same layout and policy (sim::PlannerResult::interleaved_vs_1f1b).
#pragma once

#include <string>

#include "sim/planner.h"
#include "traces/plan.h"

namespace ssdtrain::app {

// " ZeRO-3", " ZeRO-3 HSDP 2x4" (replicas x shard group) for a plan that
// shards, ", gradients synced once a step" added under deferred gradient
// sync; "" for ZeRO 0. `compact`: "+Z3", "+Z3h4", "+Z3d" (deferred) for the
// compare table.
std::string ZeroText(const traces::Plan& plan, bool compact = false);

// " (blocks 3|4x14|2)" for a plan with an uneven pipeline split of a model of
// `layers` blocks (the first stage's, the middle ones' and the last's,
// traces::BlocksOfStage); "" for the even split.
std::string SplitText(const traces::Plan& plan, int64_t layers);

// ", interleaved v=2 (5 layers per chunk)" for an interleaved plan of a model
// of `layers` blocks; "" for the other schedules.
std::string ScheduleText(const traces::Plan& plan, int64_t layers);

// What a stage holding `in_flight` passes holds, for sim::Prediction::StagePeak:
// "4" with v = 1 (micro-batches); interleaved "29 chunks, 9.7 micro-batches'
// worth," for 29 chunks of v = 3.
std::string InFlightText(int64_t in_flight, int64_t v);

// "interleaved v=2 beats 1f1b by 7.9%: bubble 27.3% -> 15.8% (1f1b at this
// layout: 1234 tokens/s)\n" when the plan is interleaved; "" otherwise. A
// 1F1B plan that does not fit the budget is said so.
std::string ScheduleVerdict(const sim::PlannerResult& r);

}  // namespace ssdtrain::app
