# Registers a test binary's GoogleTest cases with CTest in groups: run after
# the binary is linked (cmake -P, see tests/CMakeLists.txt), it lists the
# cases (--gtest_list_tests) and writes OUT, a CTest script with one test per
# group of at most GROUP consecutive cases of one suite, each run as one
# process with --gtest_filter. Each process of a binary that links LibTorch
# pays about 0.9 s of CPU to load it (Debian's libtorch_cpu pulls in some 290
# shared libraries and registers its operators), so one process per case
# spent about 10 minutes of CPU of the suite on start-up alone.
#
# Only cases of one suite share a process: a suite's cases are written to
# run one after another (a shared process group, the environment as its
# fixture leaves it), cases of different suites are not.
#
# Variables: BIN (the test binary), AREA (its label), OUT, GROUP, WORKDIR.
execute_process(COMMAND "${BIN}" --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE listing_err RESULT_VARIABLE rc
                WORKING_DIRECTORY "${WORKDIR}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BIN} --gtest_list_tests failed (${rc}):\n${listing}${listing_err}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")

set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( +#.*)?$")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set("cases_${suite}" "")
  elseif(line MATCHES "^  ([^ ]+)" AND NOT suite STREQUAL "")
    list(APPEND "cases_${suite}" "${CMAKE_MATCH_1}")
  endif()
endforeach()

set(script "# Written by tests/group_tests.cmake from ${BIN} --gtest_list_tests.\n")
foreach(suite IN LISTS suites)
  list(LENGTH "cases_${suite}" n)
  if(n EQUAL 0)
    continue()
  endif()
  math(EXPR groups "(${n} + ${GROUP} - 1) / ${GROUP}")
  set(index 0)
  set(filter "")
  set(in_group 0)
  set(group 1)
  foreach(case IN LISTS "cases_${suite}")
    if(filter STREQUAL "")
      set(filter "${suite}.${case}")
    else()
      set(filter "${filter}:${suite}.${case}")
    endif()
    math(EXPR in_group "${in_group} + 1")
    math(EXPR index "${index} + 1")
    if(in_group EQUAL GROUP OR index EQUAL n)
      if(groups EQUAL 1)
        set(name "${suite}[${AREA}]")
      else()
        set(name "${suite}[${AREA} ${group}/${groups}]")
      endif()
      # A group's time limit: each case's 300 s would be too long for a
      # hang to wait out; 900 s holds any group of today's cases.
      string(APPEND script
        "add_test([==[${name}]==] [==[${BIN}]==] [==[--gtest_filter=${filter}]==])\n"
        "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKDIR}]==] "
        "LABELS ${AREA} TIMEOUT 900 COST ${in_group} FIXTURES_REQUIRED example_data)\n")
      set(filter "")
      set(in_group 0)
      math(EXPR group "${group} + 1")
    endif()
  endforeach()
endforeach()
file(WRITE "${OUT}" "${script}")
