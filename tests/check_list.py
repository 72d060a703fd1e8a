"""The check list of the scripted tests: `check(cond, what)` prints "ok" or "FAIL" and what was
checked; `check.finish()` exits 1 when any check failed, naming how many, and 0 otherwise."""
import sys


class CheckList:
    def __init__(self):
        self.failures = []

    def __call__(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            self.failures.append(what)
        return cond

    def finish(self):
        if self.failures:
            sys.exit(f"{len(self.failures)} check(s) failed")
        print("all checks passed")
        sys.exit(0)
