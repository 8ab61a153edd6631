"""The GPT shape flags the bench/gpu drivers (bench_gpt.py, bench_host_overhead.py) share: GPT-2
124M's by default, a tiny one for smoke runs, each dimension overridable, heads dividing the
width."""
from bench_cli import UsageError, at_least

GPT2_124M = dict(layers=12, d_model=768, heads=12, seq=1024, vocab=50304)
TINY = dict(layers=2, d_model=64, heads=4, seq=64, vocab=512)


def add_shape_args(p):
    """--tiny and one flag a dimension on the argparse parser p."""
    p.add_argument("--tiny", action="store_true", help="L2 D64 H4 T64 V512 instead of GPT-2 124M")
    for name, default in GPT2_124M.items():
        p.add_argument("--" + name.replace("_", "-"), type=at_least("--" + name, 1), default=None,
                       help="default %d (--tiny: %d)" % (default, TINY[name]))


def resolve_shape(a):
    """Fills the dimensions not given from the chosen shape; a UsageError if heads do not
    divide the width."""
    shape = TINY if a.tiny else GPT2_124M
    for name, default in shape.items():
        if getattr(a, name) is None:
            setattr(a, name, default)
    if a.d_model % a.heads:
        raise UsageError("--heads %d does not divide --d-model %d" % (a.heads, a.d_model))
