# SPDX-License-Identifier: Apache-2.0
# The CMake package (find_package(apexx CONFIG), the target apexx::apexx):
# apexx-config.cmake and apexx-config-version.cmake, installed in
# $(libdir)/cmake/apexx. Made at build time, as the man pages are, with the
# installation directories make expands; a directory under the prefix is
# written relative to the package file's own directory (${_apexx_prefix}),
# and the library's file and soname are libtool's (libapexx/libapexx.la).
# Checked by tests/test_cmake_package.sh.
apexxcmakedir = $(libdir)/cmake/apexx
apexxcmake_DATA = cmake/apexx-config.cmake cmake/apexx-config-version.cmake
EXTRA_DIST += cmake/apexx-config.cmake.in cmake/apexx-config-version.cmake.in
CLEANFILES += $(apexxcmake_DATA)

# under DIR: DIR with the prefix replaced by ${_apexx_prefix}; esc: a value
# for sed's replacement
apx_cmake_edit = \
	prefix='$(prefix)'; \
	under() { case $$1 in "$$prefix"/*) printf '%s/%s' '$${_apexx_prefix}' "$${1\#"$$prefix"/}" ;; *) printf '%s' "$$1" ;; esac; }; \
	esc() { printf '%s\n' "$$1" | sed -e 's/[\\&|]/\\&/g'; }; \
	dir='$(apexxcmakedir)'; \
	case $$dir in "$$prefix"/*) \
	  top='$${CMAKE_CURRENT_LIST_DIR}/'`printf '%s\n' "$${dir\#"$$prefix"/}" | sed 's|[^/][^/]*|..|g'` ;; \
	*) top=$$prefix ;; esac; \
	la=libapexx/libapexx.la; \
	dlname=`sed -n "s/^dlname='\(.*\)'$$/\1/p" $$la`; \
	if test -n "$$dlname"; then \
	  type=SHARED; file=`sed -n "s/^library_names='\([^ ']*\).*/\1/p" $$la`; links=; \
	else \
	  type=STATIC; file=`sed -n "s/^old_library='\(.*\)'$$/\1/p" $$la`; \
	  links=`sed -n "s/^dependency_libs='\(.*\)'$$/\1/p" $$la | sed -e 's/^ *//' -e 's/ *$$//' -e 's/  */;/g'`; \
	fi; \
	test -n "$$file" || { echo "$$la names no library file" >&2; exit 1; }; \
	sed -e "s|@APX_CMAKE_TOP[@]|`esc "$$top"`|g" \
	    -e "s|@APX_CMAKE_DIR[@]|`esc '$(apexxcmakedir)'`|g" \
	    -e "s|@prefix[@]|`esc "$$prefix"`|g" \
	    -e "s|@APX_CMAKE_INCLUDEDIR[@]|`esc "\`under '$(includedir)'\`"`|g" \
	    -e "s|@APX_CMAKE_LIBRARY[@]|`esc "\`under '$(libdir)'\`/$$file"`|g" \
	    -e "s|@APX_CMAKE_BACKENDDIR[@]|`esc "\`under '$(pkglibdir)'\`"`|g" \
	    -e "s|@APX_CMAKE_LIBTYPE[@]|$$type|g" \
	    -e "s|@APX_CMAKE_SONAME[@]|`esc "$$dlname"`|g" \
	    -e "s|@APX_CMAKE_LINK_LIBS[@]|`esc "$$links"`|g" \
	    -e "s|@PACKAGE_VERSION[@]|`esc '$(PACKAGE_VERSION)'`|g" \
	    -e "s|@APX_SIZEOF_VOID_P[@]|`esc '$(APX_SIZEOF_VOID_P)'`|g"
cmake/apexx-config.cmake: $(srcdir)/cmake/apexx-config.cmake.in libapexx/libapexx.la Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && ( $(apx_cmake_edit) ) <$(srcdir)/$@.in >$@.tmp && mv -f $@.tmp $@
cmake/apexx-config-version.cmake: $(srcdir)/cmake/apexx-config-version.cmake.in libapexx/libapexx.la Makefile
	$(AM_V_GEN)$(MKDIR_P) cmake && ( $(apx_cmake_edit) ) <$(srcdir)/$@.in >$@.tmp && mv -f $@.tmp $@
