/* lock: the slow half of the futex mutex in internal.h.
 *
 * Invariant: v == 2 whenever a thread may be sleeping on the lock, so an
 * unlock that sees 2 always wakes one sleeper. */
#include "internal.h"

void lock_slow(lock_t *l) {
    for (int spin = 0; spin < 64; spin++) {
        __builtin_ia32_pause();
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 && lock_try(l)) return;
    }
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0) os_futex_wait(&l->v, 2);
}
