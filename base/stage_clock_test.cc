#include "base/stage_clock.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace sandboxd {
namespace {

TEST(StageClockTest, EveryStageHasOneDistinctWireName) {
  std::set<std::string> names;
  for (int i = 0; i < kNumStages; i++) {
    const Stage s = static_cast<Stage>(i);
    const absl::string_view name = StageName(s);
    EXPECT_NE(name, "unknown") << i;
    EXPECT_TRUE(names.insert(std::string(name)).second) << name;
    EXPECT_EQ(StageFromName(name), s) << name;
  }
  EXPECT_EQ(StageFromName("no_such_stage"), std::nullopt);
}

TEST(StageClockTest, WireNamesStayAsTheToolsReadThem) {
  EXPECT_EQ(StageName(Stage::kVdsoCalibration), "vdso_calibration");
  EXPECT_EQ(StageName(Stage::kSpareStub), "spare_stub");
  EXPECT_EQ(StageName(Stage::kCreatePoolTake), "create.pool_take");
  EXPECT_EQ(StageName(Stage::kStartSentryCall), "start.sentry_call");
  EXPECT_EQ(StageName(Stage::kExitStatusAfterOutputEnd), "exit.status_after_output_end");
  EXPECT_EQ(StageName(Stage::kClientExecFinish), "client.exec.finish");
  EXPECT_EQ(StageName(Stage::kClientCreateAttachRunExit), "client.create_attach_run_exit");
}

TEST(StageClockTest, MarksCloseConsecutiveSteps) {
  StageClock c;
  c.Mark(Stage::kHostInfo);
  c.Mark(Stage::kMemoryFile);
  ASSERT_EQ(c.stages().size(), 2u);
  EXPECT_EQ(c.stages()[0].stage, Stage::kHostInfo);
  EXPECT_EQ(c.stages()[1].stage, Stage::kMemoryFile);
}

}  // namespace
}  // namespace sandboxd
