# SPDX-License-Identifier: Apache-2.0
# Documentation: the man pages and the Markdown references, installed in
# $(docdir) (apexx.ini, apexx.ini(5) and apexx(7) point there).
dist_doc_DATA = docs/config.md docs/ops.md docs/report.md docs/ff_infer.md \
	docs/ff_weights.md docs/python.md docs/reliability.md docs/performance.md \
	docs/graph.md docs/trt.md docs/architecture.md docs/gpus.md

# The man pages are made from docs/NAME.in at build time, with the
# installation directories as make expands them: configure substitutes
# ${prefix} unexpanded (the Autoconf manual, Installation Directory
# Variables), and a page must show the real path. A '-' in a path becomes
# roff's \- so that a copied path works. Checked by tests/test_man_pages.sh.
APX_MAN_PAGES = docs/apexx-bench.1 docs/apexx-info.1 docs/apexx.ini.5 docs/apexx.7
man_MANS += $(APX_MAN_PAGES)
EXTRA_DIST += docs/apexx-bench.1.in docs/apexx-info.1.in docs/apexx.ini.5.in \
	docs/apexx.7.in
CLEANFILES += $(APX_MAN_PAGES)
apx_man_edit = roff() { printf '%s\n' "$$1" | sed -e 's/[\\&|]/\\&/g' -e 's/-/\\\\-/g'; }; \
	sed -e "s|@docdir[@]|`roff '$(docdir)'`|g" \
	    -e "s|@sysconfdir[@]|`roff '$(sysconfdir)'`|g" \
	    -e "s|@pkglibdir[@]|`roff '$(pkglibdir)'`|g" \
	    -e "s|@libdir[@]|`roff '$(libdir)'`|g" \
	    -e "s|@includedir[@]|`roff '$(includedir)'`|g" \
	    -e "s|@pkgdatadir[@]|`roff '$(pkgdatadir)'`|g" \
	    -e "s|@PACKAGE_VERSION[@]|`roff '$(PACKAGE_VERSION)'`|g"
apx_man_rule = $(MKDIR_P) docs && $(apx_man_edit) <$(srcdir)/$@.in >$@.tmp && mv -f $@.tmp $@
docs/apexx-bench.1: $(srcdir)/docs/apexx-bench.1.in Makefile
	$(AM_V_GEN)$(apx_man_rule)
docs/apexx-info.1: $(srcdir)/docs/apexx-info.1.in Makefile
	$(AM_V_GEN)$(apx_man_rule)
docs/apexx.ini.5: $(srcdir)/docs/apexx.ini.5.in Makefile
	$(AM_V_GEN)$(apx_man_rule)
docs/apexx.7: $(srcdir)/docs/apexx.7.in Makefile
	$(AM_V_GEN)$(apx_man_rule)
