# The process tests of tests/train run build/lattice train --nodes N.
if(TARGET train_tests)
  add_dependencies(train_tests lattice)
endif()
# join_test starts rank processes with the cluster tests' process helper.
if(TARGET train_tests)
  target_sources(train_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster/proc_testlib.cc)
  target_include_directories(train_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster)
endif()
