/* folio: a memory allocator for Linux with a kernel-style page heap.
 *
 * The standard allocation API (malloc, free, calloc, realloc, aligned_alloc,
 * posix_memalign, C++ new/delete, ...) is exported under the standard names.
 * This header declares folio's own calls. */
#ifndef FOLIO_H
#define FOLIO_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FOLIO_PAGE_SIZE 4096u

/* Flags for folio_alloc_pages. */
#define FOLIO_ZERO 0x1u /* the pages read as zero */

/* Allocate `npages` contiguous 4 KiB pages, page aligned, from folio's page
 * heap (per-CPU pageset, then zone).  Returns NULL with errno = ENOMEM when
 * npages is 0, impossibly large, or memory is exhausted.  The block must be
 * released with folio_free_pages(p, npages) (free() also accepts it). */
void *folio_alloc_pages(size_t npages, unsigned flags);
void folio_free_pages(void *p, size_t npages);

/* Clear n bytes at p with folio's clearing engine (the path calloc uses):
 * the caller is assumed to use the start next (FOLIO_CLEAR_TOUCH). */
void folio_clear(void *p, size_t n);

/* What the caller knows about the destination, for folio_clear_hint. */
#define FOLIO_CLEAR_HOT 0x1u       /* written recently: probably in the CPU caches */
#define FOLIO_CLEAR_COLD 0x2u      /* not used for a while: probably not cached */
#define FOLIO_CLEAR_TOUCH 0x4u     /* the caller uses the start next: clear it last, cached */
#define FOLIO_CLEAR_ONE_THREAD 0x8u /* never split the clear across helper threads */
/* Clear n bytes at p; the engine picks the strategy from its measured table
 * for the size and the hints (neither HOT nor COLD: assumed hot).  Returns
 * the strategy it used (a FOLIO_CLEAR_* value below). */
int folio_clear_hint(void *p, size_t n, unsigned hints);

/* The clearing strategies.  folio_clear_with forces one of them: a
 * benchmarking and testing aid (the engine never uses PAGES or MEMSET). */
enum folio_clear_strategy {
    FOLIO_CLEAR_AUTO,    /* the engine's choice: folio_clear_hint(p, n, 0) */
    FOLIO_CLEAR_LOOP,    /* ordinary vector stores, the widest this CPU has */
    FOLIO_CLEAR_STOSB,   /* one rep stosb over the extent (32 MiB at a time); rep stosq without ERMS */
    FOLIO_CLEAR_NT,      /* non-temporal stores, the widest this CPU has, then sfence */
    FOLIO_CLEAR_HYBRID,  /* non-temporal bulk, then the head (L2/8) with rep stosb, last */
    FOLIO_CLEAR_PAGES,   /* rep stosb one 4 KiB page at a time (the kernel's old way) */
    FOLIO_CLEAR_MEMSET,  /* the C library's memset */
    FOLIO_CLEAR_LOOP_SSE2, FOLIO_CLEAR_LOOP_AVX2, FOLIO_CLEAR_LOOP_AVX512,
    FOLIO_CLEAR_STOSQ,
    FOLIO_CLEAR_NT_MOVNTI, FOLIO_CLEAR_NT_SSE2, FOLIO_CLEAR_NT_AVX2, FOLIO_CLEAR_NT_AVX512,
    FOLIO_CLEAR_NSTRATEGIES
};
/* Clear n bytes at p with `strategy` on the calling thread.  Returns 0, or
 * -1 with errno = ENOTSUP (this CPU lacks the instructions) or EINVAL. */
int folio_clear_with(void *p, size_t n, int strategy);
/* The strategy's name ("stosb", "nt", ...), or NULL when out of range. */
const char *folio_clear_name(int strategy);

/* folio's counters as one JSON object (the same text FOLIO_REPORT writes),
 * among them "live_blocks" (allocations minus frees) and "live_bytes" (the
 * malloc_usable_size of every live block), exact when no other thread is
 * allocating or freeing.
 * Like snprintf: writes at most `len` bytes including the terminating NUL
 * and returns the length of the whole text, not counting the NUL. */
size_t folio_report_json(char *buf, size_t len);

/* Write the JSON report to `path` (`%p` is replaced by the pid).
 * Returns 0 on success, -1 with errno set on failure. */
int folio_report_write(const char *path);

/* Print a readable summary of the counters to the file descriptor fd. */
void folio_report_print(int fd);

#ifdef __cplusplus
}
#endif
#endif
