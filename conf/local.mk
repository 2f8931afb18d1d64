# SPDX-License-Identifier: Apache-2.0
apexxconfdir = $(sysconfdir)/apexx
EXTRA_DIST += conf/apexx.ini

# Keep an installed apexx.ini that the user edited; install the new default
# beside it as apexx.ini.new in that case.
install-data-local: install-apexx-ini
install-apexx-ini:
	$(MKDIR_P) '$(DESTDIR)$(apexxconfdir)'
	@if test -f '$(DESTDIR)$(apexxconfdir)/apexx.ini' && \
	    ! cmp -s '$(srcdir)/conf/apexx.ini' '$(DESTDIR)$(apexxconfdir)/apexx.ini'; then \
	  echo "keeping edited $(DESTDIR)$(apexxconfdir)/apexx.ini; new default as apexx.ini.new"; \
	  $(INSTALL_DATA) '$(srcdir)/conf/apexx.ini' '$(DESTDIR)$(apexxconfdir)/apexx.ini.new'; \
	else \
	  $(INSTALL_DATA) '$(srcdir)/conf/apexx.ini' '$(DESTDIR)$(apexxconfdir)/apexx.ini'; \
	fi
uninstall-local: uninstall-apexx-ini
uninstall-apexx-ini:
	@if cmp -s '$(srcdir)/conf/apexx.ini' '$(DESTDIR)$(apexxconfdir)/apexx.ini'; then \
	  rm -f '$(DESTDIR)$(apexxconfdir)/apexx.ini'; fi
	rm -f '$(DESTDIR)$(apexxconfdir)/apexx.ini.new'
.PHONY: install-apexx-ini uninstall-apexx-ini
