# cluster_peer: the separate-process rank of the cluster fault tests and of
# bench/failure_detect.sh (found at ${PROJECT_BINARY_DIR}/tests/cluster_peer).
if(TARGET lattice_cluster)
  add_executable(cluster_peer ${CMAKE_CURRENT_SOURCE_DIR}/cluster/cluster_peer.cc
                              ${CMAKE_CURRENT_SOURCE_DIR}/cluster/cluster_testlib.cc)
  target_link_libraries(cluster_peer PRIVATE lattice_options lattice_cluster)
  set_target_properties(cluster_peer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  if(TARGET cluster_tests)
    add_dependencies(cluster_tests cluster_peer lattice)
  endif()
endif()
