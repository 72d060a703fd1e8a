// A second writer on a trace that is being written is refused before it touches the file, and
// the first trace stays whole. In one process the two writers hold two
// open file descriptions, which conflict exactly as two processes would.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "catch_compat.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "lpdiag/trace/writer_lock.hpp"
#include "temp_dir.hpp"
#include "trace_fixture.hpp"

using namespace lpdiag;

TEST_CASE("a second writer on a live trace is refused and the first trace stays whole", "[trace][lock]") {
  const std::string path = lpdiag_test::temp_path("lock", "live.h5");
  std::filesystem::remove(path);
  const TraceLayout L = lpdiag::testing::fixture_layout();
  TraceWriterOptions o;
  o.flush_every = 10;
  {
    TraceWriter first(path, L, {}, o);
    for (int s = 0; s < 30; ++s) first.append(lpdiag::testing::fixture_record(L, s));
    first.flush();
    CHECK(WriterLock::held_by_another(path));
    REQUIRE_THROWS_AS(TraceWriter(path, L, {}, o), WriteError);
    // From another process too (what a second training job does).
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        TraceWriter second(path, L, {}, o);
        _exit(0);
      } catch (const WriteError&) {
        _exit(7);
      }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 7));
    for (int s = 30; s < 40; ++s) first.append(lpdiag::testing::fixture_record(L, s));
  }
  CHECK_FALSE(WriterLock::held_by_another(path));
  {
    const TraceReader r(path);
    CHECK(r.records() == 40);
    CHECK(r.steps(39, 1)[0] == 39);
  }
  // Once the first writer closed, a new writer may replace the finished trace.
  { TraceWriter again(path, L, {}, o); }
  CHECK(TraceReader(path).records() == 0);
}
