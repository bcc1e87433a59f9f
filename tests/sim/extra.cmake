# The validation test runs bench/sim_vs_real.py, which drives the lattice binary.
if(TARGET sim_tests)
  add_dependencies(sim_tests lattice)
endif()
