# The process tests of tests/train run build/lattice train --nodes N.
if(TARGET train_tests)
  add_dependencies(train_tests lattice)
endif()
