"""Pieces of troupe run-config text that the benchmarks share: [[model.layers]] entries.

The benchmark configs are str.format templates; these pieces hold no braces, so they can be
joined into a template before it is formatted. Imported by the scripts beside it (a script
run as bench/x.py has bench/ on its path); it runs nothing.
"""


def linear(out, init=None):
    """A linear layer with `out` outputs (and its `init` scheme, if given)."""
    text = '[[model.layers]]\ntype = "linear"\nout = %d\n' % out
    return text + ('init = "%s"\n' % init if init else "")


RELU = '[[model.layers]]\ntype = "relu"\n'


def mlp(widths, init=None):
    """Linear layers of the given output widths with a ReLU between each two."""
    return RELU.join(linear(width, init) for width in widths)
