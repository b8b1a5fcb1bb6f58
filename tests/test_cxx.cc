// folio-test: no-sanitize
/* test_cxx: C++ new/delete in all forms with folio as the allocator: plain,
 * array, nothrow, sized (every block comes back: folio's live counts return
 * to their start), aligned (std::align_val_t, over-aligned types),
 * their combinations; a huge new throws std::bad_alloc (after calling the
 * new_handler), a huge nothrow new returns nullptr; containers and shared
 * pointers freed across threads. */
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <malloc.h>

#include "check.h"
#include "api.h"

static bool is_aligned(const void *p, std::size_t a)
{
    return (reinterpret_cast<std::uintptr_t>(OPAQUE(p)) & (a - 1)) == 0;
}

static int live_objects;

struct Obj {
    std::uint64_t v[3];
    Obj() : v{1, 2, 3} { live_objects++; }
    ~Obj() { live_objects--; }
};

struct alignas(64) Line {
    unsigned char b[64];
};

struct alignas(4096) Page {
    unsigned char b[100];
};

static void plain_forms()
{
    // plain
    for (std::size_t n = 1; n <= 5000; n += 7) {
        int *p = OPAQUE(new int(static_cast<int>(n)));
        CHECK(*p == static_cast<int>(n) && is_aligned(p, 16), "new int");
        delete p;
        char *a = OPAQUE(new char[n]);
        CHECK(is_aligned(a, 16), "new char[%zu] = %p not 16-aligned", n, static_cast<void *>(a));
        CHECK(malloc_usable_size(a) >= n, "new char[%zu]: usable size %zu", n,
              malloc_usable_size(a));
        std::memset(a, 0x5a, n);
        delete[] a;
    }
    // array of objects with a destructor (the array cookie)
    for (std::size_t n = 1; n < 20000; n = n * 3 + 1) {
        Obj *a = OPAQUE(new Obj[OPAQUE(n)]);
        CHECK(live_objects == static_cast<int>(n), "new Obj[%zu] constructed %d", n, live_objects);
        CHECK(a[n - 1].v[2] == 3, "new Obj[%zu] not constructed", n);
        delete[] a;
        CHECK(live_objects == 0, "delete[] Obj left %d objects", live_objects);
    }
    // large and huge
    for (std::size_t n = 65536; n <= (std::size_t(40) << 20); n *= 3) {
        unsigned char *p = OPAQUE(new unsigned char[OPAQUE(n)]);
        p[0] = 1;
        p[n - 1] = 2;
        delete[] p;
        void *q = ::operator new(OPAQUE(n));
        static_cast<unsigned char *>(q)[n - 1] = 3;
        ::operator delete(q);
    }
}

static void nothrow_forms()
{
    for (std::size_t n = 1; n < (std::size_t(8) << 20); n = n * 5 + 3) {
        char *p = OPAQUE(new (std::nothrow) char[OPAQUE(n)]);
        CHECK(p != nullptr, "new (nothrow) char[%zu] returned nullptr", n);
        p[n - 1] = 1;
        delete[] p;
        Obj *o = OPAQUE(new (std::nothrow) Obj);
        CHECK(o != nullptr && o->v[0] == 1, "new (nothrow) Obj");
        delete o;
        void *r = ::operator new(OPAQUE(n), std::nothrow);
        CHECK(r != nullptr, "operator new(%zu, nothrow)", n);
        ::operator delete(r, std::nothrow);
        r = ::operator new[](OPAQUE(n), std::nothrow);
        CHECK(r != nullptr, "operator new[](%zu, nothrow)", n);
        ::operator delete[](r, std::nothrow);
    }
}

// One top-level counter of folio's report.
static std::uint64_t report_value(const char *key)
{
    static char rep[1 << 16];
    folio_report_json(rep, sizeof rep);
    char pat[96];
    std::snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *s = std::strstr(rep, pat);
    CHECK(s != nullptr, "report has no %s", key);
    return std::strtoull(s + std::strlen(pat), nullptr, 10);
}

static void sized_forms()
{
    std::uint64_t blocks0 = report_value("live_blocks"), bytes0 = report_value("live_bytes");
    for (std::size_t n = 1; n < (std::size_t(20) << 20); n = n < 4096 ? n + 13 : n * 2) {
        void *p = ::operator new(OPAQUE(n));
        std::memset(p, 1, n);
        ::operator delete(p, n);
        p = ::operator new[](OPAQUE(n));
        std::memset(p, 2, n);
        ::operator delete[](p, n);
    }
    // The compiler's own sized deletes (complete types).
    for (int i = 0; i < 1000; i++) {
        Obj *o = OPAQUE(new Obj);
        delete o;
        std::uint64_t *a = OPAQUE(new std::uint64_t[static_cast<std::size_t>(i) + 1]);
        a[i] = 7;
        delete[] a;
    }
    std::uint64_t blocks = report_value("live_blocks"), bytes = report_value("live_bytes");
    CHECK(blocks == blocks0 && bytes == bytes0,
          "after sized deletes: %lld live blocks and %lld live bytes more than before",
          static_cast<long long>(blocks - blocks0), static_cast<long long>(bytes - bytes0));
}

static void aligned_forms()
{
    for (std::size_t a = 16; a <= (std::size_t(2) << 20); a <<= 1) {
        const std::size_t sizes[] = {1, a / 2 + 1, a, a + 1, 3 * a, 1000, 100000};
        for (std::size_t n : sizes) {
            std::align_val_t al{a};
            void *p = ::operator new(OPAQUE(n), al);
            CHECK(is_aligned(p, a), "operator new(%zu, align %zu) = %p", n, a, p);
            std::memset(p, 0x11, n);
            ::operator delete(p, al);

            p = ::operator new[](OPAQUE(n), al);
            CHECK(is_aligned(p, a), "operator new[](%zu, align %zu) = %p", n, a, p);
            std::memset(p, 0x12, n);
            ::operator delete[](p, al);

            p = ::operator new(OPAQUE(n), al, std::nothrow);
            CHECK(p != nullptr && is_aligned(p, a), "operator new(%zu, align %zu, nothrow) = %p",
                  n, a, p);
            ::operator delete(p, al, std::nothrow);

            p = ::operator new[](OPAQUE(n), al, std::nothrow);
            CHECK(p != nullptr && is_aligned(p, a), "operator new[](%zu, align %zu, nothrow)", n,
                  a);
            ::operator delete[](p, al, std::nothrow);

            // sized + aligned
            p = ::operator new(OPAQUE(n), al);
            CHECK(is_aligned(p, a), "operator new(%zu, align %zu)", n, a);
            ::operator delete(p, n, al);
            p = ::operator new[](OPAQUE(n), al);
            CHECK(is_aligned(p, a), "operator new[](%zu, align %zu)", n, a);
            ::operator delete[](p, n, al);
        }
    }
    // The expression forms for over-aligned types.
    void *p = ::operator new(100, std::align_val_t(64));
    CHECK(is_aligned(p, 64), "new (std::align_val_t(64))");
    ::operator delete(p, std::align_val_t(64));
    for (int i = 0; i < 500; i++) {
        Line *l = OPAQUE(new Line);
        CHECK(is_aligned(l, 64), "new Line (alignas 64) = %p", static_cast<void *>(l));
        std::memset(l->b, i, sizeof l->b);
        delete l;
        Line *ls = OPAQUE(new Line[static_cast<std::size_t>(i) + 1]);
        CHECK(is_aligned(ls, 64), "new Line[%d] = %p", i + 1, static_cast<void *>(ls));
        std::memset(ls, 1, sizeof(Line) * (static_cast<std::size_t>(i) + 1));
        delete[] ls;
    }
    for (int i = 0; i < 100; i++) {
        Page *pg = OPAQUE(new Page);
        CHECK(is_aligned(pg, 4096), "new Page (alignas 4096) = %p", static_cast<void *>(pg));
        delete pg;
        Page *pn = OPAQUE(new (std::nothrow) Page[3]);
        CHECK(pn != nullptr && is_aligned(pn, 4096), "new (nothrow) Page[3]");
        delete[] pn;
    }
    // Many aligned objects alive at once do not overlap.
    std::vector<Line *> many;
    for (int i = 0; i < 3000; i++) {
        many.push_back(new Line);
        std::memset(many.back()->b, i & 0xff, 64);
    }
    for (int i = 0; i < 3000; i++) {
        CHECK(first_not(many[static_cast<std::size_t>(i)]->b, 64,
                        static_cast<unsigned char>(i & 0xff)) == static_cast<std::size_t>(-1),
              "aligned object %d overwritten", i);
        delete many[static_cast<std::size_t>(i)];
    }
}

static int handler_calls;
static void *reserve;

static void on_out_of_memory()
{
    handler_calls++;
    if (reserve) {
        std::free(reserve);   // a typical handler: release a reserve, retry
        reserve = nullptr;
    } else {
        std::set_new_handler(nullptr);   // give up: operator new throws
    }
}

static void huge_forms()
{
    const std::size_t huge[] = {SIZE_MAX / 2, SIZE_MAX - 4096, std::size_t(1) << 62,
                                static_cast<std::size_t>(PTRDIFF_MAX)};
    for (std::size_t n : huge) {
        bool thrown = false;
        try {
            void *p = ::operator new(OPAQUE(n));
            ::operator delete(p);
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "operator new(%#zx) did not throw std::bad_alloc", n);

        thrown = false;
        try {
            char *p = OPAQUE(new char[OPAQUE(n)]);
            delete[] p;
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "new char[%#zx] did not throw std::bad_alloc", n);

        thrown = false;
        try {
            void *p = ::operator new(OPAQUE(n), std::align_val_t(64));
            ::operator delete(p, std::align_val_t(64));
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "operator new(%#zx, align 64) did not throw std::bad_alloc", n);

        CHECK(::operator new(OPAQUE(n), std::nothrow) == nullptr,
              "operator new(%#zx, nothrow) did not return nullptr", n);
        CHECK(::operator new[](OPAQUE(n), std::nothrow) == nullptr,
              "operator new[](%#zx, nothrow) did not return nullptr", n);
        CHECK(::operator new(OPAQUE(n), std::align_val_t(4096), std::nothrow) == nullptr,
              "operator new(%#zx, align 4096, nothrow) did not return nullptr", n);
    }
    // Array length overflow: std::bad_array_new_length, a std::bad_alloc.
    {
        bool thrown = false;
        try {
            std::size_t n = OPAQUE(SIZE_MAX / 4);
            std::uint64_t *p = OPAQUE(new std::uint64_t[n]);
            delete[] p;
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "new uint64_t[SIZE_MAX/4] did not throw");
    }
    // The new_handler is called when allocation fails: once to release a
    // reserve (then operator new retries), once more to give up.
    reserve = std::malloc(1000);
    handler_calls = 0;
    std::set_new_handler(on_out_of_memory);
    bool thrown = false;
    try {
        void *p = ::operator new(OPAQUE(SIZE_MAX / 2));
        ::operator delete(p);
    } catch (const std::bad_alloc &) {
        thrown = true;
    }
    std::set_new_handler(nullptr);
    CHECK(thrown, "operator new(SIZE_MAX/2) with a new_handler did not throw");
    CHECK(handler_calls == 2, "the new_handler was called %d times, want 2", handler_calls);
    CHECK(reserve == nullptr, "the new_handler did not run");
    // And nothing is broken afterwards.
    std::string s(100000, 'x');
    CHECK(s.size() == 100000 && s[99999] == 'x', "std::string after bad_alloc");
}

static int throwing_calls;
static void throw_bad_alloc()
{
    throwing_calls++;
    throw std::bad_alloc();
}

// A nothrow new whose new_handler throws std::bad_alloc returns nullptr (the
// standard's "as if it called the throwing form in a try block"): it ended
// the process (std::terminate) before session 15.  And a nothrow new whose
// handler releases a reserve retries, then returns nullptr once the handler
// gives up.
static void nothrow_with_handler()
{
    const std::size_t n = OPAQUE(SIZE_MAX / 4);
    std::set_new_handler(throw_bad_alloc);
    throwing_calls = 0;
    CHECK(::operator new(n, std::nothrow) == nullptr, "operator new(nothrow), throwing handler");
    CHECK(::operator new[](n, std::nothrow) == nullptr, "operator new[](nothrow), throwing handler");
    CHECK(::operator new(n, std::align_val_t(64), std::nothrow) == nullptr,
          "operator new(align 64, nothrow), throwing handler");
    CHECK(::operator new[](n, std::align_val_t(64), std::nothrow) == nullptr,
          "operator new[](align 64, nothrow), throwing handler");
    CHECK(OPAQUE(new (std::nothrow) char[n]) == nullptr, "new (nothrow) char[], throwing handler");
    CHECK(throwing_calls == 5, "the throwing new_handler was called %d times, want 5", throwing_calls);

    reserve = std::malloc(1000);
    handler_calls = 0;
    std::set_new_handler(on_out_of_memory);
    CHECK(::operator new(n, std::nothrow) == nullptr, "operator new(nothrow), releasing handler");
    CHECK(handler_calls == 2, "the releasing new_handler was called %d times, want 2", handler_calls);
    CHECK(reserve == nullptr, "the releasing new_handler did not run");
    std::set_new_handler(nullptr);

    void *p = ::operator new(100, std::nothrow); // and small ones still succeed
    CHECK(p != nullptr, "operator new(100, nothrow) after the handlers");
    ::operator delete(p);
}

static void containers_across_threads()
{
    std::atomic<long> sum{0};
    std::vector<std::shared_ptr<std::vector<std::string>>> made(64);
    std::thread producer([&] {
        for (std::size_t i = 0; i < made.size(); i++) {
            auto v = std::make_shared<std::vector<std::string>>();
            for (int k = 0; k < 300; k++)
                v->push_back(std::string(static_cast<std::size_t>(k % 50 + 1), 'a' + k % 26));
            made[i] = v;
        }
    });
    producer.join();
    std::vector<std::thread> consumers;
    for (int t = 0; t < 4; t++) {
        consumers.emplace_back([&, t] {
            std::map<int, std::string> m;
            std::unordered_map<std::string, int> um;
            for (std::size_t i = static_cast<std::size_t>(t); i < made.size(); i += 4) {
                std::shared_ptr<std::vector<std::string>> v;
                v.swap(made[i]);   // the last reference dies in this thread
                for (auto &s : *v) {
                    sum += static_cast<long>(s.size());
                    m[static_cast<int>(m.size())] = s + s;
                    um[s + std::to_string(i)]++;
                }
            }
        });
    }
    for (auto &th : consumers)
        th.join();
    long want = 0;
    for (int k = 0; k < 300; k++)
        want += k % 50 + 1;
    want *= 64;
    CHECK(sum.load() == want, "containers: sum %ld, want %ld", sum.load(), want);
}

int main()
{
    plain_forms();
    nothrow_forms();
    sized_forms();
    aligned_forms();
    huge_forms();
    nothrow_with_handler();
    containers_across_threads();
    return 0;
}
