# SPDX-License-Identifier: Apache-2.0
# The apexx Python package: apexx/__init__.py, apexx/torch.py, apexx/onnx.py, the type
# stubs and the CPython extension _apexx (a libtool module linking
# libapexx), installed into $(python_sitedir)/apexx. For `make check` and
# the bench, python/build/apexx/ in the build tree holds the same package
# (sources copied, the extension linked from python/.libs).
APEXX_PY_SOURCES = python/apexx/__init__.py python/apexx/torch.py python/apexx/onnx.py \
	python/apexx/__init__.pyi python/apexx/_apexx.pyi python/apexx/torch.pyi \
	python/apexx/py.typed
APEXX_PY_TESTS = python/tests/run_tests.py python/tests/apexx_test.py \
	python/tests/reference.py python/tests/test_numpy_ops.py \
	python/tests/test_errors.py python/tests/test_rtld_local.py \
	python/tests/test_refcount.py python/tests/test_torch_cpu.py \
	python/tests/test_torch_autograd.py python/tests/test_torch_autograd_tile.py \
	python/tests/test_gpu.py python/tests/gpu_run.sh \
	python/tests/run_without_optional.py python/tests/test_lifetime.py \
	python/tests/test_messages_and_limits.py python/tests/sanitized.sh \
	python/tests/test_op_table.py python/tests/test_signatures.py \
	python/tests/test_stub_types.py python/tests/test_onnx_export.py \
	python/tests/test_training_loop.py python/tests/test_dlpack.py \
	python/tests/test_outputs.py
# the extension's C files (python/apexx/binding.h says which does what)
APEXX_PY_C = python/apexx/binding.h python/apexx/_apexx.c python/apexx/errors.c \
	python/apexx/call.c python/apexx/tensors.c python/apexx/ops.c \
	python/apexx/context.c python/apexx/ff.c
# pip's build of the same package (python/setup.py; checked by
# tests/test_python_pip.sh)
APEXX_PY_PIP = python/setup.py python/pyproject.toml
EXTRA_DIST += $(APEXX_PY_C) $(APEXX_PY_SOURCES) $(APEXX_PY_TESTS) $(APEXX_PY_PIP) \
	docs/python.md bench/python_overhead.py bench/python_percall.py

if BUILD_PYTHON
pyapexxdir = $(python_sitedir)/apexx
pyapexx_LTLIBRARIES = python/_apexx.la
pyapexx_DATA = $(APEXX_PY_SOURCES)
python__apexx_la_SOURCES = $(APEXX_PY_C)
python__apexx_la_CPPFLAGS = $(AM_CPPFLAGS) $(PYTHON_CPPFLAGS)
# CPython's headers are not -Wextra clean in every version (missing field
# initialisers in PyVarObject_HEAD_INIT): the binding keeps -Wall -Werror
python__apexx_la_CFLAGS = $(AM_CFLAGS) -Wno-missing-field-initializers -fvisibility=hidden
python__apexx_la_LDFLAGS = -module -avoid-version -shared -no-undefined -shrext .so
python__apexx_la_LIBADD = libapexx/libapexx.la

# the build tree's importable package
APEXX_PY_BUILD = python/build/apexx
noinst_DATA = $(APEXX_PY_BUILD)/.stamp
$(APEXX_PY_BUILD)/.stamp: $(APEXX_PY_SOURCES) python/_apexx.la
	$(AM_V_GEN)$(MKDIR_P) $(APEXX_PY_BUILD) && \
	for f in $(APEXX_PY_SOURCES); do cp -f $(srcdir)/$$f $(APEXX_PY_BUILD)/ || exit 1; done && \
	chmod u+w $(APEXX_PY_BUILD)/* && \
	ln -sf $(abs_builddir)/python/.libs/_apexx.so $(APEXX_PY_BUILD)/_apexx.so && \
	touch $@

# libtool's .la is of no use inside a Python package
install-data-hook: install-pyapexx-hook
install-pyapexx-hook:
	rm -f $(DESTDIR)$(pyapexxdir)/_apexx.la
uninstall-hook: uninstall-pyapexx-hook
uninstall-pyapexx-hook:
	rm -f $(DESTDIR)$(pyapexxdir)/_apexx.so $(DESTDIR)$(pyapexxdir)/_apexx.la
	-rmdir $(DESTDIR)$(pyapexxdir) 2>/dev/null

clean-local: clean-python-build
clean-python-build:
	rm -rf python/build

# make check: python/tests/run_tests.py (rules below)
TESTS += python/tests/run_tests.py python/tests/run_without_optional.py
endif

# make check: one runner (python/tests/run_tests.py) over the test files,
# with the build tree's package first on the path (run when
# BUILD_PYTHON, above)
TEST_EXTENSIONS = .test .py
# (in a sanitizer build, sanitized.sh preloads the sanitizer's runtime or
# skips with the reason)
PY_LOG_COMPILER = env PYTHONPATH='$(abs_top_builddir)/python/build' \
	PYTHONDONTWRITEBYTECODE=1 APEXX_PY_TESTS='$(abs_top_srcdir)/python/tests' \
	LD_LIBRARY_PATH='$(abs_top_builddir)/libapexx/.libs' \
	APEXX_TEST_ONNX_OUT='$(abs_top_builddir)/python/build/test-onnx' \
	$(SHELL) '$(abs_top_srcdir)/python/tests/sanitized.sh' '$(CC)' '$(SANITIZE_FLAGS)' $(PYTHON)
