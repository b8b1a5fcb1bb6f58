# folio: `make` builds build/libfolio.so, build/libfolio.a and checks ./folio;
# `make test` checks the layers, then builds and runs every test (normal,
# ASan+UBSan, TSan, debug).
CC      ?= cc
CXX     ?= g++
BUILD   := build
LAYERS  := base meta clear page obj api # bottom to top: each calls only the ones before it
SRCS    := $(wildcard $(LAYERS:%=src/%/*.c))
HDRS    := $(wildcard src/*/*.h) include/folio.h
WARN    := -Wall -Wextra -Werror
LIBFLAGS := -std=c11 -g -fPIC -fvisibility=hidden -ftls-model=initial-exec \
            -ffunction-sections -fdata-sections \
            -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free \
            -Iinclude $(LAYERS:%=-Isrc/%) $(WARN)
OPT     ?= -O2
VERSION   := 0.1.0
SOVERSION := $(firstword $(subst ., ,$(VERSION)))

OBJS      := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
SAN_OBJS  := $(SRCS:src/%.c=$(BUILD)/obj-san/%.o)
TSAN_OBJS := $(SRCS:src/%.c=$(BUILD)/obj-tsan/%.o)
DEBUG_OBJS := $(SRCS:src/%.c=$(BUILD)/obj-debug/%.o)
HOOK_OBJS := $(SRCS:src/%.c=$(BUILD)/obj-test/%.o)
SANFLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
TSANFLAGS := -fsanitize=thread

TEST_C    := $(wildcard tests/test_*.c)
TEST_CC   := $(if $(shell command -v $(CXX) 2>/dev/null),$(wildcard tests/test_*.cc),)
UNIT_C    := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(TEST_C:tests/%.c=$(BUILD)/tests/%) $(TEST_CC:tests/%.cc=$(BUILD)/tests/%) \
             $(UNIT_C:tests/unit/test_%.c=$(BUILD)/tests/test_unit_%)
SAN_TESTS := $(patsubst tests/%.c,$(BUILD)/tests-san/%,$(shell grep -L 'folio-test: no-sanitize' $(TEST_C) /dev/null 2>/dev/null | grep -v /dev/null))
# debug mode: every C test, linked with folio built with FOLIO_DEBUG (lock
# order and zone invariants checked), standard names, statically (not
# test_early: it is about the load order of shared libraries)
DEBUG_TESTS := $(patsubst tests/%.c,$(BUILD)/tests-debug/%,$(filter-out tests/test_early.c,$(TEST_C)))
TSAN_TESTS := $(patsubst tests/%.c,$(BUILD)/tests-tsan/%,$(shell grep -l 'folio-test: tsan' $(TEST_C) /dev/null 2>/dev/null | grep -v /dev/null))
TESTCFLAGS := -std=gnu11 -O1 -g $(WARN) -Iinclude -Itests -pthread

.PHONY: all install uninstall test test-normal test-sanitize test-tsan test-debug check-layers clean bench census stress
all: $(BUILD)/libfolio.so $(BUILD)/libfolio.a folio $(BUILD)/man/folio.3

folio:
	@test -x folio || chmod +x folio

$(BUILD)/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(OPT_$(notdir $*)) $(LIBFLAGS) -c $< -o $@
# the zone's per-span work fits the text window only at -Os (docs/notes/startup.md, session 28)
OPT_zone := -Os
$(BUILD)/obj-san/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) -O1 $(LIBFLAGS) $(SANFLAGS) -DFOLIO_PREFIX -c $< -o $@
$(BUILD)/obj-tsan/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) -O1 $(LIBFLAGS) $(TSANFLAGS) -DFOLIO_PREFIX -c $< -o $@
$(BUILD)/obj-debug/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) -O1 $(LIBFLAGS) -DFOLIO_DEBUG -c $< -o $@
# the unit tests' build: the production code plus the hooks that drive it
$(BUILD)/obj-test/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(LIBFLAGS) -DFOLIO_TEST_HOOKS -c $< -o $@

# the soname carries the major version (install.mk installs libfolio.so.$(VERSION)
# and its links); build/libfolio.so.$(SOVERSION) lets programs linked here run
# mk/layout.ld: the code a small program runs first, big tables last (start-up cost);
# max-page-size: segments aligned to the kernel's 64 KiB fault-around windows (see there)
# -Bsymbolic-functions: folio's own calls of its exported functions (new's
# malloc, delete's free, realloc's) are direct jumps, not through the PLT; a
# program that interposes malloc over folio's does not use folio anyway
# -z nodelete: a dlclose never unmaps the allocator of the process's blocks
$(BUILD)/libfolio.so: $(OBJS) mk/layout.ld Makefile
	$(CC) -shared -Wl,-soname,libfolio.so.$(SOVERSION) -o $@ $(OBJS) -pthread -Wl,-z,now -Wl,-z,nodelete -Wl,--no-undefined \
	    -Wl,-O1 -Wl,-Bsymbolic-functions -Wl,-T,mk/layout.ld -Wl,-z,max-page-size=0x10000
	ln -sf libfolio.so $(BUILD)/libfolio.so.$(SOVERSION)
$(BUILD)/libfolio.a: $(OBJS)
	rm -f $@ && ar rcs $@ $(OBJS)
$(BUILD)/libfolio-san.a: $(SAN_OBJS)
	rm -f $@ && ar rcs $@ $(SAN_OBJS)
$(BUILD)/libfolio-tsan.a: $(TSAN_OBJS)
	rm -f $@ && ar rcs $@ $(TSAN_OBJS)
$(BUILD)/libfolio-debug.a: $(DEBUG_OBJS)
	rm -f $@ && ar rcs $@ $(DEBUG_OBJS)
# the debug build preloadable: tests/run.sh debug runs the real programs under it
$(BUILD)/libfolio-debug.so: $(DEBUG_OBJS)
	$(CC) -shared -o $@ $(DEBUG_OBJS) -pthread -Wl,-z,now -Wl,-z,nodelete -Wl,--no-undefined -Wl,-Bsymbolic-functions
$(BUILD)/libfolio-test.a: $(HOOK_OBJS)
	rm -f $@ && ar rcs $@ $(HOOK_OBJS)

$(BUILD)/tests $(BUILD)/tests-san $(BUILD)/tests-tsan $(BUILD)/tests-debug:
	mkdir -p $@

# normal mode: tests link the shared library, so malloc & co. are folio's
$(BUILD)/tests/test_%: tests/test_%.c $(BUILD)/libfolio.so $(wildcard tests/*.h tests/support/*.h) | $(BUILD)/tests
	$(CC) $(TESTCFLAGS) $< -o $@ -L$(BUILD) -lfolio -Wl,-rpath,$(abspath $(BUILD)) -ldl
$(BUILD)/tests/test_%: tests/test_%.cc $(BUILD)/libfolio.so | $(BUILD)/tests
	$(CXX) -std=gnu++17 -O1 -g $(WARN) -Iinclude -Itests -pthread $< -o $@ -L$(BUILD) -lfolio -Wl,-rpath,$(abspath $(BUILD))
# unit tests see folio's internals (static library, private headers)
$(BUILD)/tests/test_unit_%: tests/unit/test_%.c tests/unit/unit.h $(BUILD)/libfolio-test.a $(HDRS) | $(BUILD)/tests
	$(CC) $(TESTCFLAGS) -DFOLIO_TEST_HOOKS $(LAYERS:%=-Isrc/%) $< -o $@ $(BUILD)/libfolio-test.a
$(BUILD)/tests-san/test_%: tests/test_%.c $(BUILD)/libfolio-san.a $(wildcard tests/*.h tests/support/*.h) | $(BUILD)/tests-san
	$(CC) $(TESTCFLAGS) $(SANFLAGS) -DFOLIO_PREFIX $< -o $@ $(BUILD)/libfolio-san.a -ldl
$(BUILD)/tests-tsan/test_%: tests/test_%.c $(BUILD)/libfolio-tsan.a $(wildcard tests/*.h tests/support/*.h) | $(BUILD)/tests-tsan
	$(CC) $(TESTCFLAGS) $(TSANFLAGS) -DFOLIO_PREFIX $< -o $@ $(BUILD)/libfolio-tsan.a -ldl
$(BUILD)/tests-debug/test_%: tests/test_%.c $(BUILD)/libfolio-debug.a $(wildcard tests/*.h tests/support/*.h) | $(BUILD)/tests-debug
	$(CC) $(TESTCFLAGS) $< -o $@ $(BUILD)/libfolio-debug.a -ldl

test-normal: all $(TEST_BINS) $(BUILD)/census.so
	bash tests/run.sh normal
test-sanitize: $(SAN_TESTS)
	bash tests/run.sh sanitize
test-tsan: $(TSAN_TESTS)
	bash tests/run.sh tsan
test-debug: $(DEBUG_TESTS) $(BUILD)/libfolio-debug.so
	bash tests/run.sh debug
# the racing tests again and again, release and debug builds (minutes; not
# part of `make test`): STRESS_ROUNDS=N rounds of each
stress: all $(TEST_BINS) $(DEBUG_TESTS) $(BUILD)/libfolio-debug.so
	bash tests/stress.sh $(or $(STRESS_ROUNDS),10) normal debug
# the layers (src/base < meta < clear < page < obj < api) include and call
# only downward (tools/check_layers.py), and the check catches violations
# (tests/layers/run.sh builds a copy of src/ with deliberate ones)
check-layers: $(OBJS)
	python3 tools/check_layers.py --src src --obj $(BUILD)/obj
	bash tests/layers/run.sh
test: check-layers test-normal test-sanitize test-tsan test-debug

include mk/install.mk

bench: all
	./folio bench alloc --quick

# a developer's tool (tools/census.c): where a process's resident heap is, at exit
census: $(BUILD)/census.so
$(BUILD)/census.so: tools/census.c $(HDRS)
	$(CC) -std=gnu11 -O1 -g $(WARN) -shared -fPIC -Iinclude $(LAYERS:%=-Isrc/%) $< -o $@

clean:
	rm -rf $(BUILD)
