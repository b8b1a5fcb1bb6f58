/* os: the one narrow interface to the kernel.
 *
 * Invariant: every syscall folio makes is in this file.  Memory from
 * os_reserve is zero-filled and 'align'-aligned; os_purge returns a range to
 * the kernel and leaves it zero-filled; nothing here calls malloc (these run
 * inside malloc, before constructors and inside dlsym). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "base.h"

_Atomic size_t os_mapped_bytes, os_peak_mapped_bytes;
_Atomic uint64_t os_map_failures;

/* The mmap family's calls, by kind, counted at the one place each is made
 * (seed 004: what serialises a process): mmap, munmap and mremap take the
 * kernel's mmap lock for writing, madvise(MADV_DONTNEED) for reading. */
static _Atomic uint64_t calls_mmap, calls_munmap, calls_mremap, calls_madvise;
static inline void count_call(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }
static void *sys_mmap(void *a, size_t n, int prot, int flags, int fd) {
    count_call(&calls_mmap);
    return mmap(a, n, prot, flags, fd, 0);
}
static int sys_munmap(void *p, size_t n) {
    count_call(&calls_munmap);
    return munmap(p, n);
}
static void *sys_mremap(void *old, size_t old_size, size_t new_size, int flags, void *to) {
    count_call(&calls_mremap);
    return mremap(old, old_size, new_size, flags, to);
}
static int sys_madvise(void *p, size_t n, int advice) {
    count_call(&calls_madvise);
    return madvise(p, n, advice);
}

void os_calls(struct os_calls *c) {
    c->mmap = atomic_load_explicit(&calls_mmap, memory_order_relaxed);
    c->munmap = atomic_load_explicit(&calls_munmap, memory_order_relaxed);
    c->mremap = atomic_load_explicit(&calls_mremap, memory_order_relaxed);
    c->mprotect = 0; /* folio makes none */
    c->madvise = atomic_load_explicit(&calls_madvise, memory_order_relaxed);
}

static void mapped_add(ptrdiff_t d) {
    size_t now = atomic_fetch_add_explicit(&os_mapped_bytes, (size_t)d, memory_order_relaxed) + (size_t)d;
    size_t peak = atomic_load_explicit(&os_peak_mapped_bytes, memory_order_relaxed);
    while (d > 0 && now > peak &&
           !atomic_compare_exchange_weak_explicit(&os_peak_mapped_bytes, &peak, now,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void *map_at(void *hint, size_t size, int flags) {
    void *p = sys_mmap(hint, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1);
    return p == MAP_FAILED ? NULL : p;
}

/* An aligned range without the over-reservation, for when the kernel refuses
 * size + align (RLIMIT_AS, or no gap that large): an exact-size mapping is
 * often aligned already (the kernel aligns anonymous mappings of 2 MiB
 * multiples to 2 MiB); else the aligned addresses on either side of where the
 * kernel put it are tried without replacing anything (MAP_FIXED_NOREPLACE;
 * an older kernel that takes it as a hint is checked by the result). */
static void *reserve_exact(size_t size, size_t align) {
    char *p = map_at(NULL, size, 0);
    if (!p || ((uintptr_t)p & (align - 1)) == 0) return p;
    sys_munmap(p, size);
    uintptr_t down = (uintptr_t)p & ~(uintptr_t)(align - 1), up = down + align;
    uintptr_t tries[2] = {down, up};
    for (int i = 0; i < 2; i++) {
        if (!tries[i]) continue;
        char *q = map_at((void *)tries[i], size, MAP_FIXED_NOREPLACE);
        if (q == (char *)tries[i]) return q;
        if (q) sys_munmap(q, size);
    }
    return NULL;
}

void *os_reserve(size_t size, size_t align) {
    if (align < PAGE_SIZE) align = PAGE_SIZE;
    size_t span = size + align - PAGE_SIZE;
    if (span < size) return NULL;
    char *p = map_at(NULL, span, 0), *a;
    if (p) {
        a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
        size_t head = (size_t)(a - p), tail = span - head - size;
        if (head) sys_munmap(p, head);
        if (tail) sys_munmap(a + size, tail);
    } else {
        a = span != size ? reserve_exact(size, align) : NULL;
        if (!a) {
            atomic_fetch_add_explicit(&os_map_failures, 1, memory_order_relaxed);
            return NULL;
        }
    }
    mapped_add((ptrdiff_t)size);
    return a;
}

/* At hint when the kernel has the range free, else wherever it finds room;
 * aligned to align (2 MiB at most).  One call when the kernel's choice is
 * aligned: a free hint is taken as given, and the kernel aligns anonymous
 * mappings of 2 MiB multiples to 2 MiB (since 6.7); else os_reserve's
 * trimmed over-reservation. */
void *os_reserve_near(void *hint, size_t size, size_t align) {
    char *p = map_at(hint, size, 0);
    if (p && ((uintptr_t)p & (align - 1)) == 0) {
        mapped_add((ptrdiff_t)size);
        return p;
    }
    if (p) sys_munmap(p, size);
    return os_reserve(size, align);
}

/* A hint, not a demand: NULL (not counted as a failure) when anything is
 * mapped there, or the kernel refuses. */
void *os_reserve_at(void *addr, size_t size) {
    char *p = map_at(addr, size, MAP_FIXED_NOREPLACE);
    if (p && p != addr) { /* a kernel older than 4.17 takes the flag as a hint */
        sys_munmap(p, size);
        p = NULL;
    }
    if (p) mapped_add((ptrdiff_t)size);
    return p;
}

bool os_release(void *p, size_t size) {
    if (sys_munmap(p, size) != 0) return false;
    mapped_add(-(ptrdiff_t)size);
    return true;
}

void os_purge(void *p, size_t size) { sys_madvise(p, size, MADV_DONTNEED); }

bool os_place_on_node(void *p, size_t size, int node) {
    enum { MPOL_PREFERRED_ = 1 }; /* linux/mempolicy.h */
    if (node < 0 || node >= 64) return false;
    unsigned long mask = 1ul << node;
    return syscall(SYS_mbind, p, size, MPOL_PREFERRED_, &mask, 65ul, 0u) == 0; /* 64 nodes + 1 */
}

/* Move or resize a mapping without copying.  fixed_at: a reserved range to
 * move onto (replaced), or NULL to resize in place only. */
void *os_remap(void *old, size_t old_size, size_t new_size, void *fixed_at) {
    void *r = fixed_at ? sys_mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, fixed_at)
                       : sys_mremap(old, old_size, new_size, 0, NULL);
    if (r == MAP_FAILED) return NULL;
    if (fixed_at)
        mapped_add((ptrdiff_t)new_size - (ptrdiff_t)old_size - (ptrdiff_t)new_size); /* fixed range was counted */
    else
        mapped_add((ptrdiff_t)new_size - (ptrdiff_t)old_size);
    return r;
}

/* Resize a mapping wherever the kernel finds room: it needs only the
 * growth in address space, not a second copy of the extent. */
void *os_move(void *old, size_t old_size, size_t new_size) {
    void *r = sys_mremap(old, old_size, new_size, MREMAP_MAYMOVE, NULL);
    if (r == MAP_FAILED) {
        atomic_fetch_add_explicit(&os_map_failures, 1, memory_order_relaxed);
        return NULL;
    }
    mapped_add((ptrdiff_t)new_size - (ptrdiff_t)old_size);
    return r;
}

/* The current CPU: from glibc's registered rseq area when there is one
 * (a plain load), else from getcpu (vDSO). */
extern __attribute__((weak)) const ptrdiff_t __rseq_offset;
extern __attribute__((weak)) const unsigned int __rseq_size;

int os_cpu(void) {
    if (&__rseq_size && __rseq_size >= 8) {
        const char *tp = __builtin_thread_pointer();
        int cpu = *(const volatile int32_t *)(tp + __rseq_offset + 4);
        if (cpu >= 0) return cpu;
    }
    int c = sched_getcpu();
    return c < 0 ? 0 : c;
}

/* Parse /sys/devices/system/cpu/possible ("0-7" or "0,2-3"); no malloc. */
int os_cpu_count(void) {
    char buf[256];
    if (!os_read_file("/sys/devices/system/cpu/possible", buf, sizeof buf)) return 64;
    int max = 0, v = 0;
    bool in = false;
    for (char *s = buf; *s; s++) {
        if (*s >= '0' && *s <= '9') {
            v = v * 10 + (*s - '0');
            in = true;
        } else {
            if (in && v > max) max = v;
            v = 0;
            in = false;
        }
    }
    if (in && v > max) max = v;
    return max + 1;
}

uint64_t os_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void os_futex_wait(_Atomic int *addr, int val) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}
void os_futex_wake(_Atomic int *addr, int n) {
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* folio's file I/O goes through syscall(), not libc's wrappers: open, read,
 * write, pwrite, close, fallocate and nanosleep are cancellation points, and
 * a thread with a cancel pending that reaches one inside malloc (which reads
 * sysfs, procfs and cgroup files on some of its paths, some under a folio
 * lock) would be cancelled there, leaving the lock held; syscall() is none. */
static int nc_open(const char *path, int flags, int mode) {
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}
static ssize_t nc_read(int fd, void *buf, size_t n) { return (ssize_t)syscall(SYS_read, fd, buf, n); }
static ssize_t nc_write(int fd, const void *buf, size_t n) { return (ssize_t)syscall(SYS_write, fd, buf, n); }
static int nc_close(int fd) { return (int)syscall(SYS_close, fd); }

void os_write_err(const char *s) { os_write_fd(2, s); }

/* The kernel's heuristic overcommit (vm.overcommit_memory 0, the default)
 * refuses one mapping larger than RAM and swap together; folio's address
 * space is reserved MAP_NORESERVE, which skips that test, so a huge block
 * asks it here.  Mode 1 (always) refuses nothing, and under mode 2 (never)
 * the kernel ignores MAP_NORESERVE and refuses by itself.  The mode is read
 * at the first call (a block of at least 32 MiB), not at start. */
bool os_overcommit_refuses(size_t bytes) {
    static _Atomic int mode = -1;
    int m = atomic_load_explicit(&mode, memory_order_relaxed);
    if (m < 0) {
        char buf[8];
        m = os_read_file("/proc/sys/vm/overcommit_memory", buf, sizeof buf) && buf[0] >= '0' && buf[0] <= '2'
                ? buf[0] - '0'
                : 0;
        atomic_store_explicit(&mode, m, memory_order_relaxed);
    }
    if (m != 0) return false;
    struct sysinfo si;
    if (sysinfo(&si) != 0) return false;
    unsigned __int128 total = ((unsigned __int128)si.totalram + si.totalswap) * (si.mem_unit ? si.mem_unit : 1);
    return bytes > total;
}

void os_write_fd(int fd, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = nc_write(fd, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

/* "folio: <what> 0x<hex>" on stderr, then abort(): the message names the
 * pointer as glibc's do. */
_Noreturn void os_fatal_ptr(const char *what, const void *p) {
    char buf[160], hex[24];
    uintptr_t v = (uintptr_t)p;
    int i = 0;
    do {
        hex[i++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    size_t n = 0;
    const char *pre = "folio: ";
    while (*pre) buf[n++] = *pre++;
    while (*what && n < 100) buf[n++] = *what++;
    buf[n++] = ' ';
    buf[n++] = '0';
    buf[n++] = 'x';
    while (i) buf[n++] = hex[--i];
    buf[n++] = '\n';
    buf[n] = 0;
    os_write_err(buf);
    abort();
}

uint64_t os_random_seed(void) {
    uint64_t r = 0;
    const unsigned char *rnd = (const unsigned char *)getauxval(AT_RANDOM);
    if (rnd) memcpy(&r, rnd + 8, sizeof r);
#if defined(__x86_64__) || defined(__i386__)
    uint64_t t = __builtin_ia32_rdtsc(); /* not the clock: it is libc's and the vDSO's pages, read by nothing else at start */
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec;
#endif
    r ^= t * 0x9e3779b97f4a7c15ull;
    r ^= (uint64_t)(uintptr_t)&r;
    return r | 1;
}

/* A "Name:   N kB" line of /proc/self/status, in bytes (0: missing) */
static uint64_t status_kb(const char *buf, const char *name) {
    const char *s = strstr(buf, name);
    return s ? (uint64_t)strtoull(s + strlen(name), NULL, 10) * 1024u : 0;
}

/* Peak RSS is this process image's VmHWM (ru_maxrss would carry the peak
 * of whatever exec'd us); it and VmRSS come from one read of status (each
 * file read is a descriptor a program listing its own may see). */
void os_rusage(uint64_t *minflt, uint64_t *majflt, uint64_t *maxrss_bytes, uint64_t *rss_bytes) {
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    getrusage(RUSAGE_SELF, &ru);
    *minflt = (uint64_t)ru.ru_minflt;
    *majflt = (uint64_t)ru.ru_majflt;
    char buf[4096];
    if (!os_read_file("/proc/self/status", buf, sizeof buf)) buf[0] = 0;
    *maxrss_bytes = status_kb(buf, "VmHWM:");
    *rss_bytes = status_kb(buf, "VmRSS:");
}

int os_write_file(const char *path, const char *buf, size_t len) {
    int fd = nc_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (len) {
        ssize_t w = nc_write(fd, buf, len);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            nc_close(fd);
            errno = e;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return nc_close(fd);
}

int os_getpid(void) { return (int)getpid(); }

void os_sleep_ms(unsigned ms) {
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (syscall(SYS_nanosleep, &ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Read a small file (sysfs, procfs, cgroupfs) into buf, NUL-terminated. */
size_t os_read_file(const char *path, char *buf, size_t len) {
    if (len == 0) return 0;
    int fd = nc_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        buf[0] = 0;
        return 0;
    }
    ssize_t n = nc_read(fd, buf, len - 1);
    nc_close(fd);
    if (n < 0) n = 0;
    buf[n] = 0;
    return (size_t)n;
}

static unsigned digit_value(char c) {
    return c >= '0' && c <= '9'   ? (unsigned)(c - '0')
           : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
           : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                  : 99u;
}
/* strtoull's base 0 (0x: hex, a leading 0: octal), saturating, for
 * unsigned digits only: libc's strtoull and the ctype table it reads are two
 * windows of libc that nothing else at start-up touches (a fault and up to
 * 64 KiB of RSS each, in every process). */
static uint64_t parse_number(const char *s, const char **end) {
    unsigned base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && digit_value(s[2]) < 16) {
        base = 16;
        s += 2;
    } else if (s[0] == '0') {
        base = 8;
    }
    uint64_t v = 0;
    bool over = false;
    for (unsigned d; (d = digit_value(*s)) < base; s++) {
        if (v > (UINT64_MAX - d) / base) over = true;
        else v = v * base + d;
    }
    *end = s;
    return over ? UINT64_MAX : v;
}

/* "123", "48K", "2M", "1g": the number times its K/M/G suffix (either
 * case); *end (if end) is set past the suffix, or to s when there is no
 * number.  The one size parser: options and sysfs cache sizes use it. */
uint64_t os_parse_size(const char *s, const char **end) {
    const char *e = s;
    uint64_t v = (*s >= '0' && *s <= '9') ? parse_number(s, &e) : 0;
    if (e != s) {
        int shift = *e == 'K' || *e == 'k' ? 10 : *e == 'M' || *e == 'm' ? 20 : *e == 'G' || *e == 'g' ? 30 : 0;
        if (shift) e++;
        v = v > UINT64_MAX >> shift ? UINT64_MAX : v << shift; /* saturating, as the digits */
    }
    if (end) *end = e;
    return v;
}

/* The size of the last-level cache cpu0 reports in sysfs ("260M",
 * "32768K").  The kernel numbers a CPU's cache leaves index0..indexN-1 with
 * no gap, by level, so the last leaf is the last level: found by probing
 * from index3 (L1d, L1i, L2, L3 on most machines: one read and one failed
 * open, where reading every leaf took 13 system calls per process), then
 * up to the first missing one, or down when index3 is missing. */
static size_t leaf_size(int i) {
    char path[64] = "/sys/devices/system/cpu/cpu0/cache/index0/size", buf[32];
    path[40] = (char)('0' + i);
    return os_read_file(path, buf, sizeof buf) ? (size_t)os_parse_size(buf, NULL) : 0;
}
size_t os_llc_bytes(void) {
    int i = 3;
    size_t v = leaf_size(i);
    if (v) {
        for (size_t next; i < 7 && (next = leaf_size(i + 1)) != 0; i++) v = next;
        return v;
    }
    while (--i >= 0 && !(v = leaf_size(i))) {
    }
    return v;
}

uint64_t os_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* From /sys/devices/system/cpu/cpu0/cache/index*: "level", "type" (Data,
 * Instruction, Unified) and "size" ("48K", "2048K", "1M"). */
size_t os_cache_size(int level) {
    char path[80] = "/sys/devices/system/cpu/cpu0/cache/index0/", buf[64];
    size_t dir = strlen(path);
    for (char i = '0'; i <= '9'; i++) {
        path[dir - 2] = i;
        strcpy(path + dir, "level");
        if (!os_read_file(path, buf, sizeof buf)) break;
        if (atoi(buf) != level) continue;
        strcpy(path + dir, "type");
        if (!os_read_file(path, buf, sizeof buf) || buf[0] == 'I') continue;
        strcpy(path + dir, "size");
        if (!os_read_file(path, buf, sizeof buf)) continue;
        size_t v = (size_t)os_parse_size(buf, NULL);
        return v;
    }
    return 0;
}

int os_cpu_allowance(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

int os_gettid(void) { return (int)syscall(SYS_gettid); }

void os_futex_wait_ms(_Atomic int *addr, int val, unsigned ms) {
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

/* The state letter of a /proc stat line ("pid (comm) S ..."): after the
 * last ')', since comm may hold anything. */
static char stat_state(const char *buf) {
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

static bool listed(const _Atomic int *tids, int n, int tid) {
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&tids[i], memory_order_relaxed) == tid) return true;
    return false;
}

/* one entry of /proc/self/task: stops the walk at a live thread not in tids */
struct task_walk {
    const _Atomic int *tids;
    int n;
    char *buf;
    size_t len;
    int alive;
};
static bool task_alive(const char *name, void *ctx) {
    struct task_walk *w = ctx;
    if (name[0] < '0' || name[0] > '9') return true;
    int tid = atoi(name);
    if (listed(w->tids, w->n, tid)) return true;
    char path[64] = "/proc/self/task/";
    size_t len = strlen(path), k = strlen(name);
    if (k > 20) return true;
    memcpy(path + len, name, k);
    strcpy(path + len + k, "/stat");
    if (!os_read_file(path, w->buf, w->len)) return true; /* reaped meanwhile */
    char st = stat_state(w->buf);
    w->alive = st != 'Z' && st != 'X' && st != 'x';
    return !w->alive;
}

/* Threads count in /proc/self/stat's num_threads (field 20) until they are
 * reaped; only the main thread stays, as a zombie, after it exits while
 * others run.  So more than one thread beyond tids is enough to say yes
 * without reading each thread's state. */
int os_other_threads_alive(const _Atomic int *tids, int n) {
    char buf[1024];
    if (!os_read_file("/proc/self/stat", buf, sizeof buf)) return -1;
    const char *p = strrchr(buf, ')');
    if (!p) return -1;
    int field = 2;
    long threads = -1;
    for (; *p; p++)
        if (*p == ' ' && ++field == 20) {
            threads = strtol(p + 1, NULL, 10);
            break;
        }
    if (threads < 0) return -1;
    int ours = 0;
    for (int i = 0; i < n; i++) ours += atomic_load_explicit(&tids[i], memory_order_relaxed) != 0;
    if (threads >= ours + 2) return 1;
    struct task_walk w = {tids, n, buf, sizeof buf, 0};
    if (!os_dir_each("/proc/self/task", -1, task_alive, &w)) return -1;
    return w.alive;
}

/* The live statistics' file (api/live.c), read by other processes: written
 * with pwrite, never mapped, so publishing takes no mmap lock (a mapping
 * made at the first second was a write-locked mmap in the middle of a
 * program's steady state).  create: a new file of `size` bytes; O_EXCL and
 * O_NOFOLLOW: in a directory others can write (/dev/shm), never open a file
 * or a link someone else left; one left by an earlier process of ours with
 * this pid (a process that died, or this one before an exec) is removed
 * first.  The space is allocated (fallocate), so a write can never fail for
 * want of room.  Else the file as it is (O_NOFOLLOW, no O_CREAT).  -1: none.
 * The descriptor is the caller's only while it writes: it closes it before
 * it returns to the program (O_CLOEXEC meanwhile). */
int os_file_open(const char *path, bool create, size_t size) {
    if (!create) return nc_open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = nc_open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && (errno != EEXIST || unlink(path) != 0)) return -1;
    }
    if (fd >= 0 && syscall(SYS_fallocate, fd, 0, (off_t)0, (off_t)size) != 0) {
        nc_close(fd);
        unlink(path);
        fd = -1;
    }
    return fd;
}

bool os_file_pwrite(int fd, const void *buf, size_t len, size_t off) {
    while (len) {
        ssize_t n = (ssize_t)syscall(SYS_pwrite64, fd, buf, len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        buf = (const char *)buf + n;
        len -= (size_t)n;
        off += (size_t)n;
    }
    return true;
}

void os_file_close(int fd) { nc_close(fd); }

bool os_file_id(int fd, struct os_file_id *id) {
    struct stat st;
    if (syscall(SYS_fstat, fd, &st) != 0) return false;
    id->dev = (uint64_t)st.st_dev;
    id->ino = (uint64_t)st.st_ino;
    return true;
}

bool os_file_is(int fd, const struct os_file_id *id) {
    struct os_file_id now;
    return os_file_id(fd, &now) && now.dev == id->dev && now.ino == id->ino;
}
void os_file_unlink(const char *path) { unlink(path); }

/* getdents64 into a buffer on the stack: no malloc (opendir's), no lock. */
bool os_dir_each(const char *dir, int max, bool (*fn)(const char *name, void *ctx), void *ctx) {
    int fd = nc_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return false;
    char dents[2048];
    long got;
    bool more = true;
    while (more && (got = syscall(SYS_getdents64, fd, dents, sizeof dents)) > 0) {
        for (long off = 0; off < got && more;) {
            struct {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (void *)(dents + off);
            off += d->reclen;
            if (d->name[0] == '.' && (!d->name[1] || (d->name[1] == '.' && !d->name[2]))) continue;
            if (max >= 0 && max-- == 0) more = false;
            else more = fn(d->name, ctx);
        }
    }
    nc_close(fd);
    return got >= 0 || !more;
}

/* kill(pid, 0): ESRCH is the only answer that means no such process (EPERM:
 * one of another user's) */
bool os_pid_exists(int pid) { return syscall(SYS_kill, pid, 0) == 0 || errno != ESRCH; }

int64_t os_file_age_s(const char *path) {
    struct stat st;
    if (syscall(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return -1; /* the vDSO's, as os_now_ns */
    return (int64_t)now.tv_sec - (int64_t)st.st_mtim.tv_sec;
}

/* ---- transparent huge pages ---- */

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

const char *const os_thp_mode_names[] = {"never", "madvise", "always", "unknown"};
const char *const os_thp_defrag_names[] = {"always", "defer", "defer+madvise", "madvise", "never",
                                           "unknown"};

/* The bracketed word of a sysfs choice ("always [madvise] never"), as an
 * index into names (n of them), or -1. */
static int sysfs_choice(const char *path, const char *const *names, int n) {
    char buf[128];
    if (!os_read_file(path, buf, sizeof buf)) return -1;
    char *a = strchr(buf, '['), *b = a ? strchr(a, ']') : NULL;
    if (!b) return -1;
    *b = 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(a + 1, names[i])) return i;
    return -1;
}

void os_thp_read(struct os_thp *t) {
    static const char *const per_size[] = {"never", "madvise", "always", "inherit"};
    const char *dir = "/sys/kernel/mm/transparent_hugepage/";
    char path[96];
    strcpy(path, dir);
    strcat(path, "enabled");
    int e = sysfs_choice(path, os_thp_mode_names, 3);
    t->enabled = e < 0 ? OS_THP_UNKNOWN : e;
    strcpy(path, dir);
    strcat(path, "defrag");
    int d = sysfs_choice(path, os_thp_defrag_names, 5);
    t->defrag = d < 0 ? OS_DEFRAG_UNKNOWN : d;
    for (int o = 1; o <= OS_THP_SIZES; o++) {
        char num[24];
        strcpy(path, dir);
        strcat(path, "hugepages-");
        strcat(path, u64_text(num, (uint64_t)4 << o));
        strcat(path, "kB/enabled");
        int m = sysfs_choice(path, per_size, 4);
        t->size_mode[o - 1] = m < 0 ? OS_THP_UNKNOWN : m == 3 ? t->enabled : m;
    }
    /* kernels before multi-size THP have no per-size files: the PMD size follows enabled */
    t->pmd = t->size_mode[8] != OS_THP_UNKNOWN ? t->size_mode[8] : t->enabled;
}

static _Atomic uint64_t calls_hugepage, calls_nohugepage, calls_collapse, calls_populate;

bool os_advise_huge(void *p, size_t size, bool huge) {
    lockdep_check_syscall(huge ? "madvise(MADV_HUGEPAGE)" : "madvise(MADV_NOHUGEPAGE)");
    count_call(huge ? &calls_hugepage : &calls_nohugepage);
    return sys_madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
}

bool os_collapse(void *p, size_t size) {
    lockdep_check_syscall("madvise(MADV_COLLAPSE)");
    count_call(&calls_collapse);
    return sys_madvise(p, size, MADV_COLLAPSE) == 0;
}

/* Pages of [p, p + size) resident (mincore), at most 512 pages (2 MiB) per
 * call; -1 when the kernel refuses. */
long os_resident_pages(void *p, size_t size) {
    unsigned char vec[512];
    size_t n = (size + PAGE_SIZE - 1) / PAGE_SIZE;
    if (n > sizeof vec) n = sizeof vec;
    if (mincore(p, n * PAGE_SIZE, vec) != 0) return -1;
    long r = 0;
    for (size_t i = 0; i < n; i++) r += vec[i] & 1;
    return r;
}

bool os_populate_write(void *p, size_t size) {
    count_call(&calls_populate);
    return sys_madvise(p, size, MADV_POPULATE_WRITE) == 0;
}

void os_advice_calls(struct os_advice_calls *c) {
    c->hugepage = atomic_load_explicit(&calls_hugepage, memory_order_relaxed);
    c->nohugepage = atomic_load_explicit(&calls_nohugepage, memory_order_relaxed);
    c->collapse = atomic_load_explicit(&calls_collapse, memory_order_relaxed);
    c->populate = atomic_load_explicit(&calls_populate, memory_order_relaxed);
}

static uint64_t kb_field(const char *buf, const char *key) {
    const char *s = strstr(buf, key);
    return s ? (uint64_t)strtoull(s + strlen(key), NULL, 10) * 1024u : 0;
}

void os_smaps_rollup(uint64_t *anon_huge, uint64_t *rss) {
    char buf[2048];
    *anon_huge = *rss = 0;
    if (!os_read_file("/proc/self/smaps_rollup", buf, sizeof buf)) return;
    *anon_huge = kb_field(buf, "\nAnonHugePages:");
    *rss = kb_field(buf, "\nRss:");
}
