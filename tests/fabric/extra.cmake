# fabric_peer: the separate-process rank of the fabric process tests (tests/fabric/process_test.cc
# finds it at ${PROJECT_BINARY_DIR}/tests/fabric_peer).
add_executable(fabric_peer ${CMAKE_CURRENT_SOURCE_DIR}/fabric/fabric_peer.cc
                           ${CMAKE_CURRENT_SOURCE_DIR}/fabric/fabric_testlib.cc)
target_link_libraries(fabric_peer PRIVATE lattice_options lattice_fabric GTest::gtest)
set_target_properties(fabric_peer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
if(TARGET fabric_tests)
  add_dependencies(fabric_tests fabric_peer)
endif()
