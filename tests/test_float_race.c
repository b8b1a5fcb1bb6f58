// folio-test: tsan
/* test_float_race: the last remote free of a floating slab races its
 * owner's collection of it.
 *
 * A free that brings every object of a floating slab back (the slab was
 * taken by an earlier push and queued in its owner's rescue slots) then
 * looks for the slab in those slots (float_complete).  By then the owner,
 * or the purger, may have emptied the slot, collected the objects and
 * retired the slab, whose owner field is NULL from then on: a read through
 * it ended the process with SIGSEGV (session 15: before the fix, this
 * test failed in 7 of 8 runs of the normal build).
 *
 * Each of CHILDREN processes (at once, so that they preempt each other's
 * threads) runs rounds in which an owner thread mallocs RACE objects of
 * 16 B-2 KiB and exits, while FREERS threads free them, interleaved.  The
 * race is rare and timing-bound: a pass says little on one run, a failure
 * (a child killed by a signal) is the bug. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"
#include "support/race_objects.h"

enum { RACE = 4000, FREERS = 3, CHILDREN = 4 };
#if defined(__SANITIZE_THREAD__)
enum { ROUNDS = 300 }; /* TSan widens the window and slows each round tenfold */
#elif defined(__SANITIZE_ADDRESS__)
enum { ROUNDS = 3000 };
#else
enum { ROUNDS = 8000 };
#endif

static void *objs[RACE];
static pthread_barrier_t start;

static void *owner(void *arg)
{
    unsigned seed = malloc_race_objects(objs, RACE, (unsigned)(uintptr_t)arg);
    pthread_barrier_wait(&start);
    if (seed & 1) /* sometimes alive a little longer: it drains its rescue slots itself */
        for (int i = 0; i < 2000; i++)
            free(malloc(64));
    return NULL;
}

static void *freer(void *arg)
{
    int k = (int)(uintptr_t)arg;
    pthread_barrier_wait(&start);
    for (int i = k; i < RACE; i += FREERS)
        free(objs[i]);
    return NULL;
}

static void rounds(void)
{
    CHECK(pthread_barrier_init(&start, NULL, FREERS + 1) == 0, "pthread_barrier_init");
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t t[FREERS + 1];
        CHECK(pthread_create(&t[0], NULL, owner, (void *)(uintptr_t)(r + 3)) == 0, "pthread_create");
        for (int k = 0; k < FREERS; k++)
            CHECK(pthread_create(&t[k + 1], NULL, freer, (void *)(uintptr_t)k) == 0, "pthread_create");
        for (int k = 0; k <= FREERS; k++)
            CHECK(pthread_join(t[k], NULL) == 0, "pthread_join");
    }
}

int main(void)
{
    pid_t pid[CHILDREN];
    for (int c = 0; c < CHILDREN; c++) {
        pid[c] = fork();
        CHECK(pid[c] >= 0, "fork");
        if (pid[c] == 0) {
            rounds();
            _exit(0);
        }
    }
    int failed = 0;
    for (int c = 0; c < CHILDREN; c++) {
        int st;
        CHECK(waitpid(pid[c], &st, 0) == pid[c], "waitpid");
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "child %d: killed by signal %d (%s)\n", c, WTERMSIG(st), strsignal(WTERMSIG(st)));
            failed++;
        } else if (WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %d: exit status %d\n", c, WEXITSTATUS(st));
            failed++;
        }
    }
    CHECK(failed == 0, "%d of %d processes of %d rounds each failed", failed, CHILDREN, ROUNDS);
    printf("%d processes, %d rounds each: ok\n", CHILDREN, ROUNDS);
    return 0;
}
