"""Bad arguments to torch.ops.lpdiag.attention (and Monitor.record) raise RuntimeError naming the argument, from Python,
and the process survives (a private static libstdc++ in our libraries once made it abort here).
On a machine with CUDA and the kernels, the CUDA path's checks are exercised too.
    op_errors.py LIBRARY"""
import sys

import torch

torch.ops.load_library(sys.argv[1])
failures = 0


def att(q, k, v, causal, policy, fix, level, layer):
    """The op with its spec written from the text forms, as lpdiag.attention does."""
    spec = '{"policy":"%s","fix":"%s","level":"%s","causal":%s}' % (policy, fix, level, "true" if causal else "false")
    return torch.ops.lpdiag.attention(q, k, v, spec, layer)


def expect_error(what, fn, needle):
    global failures
    try:
        fn()
    except RuntimeError as e:
        if needle not in str(e):
            print(f"FAIL {what}: message lacks '{needle}': {str(e)[:200]}")
            failures += 1
        else:
            print(f"ok   {what}: {str(e).splitlines()[0][:120]}")
        return
    print(f"FAIL {what}: no error")
    failures += 1


q = torch.randn(1, 2, 16, 64)
expect_error("float64 v", lambda: att(q, q, q.double(), True, "fa2", "none", "counters", 0), "v must be bfloat16")
expect_error("3-D k", lambda: att(q, q[0], q, True, "fa2", "none", "counters", 0), "k must have shape")
expect_error("unknown policy", lambda: att(q, q, q, True, "fa3", "none", "counters", 0), "fa3")
expect_error("bad level", lambda: att(q, q, q, True, "fa2", "none", "loud", 0), "level must be off, counters or full")
expect_error("a spec that is not JSON", lambda: torch.ops.lpdiag.attention(q, q, q, "fa2", 0), "attention spec is not a JSON object")
expect_error("a scale the kernels do not apply", lambda: torch.ops.lpdiag.attention(
    q, q, q, torch.ops.lpdiag.attention_spec("fa2", "none", "counters", True, 0.5), 0), "the kernels use scale")
expect_error("attention_spec names a bad fix", lambda: torch.ops.lpdiag.attention_spec("fa2", "bogus"), "bogus")
canonical = torch.ops.lpdiag.attention_spec("seed:tile=128", "paper", "full", True)
print("ok   attention_spec:", canonical)
if '"beta"' not in canonical or '"level":"full"' not in canonical:
    print("FAIL attention_spec: the canonical form lacks the fix's parameters or the level")
    failures += 1
if torch.cuda.is_available():
    c = torch.randn(1, 2, 16, 32, device="cuda", dtype=torch.bfloat16)
    try:
        att(c, c, c, True, "fa2", "none", "counters", 0)
        print("FAIL cuda head dim 32: no error")
        failures += 1
    except RuntimeError as e:
        print("ok   cuda head dim 32:", str(e).splitlines()[0][:120])
# Monitor.record takes floats or scalar tensors for the loss and gradient norm, nothing else.
import os
import tempfile
mon = torch.classes.lpdiag.Monitor(os.path.join(tempfile.mkdtemp(), "rec.h5"), 1, 2, 32, "{}", 0, 1, False)
mon.add_fused_qkv("blk0", 0, torch.randn(192, 64))
mon.set_cuda_graphs(False)  # registered for Python (a no-op for CPU weights)
expect_error("string loss", lambda: mon.record(0, "low", 1e-3, 1.0), "loss must be a float or a scalar tensor")
expect_error("vector grad_norm", lambda: mon.record(0, 1.0, 1e-3, torch.ones(2)), "must be scalars")
expect_error("integer tensor loss", lambda: mon.record(0, torch.tensor(3), 1e-3, 1.0), "floating point")
assert mon.record(0, torch.tensor(2.5), 1e-3, 0.5) and mon.record(1, 2.0, 1e-3, torch.tensor(0.25))
mon.close()
# Still alive and still working after the errors.
o = att(q.bfloat16(), q.bfloat16(), q.bfloat16(), True, "fa2", "none", "counters", 0)
assert o.shape == q.shape
print("FAILED" if failures else "PASSED", failures)
sys.exit(1 if failures else 0)
