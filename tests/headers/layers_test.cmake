# The layering the build enforces (cmake/BaguaAreas.cmake), checked from
# outside: run by CTest as
#   cmake -DCXX=... -DTREES=build/include-trees -DLIBS=build/engine -DEXAMPLES=build/examples
#         -DCLI=build/cli/bagua -DCLI_SOURCES=cli -P layers_test.cmake
#
# 1. An area's include path holds only itself and the areas below it: the
#    recipe area sees bagua/recipe.h but not bagua/data.h (data is not
#    below it), and comm does not see train's private headers.
# 2. libbagua_core.so (the collectives, with_bagua, the algorithms, the
#    optimizers) needs LibTorch and nothing of the launcher's: no yaml-cpp,
#    hiredis, protobuf, and not libbagua.so; the examples need only it.
# 3. The `bagua` executable (validate, schema, report) loads no LibTorch:
#    nothing of ldd's list is torch or c10.
# 4. The CLI sees only public headers: its include tree (public) holds
#    bagua/ and nothing else, no private header compiles there, and every
#    #include "..." in cli/ names a file of cli/ itself.
set(work ${CMAKE_CURRENT_BINARY_DIR}/layers-test)
file(MAKE_DIRECTORY ${work})

function(compiles result tree text)
  file(WRITE ${work}/probe.cpp "${text}\n")
  execute_process(COMMAND ${CXX} -std=c++17 -fsyntax-only -I${TREES}/${tree} ${work}/probe.cpp
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(rc EQUAL 0)
    set(${result} TRUE PARENT_SCOPE)
  else()
    set(${result} FALSE PARENT_SCOPE)
    set(last_error "${err}" PARENT_SCOPE)
  endif()
endfunction()

set(failures "")
compiles(ok recipe "#include <bagua/recipe.h>")
if(NOT ok)
  list(APPEND failures "the recipe area cannot include its own bagua/recipe.h: ${last_error}")
endif()
compiles(ok recipe "#include <bagua/data.h>")
if(ok)
  list(APPEND failures "the recipe area can include bagua/data.h, an area not below it")
elseif(NOT last_error MATCHES "bagua/data.h: No such file")
  list(APPEND failures "bagua/data.h in the recipe area failed for another reason: ${last_error}")
endif()
compiles(ok comm "#include \"train/checkpoint.h\"")
if(ok OR NOT last_error MATCHES "train/checkpoint.h: No such file")
  list(APPEND failures "the comm area can reach train's private headers: ${last_error}")
endif()
compiles(ok common "#include <bagua/metrics.h>\n#include <bagua/recipe_spec.h>")
if(NOT ok)
  list(APPEND failures "the common area's headers do not compile without LibTorch: ${last_error}")
endif()

file(GLOB public_entries RELATIVE ${TREES}/public ${TREES}/public/*)
if(NOT public_entries STREQUAL "bagua")
  list(APPEND failures "the public include tree (the CLI's) holds more than bagua/: ${public_entries}")
endif()
compiles(ok public "#include <bagua/report.h>\n#include <bagua/bench.h>")
if(NOT ok)
  list(APPEND failures "the public include tree lacks a public header: ${last_error}")
endif()
compiles(ok public "#include \"common/svg_chart.h\"")
if(ok OR NOT last_error MATCHES "No such file")
  list(APPEND failures "the public include tree (the CLI's) reaches a private header: ${last_error}")
endif()
file(GLOB cli_files ${CLI_SOURCES}/*.cpp ${CLI_SOURCES}/*.h)
foreach(f IN LISTS cli_files)
  file(STRINGS ${f} quoted REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS quoted)
    string(REGEX REPLACE "^[^\"]*\"([^\"]*)\".*$" "\\1" name "${line}")
    if(NOT EXISTS ${CLI_SOURCES}/${name})
      get_filename_component(short ${f} NAME)
      list(APPEND failures "cli/${short} includes \"${name}\", not a file of cli/: the CLI sees only public headers")
    endif()
  endforeach()
endforeach()

function(needed out file)
  execute_process(COMMAND readelf -d ${file} OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${file} failed")
  endif()
  string(REGEX MATCHALL "NEEDED\\)[^\\[]*\\[[^]]*\\]" entries "${text}")
  set(${out} "${entries}" PARENT_SCOPE)
endfunction()

needed(core ${LIBS}/libbagua_core.so)
foreach(forbidden yaml-cpp hiredis protobuf valijson "libbagua.so")
  if(core MATCHES "${forbidden}")
    list(APPEND failures "libbagua_core.so needs ${forbidden}: ${core}")
  endif()
endforeach()
if(NOT core MATCHES "libtorch")
  list(APPEND failures "libbagua_core.so does not need LibTorch? ${core}")
endif()
needed(common ${LIBS}/libbagua_common.so)
if(common MATCHES "torch|c10")
  list(APPEND failures "libbagua_common.so needs LibTorch: ${common}")
endif()
foreach(example with_bagua collectives)
  needed(e ${EXAMPLES}/${example})
  if(NOT e MATCHES "libbagua_core.so" OR e MATCHES "libbagua.so")
    list(APPEND failures "examples/${example} should need libbagua_core.so and not libbagua.so: ${e}")
  endif()
endforeach()

execute_process(COMMAND ldd ${CLI} OUTPUT_VARIABLE loaded RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  list(APPEND failures "ldd ${CLI} failed")
# Library names only: ldd's load addresses are hex, and one holding "c10"
# (0x...836ac1000) must not read as LibTorch's libc10.
elseif(loaded MATCHES "libtorch|libc10|libbagua\\.so|libbagua_core")
  list(APPEND failures "the bagua command loads LibTorch (or a library that does):\n${loaded}")
elseif(NOT loaded MATCHES "libbagua_recipe.so")
  list(APPEND failures "the bagua command does not load libbagua_recipe.so?\n${loaded}")
endif()

if(failures)
  string(REPLACE ";" "\n  " text "${failures}")
  message(FATAL_ERROR "layering:\n  ${text}")
endif()
message(STATUS "layering holds: include trees and NEEDED entries as declared")
