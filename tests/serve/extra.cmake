# serve_tests starts `lattice serve` as a child process through the cluster tests' Proc
# (tests/cluster/proc_testlib.*, core only), and needs the lattice binary built first.
if(TARGET serve_tests)
  target_sources(serve_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster/proc_testlib.cc)
  target_include_directories(serve_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster)
  add_dependencies(serve_tests lattice)
endif()
