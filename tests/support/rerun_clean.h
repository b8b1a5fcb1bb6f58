/* tests/support/rerun_clean.h: a test that measures what a process of its
 * own does (its page table, its mappings) runs itself again with no FOLIO_*
 * variable of the caller's environment but FOLIO_LIVE=0 (the live file is a
 * process's second second, not its start-up; a FOLIO_LIVE among the
 * settings replaces it) and the settings given, then with marker set,
 * which tells the second run it is the clean one.
 * Include after check.h. */
#ifndef FOLIO_TEST_RERUN_CLEAN_H
#define FOLIO_TEST_RERUN_CLEAN_H

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* settings: "NAME=value" strings, NULL-terminated (may be NULL) */
static inline void rerun_clean(char **argv, const char *marker, const char *const *settings)
{
    static char *env[256];
    size_t k = 0;
    for (char **e = environ; *e && k < 240; e++)
        if (strncmp(*e, "FOLIO_", 6) != 0)
            env[k++] = *e;
    bool live_set = false;
    for (size_t i = 0; settings && settings[i]; i++)
        live_set |= strncmp(settings[i], "FOLIO_LIVE=", 11) == 0;
    if (!live_set)
        env[k++] = "FOLIO_LIVE=0";
    for (size_t i = 0; settings && settings[i] && k < 254; i++)
        env[k++] = (char *)settings[i];
    env[k++] = (char *)marker;
    env[k] = NULL;
    execve("/proc/self/exe", argv, env);
    FAIL("execve /proc/self/exe");
}

#endif
