"""The seed of a randomized script test, as tests/test_seed.hpp gives the C++ tests one: the fixed
seed chosen once for CI, printed; LPDIAG_TEST_SEED=fresh draws a new one (scripts/validate's
sweeps, outside CI); LPDIAG_TEST_SEED=N repeats a printed seed N."""
import os
import random


def seed(what, fixed):
    env = os.environ.get("LPDIAG_TEST_SEED", "")
    s = random.SystemRandom().randrange(1 << 31) if env == "fresh" else int(env) if env else fixed
    print(f"[seed] {what}: {s}{' (fixed)' if s == fixed else ''} (LPDIAG_TEST_SEED={s} repeats it)", flush=True)
    return s
