# SPDX-License-Identifier: Apache-2.0
# cuda backend: apexx-cuda.so, CUDA kernels (.cu) compiled by nvcc through
# libtool (build-aux/nvcc-libtool passes libtool's host flags on), linked
# with the C++ linker against the static cudart and no libcuda.
cuda_backend_sources = \
	backends/cuda/backend.cu \
	backends/cuda/validate.cu \
	backends/cuda/tilepack.cu \
	backends/cuda/tileunpack.cu \
	backends/cuda/fused_pack_op_unpack.cu \
	backends/cuda/fusiongate_alpha.cu \
	backends/cuda/fusiongate_fuse.cu \
	backends/cuda/fusiongate_fuse_backward.cu \
	backends/cuda/fusiongate_alpha_backward.cu \
	backends/cuda/tilessm_scan.cu \
	backends/cuda/tilessm_scan_backward.cu \
	backends/cuda/gather.cu \
	backends/cuda/index_select.cu \
	backends/cuda/scatter_add.cu \
	backends/cuda/gather_backward.cu \
	backends/cuda/tilepack_backward.cu \
	backends/cuda/index_select_backward.cu \
	backends/cuda/fused_pack_op_unpack_backward.cu \
	backends/cuda/tileunpack_backward.cu \
	backends/cuda/ff_infer.cu \
	backends/cuda/ff_route.cu \
	backends/cuda/ff_refine.cu \
	backends/cuda/graph.cu
# The headers every .cu includes (cuda_backend.h and its parts), and those
# of one op's layers (the .cu named first includes them).
cuda_backend_headers = \
	backends/cuda/cuda_backend.h \
	backends/cuda/cuda_state.h \
	backends/cuda/cuda_geom.h \
	backends/cuda/cuda_launch.h \
	backends/cuda/cuda_dtype.cuh \
	backends/cuda/cuda_check.h \
	backends/cuda/cuda_check_device.cuh \
	backends/cuda/cuda_workspace.h
# helpers some ops' files include (the last-block sums of the backward ops)
cuda_helper_headers = backends/cuda/cuda_ticket.cuh
cuda_ff_headers = backends/cuda/cuda_ff.h
cuda_tileunpack_headers = \
	backends/cuda/tileunpack.h \
	backends/cuda/tileunpack_index.cuh \
	backends/cuda/tileunpack_cells.cuh \
	backends/cuda/tileunpack_small.cuh \
	backends/cuda/tileunpack_table.cuh
cuda_scatter_add_headers = \
	backends/cuda/scatter_add.h \
	backends/cuda/scatter_add_common.cuh \
	backends/cuda/scatter_add_sort.cuh \
	backends/cuda/scatter_add_small.cuh \
	backends/cuda/scatter_add_direct.cuh
cuda_tilessm_scan_headers = \
	backends/cuda/tilessm_scan.h \
	backends/cuda/tilessm_scan_common.cuh \
	backends/cuda/tilessm_scan_chunked.cuh \
	backends/cuda/tilessm_scan_block.cuh \
	backends/cuda/tilessm_scan_staged.cuh
cuda_ff_refine_headers = \
	backends/cuda/ff_refine.h \
	backends/cuda/ff_refine_common.cuh \
	backends/cuda/ff_refine_scan.cuh \
	backends/cuda/ff_refine_conv.cuh \
	backends/cuda/ff_refine_fused.cuh \
	backends/cuda/ff_refine_tc.cuh
cuda_op_headers = $(cuda_tileunpack_headers) $(cuda_scatter_add_headers) \
	$(cuda_tilessm_scan_headers) $(cuda_ff_refine_headers) $(cuda_helper_headers)
EXTRA_DIST += $(cuda_backend_sources) $(cuda_backend_headers) $(cuda_ff_headers) \
	$(cuda_op_headers) \
	build-aux/nvcc-libtool \
	backends/cuda/apexx-cuda.map

# Which code a device runs from the module's arch list (arch_match.c) and
# the FF frame's shared memory against the device's (ff_smem.c): plain C,
# built with or without CUDA so that make check tests them everywhere
# (tests/test_cuda_arch, tests/test_cuda_ff_smem); the module links them.
noinst_LTLIBRARIES += backends/cuda/libcudaarch.la
backends_cuda_libcudaarch_la_SOURCES = backends/cuda/arch_match.c backends/cuda/arch_match.h \
	backends/cuda/ff_smem.c backends/cuda/ff_smem.h
backends_cuda_libcudaarch_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden

# nvcc flags of the project's own .cu files; NVCCFLAGS is the user's.
AM_NVCCFLAGS = -O3 -std=c++17 $(NVCC_ARCH_FLAGS) --compiler-options=-fvisibility=hidden \
	--expt-relaxed-constexpr
NVCC_COMPILE = $(NVCC) $(DEFS) $(DEFAULT_INCLUDES) $(INCLUDES) $(AM_CPPFLAGS) $(CPPFLAGS) \
	$(CUDA_CPPFLAGS) $(AM_NVCCFLAGS) $(NVCCFLAGS) $(WARN_CFLAGS)
.cu.lo:
	$(AM_V_CC)$(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
	  --mode=compile $(SHELL) $(top_srcdir)/build-aux/nvcc-libtool $(NVCC_COMPILE) \
	  -c -o $@ $<

if BUILD_CUDA
pkglib_LTLIBRARIES += backends/apexx-cuda.la
backends_apexx_cuda_la_SOURCES = $(cuda_backend_sources) $(cuda_backend_headers) \
	$(cuda_ff_headers) $(cuda_op_headers)
backends_apexx_cuda_la_LIBADD = backends/cuda/libcudaarch.la $(CUDA_LIBS)
# The version script keeps every symbol but the entry local: libtool's
# -export-symbols-regex alone (-retain-symbols-file for C++) would still
# export what static archives bring in.
backends_apexx_cuda_la_LDFLAGS = $(AM_LDFLAGS) -module -avoid-version -shared \
	-export-symbols-regex '^apx_backend_entry$$' -no-undefined \
	-Wl,--version-script=$(top_srcdir)/backends/cuda/apexx-cuda.map
EXTRA_backends_apexx_cuda_la_DEPENDENCIES = $(top_srcdir)/backends/cuda/apexx-cuda.map
# The objects carry C++ host code (and cudart_static needs libstdc++).
backends_apexx_cuda_la_LINK = $(LIBTOOL) $(AM_V_lt) --tag=CXX $(AM_LIBTOOLFLAGS) \
	$(LIBTOOLFLAGS) --mode=link $(CXXLD) $(AM_CXXFLAGS) $(CXXFLAGS) \
	$(backends_apexx_cuda_la_LDFLAGS) $(LDFLAGS) -o $@
# Without automake's dependency tracking for .cu: every object depends on
# the shared headers, an op's object on its layers.
$(cuda_backend_sources:.cu=.lo): $(cuda_backend_headers)
backends/cuda/ff_infer.lo backends/cuda/ff_route.lo backends/cuda/ff_refine.lo: \
	$(cuda_ff_headers)
backends/cuda/tileunpack.lo: $(cuda_tileunpack_headers)
backends/cuda/scatter_add.lo: $(cuda_scatter_add_headers)
backends/cuda/tilessm_scan.lo: $(cuda_tilessm_scan_headers)
backends/cuda/ff_refine.lo: $(cuda_ff_refine_headers)
endif

# GPU run tools (bench/gpu/, bench/peers/): they use only the public API,
# so they build with or without CUDA (and skip, exit 77, where the cuda
# backend cannot run). The bandwidth table is apexx-bench's (run-all.sh).
noinst_PROGRAMS += bench/gpu/ff_time
bench_gpu_ff_time_SOURCES = bench/gpu/ff_time.c
bench_gpu_ff_time_LDADD = libapexx/libapexx.la $(M_LIBS)
EXTRA_DIST += bench/gpu/ff-run.sh
EXTRA_DIST += bench/gpu/run-all.sh bench/gpu/table.py bench/peers/torch_peers.py \
	bench/peers/torch_backward.py \
	bench/gpu/ab-build.sh bench/gpu/ab-extra.sh bench/gpu/ab_table.py bench/gpu/suites.sh \
	bench/gpu/rows.sh \
	bench/gpu/arch-check.sh bench/gpu/arch_table.py
