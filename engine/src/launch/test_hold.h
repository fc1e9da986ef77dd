// A pause at a named point of the run agent, for tests that must send a
// signal inside a window too short to hit by timing: BAGUA_TEST_HOLD=POINT:S
// makes the agent say "test hold at POINT for S s" on stderr and sleep S
// seconds there. Points: "preflight" (the relay is in force, nothing
// checked yet) and "after-join" (an elastic round was joined, its workers not
// yet started). Unset (always, outside tests), it costs one getenv.
#pragma once

namespace bagua::launch {

void hold_for_test(const char* point);

}  // namespace bagua::launch
