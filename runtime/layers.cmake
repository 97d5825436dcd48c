# runtime/ in layers (docs/ARCHITECTURE.md, "runtime/ in layers"): one static library per folder,
# each linking only the layers below it that it uses. A header of a layer not listed is out of
# reach: tools/check_layers.py (ctest `layers`) refuses an include that goes up or sideways, so
# the order below is the architecture, checked.
#   base    utilities with no sbx model: errors, paths, JSON reading, escaping, clocks, fd passing
#   egress  allow rules, the proxy, its request parser and resolver (it never reads a RunSpec)
#   model   what a run is: RunSpec, profiles and their layering, environment, classify
#   linux   the kernel facilities: namespaces, ids, cgroups, mounts, seccomp, capabilities, GPUs
#   record  the trace store, its ledger, index, keys and verification
#   image   the content-addressed blob store, images, import, export
#   launch  one run: clone, the shared init, the supervisor, the outcome, the record
#   typed   typed IO: JSON Schema, packs, exec requests, replay
#   session sbx session: a long-lived sandbox, its server and the agent inside it
#   server  sbx mcp and its warm pool
# Everything shares one set of compile flags and one precompiled header (sbx_common, sbx_base).
add_library(sbx_common INTERFACE)
target_include_directories(sbx_common INTERFACE ${CMAKE_SOURCE_DIR} ${CLI11_INCLUDE} ${SPDLOG_INCLUDE}
                           ${RE2_INCLUDE} ${CARES_INCLUDE})
target_compile_definitions(sbx_common INTERFACE SPDLOG_HEADER_ONLY SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY
  SBX_VERSION="${PROJECT_VERSION}"
  SBX_DATADIR="${CMAKE_INSTALL_PREFIX}/share/sbx")
target_link_libraries(sbx_common INTERFACE nlohmann_json::nlohmann_json ${SECCOMP_STATIC} ${CAPNG_STATIC} ${RE2_STATIC}
                      ${CARES_STATIC} ${SSL_STATIC} ${CRYPTO_STATIC} ${Z_STATIC} ${LZMA_STATIC} ${ZSTD_STATIC}
                      ${BZ2_STATIC} ${SQLITE3_STATIC} m ${CMAKE_DL_LIBS} Threads::Threads)

set(SBX_LAYERS)
function(sbx_layer name)
  cmake_parse_arguments(L "" "" "DEPS;SOURCES;EXCLUDE" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/runtime/${name}/*.cpp)
  foreach(x IN LISTS L_EXCLUDE)
    list(REMOVE_ITEM srcs ${CMAKE_SOURCE_DIR}/runtime/${name}/${x})
  endforeach()
  add_library(sbx_${name} STATIC ${srcs} ${L_SOURCES})
  target_link_libraries(sbx_${name} PUBLIC sbx_common)
  target_compile_options(sbx_${name} PRIVATE ${SBX_STRICT_WARNINGS})
  foreach(d IN LISTS L_DEPS)
    target_link_libraries(sbx_${name} PUBLIC sbx_${d})
  endforeach()
  # nlohmann/json dominates compile time on 2-core machines: one precompiled header for all.
  if(name STREQUAL "base")
    target_precompile_headers(sbx_base PRIVATE <nlohmann/json.hpp> <string> <vector> <map>)
  else()
    target_precompile_headers(sbx_${name} REUSE_FROM sbx_base)
  endif()
  set(SBX_LAYERS ${SBX_LAYERS} sbx_${name} PARENT_SCOPE)
endfunction()

sbx_layer(base)
sbx_layer(egress DEPS base)
sbx_layer(model  DEPS egress base SOURCES ${SBX_EMBED_CPP} ${SBX_PYTHON_MAIN_CPP} ${SBX_TEMPLATE_DRIVER_CPP})
sbx_layer(linux  DEPS model base SOURCES ${SBX_SECCOMP_CPP})
sbx_layer(record DEPS base EXCLUDE pg_stubs.cpp)
target_include_directories(sbx_record PRIVATE ${PQ_INCLUDE})
# libpq's GSSAPI and LDAP references (pg_stubs.cpp) are resolved by an archive linked after it:
# inside sbx_record, ahead of libpq.a on the link line, nothing would pull them in.
add_library(sbx_pg_stubs STATIC ${CMAKE_SOURCE_DIR}/runtime/record/pg_stubs.cpp)
target_compile_options(sbx_pg_stubs PRIVATE ${SBX_STRICT_WARNINGS})
target_link_libraries(sbx_record PUBLIC ${PQ_STATIC} sbx_pg_stubs ${PGCOMMON_STATIC} ${PGPORT_STATIC} ${SSL_STATIC}
                      ${CRYPTO_STATIC})
sbx_layer(image  DEPS record base)
sbx_layer(launch DEPS image record egress linux model base)
sbx_layer(typed  DEPS launch image record linux model base)
sbx_layer(session DEPS typed launch image record linux model base SOURCES ${SBX_SESSION_PYTHON_CPP})
sbx_layer(server DEPS session typed launch image record linux model base)

# The whole runtime, for the binary, the unit tests and the fuzz targets.
add_library(sbx_runtime INTERFACE)
target_link_libraries(sbx_runtime INTERFACE ${SBX_LAYERS})

# clang 14's UBSan cannot emit Asio's C++20 coroutines ("Cannot represent a difference across
# sections"): the fuzz build (clang, tests/fuzz/) compiles mcp_http.cpp without it. No fuzz target
# drives that unit; GCC's sanitizer pass (make test-asan) keeps UBSan on it.
if(SBX_FUZZ)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/runtime/server/mcp_http.cpp PROPERTIES COMPILE_OPTIONS
                              -fno-sanitize=undefined)
endif()
