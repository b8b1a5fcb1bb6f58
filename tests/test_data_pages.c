// folio-test: no-sanitize
/* test_data_pages: a small program writes two pages of libfolio.so's
 * data, not more.
 *
 * Every page of the library's writable data a process touches is a page
 * fault and 4 KiB of RSS in every process (and a copy in a fork child that
 * writes it).  mk/layout.ld gathers what a process uses at start: one page
 * of .data and folio_fork (the options, the relocated pointers, the locks
 * and the zone: the page ld.so zeroes past the file's end anyway) and one
 * page of .bss variables (.bss.folio_hot), the dense heap's state among
 * them (obj/dense.c: its bins and per-size counts, 1.8 KiB), which a small
 * program's first blocks use instead of a slab page per size.  A variable
 * that a common path starts to use without a line there lands among the
 * others and costs a page, which this test catches: at 0f6cd35 the same
 * program touched four where three were expected (the .bss variables
 * spread over two pages); from session 22 to 24 the dense heap's state sat
 * on a second .bss page (after cpu_node, which spilt past the first) and
 * this bound was four; until session 25 .data (with heap_none, read-only
 * data now) and folio_fork were a page each, and it was three.
 *
 * A fork child that runs the same program then touches no page of that
 * segment its parent had not (check_fork_child).
 *
 * The program does what a small one does (malloc and free of a few sizes,
 * a calloc, free(NULL), a stdio buffer), run again with the FOLIO_*
 * variables cleared and FOLIO_LIVE=0, then reads its page table over the
 * library's writable segment (dl_iterate_phdr): the pages present and
 * private (written, or .bss).  The RELRO page (read-only after relocation) is not counted.  Skipped where folio is linked statically (sanitizer and
 * debug modes) or the page table cannot be read. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"
#include "support/rerun_clean.h"

#define MAX_PAGES 2

static void small_program(void)
{
    char *p = malloc(100), *buf = malloc(4096), *c = calloc(10, 24);
    CHECK(p && buf && c, "malloc");
    snprintf(p, 100, "%p", (void *)buf);
    memset(buf, 1, 4096);
    free(NULL);
    free(c);
    free(buf);
    free(p);
}

/* libfolio.so's writable segment (.data, .bss), less its RELRO part */
struct seg {
    unsigned long lib, start, end;
};
static int find_data(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct seg *seg = arg;
    const char *base = strrchr(info->dlpi_name, '/');
    if (!base || strncmp(base + 1, "libfolio.so", 11) != 0)
        return 0;
    unsigned long relro_end = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            seg->start = info->dlpi_addr + ph->p_vaddr;
            seg->end = seg->start + ph->p_memsz;
        }
        if (ph->p_type == PT_GNU_RELRO)
            relro_end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + 4095) & ~4095ul;
    }
    if (relro_end > seg->start)
        seg->start = relro_end;
    seg->lib = info->dlpi_addr;
    return 1;
}

#define MAX_SEG_PAGES 4096 /* the segment's pages looked at (16 MiB) */

/* The pages of [start, end) present in this process's page table and not
 * file pages: written (a private copy), .bss, or a zero page mapped by a
 * read; pages of the file that fault-around mapped along with one read
 * cost no fault of their own and are not counted.  -1: no pagemap to
 * open, -2: a read of it failed. */
static int present_pages(const struct seg *seg, unsigned char *bits)
{
    int pm = open("/proc/self/pagemap", O_RDONLY);
    if (pm < 0)
        return -1;
    int n = 0;
    unsigned long first = seg->start & ~4095ul;
    for (unsigned long a = first; a < seg->end && (a - first) / 4096 < MAX_SEG_PAGES; a += 4096) {
        uint64_t e = 0;
        if (pread(pm, &e, sizeof e, (off_t)(a / 4096 * 8)) != (ssize_t)sizeof e) {
            close(pm);
            return -2;
        }
        unsigned long i = (a - first) / 4096;
        bits[i] = (e >> 63) && !(e >> 61 & 1);
        n += bits[i];
    }
    close(pm);
    return n;
}

/* A fork child of this single-threaded program that runs the same small
 * program must touch no page of folio's data that the parent had not: its
 * fork handlers and first calls find everything where the parent left it
 * (from d217802 to 9fc4039 a child read the background threads' page,
 * which the parent never had: a fault in every fork child of a shell).  The
 * child's count of such pages is its exit status. */
static void check_fork_child(const struct seg *seg)
{
    static unsigned char parent[MAX_SEG_PAGES], child[MAX_SEG_PAGES];
    if (present_pages(seg, parent) < 0)
        return;
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        small_program();
        if (present_pages(seg, child) < 0)
            _exit(255);
        int extra = 0;
        unsigned long first = seg->start & ~4095ul;
        for (unsigned long i = 0; i < MAX_SEG_PAGES && first + i * 4096 < seg->end; i++)
            if (child[i] && !parent[i]) {
                fprintf(stderr, "  fork child: page %#lx of libfolio.so's data, which the parent never touched\n",
                        first + i * 4096 - seg->lib);
                extra++;
            }
        _exit(extra > 250 ? 250 : extra);
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st), "the fork child did not exit normally");
    CHECK(WEXITSTATUS(st) != 255, "the fork child could not read its pagemap");
    CHECK(WEXITSTATUS(st) == 0,
          "a fork child touched %d pages of libfolio.so's data that its single-threaded parent had not",
          WEXITSTATUS(st));
    NOTE("fork child: no page of libfolio.so's data beyond its parent's");
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!getenv("TEST_DATA_PAGES_CLEAN"))
        rerun_clean(argv, "TEST_DATA_PAGES_CLEAN=1", NULL);
    small_program();

    struct seg seg = {0};
    dl_iterate_phdr(find_data, &seg);
    if (!seg.lib)
        SKIP("folio is not libfolio.so in this build (linked statically)");

    CHECK(((seg.end - (seg.start & ~4095ul)) + 4095) / 4096 <= MAX_SEG_PAGES,
          "libfolio.so's writable segment is larger than the %d pages this test reads", MAX_SEG_PAGES);
    static unsigned char written[MAX_SEG_PAGES];
    int n = present_pages(&seg, written);
    if (n == -1)
        SKIP("cannot open /proc/self/pagemap");
    CHECK(n >= 0, "pagemap");
    unsigned present = (unsigned)n;
    char where[400] = "";
    size_t used = 0;
    unsigned long first = seg.start & ~4095ul;
    for (unsigned long i = 0; first + i * 4096 < seg.end; i++)
        if (written[i] && used + 24 < sizeof where)
            used += (size_t)snprintf(where + used, sizeof where - used, " %#lx", first + i * 4096 - seg.lib);
    NOTE("libfolio.so data: %u pages written (at%s in the library)", present, where);
    CHECK(present > 0, "no page of libfolio.so's data written: is pagemap telling the truth?");
    CHECK(present <= MAX_PAGES,
          "%u pages of libfolio.so's data written, at most %d expected (at%s in the library): "
          "a variable a small program uses is not in mk/layout.ld's .bss.folio_hot (`nm -n "
          "build/libfolio.so` names what is there)",
          present, MAX_PAGES, where);
    check_fork_child(&seg);
    return 0;
}
