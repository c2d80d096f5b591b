# tfg: a plain GNU Makefile.
#
#   make            build/tfg and build/libtfg.a
#   make check      build, then the quick tests: unit suites, goldens, examples
#   make test       install missing packages, build, run every test
#   make asan       the same under AddressSanitizer + UBSan (in build/asan)
#   make tsan       the threaded tests under ThreadSanitizer (in build/tsan)
#   make fuzz       fuzz for FUZZ_SECONDS (default 600): libFuzzer over the
#                   lexer and parser, then mutated programs through
#                   `tfg run` under ASan+UBSan (tests/fuzz/mutate.py)
#   make fuzz-mutate  the mutated programs only (FUZZ_SECONDS of them)
#   make demo       build and run an example
#   make deps       install the Debian packages the build and tests need
#   make CUDA=0     build without CUDA even where the toolkit exists
#   make NCCL=0     build with CUDA but without NCCL (all-reduce across GPUs
#                   then uses the built-in ring over peer access)
#   make MPI=0      build without MPI even where Open MPI's mpicc is (a tfg
#                   that mpirun starts then says it cannot join the job)
#
# CUDA is on when nvcc is found (on PATH, or CUDA_HOME/bin/nvcc): then
# kernels/cuda/*.cu are compiled by nvcc and runtime/backend_cuda*.c by the C
# compiler with the toolkit's headers, and everything links the CUDA
# runtime, cuBLAS, cuBLASLt, cuDNN and NCCL (with an rpath, so build/tfg
# runs where it was built). The binary starts without a driver or GPU: it
# then finds none and runs on host devices. NCCL is on with CUDA when nccl.h
# is found (under CUDA_HOME/include or /usr/include); NCCL=0 leaves it out
# (TFG_BUILD_NCCL=0: runtime/registry.c then says "this build of tfg has no
# NCCL"). Switching CUDA or NCCL needs a clean BUILD (or another BUILD dir).
#
# re2c and Bison generate into $(BUILD)/gen; nothing generated is committed.
#
# The build runs one job per core unless the command line says otherwise
# (make -j1 for one at a time), and it says at the start what it builds:
# with CUDA, nvcc compiles every kernels/cuda/*.cu for each architecture
# of CUDA_ARCH, which is most of the build time.

BUILD   ?= build
CC      ?= cc
CUDA    ?= auto
SAN     ?=
V       ?= 0

ifeq ($(V),0)
  Q = @
else
  Q =
endif

# Parallel by default: one job per core, unless -j was given, on the command
# line or in MAKEFLAGS in the environment (GNU make 4.3 shows neither in
# MAKEFLAGS while it reads this file, hence /proc and printenv; where they
# miss, a command-line -jN still wins). Sub-makes share the top one's jobs.
ifeq ($(MAKELEVEL),0)
  MAKE_ARGS := $(MAKEFLAGS) $(shell printenv MAKEFLAGS; tr '\0' ' ' </proc/$$PPID/cmdline 2>/dev/null)
  ifeq ($(filter -j% j% --jobs%,$(MAKE_ARGS)),)
    JOBS := $(shell nproc 2>/dev/null || echo 2)
    MAKEFLAGS += -j$(JOBS)
  endif
endif

# ---- CUDA detection: nvcc on PATH or under CUDA_HOME -----------------------
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null))
ifeq ($(CUDA_HOME),)
  CUDA_HOME := $(wildcard /usr/local/cuda)
endif
# The sanitizer build (make asan) is always CUDA=0. ASan and the CUDA
# runtime link together (and a driverless run works), but on a machine with
# a driver they conflict: ASan protects the low "shadow gap" of the address
# space, where the CUDA driver maps memory, so cuInit/context creation fails
# unless ASAN_OPTIONS=protect_shadow_gap=0 (google/sanitizers#629), and
# LeakSanitizer would blame the driver's own allocations. make asan checks
# the CPU path, which is all tests/run.sh runs; the GPU path has its own
# suite (tests/gpu).
ifneq ($(SAN),)
  override CUDA := 0
endif
ifeq ($(CUDA),auto)
  ifneq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
    CUDA_ON := 1
  else
    CUDA_ON := 0
  endif
else
  CUDA_ON := $(CUDA)
endif

# OPT is the optimisation level; CFLAGS given on the command line are
# added to the project's flags, never replace them (override).
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
OPT     ?= -O2 -g
override CFLAGS := $(OPT) -std=c11 $(WARN) -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -pthread $(CFLAGS)
CPPFLAGS += -I. -I$(BUILD)/gen $(shell pkg-config --cflags openblas 2>/dev/null)
# libmvec: glibc's vector libm (kernels/cpu/vmath.c), where the C library has it
LIBMVEC := $(shell printf 'int main(void){return 0;}' | $(CC) -x c - -lmvec -o /dev/null 2>/dev/null && echo -lmvec)
ifeq ($(LIBMVEC),)
  override CFLAGS += -DTFG_NO_LIBMVEC
endif
LDLIBS  += $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -lz $(LIBMVEC) -lm -pthread

# SAN=1: AddressSanitizer + UBSan (make asan); SAN=thread: ThreadSanitizer
# (make tsan).
ifeq ($(SAN),thread)
  override CFLAGS += -fsanitize=thread -fno-omit-frame-pointer
  override LDFLAGS += -fsanitize=thread
else ifneq ($(SAN),)
  override CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  override LDFLAGS += -fsanitize=address,undefined
endif

# NCCL: only with CUDA; auto = where its header is.
NCCL    ?= auto
ifeq ($(CUDA_ON),1)
  ifeq ($(NCCL),auto)
    NCCL_ON := $(if $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),1,0)
  else
    NCCL_ON := $(NCCL)
  endif
else
  NCCL_ON := 0
endif

# MPI: auto = where Open MPI's mpicc is (make deps installs it); its compile
# and link flags from mpicc itself. The ASan build leaves it out (Open
# MPI's own allocations would read as leaks), as it leaves out CUDA; the
# TSan build keeps it (the MPI progress thread is ours to check; Open MPI's
# own lock-order report is suppressed in tests/tsan.supp).
MPI     ?= auto
ifneq ($(filter-out thread,$(SAN)),)
  override MPI := 0
endif
ifeq ($(MPI),auto)
  MPI_ON := $(if $(shell command -v mpicc 2>/dev/null),1,0)
else
  MPI_ON := $(MPI)
endif
ifeq ($(MPI_ON),1)
  MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null))
  LDLIBS     += $(shell mpicc --showme:link 2>/dev/null)
  $(BUILD)/obj/runtime/mpi.o: CPPFLAGS += $(MPI_CFLAGS)
endif

VERSION := 0.1.0
PREFIX  ?= /usr/local
CPPFLAGS += -DTFG_VERSION='"$(VERSION)"' -DTFG_BUILD_CUDA=$(CUDA_ON) -DTFG_BUILD_NCCL=$(NCCL_ON) -DTFG_BUILD_MPI=$(MPI_ON) \
            -DTFG_STDLIB_DIR='"$(PREFIX)/share/tfg/stdlib"' -DTFG_SOURCE_STDLIB='"$(CURDIR)/stdlib"' 

# ---- CUDA: nvcc for the kernels, the libraries for the link ------------------
# The CUDA backend's C files (runtime/backend_cuda*.c): compiled with the
# toolkit's headers in builds with CUDA, left out of the others.
CUDA_C_SRC := $(wildcard runtime/backend_cuda*.c)

ifeq ($(CUDA_ON),1)
  NVCC       ?= $(CUDA_HOME)/bin/nvcc
  # lib64 or lib, whichever holds the runtime (some toolkits link one to the other)
  CUDA_LIBDIR := $(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so \
                                                              $(CUDA_HOME)/lib/libcudart.so))))
  # sm_80 (A100) and sm_90 (H100/H200) code, and compute_90 PTX for newer GPUs to JIT.
  CUDA_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                -gencode arch=compute_90,code=compute_90
  NVCCFLAGS  := -std=c++17 -O2 -g $(CUDA_ARCH) -Xcompiler -Wall,-Werror $(NVCCFLAGS)
  CU_SRC     := $(wildcard kernels/cuda/*.cu)
  CU_OBJ     := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CU_SRC))
  CUDA_LIBS  := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart -lcublasLt -lcublas -lcudnn \
                $(if $(filter 1,$(NCCL_ON)),-lnccl) -lstdc++
  LDLIBS     += $(CUDA_LIBS)
  # The toolkit's headers are system headers for our warnings (nccl.h and
  # cublasLt.h have old-style declarations that -Wstrict-prototypes flags).
  $(patsubst %.c,$(BUILD)/obj/%.o,$(CUDA_C_SRC)): CPPFLAGS += -isystem $(CUDA_HOME)/include
endif

# ---- say what is built and why (once, from the top make; not for clean/deps) --
comma := ,
ifeq ($(MAKELEVEL),0)
  ifneq ($(filter-out clean deps deps-fuzz asan tsan fuzz fuzz-mutate,$(or $(MAKECMDGOALS),all)),)
    ifneq ($(JOBS),)
      JOBS_SAID := ; $(JOBS) jobs at once (make -j1: one)
    endif
    ifeq ($(CUDA_ON),1)
      CUDA_SAID := $(patsubst code=%,%,$(filter code=sm_%,$(subst $(comma), ,$(CUDA_ARCH))))
      $(info tfg: CUDA found at $(CUDA_HOME), so the build includes the CUDA backend: $(words $(wildcard kernels/cuda/*.cu)) .cu files for $(CUDA_SAID), most of the build time (make CUDA=0 leaves it out)$(JOBS_SAID))
    else ifeq ($(SAN),thread)
      $(info tfg: $(BUILD) is built with ThreadSanitizer, CPU backend only$(JOBS_SAID))
    else ifneq ($(SAN),)
      $(info tfg: $(BUILD) is built with ASan+UBSan, CPU backend only$(JOBS_SAID))
    else ifeq ($(CUDA),auto)
      $(info tfg: no CUDA toolkit (no nvcc on PATH or in CUDA_HOME), so the build has the CPU backend only$(JOBS_SAID))
    else
      $(info tfg: CUDA=$(CUDA), so the build has the CPU backend only$(JOBS_SAID))
    endif
  endif
endif

# ---- sources ----------------------------------------------------------------
LIB_SRC := $(wildcard base/*.c ir/*.c io/*.c lang/*.c compiler/*.c compiler/strategy/*.c runtime/*.c kernels/*.c kernels/cpu/*.c)
ifneq ($(CUDA_ON),1)
  LIB_SRC := $(filter-out $(CUDA_C_SRC),$(LIB_SRC))
endif
GEN_SRC := $(BUILD)/gen/parser.tab.c $(BUILD)/gen/lexer.c $(BUILD)/gen/fused_headers.c
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/unit/*.c)

LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) \
            $(BUILD)/obj/gen/parser.tab.o $(BUILD)/obj/gen/lexer.o $(BUILD)/obj/gen/fused_headers.o $(CU_OBJ)
CLI_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(CLI_SRC))
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRC))

CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

.PHONY: all check test asan tsan fuzz fuzz-mutate demo deps deps-fuzz clean test-gpu bench-build
.DEFAULT_GOAL := all

all: $(BUILD)/tfg $(BUILD)/libtfg.a

# A pattern rule, so that make knows one Bison run makes both files (with
# two explicit targets, a parallel make would run Bison twice at once);
# .SECONDARY keeps them (made by a pattern rule, they would count as
# intermediate files and be deleted after the build).
.SECONDARY: $(BUILD)/gen/parser.tab.c $(BUILD)/gen/parser.tab.h
$(BUILD)/gen/%.tab.c $(BUILD)/gen/%.tab.h: lang/%.y
	@mkdir -p $(dir $@)
	@echo "  BISON   $<"
	$(Q)bison -Wall -Werror --defines=$(BUILD)/gen/$*.tab.h -o $(BUILD)/gen/$*.tab.c $<

$(BUILD)/gen/lexer.c: lang/lexer.re
	@mkdir -p $(dir $@)
	@echo "  RE2C    $<"
	$(Q)re2c -W -Werror --no-generation-date -o $@ $<

# The headers a generated fused kernel includes, as C strings
# (kernels/fused_codegen.h): NVRTC compiles with the formulas and the op
# lists tfg was built with.
$(BUILD)/gen/fused_headers.c: kernels/hostdev.h kernels/elementwise_math.h ir/op_list.h kernels/embed.awk
	@mkdir -p $(dir $@)
	@echo "  GEN     $@"
	$(Q){ echo '/* generated from kernels/hostdev.h, kernels/elementwise_math.h and ir/op_list.h by kernels/embed.awk */'; \
	  awk -v name=tfg_hostdev_h_text -f kernels/embed.awk kernels/hostdev.h; \
	  awk -v name=tfg_elementwise_math_h_text -f kernels/embed.awk kernels/elementwise_math.h; \
	  awk -v name=tfg_op_list_h_text -f kernels/embed.awk ir/op_list.h; } >$@.tmp && mv $@.tmp $@

$(BUILD)/obj/%.o: %.c $(BUILD)/gen/parser.tab.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.o: %.cu $(BUILD)/gen/parser.tab.h
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(BUILD)/gen/parser.tab.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/obj/tests/%.o: tests/%.c $(BUILD)/gen/parser.tab.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/libtfg.a: $(LIB_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# The CLI alone links libedit (line editing in `tfg repl`).
CLI_LIBS := $(shell pkg-config --libs libedit 2>/dev/null || echo -ledit)

$(BUILD)/tfg: $(CLI_OBJ) $(BUILD)/libtfg.a
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libtfg.a $(LDLIBS) $(CLI_LIBS)

$(BUILD)/unit: $(TEST_OBJ) $(BUILD)/libtfg.a
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(BUILD)/libtfg.a $(CHECK_LIBS) $(LDLIBS)

# Benchmarks: each bench/NAME.c and bench/gpu/NAME.c is a program linked
# against libtfg (the GPU ones find a GPU through the backend registration)
# and the CLI's reader of the TFG_* switches (cli/switches.h), so that a
# switch means to them what it means to `tfg run`.
BENCH_SRC := $(wildcard bench/*.c bench/gpu/*.c)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
SWITCHES_OBJ := $(BUILD)/obj/cli/switches.o

$(BUILD)/bench/%: bench/%.c $(SWITCHES_OBJ) $(BUILD)/libtfg.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(SWITCHES_OBJ) $(BUILD)/libtfg.a $(LDLIBS)

bench-build: $(BENCH_BIN)

# The GPU tests: each tests/gpu/NAME.c is a program linked against libtfg
# (and cli/switches.o, as the benchmarks); tests/gpu/run.sh runs them (and
# build/tfg on cuda:0), or prints one SKIP line where there is no GPU (no
# driver, no device, a build without CUDA).
GPU_TEST_SRC := $(wildcard tests/gpu/*.c)
GPU_TEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_TEST_SRC))

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(SWITCHES_OBJ) $(BUILD)/libtfg.a
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(SWITCHES_OBJ) $(BUILD)/libtfg.a $(LDLIBS)

test-gpu: all $(GPU_TEST_BIN)
	@sh tests/gpu/run.sh $(BUILD)

# CUDA device code run on the CPU: tests/emu/NAME.cpp includes a kernel
# header of kernels/cuda (device code alone) through tests/emu/cuda_emu.h,
# which emulates blocks, barriers and shuffles with threads (C++20's
# std::barrier); needs no CUDA and no GPU. tests/run.sh runs them.
CXX      ?= c++
EMU_SRC  := $(wildcard tests/emu/*.cpp)
EMU_BIN  := $(patsubst tests/emu/%.cpp,$(BUILD)/tests/emu/%,$(EMU_SRC))

$(BUILD)/tests/emu/%: tests/emu/%.cpp tests/emu/cuda_emu.h kernels/cuda/attention_device.cuh ir/matmul_view.h
	@mkdir -p $(dir $@)
	@echo "  CXX     $<"
	$(Q)$(CXX) -std=c++20 -O2 -Wall -Wextra -Werror -pthread -I. -o $@ $<

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- packages -------------------------------------------------------------
DEB_PKGS  := re2c bison check libsubunit-dev pkg-config libopenblas-dev zlib1g-dev libedit-dev python3 python3-torch \
             openmpi-bin libopenmpi-dev g++
FUZZ_PKGS := clang libclang-rt-14-dev

deps:
	@sh tests/deps.sh $(DEB_PKGS)

deps-fuzz: deps
	@sh tests/deps.sh $(FUZZ_PKGS)

# ---- tests ----------------------------------------------------------------
# Packages first, then the build in a sub-make: a parallel make would
# otherwise build while apt-get is still installing re2c or Bison.
ASAN_BUILD := $(BUILD)/asan

test: deps
	@$(MAKE) --no-print-directory all $(BUILD)/unit $(BUILD)/tests/gpu/conformance $(EMU_BIN)
	@sh tests/run.sh $(BUILD)

# The inner loop: the unit suites, the golden files and a smoke run of
# each example, on every core (tests/run.sh --quick); no package check.
check:
	@$(MAKE) --no-print-directory all $(BUILD)/unit
	@sh tests/run.sh $(BUILD) --quick

asan: deps
	@echo "tfg: building $(ASAN_BUILD) with ASan+UBSan (CPU backend only), then every test under it"
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 OPT="-O1 -g" all $(ASAN_BUILD)/unit \
	  $(ASAN_BUILD)/tests/gpu/conformance $(patsubst $(BUILD)/%,$(ASAN_BUILD)/%,$(EMU_BIN))
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  sh tests/run.sh $(ASAN_BUILD)

# The thread pool, executor, collectives and strategies under
# ThreadSanitizer, and the examples at --threads 4 (tests/tsan.sh): the
# races that only show when a pool's workers run beside each device's
# worker. CI runs it after make test.
TSAN_BUILD := $(BUILD)/tsan

tsan: deps
	@echo "tfg: building $(TSAN_BUILD) with ThreadSanitizer (CPU backend only), then the threaded tests under it"
	@$(MAKE) --no-print-directory BUILD=$(TSAN_BUILD) SAN=thread OPT="-O1 -g" all $(TSAN_BUILD)/unit
	@sh tests/tsan.sh $(TSAN_BUILD)

# ---- fuzzing --------------------------------------------------------------
# FUZZ_SECONDS is the length of the whole `make fuzz` (builds aside): a
# quarter for libFuzzer over the lexer and parser (tests/fuzz/run.sh), the
# rest for mutated programs run through tfg under ASan+UBSan
# (tests/fuzz/mutate.py, 2 jobs; its findings land in $(BUILD)/fuzz/findings).
# FUZZ_PARSE_SECONDS and FUZZ_MUTATE_SECONDS set the two parts directly.
FUZZ_SECONDS ?= 600
FUZZ_PARSE_SECONDS ?= $(shell expr $(FUZZ_SECONDS) / 4)
FUZZ_MUTATE_SECONDS ?= $(shell expr $(FUZZ_SECONDS) - $(FUZZ_PARSE_SECONDS))
FUZZ_SRC := base/arena.c base/strbuf.c base/utf8.c base/status.c base/assert.c base/grow.c base/file.c \
            base/diag.c lang/ast.c

$(BUILD)/fuzz/fuzz_parse: tests/fuzz/fuzz_parse.c $(FUZZ_SRC) $(BUILD)/gen/parser.tab.c $(BUILD)/gen/lexer.c
	@mkdir -p $(dir $@)
	@echo "  CLANG   $@"
	$(Q)clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I. -I$(BUILD)/gen \
	  -fsanitize=fuzzer,address,undefined -o $@ $^

fuzz: deps-fuzz
	@$(MAKE) --no-print-directory $(BUILD)/fuzz/fuzz_parse
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 OPT="-O1 -g" all
	@echo "fuzz: the parser for $(FUZZ_PARSE_SECONDS) s (libFuzzer), then mutated programs for $(FUZZ_MUTATE_SECONDS) s"
	@rc=0; sh tests/fuzz/run.sh $(BUILD)/fuzz/fuzz_parse $(FUZZ_PARSE_SECONDS) || rc=1; \
	  python3 tests/fuzz/mutate.py --tfg $(ASAN_BUILD)/tfg --seconds $(FUZZ_MUTATE_SECONDS) \
	    --findings $(BUILD)/fuzz/findings || rc=1; \
	  exit $$rc

fuzz-mutate: deps
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 OPT="-O1 -g" all
	@python3 tests/fuzz/mutate.py --tfg $(ASAN_BUILD)/tfg --seconds $(FUZZ_SECONDS) --findings $(BUILD)/fuzz/findings

# ---- demo -----------------------------------------------------------------
demo: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/tfg run examples/digits.tfg

clean:
	rm -rf $(BUILD)
