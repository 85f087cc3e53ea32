"""A program with several outputs: a decoder layer's attention inputs at decode size. The residual add is
kept (the next residual needs it) and normalized, then projected to Q, K and V (grouped-query: K and V
are a quarter of Q's width).

    prism optimize examples/norm_qkv.py

searches, proves and tunes each output's part of the program on its own (prism.superoptimize with several
outputs); Q, K and V, whose parts share their forms, are also searched jointly, and one kernel writes all three
where the tuner finds it faster than three (prism.search.joint). `prism search` searches all four outputs
jointly: the kernels that write every one of them.
"""

from prism import KernelGraph

N, D, KV = 8, 1024, 256                 # tokens, model width, K/V width (GQA: 8 of 32 heads' worth)

g = KernelGraph()
x = g.input((N, D), "float16", "X")
r = g.input((N, D), "float16", "R")
wq = g.input((D, D), "float16", "Wq")
wk = g.input((D, KV), "float16", "Wk")
wv = g.input((D, KV), "float16", "Wv")
h = g.add(x, r)                         # the new residual stream: an output of its own
n = g.rms_norm(h, 1e-6)
g.output(h, g.matmul(n, wq), g.matmul(n, wk), g.matmul(n, wv))
