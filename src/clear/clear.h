/* clear: the clearing engine (seeds 000 and 002).  Includes base only. */
#ifndef FOLIO_CLEAR_H
#define FOLIO_CLEAR_H

#include "base.h"


/* x86-64 kernels (rep stosb, AVX stores, non-temporal stores); elsewhere,
 * or built with FOLIO_CLEAR_PORTABLE to test the fallback, memset only */
#if defined(__x86_64__) && !defined(FOLIO_CLEAR_PORTABLE)
#define CLEAR_X86 1
#else
#define CLEAR_X86 0
#endif
/* The clearing engine (clear.c): clear_hint is the one path every
 * zeroing of recycled memory takes; memory known to be zero is skipped by the
 * caller and counted with clear_zero_skipped. */
struct clear_stats {
    uint64_t loop, stosb, nt, hybrid, other; /* bytes cleared by each kind of strategy */
    uint64_t zero_skipped;                   /* bytes known zero, not cleared */
    uint64_t mt_clears, mt_bytes;            /* clears split across threads */
    uint64_t hot_nt_from, cold_nt_from;      /* sizes from which non-temporal stores are used */
    uint64_t calibration_us;                 /* 0: not calibrated (yet) */
};
/* The engine's entry points; folio_clear_hint, folio_clear and
 * folio_clear_with (api) call them after folio's initialisation. */
int clear_hint(void *p, size_t n, unsigned hints); /* the strategy used */
int clear_with(void *p, size_t n, int strategy);   /* 0, or -1 with errno */
void clear_stats(struct clear_stats *st);
void clear_visit_locks(lock_visit_fn *fn, void *ctx); /* for the report */
void clear_lock_all(void); /* fork: the engine's start-up lock */
void clear_unlock_all(bool child);
void clear_json(void (*put)(void *ctx, const char *s), void *ctx); /* the "clear" object */
void clear_zero_skipped(size_t n);
unsigned clear_age_hint(uint64_t freed_at_ms); /* FOLIO_CLEAR_HOT or _COLD from the free time */
/* clear_kernels.c: CPU detection and the kernels (each clears exactly [p, p+n)) */
typedef void (*clear_kernel_fn)(char *p, size_t n);
struct clear_cpu {
    bool erms, avx2, avx512;
    int loop_impl, nt_impl;  /* the widest FOLIO_CLEAR_LOOP_* / FOLIO_CLEAR_NT_* */
    size_t l1, l2, l3, head; /* cache sizes; head: what a TOUCH clear leaves cached (L2/8) */
};
extern struct clear_cpu clear_cpu;
enum { CLEAR_K_LOOP, CLEAR_K_STOSB, CLEAR_K_NT, CLEAR_K_HYBRID, CLEAR_K_OTHER, CLEAR_NKINDS };
void clear_detect_cpu(void);
clear_kernel_fn clear_kernel(int strategy); /* NULL: not on this CPU, or AUTO/HYBRID */
void clear_small(char *p, size_t n);        /* n < 128 */
int clear_kind(int strategy);               /* CLEAR_K_*: which counter its bytes go to */



#endif
