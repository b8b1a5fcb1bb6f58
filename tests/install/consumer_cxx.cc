// consumer_cxx: C++ new and delete of a program linked with an installed
// folio are folio's: its counters move by exactly the objects made.
#include <folio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static char json[1 << 16];

static long counter(const char *key) {
    char k[64];
    folio_report_json(json, sizeof json);
    std::snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = std::strstr(json, k);
    return p ? std::atol(p + std::strlen(k)) : -1;
}

// the compiler may drop a new whose object is never used: hide the pointer
template <class T> static T *opaque(T *p) {
    asm volatile("" : "+r"(p));
    return p;
}

static bool round_trip(long *made, long *live_made, long *live_after) {
    long allocs = counter("allocs"), live = counter("live_blocks");
    int *one = opaque(new int(7));
    double *arr = opaque(new double[100]);
    auto *v = opaque(new std::vector<int>(1000)); // the object and its storage
    *made = counter("allocs") - allocs;
    *live_made = counter("live_blocks") - live;
    delete opaque(v);
    delete[] opaque(arr);
    delete opaque(one);
    *live_after = counter("live_blocks") - live;
    return true;
}

int main() {
    long made, live, after;
    round_trip(&made, &live, &after); // first use of the C and C++ libraries
    round_trip(&made, &live, &after);
    bool ok = made == 4 && live == 4 && after == 0;
    std::printf("consumer_cxx: new +%ld, live +%ld, after delete %+ld: new is %sfolio's\n", made,
                live, after, ok ? "" : "NOT ");
    return ok ? 0 : 1;
}
