# install.mk: `make install` / `make uninstall` (included by the Makefile).
#
#   make install PREFIX=/usr/local DESTDIR= LIBDIR=$(PREFIX)/lib
#
# Installs the shared library under its versioned name with the soname link
# (libfolio.so.$(SOVERSION)) and the development link (libfolio.so), the
# static library, include/folio.h, pkg-config files (folio.pc; folio-static.pc
# links libfolio.a), a CMake package (find_package(folio): folio::folio and
# folio::folio_static), the `folio` command with its Python tools, and the man
# pages folio(1) and folio(3).  Paths written into the installed files are the
# final ones (without DESTDIR), so a staged install works as installed.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share
MANDIR     ?= $(DATADIR)/man
LIBEXECDIR ?= $(PREFIX)/libexec
TOOLSDIR   := $(DATADIR)/folio
HELPERDIR  := $(LIBEXECDIR)/folio
CMAKEDIR   := $(LIBDIR)/cmake/folio
DIST       := $(BUILD)/dist

SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
            -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
            -e 's|@SOVERSION@|$(SOVERSION)|g'

# folio(3): the template with every option of the code's table (base.h
# FOLIO_OPTIONS), printed by a program built from that table
$(BUILD)/options_table: tools/options_table.c src/base/base.h include/folio.h
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O0 $(WARN) -Iinclude -Isrc/base $< -o $@
$(BUILD)/man/folio.3: man/folio.3.in $(BUILD)/options_table
	@mkdir -p $(dir $@)
	{ sed '/^@OPTIONS@$$/,$$d' $<; $(BUILD)/options_table --man; sed '1,/^@OPTIONS@$$/d' $<; } \
	  | sed -e 's|@VERSION@|$(VERSION)|g' >$@.tmp && mv $@.tmp $@

# `folio run` measures its command with bench/rusage_exec (tools/folio_tools/proc.py)
$(BUILD)/bench/rusage_exec: bench/rusage_exec.c
	$(MAKE) -C bench OUT=$(abspath $(BUILD))/bench $(abspath $@)

install: all $(BUILD)/bench/rusage_exec
	@rm -rf $(DIST) && mkdir -p $(DIST)
	$(SUBST) dist/folio.pc.in >$(DIST)/folio.pc
	$(SUBST) dist/folio-static.pc.in >$(DIST)/folio-static.pc
	$(SUBST) dist/folioConfig.cmake.in >$(DIST)/folioConfig.cmake
	$(SUBST) dist/folioConfigVersion.cmake.in >$(DIST)/folioConfigVersion.cmake
	sed -e 's|@VERSION@|$(VERSION)|g' man/folio.1 >$(DIST)/folio.1
	sed -e 's|^INSTALLED = None$$|INSTALLED = {"tools": "$(TOOLSDIR)", "library": "$(LIBDIR)/libfolio.so.$(SOVERSION)", "helper": "$(HELPERDIR)/rusage_exec", "version": "$(VERSION)"}|' \
	    folio >$(DIST)/folio
	grep -q '^INSTALLED = {' $(DIST)/folio
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(CMAKEDIR) \
	    $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
	    $(DESTDIR)$(TOOLSDIR)/folio_tools/suites $(DESTDIR)$(HELPERDIR)
	install -m 755 $(BUILD)/bench/rusage_exec $(DESTDIR)$(HELPERDIR)/rusage_exec
	install -m 755 $(BUILD)/libfolio.so $(DESTDIR)$(LIBDIR)/libfolio.so.$(VERSION)
	ln -sfn libfolio.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfolio.so.$(SOVERSION)
	ln -sfn libfolio.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libfolio.so
	install -m 644 $(BUILD)/libfolio.a $(DESTDIR)$(LIBDIR)/libfolio.a
	install -m 644 include/folio.h $(DESTDIR)$(INCLUDEDIR)/folio.h
	install -m 644 $(DIST)/folio.pc $(DIST)/folio-static.pc $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 $(DIST)/folioConfig.cmake $(DIST)/folioConfigVersion.cmake $(DESTDIR)$(CMAKEDIR)/
	install -m 644 $(DIST)/folio.1 $(DESTDIR)$(MANDIR)/man1/folio.1
	install -m 644 $(BUILD)/man/folio.3 $(DESTDIR)$(MANDIR)/man3/folio.3
	install -m 644 tools/folio_tools/*.py $(DESTDIR)$(TOOLSDIR)/folio_tools/
	install -m 644 tools/folio_tools/suites/*.py $(DESTDIR)$(TOOLSDIR)/folio_tools/suites/
	install -m 755 $(DIST)/folio $(DESTDIR)$(BINDIR)/folio
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/folio $(DESTDIR)$(INCLUDEDIR)/folio.h \
	    $(DESTDIR)$(LIBDIR)/libfolio.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libfolio.so.$(SOVERSION) \
	    $(DESTDIR)$(LIBDIR)/libfolio.so $(DESTDIR)$(LIBDIR)/libfolio.a \
	    $(DESTDIR)$(LIBDIR)/pkgconfig/folio.pc $(DESTDIR)$(LIBDIR)/pkgconfig/folio-static.pc \
	    $(DESTDIR)$(MANDIR)/man1/folio.1 $(DESTDIR)$(MANDIR)/man3/folio.3
	rm -rf $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(TOOLSDIR) $(DESTDIR)$(HELPERDIR)
