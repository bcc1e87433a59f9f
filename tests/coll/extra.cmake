# coll_peer: one rank of the coll process tests (found at ${PROJECT_BINARY_DIR}/tests/coll_peer).
if(TARGET lattice_coll)
  add_executable(coll_peer ${CMAKE_CURRENT_SOURCE_DIR}/coll/coll_peer.cc)
  target_link_libraries(coll_peer PRIVATE lattice_options lattice_coll)
  set_target_properties(coll_peer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  if(TARGET coll_tests)
    add_dependencies(coll_tests coll_peer)
  endif()
endif()
