# GPU suite of the cuda backend (tests/test_cuda.c): every op against the
# cpu backend through the public API. It uses only the public API, so it
# builds without CUDA too; where the cuda backend cannot run it prints
# "SKIP: <reason>" and exits 77.
check_PROGRAMS += tests/test_cuda
TESTS += tests/test_cuda
tests_test_cuda_SOURCES = tests/test_cuda.c
tests_test_cuda_CPPFLAGS = $(APX_TEST_CPPFLAGS)
tests_test_cuda_LDADD = $(APX_TEST_LIBS)
