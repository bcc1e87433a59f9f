# doctor_tests starts `lattice launch ... lattice doctor` through the cluster tests' Proc
# (tests/cluster/proc_testlib.*, core only), and needs the lattice binary built first.
if(TARGET doctor_tests)
  target_sources(doctor_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster/proc_testlib.cc)
  target_include_directories(doctor_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cluster)
  add_dependencies(doctor_tests lattice)
endif()
