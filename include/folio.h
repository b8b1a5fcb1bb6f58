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

/* Clear n bytes at p with folio's clearing engine (the path calloc uses). */
void folio_clear(void *p, size_t n);

/* folio's counters as one JSON object (the same text FOLIO_REPORT writes).
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
