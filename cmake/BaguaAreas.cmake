# One CMake library per source area, with the layering enforced by the build.
#
#   bagua_area(NAME <area>
#              SOURCES <files...>            # .cpp (and .cu) of the area
#              PRIVATE_DIRS <dirs...>        # folders of engine/src/ the area owns (its private headers)
#              PUBLIC_HEADERS <headers...>   # the area's headers under engine/include/bagua/
#              DEPENDS <areas...>            # the areas below it that it uses
#              [TORCH])                      # it compiles against LibTorch
#
# Each area is an OBJECT library `bagua_<area>`; the shared libraries are
# made of them (engine/CMakeLists.txt). Areas are declared bottom-up, and an
# area may depend only on areas declared before it: a dependency on one not
# yet declared stops the configure step, naming both. The layering is then
# enforced at compile time: an area's include path is a folder of its own
# (build/include-trees/<area>/) holding links to exactly the private folders
# and public headers of itself and of the areas below it that it depends on
# (transitively). An #include of anything else is "file not found". The
# other way round, a declared dependency must be used: an area none of
# whose files (its sources, its private folders' headers, its public
# headers) includes a header of a dependency it declares stops the
# configure step too, so DEPENDS says what the area uses, no more.
#
# The area's properties, for areas above it and for tests:
#   BAGUA_AREA_DIRS     private folders visible to it (its own and below)
#   BAGUA_AREA_HEADERS  public headers visible to it
#   BAGUA_AREA_TREE     its include tree
#   BAGUA_AREA_TORCH    whether it (or an area below it) needs LibTorch
#   BAGUA_AREA_OWN      its own private folders and public headers (an
#                       #include of one of them uses the area)

set(BAGUA_SRC_ROOT ${PROJECT_SOURCE_DIR}/engine/src)
set(BAGUA_INCLUDE_ROOT ${PROJECT_SOURCE_DIR}/engine/include)
set(BAGUA_TREES ${PROJECT_BINARY_DIR}/include-trees)
set_property(GLOBAL PROPERTY BAGUA_AREAS "")

# An include tree: links to `dirs` (folders of engine/src) and to `headers`
# (paths under engine/include/bagua).
function(bagua_include_tree root dirs headers)
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/bagua/algorithms)
  foreach(d IN LISTS dirs)
    file(CREATE_LINK ${BAGUA_SRC_ROOT}/${d} ${root}/${d} SYMBOLIC)
  endforeach()
  foreach(h IN LISTS headers)
    file(CREATE_LINK ${BAGUA_INCLUDE_ROOT}/bagua/${h} ${root}/bagua/${h} SYMBOLIC)
  endforeach()
endfunction()

# Fails the configure step when none of `files` includes anything of area
# `dep` (its own private folders, "dir/...", or public headers, <bagua/h>).
function(bagua_check_used area dep files)
  get_target_property(own bagua_${dep} BAGUA_AREA_OWN)
  set(alternatives "")
  foreach(item IN LISTS own)
    if(item STREQUAL "")
      continue()
    elseif(item MATCHES "\\.h$")
      list(APPEND alternatives "bagua/${item}")
    else()
      list(APPEND alternatives "${item}/")
    endif()
  endforeach()
  string(REPLACE "." "\\." alternatives "${alternatives}")
  list(JOIN alternatives "|" pattern)
  foreach(f IN LISTS files)
    file(STRINGS ${f} hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](${pattern})")
    if(hits)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "bagua area '${area}' declares a dependency on '${dep}' but none of its files includes "
                      "anything of it: remove '${dep}' from its DEPENDS (an area declares what it uses).")
endfunction()

function(bagua_area)
  cmake_parse_arguments(A "TORCH" "NAME" "SOURCES;PRIVATE_DIRS;PUBLIC_HEADERS;DEPENDS" ${ARGN})
  # What the area's own files are, for bagua_check_used.
  set(own_files "")
  foreach(f IN LISTS A_SOURCES)
    if(EXISTS ${f} AND f MATCHES "\\.(cpp|h|cu)$")
      list(APPEND own_files ${f})
    endif()
  endforeach()
  foreach(d IN LISTS A_PRIVATE_DIRS)
    file(GLOB private_headers ${BAGUA_SRC_ROOT}/${d}/*.h)
    list(APPEND own_files ${private_headers})
  endforeach()
  foreach(h IN LISTS A_PUBLIC_HEADERS)
    list(APPEND own_files ${BAGUA_INCLUDE_ROOT}/bagua/${h})
  endforeach()
  get_property(declared GLOBAL PROPERTY BAGUA_AREAS)
  set(dirs ${A_PRIVATE_DIRS})
  set(headers ${A_PUBLIC_HEADERS})
  set(torch ${A_TORCH})
  foreach(dep IN LISTS A_DEPENDS)
    if(NOT dep IN_LIST declared)
      message(FATAL_ERROR "bagua area '${A_NAME}' depends on '${dep}', which is not declared below it "
                          "(areas, bottom-up: ${declared}). An area may use only the areas below it.")
    endif()
    get_target_property(dep_dirs bagua_${dep} BAGUA_AREA_DIRS)
    get_target_property(dep_headers bagua_${dep} BAGUA_AREA_HEADERS)
    get_target_property(dep_torch bagua_${dep} BAGUA_AREA_TORCH)
    bagua_check_used(${A_NAME} ${dep} "${own_files}")
    list(APPEND dirs ${dep_dirs})
    list(APPEND headers ${dep_headers})
    if(dep_torch)
      set(torch ON)
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  list(REMOVE_DUPLICATES headers)
  set(tree ${BAGUA_TREES}/${A_NAME})
  bagua_include_tree(${tree} "${dirs}" "${headers}")

  add_library(bagua_${A_NAME} OBJECT ${A_SOURCES})
  set_target_properties(bagua_${A_NAME} PROPERTIES
    BAGUA_AREA_DIRS "${dirs}" BAGUA_AREA_HEADERS "${headers}" BAGUA_AREA_TREE ${tree}
    BAGUA_AREA_TORCH "${torch}" BAGUA_AREA_OWN "${A_PRIVATE_DIRS};${A_PUBLIC_HEADERS}"
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(bagua_${A_NAME} PRIVATE ${tree})
  target_compile_options(bagua_${A_NAME} PRIVATE ${BAGUA_WARNINGS})
  target_link_libraries(bagua_${A_NAME} PUBLIC nlohmann_json::nlohmann_json)
  if(torch)
    # LibTorch's headers as system headers: their warnings do not drown ours.
    target_include_directories(bagua_${A_NAME} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
    target_link_libraries(bagua_${A_NAME} PRIVATE ${TORCH_LIBRARIES})
    target_compile_definitions(bagua_${A_NAME} PRIVATE ${BAGUA_TORCH_DEFINITIONS})
  endif()
  set_property(GLOBAL APPEND PROPERTY BAGUA_AREAS ${A_NAME})
endfunction()

# The include trees of the programs above the areas: `out_var` gets the
# tree of everything, private folders included (the tests, which may look
# inside what they test); `public_var` the tree of every public header and
# nothing else (the CLI and the benchmarks: a private header there is "file
# not found").
function(bagua_full_tree out_var public_var)
  get_property(declared GLOBAL PROPERTY BAGUA_AREAS)
  set(dirs "")
  set(headers "")
  foreach(area IN LISTS declared)
    get_target_property(d bagua_${area} BAGUA_AREA_DIRS)
    get_target_property(h bagua_${area} BAGUA_AREA_HEADERS)
    list(APPEND dirs ${d})
    list(APPEND headers ${h})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  list(REMOVE_DUPLICATES headers)
  bagua_include_tree(${BAGUA_TREES}/all "${dirs}" "${headers}")
  bagua_include_tree(${BAGUA_TREES}/public "" "${headers}")
  set(${out_var} ${BAGUA_TREES}/all PARENT_SCOPE)
  set(${public_var} ${BAGUA_TREES}/public PARENT_SCOPE)
endfunction()
