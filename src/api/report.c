/* report: folio's counters, gathered from the modules that own them, as JSON
 * (FOLIO_REPORT, folio_report_json) and as a readable summary.
 * Invariant: nothing here allocates (it runs at exit, inside malloc's
 * process, possibly with a broken heap); text is built in caller or static
 * buffers with our own number formatting. */
#include <errno.h>
#include <string.h>

#include "api_layer.h"

struct sb {
    char *buf;
    size_t cap, len;
};

static void sb_put(struct sb *b, const char *s) {
    for (; *s; s++, b->len++)
        if (b->len + 1 < b->cap) b->buf[b->len] = *s;
}
static void sb_u64(struct sb *b, uint64_t v) {
    char t[24];
    sb_put(b, u64_text(t, v));
}
static void sb_i64(struct sb *b, long v) {
    if (v < 0) {
        sb_put(b, "-");
        sb_u64(b, (uint64_t)-v);
    } else {
        sb_u64(b, (uint64_t)v);
    }
}
static void sb_put_cb(void *b, const char *s) { sb_put(b, s); }
static void kv(struct sb *b, const char *k, uint64_t v) {
    sb_put(b, "\"");
    sb_put(b, k);
    sb_put(b, "\": ");
    sb_u64(b, v);
    sb_put(b, ",\n");
}

struct snapshot {
    struct heap_counts hc;
    struct zone_stats zs;
    struct huge_stats hs;
    struct pageset_stats pcp;
    struct pressure_stats pr;
    struct dense_stats ds;
    uint64_t allocs, frees, live_bytes; /* every tier */
    uint64_t minflt, majflt, maxrss, rss, mapped, peak_mapped, map_failures;
    struct as_stats as;
    struct os_calls calls;
    struct os_advice_calls advice;
    struct thp_stats thp;
    uint64_t anon_huge, smaps_rss; /* /proc/self/smaps_rollup */
};

static void snap(struct snapshot *s) {
    memset(s, 0, sizeof *s);
    heap_counts(&s->hc);
    zone_stats(&s->zs);
    huge_stats(&s->hs);
    pageset_totals(&s->pcp);
    pressure_stats(&s->pr);
    dense_stats(&s->ds);
    /* live: blocks handed out and not freed, by their usable size (what
     * malloc_usable_size returns: small: the class size; large: its pages;
     * huge: its mapping) */
    s->allocs = s->hc.small_allocs + s->hc.large_allocs + s->hs.allocs + s->ds.allocs;
    s->frees = s->hc.frees + s->hc.large_frees + s->hs.frees + s->ds.frees;
    s->live_bytes = s->hc.small_live_bytes + (s->hc.large_pages << PAGE_SHIFT) + s->hs.live_bytes + s->ds.live_bytes;
    os_rusage(&s->minflt, &s->majflt, &s->maxrss, &s->rss);
    if (s->maxrss < s->rss) s->maxrss = s->rss;
    s->mapped = atomic_load(&os_mapped_bytes);
    s->peak_mapped = atomic_load(&os_peak_mapped_bytes);
    s->map_failures = atomic_load(&os_map_failures);
    os_calls(&s->calls);
    os_advice_calls(&s->advice);
    thp_stats(&s->thp);
    os_smaps_rollup(&s->anon_huge, &s->smaps_rss);
    as_stats(&s->as);
}

/* one entry of the "locks" array per folio lock */
struct lock_json {
    struct sb *b;
    int n;
};
static void lock_entry(void *ctx, const char *name, long index, lock_t *l) {
    struct lock_json *j = ctx;
    struct lock_stat st;
    lock_stat_read(l, &st);
    sb_put(j->b, j->n++ ? ",\n  {\"name\": \"" : "\n  {\"name\": \"");
    sb_put(j->b, name);
    sb_put(j->b, "\", \"index\": ");
    sb_i64(j->b, index);
    sb_put(j->b, ", \"acquired\": ");
    sb_u64(j->b, st.acquired);
    sb_put(j->b, ", \"contended\": ");
    sb_u64(j->b, st.contended);
    sb_put(j->b, ", \"held_ns\": ");
    sb_u64(j->b, st.held_ns);
    sb_put(j->b, "}");
}

/* The system's THP settings and FOLIO_THP, as one JSON object. */
static void thp_json(struct sb *b) {
    const struct os_thp *t = thp_system();
    sb_put(b, "\"thp\": {\"option\": \"");
    sb_put(b, thp_option_names[opt.thp]);
    sb_put(b, "\", \"enabled\": \"");
    sb_put(b, os_thp_mode_names[t->enabled]);
    sb_put(b, "\", \"defrag\": \"");
    sb_put(b, os_thp_defrag_names[t->defrag]);
    sb_put(b, "\", \"pmd\": \"");
    sb_put(b, os_thp_mode_names[t->pmd]);
    sb_put(b, "\", \"sizes\": {");
    int first = 1;
    for (int o = 1; o <= OS_THP_SIZES; o++) {
        if (t->size_mode[o - 1] == OS_THP_UNKNOWN) continue;
        sb_put(b, first ? "\"" : ", \"");
        sb_u64(b, (uint64_t)4 << o);
        sb_put(b, "kB\": \"");
        sb_put(b, os_thp_mode_names[t->size_mode[o - 1]]);
        sb_put(b, "\"");
        first = 0;
    }
    sb_put(b, "}},\n");
}

EXPORT size_t folio_report_json(char *buf, size_t len) {
    folio_init();
    struct snapshot s;
    snap(&s);
    struct sb b = {buf, len, 0};
    sb_put(&b, "{\n");
    kv(&b, "pid", (uint64_t)os_getpid());
    kv(&b, "allocs", s.allocs);
    kv(&b, "frees", s.frees);
    kv(&b, "live_blocks", s.allocs - s.frees);
    kv(&b, "live_bytes", s.live_bytes);
    kv(&b, "small_allocs", s.hc.small_allocs);
    kv(&b, "small_bytes", s.hc.small_bytes);
    kv(&b, "large_allocs", s.hc.large_allocs);
    kv(&b, "large_bytes", s.hc.large_bytes);
    kv(&b, "remote_frees", s.hc.remote_frees);
    kv(&b, "remote_collects", s.hc.remote_collects);
    kv(&b, "remote_collected", s.hc.remote_collected);
    kv(&b, "heap_slab_cache_hits", s.hc.slab_cache_hits);
    kv(&b, "heap_slab_cache_raises", s.hc.slab_cache_raises);
    kv(&b, "heap_slab_cache_high_peak", s.hc.slab_cache_high_peak);
    kv(&b, "heap_big_cache_hits", s.hc.big_cache_hits);
    kv(&b, "heap_big_cache_returns", s.hc.big_cache_returns);
    kv(&b, "heap_list_refills", s.hc.list_refills);
    kv(&b, "heap_list_flushes", s.hc.list_flushes);
    kv(&b, "heap_list_flushed", s.hc.list_flushed);
    kv(&b, "remote_batches", s.hc.remote_batches);
    kv(&b, "floating_slabs_queued", s.hc.floating_slabs_queued);
    kv(&b, "floating_slabs_handed", s.hc.floating_slabs_handed);
    kv(&b, "floating_slabs_spared", s.hc.floating_slabs_spared);
    kv(&b, "huge_allocs", s.hs.allocs);
    kv(&b, "huge_bytes", s.hs.bytes);
    kv(&b, "dense_allocs", s.ds.allocs);
    kv(&b, "dense_frees", s.ds.frees);
    kv(&b, "dense_live_bytes", s.ds.live_bytes);
    kv(&b, "dense_region_bytes", s.ds.region_bytes);
    kv(&b, "dense_regions", s.ds.regions);
    kv(&b, "dense_regions_added", s.ds.regions_added);
    kv(&b, "dense_closed", s.ds.closed);
    kv(&b, "dense_sizes_graduated", s.ds.graduated);
    kv(&b, "dense_purged_bytes", s.ds.purged_bytes);
    kv(&b, "zone_lock_acquired", s.zs.lock_acquired);
    kv(&b, "zone_lock_contended", s.zs.lock_contended);
    kv(&b, "pages_from_zone", s.zs.pages_from_zone);
    kv(&b, "pages_to_zone", s.zs.pages_to_zone);
    kv(&b, "zone_free_pages", s.zs.free_pages);
    kv(&b, "zone_dirty_pages", s.zs.dirty_pages);
    kv(&b, "zone_chunks", s.zs.chunks);
    kv(&b, "zone_meta_pages", s.zs.meta_pages);
    kv(&b, "zone_depot_pages", s.zs.depot_pages);
    kv(&b, "zone_depot_gets", s.zs.depot_gets);
    kv(&b, "zone_depot_puts", s.zs.depot_puts);
    kv(&b, "zone_depot_bypassed", s.zs.depot_bypassed);
    kv(&b, "zone_chunks_moved", s.zs.chunks_moved_in);
    kv(&b, "zones", zones_in_use());
    kv(&b, "zone_depot_released", s.zs.depot_released);
    kv(&b, "pcp_refills", s.pcp.refills);
    kv(&b, "pcp_drains", s.pcp.drains);
    kv(&b, "free_high_drains", s.pcp.free_high_drains);
    kv(&b, "pcp_decays", s.pcp.decays);
    kv(&b, "pcp_trylock_failed", s.pcp.trylock_failed);
    kv(&b, "pcp_held_pages", (uint64_t)s.pcp.count);
    kv(&b, "pcp_free_high_batch", pageset_free_high_batch());
    kv(&b, "pcp_in_use", (uint64_t)s.pcp.in_use);
    kv(&b, "pcp_held_chunks", (uint64_t)s.pcp.chunks);
    kv(&b, "pcp_chunks_drained", s.pcp.chunks_drained);
    kv(&b, "pcp_exact_hits", s.pcp.exact_hits);
    kv(&b, "pcp_exact_misses", s.pcp.exact_misses);
    kv(&b, "pcp_exact_near_hits", s.pcp.exact_near_hits);
    kv(&b, "pcp_reclaim_caps", s.pcp.reclaim_caps);
    kv(&b, "pressure_state", (uint64_t)s.pr.state);
    kv(&b, "pressure_below_high_periods", s.pr.below_high_periods);
    kv(&b, "pressure_reclaim_periods", s.pr.reclaim_periods);
    kv(&b, "pressure_limit_reads", s.pr.limit_reads);
    kv(&b, "pressure_cgroup_limit_bytes", s.pr.cgroup_limit);
    kv(&b, "purges", s.zs.purges + s.hs.purges);
    kv(&b, "purged_bytes", s.zs.purged_bytes + s.hs.purged_bytes);
    kv(&b, "zone_bound_purged_bytes", s.zs.bound_purged_bytes);
    kv(&b, "huge_mapped_bytes", s.hs.mapped);
    kv(&b, "huge_cached_bytes", s.hs.cached);
    kv(&b, "huge_reserved_bytes", s.hs.reserved);
    kv(&b, "huge_numa_placed", s.hs.placed);
    kv(&b, "numa_nodes", (uint64_t)numa_nodes());
    kv(&b, "huge_cache_hits", s.hs.cache_hits);
    kv(&b, "huge_mremaps", s.hs.mremaps);
    kv(&b, "mapped_bytes", s.mapped);
    kv(&b, "peak_mapped_bytes", s.peak_mapped);
    kv(&b, "mmap_failures", s.map_failures);
    kv(&b, "os_mmap_calls", s.calls.mmap);
    kv(&b, "os_munmap_calls", s.calls.munmap);
    kv(&b, "os_mremap_calls", s.calls.mremap);
    kv(&b, "os_mprotect_calls", s.calls.mprotect);
    kv(&b, "os_madvise_calls", s.calls.madvise);
    kv(&b, "as_reclaims", s.as.reclaims);
    kv(&b, "as_released_bytes", s.as.released_bytes);
    kv(&b, "rss_bytes", s.rss);
    kv(&b, "peak_rss_bytes", s.maxrss);
    kv(&b, "minor_faults", s.minflt);
    kv(&b, "major_faults", s.majflt);
    /* huge pages and batched faulting (thp.c) */
    kv(&b, "thp_chunks_advised", s.thp.advised);
    kv(&b, "thp_chunks_collapsed", s.thp.collapsed);
    kv(&b, "thp_chunks_split", s.thp.split);
    kv(&b, "thp_huge_regions_advised", s.thp.regions_advised);
    kv(&b, "thp_purges_skipped", s.thp.purges_skipped);
    kv(&b, "populated_bytes", s.thp.populated_bytes);
    kv(&b, "os_madvise_hugepage_calls", s.advice.hugepage);
    kv(&b, "os_madvise_nohugepage_calls", s.advice.nohugepage);
    kv(&b, "os_madvise_collapse_calls", s.advice.collapse);
    kv(&b, "os_madvise_populate_calls", s.advice.populate);
    kv(&b, "anon_huge_bytes", s.anon_huge);
    kv(&b, "smaps_rss_bytes", s.smaps_rss);
    /* minor faults per MiB of peak RSS, in thousandths */
    kv(&b, "faults_per_peak_mib_milli", s.maxrss ? s.minflt * 1000u * (1u << 20) / s.maxrss : 0);
    thp_json(&b);
    struct clear_stats cs; /* the clearing engine */
    clear_stats(&cs);
    kv(&b, "cleared_bytes_loop", cs.loop);
    kv(&b, "cleared_bytes_stosb", cs.stosb);
    kv(&b, "cleared_bytes_nt", cs.nt);
    kv(&b, "cleared_bytes_hybrid", cs.hybrid);
    kv(&b, "cleared_bytes_other", cs.other);
    kv(&b, "zero_skipped_bytes", cs.zero_skipped);
    sb_put(&b, "\"clear\": ");
    clear_json(sb_put_cb, &b);
    sb_put(&b, ",\n");
    sb_put(&b, "\"pagesets\": [");
    for (int i = 0; i < pageset_count(); i++) {
        struct pageset_stats p;
        pageset_stats(i, &p);
        sb_put(&b, i ? ",\n  {" : "\n  {");
        sb_put(&b, "\"cpu\": ");
        sb_i64(&b, p.cpu);
        sb_put(&b, ", \"count\": ");
        sb_i64(&b, p.count);
        sb_put(&b, ", \"high\": ");
        sb_i64(&b, p.high);
        sb_put(&b, ", \"high_min\": ");
        sb_i64(&b, p.high_min);
        sb_put(&b, ", \"high_max\": ");
        sb_i64(&b, p.high_max);
        sb_put(&b, ", \"high_lowest\": ");
        sb_i64(&b, p.high_lowest);
        sb_put(&b, ", \"high_highest\": ");
        sb_i64(&b, p.high_highest);
        sb_put(&b, ", \"batch\": ");
        sb_i64(&b, p.batch);
        sb_put(&b, ", \"chunks\": ");
        sb_i64(&b, p.chunks);
        sb_put(&b, ", \"refills\": ");
        sb_u64(&b, p.refills);
        sb_put(&b, ", \"drains\": ");
        sb_u64(&b, p.drains);
        sb_put(&b, ", \"free_high_drains\": ");
        sb_u64(&b, p.free_high_drains);
        sb_put(&b, ", \"decays\": ");
        sb_u64(&b, p.decays);
        sb_put(&b, ", \"trylock_failed\": ");
        sb_u64(&b, p.trylock_failed);
        sb_put(&b, ", \"reclaim_caps\": ");
        sb_u64(&b, p.reclaim_caps);
        sb_put(&b, ", \"chunks_drained\": ");
        sb_u64(&b, p.chunks_drained);
        sb_put(&b, ", \"exact_pages\": ");
        sb_i64(&b, p.exact_pages);
        sb_put(&b, ", \"exact_high\": ");
        sb_i64(&b, p.exact_high);
        sb_put(&b, ", \"in_use\": ");
        sb_i64(&b, p.in_use);
        sb_put(&b, "}");
    }
    sb_put(&b, "],\n");
    kv(&b, "lock_stats_timed", lock_timing);
    sb_put(&b, "\"locks\": [");
    struct lock_json lj = {&b, 0};
    api_visit_locks(lock_entry, &lj);
    sb_put(&b, "],\n\"options\": {");
    int first = 1;
#define X(name, env, def, doc)                                                                     \
    sb_put(&b, first ? "\"" env "\": " : ", \"" env "\": ");                                   \
    sb_i64(&b, opt.name);                                                                      \
    first = 0;
    FOLIO_OPTIONS(X)
#undef X
    sb_put(&b, "}\n}\n");
    if (len) buf[b.len < len ? b.len : len - 1] = 0;
    return b.len;
}

static char report_buf[64 * 1024];

EXPORT int folio_report_write(const char *path) {
    if (!path || !*path) {
        errno = EINVAL;
        return -1;
    }
    char real[4096];
    size_t n = 0;
    for (const char *p = path; *p && n + 24 < sizeof real; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            struct sb b = {real + n, 24, 0};
            sb_u64(&b, (uint64_t)os_getpid());
            n += b.len;
            p++;
        } else {
            real[n++] = *p;
        }
    }
    real[n] = 0;
    size_t len = folio_report_json(report_buf, sizeof report_buf);
    if (len >= sizeof report_buf) len = sizeof report_buf - 1;
    return os_write_file(real, report_buf, len);
}

static void line(struct sb *b, const char *label, uint64_t v, const char *unit) {
    sb_put(b, label);
    sb_u64(b, v);
    sb_put(b, unit);
    sb_put(b, "\n");
}

EXPORT void folio_report_print(int fd) {
    static char text[8192];
    struct snapshot s;
    folio_init();
    snap(&s);
    struct sb b = {text, sizeof text, 0};
    sb_put(&b, "folio report\n");
    line(&b, "  small allocs      ", s.hc.small_allocs, "");
    line(&b, "  large allocs      ", s.hc.large_allocs, "");
    line(&b, "  huge allocs       ", s.hs.allocs, "");
    line(&b, "  dense allocs      ", s.ds.allocs, "");
    line(&b, "  frees             ", s.frees, "");
    line(&b, "  live blocks       ", s.allocs - s.frees, "");
    line(&b, "  live bytes        ", s.live_bytes, "");
    line(&b, "  zone lock taken   ", s.zs.lock_acquired, "");
    line(&b, "  zone lock waited  ", s.zs.lock_contended, "");
    line(&b, "  pages from zone   ", s.zs.pages_from_zone, "");
    line(&b, "  pages to zone     ", s.zs.pages_to_zone, "");
    line(&b, "  pageset refills   ", s.pcp.refills, "");
    line(&b, "  pageset drains    ", s.pcp.drains, "");
    line(&b, "  free_high drains  ", s.pcp.free_high_drains, "");
    line(&b, "  pageset decays    ", s.pcp.decays, "");
    line(&b, "  purged            ", s.zs.purged_bytes + s.hs.purged_bytes, " bytes");
    line(&b, "  mapped (peak)     ", s.peak_mapped, " bytes");
    line(&b, "  mmap failures     ", s.map_failures, "");
    line(&b, "  AS given back     ", s.as.released_bytes, " bytes");
    line(&b, "  resident (peak)   ", s.maxrss, " bytes");
    line(&b, "  minor faults      ", s.minflt, "");
    struct clear_stats cs;
    clear_stats(&cs);
    line(&b, "  cleared           ", cs.loop + cs.stosb + cs.nt + cs.hybrid + cs.other, " bytes");
    line(&b, "    non-temporal    ", cs.nt + cs.hybrid, " bytes");
    line(&b, "    known zero      ", cs.zero_skipped, " bytes (not cleared)");
    line(&b, "    nt from (hot)   ", cs.hot_nt_from, " bytes (0: never)");
    line(&b, "    nt from (cold)  ", cs.cold_nt_from, " bytes");
    size_t n = b.len < sizeof text ? b.len : sizeof text - 1;
    text[n] = 0;
    os_write_fd(fd, text);
}
