/* clear_kernels: the instruction-level half of the clearing engine
 * (clear.c is the policy): CPU feature and cache-size detection, and one
 * kernel per strategy and instruction set.
 *
 * Invariants:
 *  - a kernel writes exactly the bytes [p, p+n), zeros, and nothing else,
 *    for every n and alignment (tests/test_clear.c checks each one);
 *  - non-temporal kernels end with sfence: their zeros are visible before
 *    the kernel returns;
 *  - a kernel for instructions the CPU (or the OS: XSAVE state) lacks is
 *    never returned by clear_kernel: AVX-512 and AVX2 come from cpuid and
 *    xgetbv, rep stosb from ERMS (rep stosq without it); SSE2 and movnti are
 *    always there on x86-64.  Elsewhere every strategy is memset.
 * No syscalls here but the cache sizes, through os. */
#define _GNU_SOURCE
#include <string.h>

#include "clear.h"

#if CLEAR_X86
#include <cpuid.h>
#include <immintrin.h>
#endif

#define SMALL_CLEAR 128 /* below: a few overlapping ordinary stores */

/* ------------------------------------------------------------ CPU features */
struct clear_cpu clear_cpu;

#if CLEAR_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* L2/L3 from cpuid leaf 4 (Intel) when sysfs has nothing. */
static size_t cpuid_cache(int level) {
    unsigned a, b, c, d, max;
    __cpuid(0, max, b, c, d);
    if (max < 4) return 0;
    for (unsigned i = 0; i < 16; i++) {
        __cpuid_count(4, i, a, b, c, d);
        unsigned type = a & 31;
        if (type == 0) break;
        if (type == 2 || (int)((a >> 5) & 7) != level) continue;
        return (size_t)(((b >> 22) & 0x3ff) + 1) * (((b >> 12) & 0x3ff) + 1) *
               ((b & 0xfff) + 1) * ((size_t)c + 1);
    }
    return 0;
}
#endif

void clear_detect_cpu(void) {
    clear_cpu.loop_impl = FOLIO_CLEAR_LOOP_SSE2;
    clear_cpu.nt_impl = FOLIO_CLEAR_NT_SSE2;
#if CLEAR_X86
    unsigned a, b, c, d, max;
    __cpuid(0, max, b, c, d);
    bool osxsave = false;
    if (max >= 1) {
        __cpuid(1, a, b, c, d);
        osxsave = (c >> 27) & 1;
        bool avx = (c >> 28) & 1;
        uint64_t xcr0 = osxsave ? xgetbv0() : 0;
        bool ymm_ok = avx && (xcr0 & 6) == 6;
        bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
        if (max >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            clear_cpu.erms = (b >> 9) & 1;
            clear_cpu.avx2 = ymm_ok && ((b >> 5) & 1);
            clear_cpu.avx512 = zmm_ok && ((b >> 16) & 1);
        }
    }
    if (clear_cpu.avx2) clear_cpu.loop_impl = FOLIO_CLEAR_LOOP_AVX2, clear_cpu.nt_impl = FOLIO_CLEAR_NT_AVX2;
    if (clear_cpu.avx512) clear_cpu.loop_impl = FOLIO_CLEAR_LOOP_AVX512, clear_cpu.nt_impl = FOLIO_CLEAR_NT_AVX512;
#endif
    clear_cpu.l1 = os_cache_size(1);
    clear_cpu.l2 = os_cache_size(2);
    clear_cpu.l3 = os_cache_size(3);
#if CLEAR_X86
    if (!clear_cpu.l2) clear_cpu.l2 = cpuid_cache(2);
    if (!clear_cpu.l3) clear_cpu.l3 = cpuid_cache(3);
#endif
    if (!clear_cpu.l2) clear_cpu.l2 = (size_t)1 << 20;
    if (!clear_cpu.l3) clear_cpu.l3 = clear_cpu.l2 * 8;
    /* the head a TOUCH clear leaves cached: 1/8 of L2, 64 KiB .. 1 MiB */
    size_t h = clear_cpu.l2 / 8;
    if (h < ((size_t)64 << 10)) h = (size_t)64 << 10;
    if (h > ((size_t)1 << 20)) h = (size_t)1 << 20;
    clear_cpu.head = h & ~(PAGE_SIZE - 1);
}

/* ------------------------------------------------------------ kernels
 * Each clears exactly [p, p+n).  Below SMALL_CLEAR bytes: overlapping
 * unaligned ordinary stores.  Vector kernels: an unaligned head up to the
 * next 64-byte boundary, aligned 64-byte units, an unaligned tail. */

static inline void st8(char *p) {
    uint64_t z = 0;
    memcpy(p, &z, 8);
}
static inline void st4(char *p) {
    uint32_t z = 0;
    memcpy(p, &z, 4);
}

#if CLEAR_X86
static inline void st16(char *p) { _mm_storeu_si128((__m128i *)(void *)p, _mm_setzero_si128()); }
/* An empty asm that makes the pointer opaque: without it GCC turns the
 * store loops below into calls to memset. */
#define OPAQUE_PTR(a) __asm__("" : "+r"(a))
#else
static inline void st16(char *p) {
    st8(p);
    st8(p + 8);
}
#endif

/* n < SMALL_CLEAR */
static inline void small_clear(char *p, size_t n) {
    if (n >= 16) {
        if (n >= 64) {
            st16(p), st16(p + 16), st16(p + 32), st16(p + 48);
            st16(p + n - 64), st16(p + n - 48), st16(p + n - 32), st16(p + n - 16);
        } else if (n >= 32) {
            st16(p), st16(p + 16), st16(p + n - 32), st16(p + n - 16);
        } else {
            st16(p), st16(p + n - 16);
        }
    } else if (n >= 8) {
        st8(p), st8(p + n - 8);
    } else if (n >= 4) {
        st4(p), st4(p + n - 4);
    } else if (n) {
        p[0] = 0;
        p[n - 1] = 0;
        if (n > 2) p[1] = 0;
    }
}

/* Clear [p, next 64-byte boundary) with ordinary stores; returns the boundary. */
static inline char *head_to_line(char *p) {
    char *a = (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
    if (a != p) small_clear(p, (size_t)(a - p));
    return a;
}

static void k_memset(char *p, size_t n) { memset(p, 0, n); }

#if CLEAR_X86
static void k_stosb(char *p, size_t n) {
    if (n < SMALL_CLEAR) {
        small_clear(p, n);
        return;
    }
    char *a = head_to_line(p);
    n -= (size_t)(a - p);
    __asm__ volatile("rep stosb" : "+D"(a), "+c"(n) : "a"(0) : "memory");
}

static void k_stosq(char *p, size_t n) {
    if (n < SMALL_CLEAR) {
        small_clear(p, n);
        return;
    }
    char *end = p + n;
    char *a = head_to_line(p);
    size_t q = (size_t)(end - a) >> 3;
    __asm__ volatile("rep stosq" : "+D"(a), "+c"(q) : "a"(0) : "memory");
    if (a != end) st8(end - 8);
}

static void k_loop_sse2(char *p, size_t n) {
    if (n < SMALL_CLEAR) {
        small_clear(p, n);
        return;
    }
    __m128i z = _mm_setzero_si128();
    char *end = p + n, *a = head_to_line(p);
    for (; a + 256 <= end; a += 256) {
        OPAQUE_PTR(a);
        for (int i = 0; i < 256; i += 16) _mm_store_si128((__m128i *)(void *)(a + i), z);
    }
    for (; a + 64 <= end; a += 64) {
        OPAQUE_PTR(a);
        for (int i = 0; i < 64; i += 16) _mm_store_si128((__m128i *)(void *)(a + i), z);
    }
    if (a != end) small_clear(end - 64, 64);
}

__attribute__((target("avx2"))) static void k_loop_avx2(char *p, size_t n) {
    if (n < SMALL_CLEAR) {
        small_clear(p, n);
        return;
    }
    __m256i z = _mm256_setzero_si256();
    char *end = p + n;
    _mm256_storeu_si256((__m256i *)(void *)p, z);
    _mm256_storeu_si256((__m256i *)(void *)(p + 32), z);
    char *a = (char *)(((uintptr_t)p + 64) & ~(uintptr_t)63);
    for (; a + 256 <= end; a += 256) {
        OPAQUE_PTR(a);
        for (int i = 0; i < 256; i += 32) _mm256_store_si256((__m256i *)(void *)(a + i), z);
    }
    for (; a + 64 <= end; a += 64) {
        OPAQUE_PTR(a);
        _mm256_store_si256((__m256i *)(void *)a, z);
        _mm256_store_si256((__m256i *)(void *)(a + 32), z);
    }
    if (a != end) {
        _mm256_storeu_si256((__m256i *)(void *)(end - 64), z);
        _mm256_storeu_si256((__m256i *)(void *)(end - 32), z);
    }
}

__attribute__((target("avx512f"))) static void k_loop_avx512(char *p, size_t n) {
    if (n < SMALL_CLEAR) {
        small_clear(p, n);
        return;
    }
    __m512i z = _mm512_setzero_si512();
    char *end = p + n;
    _mm512_storeu_si512((void *)p, z);
    char *a = (char *)(((uintptr_t)p + 64) & ~(uintptr_t)63);
    for (; a + 256 <= end; a += 256) {
        OPAQUE_PTR(a);
        _mm512_store_si512((void *)a, z);
        _mm512_store_si512((void *)(a + 64), z);
        _mm512_store_si512((void *)(a + 128), z);
        _mm512_store_si512((void *)(a + 192), z);
    }
    for (; a + 64 <= end; a += 64) {
        OPAQUE_PTR(a);
        _mm512_store_si512((void *)a, z);
    }
    if (a != end) _mm512_storeu_si512((void *)(end - 64), z);
}

/* Non-temporal kernels: ordinary stores on the partial lines at both ends
 * (a partial non-temporal line is slow), whole lines streamed, sfence. */
#define NT_BODY(p, n, store_line)                                                              \
    do {                                                                                       \
        if ((n) < SMALL_CLEAR) {                                                               \
            small_clear(p, n);                                                                 \
            return;                                                                            \
        }                                                                                      \
        char *end_ = (p) + (n);                                                                \
        char *a_ = head_to_line(p);                                                            \
        char *e_ = (char *)((uintptr_t)end_ & ~(uintptr_t)63);                                 \
        for (; a_ + 256 <= e_; a_ += 256) {                                                    \
            store_line(a_);                                                                    \
            store_line(a_ + 64);                                                               \
            store_line(a_ + 128);                                                              \
            store_line(a_ + 192);                                                              \
        }                                                                                      \
        for (; a_ < e_; a_ += 64) store_line(a_);                                              \
        _mm_sfence();                                                                          \
        if (e_ != end_) small_clear(e_, (size_t)(end_ - e_));                                  \
    } while (0)

#define LINE_MOVNTI(a)                                                                         \
    for (int i_ = 0; i_ < 64; i_ += 8) _mm_stream_si64((long long *)(void *)((a) + i_), 0)
#define LINE_SSE2(a)                                                                           \
    for (int i_ = 0; i_ < 64; i_ += 16)                                                        \
    _mm_stream_si128((__m128i *)(void *)((a) + i_), _mm_setzero_si128())
#define LINE_AVX2(a)                                                                           \
    do {                                                                                       \
        _mm256_stream_si256((__m256i *)(void *)(a), _mm256_setzero_si256());                   \
        _mm256_stream_si256((__m256i *)(void *)((a) + 32), _mm256_setzero_si256());            \
    } while (0)
#define LINE_AVX512(a) _mm512_stream_si512((void *)(a), _mm512_setzero_si512())

static void k_nt_movnti(char *p, size_t n) { NT_BODY(p, n, LINE_MOVNTI); }
static void k_nt_sse2(char *p, size_t n) { NT_BODY(p, n, LINE_SSE2); }
__attribute__((target("avx2"))) static void k_nt_avx2(char *p, size_t n) { NT_BODY(p, n, LINE_AVX2); }
__attribute__((target("avx512f"))) static void k_nt_avx512(char *p, size_t n) {
    NT_BODY(p, n, LINE_AVX512);
}
#else /* not x86-64: the C library's memset stands in for every strategy */
#define k_stosb k_memset
#define k_stosq k_memset
#define k_loop_sse2 k_memset
#define k_loop_avx2 k_memset
#define k_loop_avx512 k_memset
#define k_nt_movnti k_memset
#define k_nt_sse2 k_memset
#define k_nt_avx2 k_memset
#define k_nt_avx512 k_memset
#endif

/* The kernel's old way: one rep stosb per 4 KiB page. */
static void k_pages(char *p, size_t n) {
    while (n) {
        size_t piece = PAGE_SIZE - ((uintptr_t)p & (PAGE_SIZE - 1));
        if (piece > n) piece = n;
        k_stosb(p, piece);
        p += piece;
        n -= piece;
    }
}

/* ------------------------------------------------------------ strategies */

static const uint8_t strat_kind[FOLIO_CLEAR_NSTRATEGIES] = {
    [FOLIO_CLEAR_AUTO] = CLEAR_K_OTHER,
    [FOLIO_CLEAR_LOOP] = CLEAR_K_LOOP,
    [FOLIO_CLEAR_STOSB] = CLEAR_K_STOSB,
    [FOLIO_CLEAR_NT] = CLEAR_K_NT,
    [FOLIO_CLEAR_HYBRID] = CLEAR_K_HYBRID,
    [FOLIO_CLEAR_PAGES] = CLEAR_K_OTHER,
    [FOLIO_CLEAR_MEMSET] = CLEAR_K_OTHER,
    [FOLIO_CLEAR_LOOP_SSE2] = CLEAR_K_LOOP,
    [FOLIO_CLEAR_LOOP_AVX2] = CLEAR_K_LOOP,
    [FOLIO_CLEAR_LOOP_AVX512] = CLEAR_K_LOOP,
    [FOLIO_CLEAR_STOSQ] = CLEAR_K_STOSB,
    [FOLIO_CLEAR_NT_MOVNTI] = CLEAR_K_NT,
    [FOLIO_CLEAR_NT_SSE2] = CLEAR_K_NT,
    [FOLIO_CLEAR_NT_AVX2] = CLEAR_K_NT,
    [FOLIO_CLEAR_NT_AVX512] = CLEAR_K_NT,
};

/* The kernel of a concrete strategy on this CPU; NULL when it lacks it
 * (and for AUTO and HYBRID, which are not one kernel). */
clear_kernel_fn clear_kernel(int s) {
    switch (s) {
    case FOLIO_CLEAR_LOOP: return clear_kernel(clear_cpu.loop_impl);
    case FOLIO_CLEAR_NT: return clear_kernel(clear_cpu.nt_impl);
    case FOLIO_CLEAR_STOSB: return clear_cpu.erms ? k_stosb : k_stosq;
    case FOLIO_CLEAR_PAGES: return k_pages;
    case FOLIO_CLEAR_MEMSET: return k_memset;
    case FOLIO_CLEAR_LOOP_SSE2: return k_loop_sse2;
    case FOLIO_CLEAR_LOOP_AVX2: return clear_cpu.avx2 ? k_loop_avx2 : NULL;
    case FOLIO_CLEAR_LOOP_AVX512: return clear_cpu.avx512 ? k_loop_avx512 : NULL;
    case FOLIO_CLEAR_STOSQ: return k_stosq;
    case FOLIO_CLEAR_NT_MOVNTI: return k_nt_movnti;
    case FOLIO_CLEAR_NT_SSE2: return k_nt_sse2;
    case FOLIO_CLEAR_NT_AVX2: return clear_cpu.avx2 ? k_nt_avx2 : NULL;
    case FOLIO_CLEAR_NT_AVX512: return clear_cpu.avx512 ? k_nt_avx512 : NULL;
    default: return NULL;
    }
}

void clear_small(char *p, size_t n) { small_clear(p, n); }

int clear_kind(int s) { return strat_kind[s]; }

EXPORT const char *folio_clear_name(int strategy) {
    if (strategy < 0 || strategy >= FOLIO_CLEAR_NSTRATEGIES) return NULL;
    return clear_strategy_names[strategy];
}
