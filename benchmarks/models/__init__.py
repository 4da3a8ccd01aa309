"""The model-fusion benchmark suite: nvFuser's Python benchmark fusions (NVIDIA/Fuser,
benchmarks/python) ported to kfuse, run against torch eager and torch.compile over a size
sweep per family. `python benchmarks/models/run.py --help`; charts and tables from its JSON
with `python benchmarks/models/chart.py`.

Modules: case (the Case record and helpers), sweeps (the shapes), norms / softmax /
groupnorm / batchnorm / transpose / pointwise / attention (the cases of each family),
registry (all cases), measure (check and time one case at one shape), table (Markdown and
console tables), run (the command), chart (PNGs and the Markdown table from a run's JSON).
"""
